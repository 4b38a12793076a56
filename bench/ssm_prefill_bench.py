"""Prefill latency of a gated delta-net hybrid's two ONNX lowerings on ONNX Runtime, in one run (issue #20).

Builds a Qwen3.5-text-shaped checkpoint with Transformers from a config (random weights, f32, nothing
downloaded; --shape picks the size), exports it twice with `hfx export --no-verify`:
  - ort:      `--onnx-profile ort`: each layer's causal conv and gated delta rule are ONNX Runtime's fused
              com.microsoft CausalConvWithState and LinearAttention (its CPU kernels; attention portable)
  - portable: `--onnx-profile portable`: the same layers in standard ops, hfx's loop-free chunked delta
              rule (chunks of 64, a Hillis-Steele scan across chunks) and the conv as shifted slices
then runs one prompt of each length (--lengths, default 512 and 2048 tokens, batch 1, empty state) through
each graph in a fresh ONNX Runtime session (default session options, log level 3): one warm-up run, then
the median of --runs timed runs. Reports each latency and the ratio portable / ort (how much faster the
fused ops are), and checks the two lowerings' logits agree (max abs diff).

Usage: .venv/bin/python bench/ssm_prefill_bench.py [--shape small|tiny] [--keep DIR] [--runs 3]
                                                   [--lengths 512,2048] [--hfx build/hfx] [--markdown]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

# Qwen3.5-text layouts: three delta-net layers then one gated attention layer, repeated.
SHAPES = {
    # 8 layers at Qwen3.5-0.8B's widths (hidden 1024, 16 delta-net heads of 128, kernel 4): ~0.3 B parameters
    "small": dict(hidden_size=1024, intermediate_size=3584, num_hidden_layers=8, num_attention_heads=8,
                  num_key_value_heads=2, head_dim=256, linear_num_key_heads=16, linear_num_value_heads=16,
                  linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4, vocab_size=32000),
    # the whole script in a minute
    "tiny": dict(hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=32, linear_num_key_heads=4, linear_num_value_heads=4,
                 linear_key_head_dim=32, linear_value_head_dim=32, linear_conv_kernel_dim=4, vocab_size=1000),
}


def make_checkpoint(shape: str, folder: Path) -> Path:
    if (folder / "config.json").exists():
        return folder
    import torch
    from transformers import Qwen3_5TextConfig, Qwen3_5ForCausalLM
    cfg = dict(SHAPES[shape])
    layers = cfg["num_hidden_layers"]
    cfg["layer_types"] = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)]
    torch.manual_seed(0)
    model = Qwen3_5ForCausalLM(Qwen3_5TextConfig(max_position_embeddings=8192, rms_norm_eps=1e-6, **cfg)).eval()
    model.save_pretrained(folder)
    return folder


def export(hfx: str, ckpt: Path, out: Path, profile: str) -> None:
    if not (out / "onnx" / "model.onnx").exists():
        subprocess.run([hfx, "export", "--model", str(ckpt), "--format", "onnx", "--onnx-profile", profile,
                        "--no-verify", "--quiet", str(out)], check=True)


def prefill(model: Path, length: int, runs: int) -> tuple[float, np.ndarray]:
    """Median seconds of one prompt of `length` tokens, and its last position's logits."""
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feed = {"input_ids": rng.integers(3, 1000, size=(1, length), dtype=np.int64),
            "attention_mask": np.ones((1, length), np.int64),
            "position_ids": np.arange(length, dtype=np.int64)[None]}
    for i in sess.get_inputs():
        if i.name.startswith("past"):
            dims = [1 if d == "batch_size" else 0 if isinstance(d, str) else d for d in i.shape]
            feed[i.name] = np.zeros(dims, np.float32)
    feed = {k: v for k, v in feed.items() if k in {i.name for i in sess.get_inputs()}}
    logits = sess.run(["logits"], feed)[0]  # warm-up
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        sess.run(["logits"], feed)
        times.append(time.perf_counter() - start)
    return statistics.median(times), logits[0, -1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="small", choices=sorted(SHAPES))
    ap.add_argument("--keep", help="folder to keep the checkpoint and exports in (reused when present)")
    ap.add_argument("--hfx", default=str(ROOT / "build" / "hfx"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--lengths", default="512,2048")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="hfx-ssm-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    ckpt = make_checkpoint(args.shape, base / f"ckpt-{args.shape}")
    rows = []
    for profile in ("ort", "portable"):
        export(args.hfx, ckpt, base / f"out-{args.shape}-{profile}", profile)
    for length in [int(x) for x in args.lengths.split(",")]:
        ort_s, ort_logits = prefill(base / f"out-{args.shape}-ort" / "onnx" / "model.onnx", length, args.runs)
        por_s, por_logits = prefill(base / f"out-{args.shape}-portable" / "onnx" / "model.onnx", length, args.runs)
        rows.append((length, ort_s, por_s, float(np.abs(ort_logits - por_logits).max())))
    head = "| prompt tokens | ort (CausalConvWithState + LinearAttention) ms | portable (chunked primitives) ms | portable / ort | logits max abs diff |"
    print(f"shape {args.shape}, median of {args.runs} runs after a warm-up, batch 1")
    print(head)
    print("|---|---|---|---|---|")
    for length, o, p, diff in rows:
        print(f"| {length} | {o * 1000:.1f} | {p * 1000:.1f} | {p / o:.2f} | {diff:.2e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
