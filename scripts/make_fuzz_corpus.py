#!/usr/bin/env python3
"""Writes the fuzzers' seed corpora (fuzz/corpus/<target>/) and the fixed companion files the
targets place beside their input (fuzz/data/). Everything is small, seeded and made here: tiny random
checkpoints with Transformers, tokenizers trained with `tokenizers` and cut down, and an hfx export of
a tiny checkpoint (needs the hfx binary: $HFX_BIN, default build/hfx).

    .venv/bin/python scripts/make_fuzz_corpus.py            # rewrite fuzz/corpus and fuzz/data

Seeds are valid inputs plus near-valid ones (one thing wrong each), so libFuzzer starts next to
both the accepting paths and each rejection. Files named regression-* (inputs that once found a bug,
copied from build-fuzz/findings/) are kept. The whole tree stays well under 2 MB. Regenerating gives
the same files except a few trained tokenizers (bert, mistral), whose trainers break ties in hash
order.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "oracle"))

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

CORPUS = ROOT / "fuzz" / "corpus"
DATA = ROOT / "fuzz" / "data"

# Tiny sizes shared by every model type: head_dim 8 so partial rotary (0.25) still has 2 dims.
TINY = dict(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
            num_key_value_heads=1, max_position_embeddings=32, rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2,
            pad_token_id=0)


def seed_name(data: bytes, label: str) -> str:
    return f"{label}-{hashlib.sha1(data).hexdigest()[:10]}"


def put(target: str, label: str, data: bytes | str) -> None:
    if isinstance(data, str):
        data = data.encode()
    folder = CORPUS / target
    folder.mkdir(parents=True, exist_ok=True)
    (folder / seed_name(data, label)).write_bytes(data)


def compact(obj) -> str:
    return json.dumps(obj, separators=(",", ":"))


# ---------------------------------------------------------------------------------------- checkpoints

def tiny_case(model_type: str, overrides: dict) -> dict:
    cfg = dict(TINY)
    cfg.update(overrides)
    for key in ("head_dim",):
        if key in cfg:
            cfg[key] = 8
    if "query_pre_attn_scalar" in cfg:
        cfg["query_pre_attn_scalar"] = 8
    if model_type in ("gpt2", "gpt_neox"):
        cfg["num_key_value_heads"] = cfg["num_attention_heads"]
    if model_type == "gpt2":
        cfg["n_inner"] = 32
    for key in ("sliding_window",):
        if key in cfg:
            cfg[key] = 3
    if "layer_types" in cfg:
        cfg["num_hidden_layers"] = len(cfg["layer_types"])
    return cfg


def save_tiny(model_type: str, cfg: dict, folder: Path, dtype: str = "float32", seed: int = 0) -> Path:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(model_type, **cfg)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, torch_dtype=getattr(torch, dtype))
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            p.copy_((torch.randn(p.shape) * 0.2).to(p.dtype))
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    return folder


def config_seeds(work: Path) -> None:
    """fuzz/data/config/<model_type>.safetensors and the matching config.json seeds."""
    import tiny_models

    (DATA / "config").mkdir(parents=True, exist_ok=True)
    done: set[str] = set()
    configs: list[tuple[str, dict]] = []
    for case, (model_type, overrides) in tiny_models.CASES.items():
        if "longrope" in case:
            continue  # longrope factor lists are sized for head_dim 16
        cfg = tiny_case(model_type, overrides)
        if model_type not in done:
            # Weights per model type; the first case of each type decides the tensors (bf16 for half of
            # them, so both conversions are exercised).
            folder = save_tiny(model_type, cfg, work / f"cfg-{model_type}",
                               dtype="bfloat16" if len(done) % 2 else "float32")
            shutil.copy(folder / "model.safetensors", DATA / "config" / f"{model_type}.safetensors")
            done.add(model_type)
            saved = json.loads((folder / "config.json").read_text())
            configs.append((case, saved))
        elif (work / f"cfg-{model_type}").exists():
            # Variants of a model type with the same tensors (rope types, windows): config only.
            from transformers import AutoConfig
            saved = AutoConfig.for_model(model_type, **cfg).to_dict()
            configs.append((case, json.loads(json.dumps(saved, default=str))))
    for case, cfg in configs:
        put("config", case, compact(cfg))
    # Near-valid: one thing wrong in the llama config each.
    base = dict(next(c for k, c in configs if k == "llama"))
    variants = {
        "missing-hidden": {k: v for k, v in base.items() if k != "hidden_size"},
        "heads-zero": {**base, "num_attention_heads": 0},
        "kv-heads-not-divisor": {**base, "num_key_value_heads": 3},
        "vocab-huge": {**base, "vocab_size": 10**12},
        "hidden-negative": {**base, "hidden_size": -16},
        "eps-string": {**base, "rms_norm_eps": "1e-6"},
        "float-layers": {**base, "num_hidden_layers": 1.5},
        "null-rope": {**base, "rope_parameters": None, "rope_scaling": None},
        "rope-scaling-v4": {**{k: v for k, v in base.items() if k != "rope_parameters"},
                            "rope_scaling": {"type": "linear", "factor": 2.0}, "rope_theta": 10000.0},
        "rope-unknown": {**base, "rope_parameters": {"rope_type": "nope", "rope_theta": 1.0}},
        "max-pos-huge": {**base, "max_position_embeddings": 2**62},
        "head-dim-odd": {**base, "head_dim": 7},
        "window-zero": {**base, "model_type": "mistral", "sliding_window": 0},
        "act-unknown": {**base, "hidden_act": "swishy"},
        "no-model-type": {k: v for k, v in base.items() if k != "model_type"},
    }
    for label, cfg in variants.items():
        put("config", label, compact(cfg))
    put("config", "nan", compact(base).replace('"rms_norm_eps":1e-06', '"rms_norm_eps":NaN'))
    put("config", "not-object", "[1, 2, 3]")
    put("config", "truncated", compact(base)[:100])


def index_seeds(work: Path) -> None:
    """fuzz/data/index/: a tiny llama config.json and two shards; the index and its variants as seeds."""
    from safetensors.torch import load_file, save_file

    src = save_tiny("llama", tiny_case("llama", {}), work / "index-llama", dtype="bfloat16", seed=1)
    tensors = load_file(src / "model.safetensors")
    names = sorted(tensors)
    half = len(names) // 2
    shards = {"model-00001-of-00002.safetensors": names[:half], "model-00002-of-00002.safetensors": names[half:]}
    out = DATA / "index"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    shutil.copy(src / "config.json", out / "config.json")
    weight_map = {}
    for shard, members in shards.items():
        save_file({n: tensors[n].contiguous() for n in members}, out / shard, metadata={"format": "pt"})
        weight_map.update({n: shard for n in members})
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    put("index", "valid", json.dumps(index, indent=2))
    first = names[0]
    variants = {
        "missing-entry": {**index, "weight_map": {k: v for k, v in weight_map.items() if k != first}},
        "extra-entry": {**index, "weight_map": {**weight_map, "model.extra.weight": "model-00001-of-00002.safetensors"}},
        "wrong-shard": {**index, "weight_map": {**weight_map, first: "model-00002-of-00002.safetensors"}},
        "dotdot": {**index, "weight_map": {**weight_map, first: "../model-00001-of-00002.safetensors"}},
        "absolute": {**index, "weight_map": {**weight_map, first: "/etc/passwd"}},
        "missing-shard": {**index, "weight_map": {**weight_map, first: "model-00003-of-00003.safetensors"}},
        "config-as-shard": {**index, "weight_map": {**weight_map, first: "config.json"}},
        "shard-number": {**index, "weight_map": {**weight_map, first: 7}},
        "empty-map": {**index, "weight_map": {}},
        "map-list": {**index, "weight_map": list(weight_map)},
    }
    for label, obj in variants.items():
        put("index", label, compact(obj))
    put("index", "no-map", '{"metadata": {}}')


# ----------------------------------------------------------------------------------------- safetensors

def st_bytes(header: dict, data: bytes, pad_header_to: int = 8) -> bytes:
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % pad_header_to)
    return struct.pack("<Q", len(raw)) + raw + data


def safetensors_seeds() -> None:
    import numpy as np

    a = np.arange(6, dtype=np.float32).tobytes()
    b = np.arange(4, dtype=np.float16).tobytes()
    valid = {"__metadata__": {"format": "pt"},
             "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
             "b": {"dtype": "F16", "shape": [4], "data_offsets": [24, 32]}}
    put("safetensors", "valid", st_bytes(valid, a + b))
    every = {}
    data = b""
    for i, (dt, size) in enumerate([("F64", 8), ("F32", 4), ("F16", 2), ("BF16", 2), ("I64", 8), ("I32", 4),
                                    ("I16", 2), ("I8", 1), ("U8", 1), ("BOOL", 1)]):
        every[f"t{i}"] = {"dtype": dt, "shape": [2], "data_offsets": [len(data), len(data) + 2 * size]}
        data += bytes(range(2 * size))
    put("safetensors", "every-dtype", st_bytes(every, data))
    put("safetensors", "scalar-and-empty", st_bytes(
        {"s": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]},
         "e": {"dtype": "F32", "shape": [0, 5], "data_offsets": [4, 4]}}, a[:4]))
    put("safetensors", "empty-header", st_bytes({}, b""))
    # Near-valid.
    full = st_bytes(valid, a + b)
    put("safetensors", "truncated-data", full[:-5])
    put("safetensors", "truncated-header", full[:30])
    put("safetensors", "length-past-end", struct.pack("<Q", len(full)) + full[8:])
    put("safetensors", "length-huge", struct.pack("<Q", 2**63) + full[8:])
    put("safetensors", "overlap", st_bytes({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                            "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, a))
    put("safetensors", "size-mismatch", st_bytes({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, a))
    put("safetensors", "unknown-dtype", st_bytes({"a": {"dtype": "F33", "shape": [2], "data_offsets": [0, 8]}}, a))
    put("safetensors", "f8-dtype", st_bytes({"a": {"dtype": "F8_E4M3", "shape": [8], "data_offsets": [0, 8]}}, a))
    put("safetensors", "negative-dim", st_bytes({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, a))
    put("safetensors", "huge-dims", st_bytes(
        {"a": {"dtype": "F32", "shape": [2**40, 2**40], "data_offsets": [0, 8]}}, a))
    put("safetensors", "begin-after-end", st_bytes({"a": {"dtype": "F32", "shape": [0], "data_offsets": [8, 0]}}, a))
    dup = json.dumps(valid)[:-1] + ',"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'
    put("safetensors", "duplicate", struct.pack("<Q", len(dup)) + dup.encode() + a + b)
    put("safetensors", "metadata-number", st_bytes({"__metadata__": {"format": 1}}, b""))
    put("safetensors", "header-list", struct.pack("<Q", 2) + b"[]")
    put("safetensors", "short", b"\x01\x00\x00")


# ---------------------------------------------------------------------------------------- tokenizers

def shrink_tokenizer(tok: dict, keep: int) -> dict:
    """Cuts a trained tokenizer.json down to its first `keep` ids (plus added tokens) and the merges
    that stay within them, so seeds are a few KB."""
    model = tok["model"]
    added = {t["id"] for t in tok.get("added_tokens", [])}
    if "vocab" in model and isinstance(model["vocab"], dict):
        model["vocab"] = {k: v for k, v in model["vocab"].items() if v < keep or v in added}
        if "merges" in model:
            vocab = model["vocab"]
            kept = []
            for m in model["merges"]:
                a, b = m.split(" ", 1) if isinstance(m, str) else m
                if a in vocab and b in vocab and a + b in vocab:
                    kept.append(m)
            model["merges"] = kept
    return tok


def tokenizer_seeds(work: Path) -> None:
    import make_tokenizers
    from tokenizers import Tokenizer

    for name in ["gpt2", "roberta", "llama3", "qwen2", "llama2", "mistral", "bert", "bert_cased"]:
        made = Path(make_tokenizers.make(name, work / "tok" / name))
        tok = json.loads((made if made.is_file() else made / "tokenizer.json").read_text())
        keep = 40 if name.startswith("bert") else 300
        small = compact(shrink_tokenizer(tok, keep))
        try:
            Tokenizer.from_str(small)
        except Exception as e:  # noqa: BLE001 - keep the full file when the cut one is not loadable
            print(f"  tokenizer {name}: cut version rejected by tokenizers ({e}); keeping it anyway")
        put("tokenizer", name, small)
    # Near-valid.
    put("tokenizer", "unknown-model", '{"version":"1.0","model":{"type":"Unigram","vocab":[["a",0.0]]}}')
    put("tokenizer", "wordlevel", compact({"version": "1.0", "model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "a": 1, "b": 2},
                                                                       "unk_token": "[UNK]"},
                                           "pre_tokenizer": {"type": "Whitespace"}}))
    put("tokenizer", "merge-unknown", compact({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a c"]}}))
    put("tokenizer", "added-bad-id", compact({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                                              "added_tokens": [{"id": -1, "content": "<x>", "special": True}]}))


# --------------------------------------------------------------------------------- export (onnx, manifest)

def export_seeds(work: Path) -> None:
    hfx = os.environ.get("HFX_BIN", str(ROOT / "build" / "hfx"))
    # Intermediate 16: every weight but the two 64x16 embeddings is inline, so the data file is small.
    cfg = tiny_case("llama", dict(tie_word_embeddings=False, intermediate_size=16))
    save_tiny("llama", cfg, work / "export-llama", seed=2)
    out = work / "export"
    # Relative paths from the work folder: the manifest records the source folder as given, so the
    # seeds do not change with the temporary folder's name.
    subprocess.run([hfx, "export", "--model", "export-llama", "--quiet", "--no-verify", "export"], check=True, cwd=work)
    static = work / "export-static"
    subprocess.run([hfx, "export", "--model", "export-llama", "--quiet", "--no-verify", "--static-cache",
                    "--max-cache-len", "8", "export-static"], check=True, cwd=work)
    dest = DATA / "export"
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(out, dest)
    # The source checkpoint too: fuzz_artifact runs verify, which rebuilds the reference from it.
    source = DATA / "export-source"
    if source.exists():
        shutil.rmtree(source)
    shutil.copytree(work / "export-llama", source)
    manifest = (dest / "hfx.json").read_text()
    (dest / "hfx.json").unlink()

    put("onnx", "decoder", (out / "onnx" / "model.onnx").read_bytes())
    if (static / "onnx" / "model.onnx_data").read_bytes() == (out / "onnx" / "model.onnx_data").read_bytes():
        put("onnx", "static-cache", (static / "onnx" / "model.onnx").read_bytes())
    model = (out / "onnx" / "model.onnx").read_bytes()
    put("onnx", "truncated", model[: len(model) // 2])
    put("onnx", "empty", b"")
    try:
        import onnx

        m = onnx.load(str(out / "onnx" / "model.onnx"), load_external_data=False)
        m.opset_import[0].version = 11
        put("onnx", "old-opset", m.SerializeToString())
        m = onnx.load(str(out / "onnx" / "model.onnx"), load_external_data=False)
        for init in m.graph.initializer:
            for e in init.external_data:
                if e.key == "location":
                    e.value = "../model.onnx_data"
                    break
            else:
                continue
            break
        put("onnx", "data-escapes", m.SerializeToString())
        m = onnx.load(str(out / "onnx" / "model.onnx"), load_external_data=False)
        m.graph.node[0].op_type = "NoSuchOp"
        put("onnx", "unknown-op", m.SerializeToString())
    except ImportError:
        pass

    j = json.loads(manifest)
    j["source"]["folder"] = "export-llama"  # the temporary folder's name would change the seeds every run
    manifest = json.dumps(j, indent=2)
    put("manifest", "valid", manifest)
    first = next(iter(j["files"]))
    variants = {
        "schema-2": {**j, "schema_version": 2},
        "no-files": {k: v for k, v in j.items() if k != "files"},
        "bad-hash": {**j, "files": {**j["files"], first: "0" * 64}},
        "escaping-path": {**j, "files": {**j["files"], "../../etc/passwd": "0" * 64}},
        "absolute-path": {**j, "files": {**j["files"], "/etc/passwd": "0" * 64}},
        "hash-number": {**j, "files": {**j["files"], first: 5}},
        "component-not-object": {**j, "components": [1]},
        "component-file-number": {**j, "components": [{**j["components"][0], "file": 3}]},
        "no-components": {**j, "components": []},
    }
    for label, obj in variants.items():
        put("manifest", label, compact(obj))
    put("manifest", "not-object", "[]")
    artifact_seeds(j)


def artifact_seeds(j: dict) -> None:
    """fuzz/corpus/artifact: the valid manifest of fuzz/data/export and one hostile field each (the
    reproductions of D2, D3 and D5 in the hostile-input report), for verify_export and generate."""
    import copy

    put("artifact", "valid", json.dumps(j, indent=2))

    def variant(label: str, edit) -> None:
        m = copy.deepcopy(j)
        edit(m)
        put("artifact", label, compact(m))

    comp = lambda m: m["components"][0]  # noqa: E731
    variant("role-x", lambda m: comp(m).update(role="x"))
    variant("role-encoder", lambda m: comp(m).update(role="encoder"))
    variant("role-deleted", lambda m: comp(m).pop("role"))
    variant("source-folder-number", lambda m: m["source"].update(folder=5))
    variant("source-folder-deleted", lambda m: m["source"].pop("folder"))
    variant("source-string", lambda m: m.update(source="x"))
    variant("source-file-number", lambda m: m["source"]["files"].update({"config.json": 5}))
    variant("input-name-number", lambda m: comp(m)["inputs"][0].update(name=5))
    variant("input-name-deleted", lambda m: comp(m)["inputs"][0].pop("name"))
    variant("inputs-string", lambda m: comp(m).update(inputs="abc"))
    variant("shape-ints", lambda m: comp(m)["inputs"][0].update(shape=[1, 2]))
    variant("num-layers-1e9", lambda m: m["model"].update(num_layers=1_000_000_000))
    variant("num-layers-2", lambda m: m["model"].update(num_layers=2))
    variant("static-cache-2p40", lambda m: m["recipe"].update(static_cache=True, max_cache_len=2 ** 40))
    variant("static-cache-8", lambda m: m["recipe"].update(static_cache=True, max_cache_len=8))
    variant("batch-min-2p62", lambda m: comp(m)["dims"]["batch_size"].update(min=2 ** 62))
    variant("batch-min-negative", lambda m: comp(m)["dims"]["batch_size"].update(min=-1))
    variant("batch-max-2", lambda m: comp(m)["dims"]["batch_size"].update(max=2))
    variant("eos-string", lambda m: m["model"].update(eos_token_ids=["2"]))
    variant("pad-huge", lambda m: m["model"].update(pad_token_id=2 ** 40))


def main() -> int:
    if os.environ.get("PYTHONHASHSEED") != "0":
        # Set-ordered steps (tokenizer training corpora) must not depend on the hash seed: rerun with 0.
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "PYTHONHASHSEED": "0"})
    for target in ["safetensors", "config", "index", "tokenizer", "manifest", "onnx", "artifact"]:
        # Inputs that once found a bug (regression-*, copied from build-fuzz/findings/) stay.
        for p in (CORPUS / target).glob("*"):
            if not p.name.startswith("regression-"):
                p.unlink()
    if (DATA / "config").exists():
        shutil.rmtree(DATA / "config")
    with tempfile.TemporaryDirectory(prefix="hfx-fuzz-corpus-") as tmp:
        work = Path(tmp)
        safetensors_seeds()
        config_seeds(work)
        index_seeds(work)
        tokenizer_seeds(work)
        export_seeds(work)
    total = sum(p.stat().st_size for base in (CORPUS, DATA) for p in base.rglob("*") if p.is_file())
    for base in (CORPUS, DATA):
        for d in sorted(p for p in base.iterdir() if p.is_dir()):
            files = [p for p in d.rglob("*") if p.is_file()]
            print(f"{d.relative_to(ROOT)}: {len(files)} files, {sum(p.stat().st_size for p in files)} bytes")
    print(f"total {total} bytes")
    return 0 if total < 2_000_000 else 1


if __name__ == "__main__":
    sys.exit(main())
