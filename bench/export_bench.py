"""Export wall time and peak RSS of hfx beside `cp` of the same safetensors, in one run.

Saves a random-initialised checkpoint of real size with Transformers (default: Qwen3-0.6B's config,
bf16 as published; nothing is downloaded), then measures:
  - cp:  copying model.safetensors (the floor for any tool that writes every weight once)
  - hfx: `hfx export --format onnx` (bf16 -> f32 ONNX, so it writes twice the bytes cp does)
and prints ratios. Usage: .venv/bin/python bench/export_bench.py [--model qwen3-0.6b] [--keep DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CONFIGS = {
    # Qwen/Qwen3-0.6B config.json (architecture fields only)
    "qwen3-0.6b": dict(model_type="qwen3", vocab_size=151936, hidden_size=1024, intermediate_size=3072,
                       num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                       max_position_embeddings=40960, rms_norm_eps=1e-6, tie_word_embeddings=True,
                       rope_theta=1000000.0, bos_token_id=151643, eos_token_id=151645),
}


def make_checkpoint(name: str, folder: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = dict(CONFIGS[name])
    config = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16)
    model.save_pretrained(folder, safe_serialization=True)


def measure(cmd: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes) of one command, run in a child so RUSAGE_CHILDREN is its own."""
    code = (
        "import resource, subprocess, sys, time, json\n"
        "t = time.perf_counter(); subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)\n"
        "dt = time.perf_counter() - t\n"
        "print(json.dumps([dt, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code, *cmd], check=True, capture_output=True, text=True).stdout
    dt, rss = json.loads(out.strip().splitlines()[-1])
    return dt, rss


def drop_caches_hint(path: Path) -> None:
    # Read the files once so both tools start from the same (warm) page cache.
    for f in path.iterdir():
        if f.is_file():
            with open(f, "rb") as fh:
                while fh.read(1 << 24):
                    pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen3-0.6b", choices=sorted(CONFIGS))
    ap.add_argument("--keep", help="folder to keep the checkpoint in (reused when present)")
    ap.add_argument("--hfx", default=str(ROOT / "build" / "hfx"))
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="hfx-bench-"))
    ckpt = Path(args.keep) if args.keep else work / "checkpoint"
    try:
        if not (ckpt / "model.safetensors").exists():
            t = time.perf_counter()
            make_checkpoint(args.model, ckpt)
            print(f"saved {args.model} checkpoint in {time.perf_counter() - t:.1f} s")
        size = sum(f.stat().st_size for f in ckpt.glob("*.safetensors"))
        drop_caches_hint(ckpt)
        cp_t, cp_rss = measure(["cp", str(ckpt / "model.safetensors"), str(work / "copy.safetensors")])
        hfx_t, hfx_rss = measure([args.hfx, "export", "--model", str(ckpt), "--format", "onnx", "--quiet",
                                  "--no-verify", "--overwrite", str(work / "onnx-out")])
        written = sum(f.stat().st_size for f in (work / "onnx-out").rglob("*") if f.is_file())
        largest = max(f.stat().st_size for f in [ckpt / "model.safetensors"])
        mb = 1 << 20
        print(f"\nmodel {args.model}: checkpoint {size / mb:.0f} MiB (bf16), hfx wrote {written / mb:.0f} MiB (f32 ONNX)")
        print(f"{'tool':<6} {'wall s':>8} {'peak RSS MiB':>13} {'MiB/s written':>14}")
        print(f"{'cp':<6} {cp_t:8.2f} {cp_rss / mb:13.0f} {size / mb / cp_t:14.0f}")
        print(f"{'hfx':<6} {hfx_t:8.2f} {hfx_rss / mb:13.0f} {written / mb / hfx_t:14.0f}   (export --no-verify)")
        largest_tensor = 151936 * 1024 * 4 if args.model == "qwen3-0.6b" else 0
        if largest_tensor:
            print(f"peak RSS goal 1 GiB + 2 x largest tensor = {(1 << 30) / mb + 2 * largest_tensor / mb:.0f} MiB")
        print(f"ratio hfx/cp: wall {hfx_t / cp_t:.2f}x, peak RSS {hfx_rss / max(cp_rss, 1):.1f}x "
              f"(hfx writes {written / size:.1f}x the bytes)")
        del largest
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
