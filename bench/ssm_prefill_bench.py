"""Prefill latency of a recurrent model's three ONNX lowerings on ONNX Runtime, in one run (issue #20).

Builds a checkpoint with Transformers from a config (random weights, f32, nothing downloaded; --family
picks Qwen3.5-text's gated delta-net or Mamba-1, --shape the size), exports it three times with `hfx
export --no-verify`:
  - ort:     `--onnx-profile ort`: each layer's causal conv and recurrence are ONNX Runtime's fused
             com.microsoft CausalConvWithState and LinearAttention (its CPU kernels; attention portable)
  - chunked: `--onnx-profile portable`: the same layers in standard ops, hfx's loop-free chunked
             recurrence (the delta rule in chunks of 64 with a Hillis-Steele scan across chunks; Mamba's
             SSD in chunks of floor(sqrt(length))) and the conv as shifted slices
  - scan:    `--onnx-profile portable --onnx-recurrence scan`: the recurrence as an ONNX Scan over time
             whose body is Transformers' one-step update (the conv as in chunked)
then runs one prompt of each length (--lengths, default 512 and 2048 tokens, batch 1, empty state) through
each graph in a fresh ONNX Runtime session (default session options, log level 3): one warm-up run, then
the median of --runs timed runs. Reports each latency, the ratios chunked / ort and scan / ort (how much
faster the fused ops are), and checks the lowerings' logits agree with ort's (max abs diff). With
--peak-rss, each (lowering, length) also runs once in a child process that reports its peak resident
memory (the session, its weights and one prefill). Mamba-1's
chunked prefill holds [chunks, channels x state, chunk, chunk] products (length^1.5 x channels x state
floats each); it is skipped where one of them would pass --max-chunked-gib.

Usage: .venv/bin/python bench/ssm_prefill_bench.py [--family qwen3_5|mamba] [--shape small|tiny] [--keep DIR]
                                                   [--runs 3] [--lengths 512,2048] [--hfx build/hfx] [--peak-rss]
"""
from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

# Qwen3.5-text layouts: three delta-net layers then one gated attention layer, repeated.
QWEN3_5_SHAPES = {
    # 8 layers at Qwen3.5-0.8B's widths (hidden 1024, 16 delta-net heads of 128, kernel 4): ~0.3 B parameters
    "small": dict(hidden_size=1024, intermediate_size=3584, num_hidden_layers=8, num_attention_heads=8,
                  num_key_value_heads=2, head_dim=256, linear_num_key_heads=16, linear_num_value_heads=16,
                  linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4, vocab_size=32000),
    # the whole script in a minute
    "tiny": dict(hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=32, linear_num_key_heads=4, linear_num_value_heads=4,
                 linear_key_head_dim=32, linear_value_head_dim=32, linear_conv_kernel_dim=4, vocab_size=1000),
}
# Mamba-1 (MambaForCausalLM): a selective scan of (2 x hidden) channels x 16 states per layer.
MAMBA_SHAPES = {
    # 8 layers, hidden 256 (512 channels x 16 states: 8192 one-by-one scan heads); mamba-130m is 24 x 768
    "small": dict(hidden_size=256, num_hidden_layers=8, state_size=16, expand=2, conv_kernel=4, vocab_size=32000),
    "tiny": dict(hidden_size=64, num_hidden_layers=2, state_size=8, expand=2, conv_kernel=4, vocab_size=1000),
}
LOWERINGS = {
    "ort": ["--onnx-profile", "ort"],
    "chunked": ["--onnx-profile", "portable"],
    "scan": ["--onnx-profile", "portable", "--onnx-recurrence", "scan"],
}


def make_checkpoint(family: str, shape: str, folder: Path) -> Path:
    if (folder / "config.json").exists():
        return folder
    import torch
    torch.manual_seed(0)
    if family == "mamba":
        from transformers import MambaConfig, MambaForCausalLM
        model = MambaForCausalLM(MambaConfig(**MAMBA_SHAPES[shape])).eval()
    else:
        from transformers import Qwen3_5TextConfig, Qwen3_5ForCausalLM
        cfg = dict(QWEN3_5_SHAPES[shape])
        layers = cfg["num_hidden_layers"]
        cfg["layer_types"] = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)]
        model = Qwen3_5ForCausalLM(Qwen3_5TextConfig(max_position_embeddings=8192, rms_norm_eps=1e-6, **cfg)).eval()
    model.save_pretrained(folder)
    return folder


def export(hfx: str, ckpt: Path, out: Path, lowering: str) -> None:
    if not (out / "onnx" / "model.onnx").exists():
        subprocess.run([hfx, "export", "--model", str(ckpt), "--format", "onnx", *LOWERINGS[lowering],
                        "--no-verify", "--quiet", str(out)], check=True)


def mamba_chunked_gib(shape: str, length: int) -> float:
    """GiB of one [chunks, heads, chunk, chunk] f32 product of Mamba-1's chunked prefill (models/ssd.h)."""
    c = MAMBA_SHAPES[shape]
    heads = c["expand"] * c["hidden_size"] * c["state_size"]
    chunk = math.isqrt(length)
    return -(-length // chunk) * heads * chunk * chunk * 4 / 2**30


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
    return (statistics.median(times) if times else 0.0), logits[0, -1]


def peak_rss_mib(model: Path, length: int) -> float:
    """Peak resident MiB of a child process that loads `model` and runs one prompt of `length` tokens."""
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over execve, so a child would report its parent's peak.
    code = ("import sys; sys.path.insert(0, sys.argv[3]); import ssm_prefill_bench as b; "
            "b.prefill(b.Path(sys.argv[1]), int(sys.argv[2]), 0); "
            "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')][0])")
    out = subprocess.run([sys.executable, "-c", code, str(model), str(length), str(ROOT / "bench")], check=True,
                         capture_output=True, text=True).stdout
    return int(out.strip().splitlines()[-1]) / 1024  # kB


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", default="qwen3_5", choices=["qwen3_5", "mamba"])
    ap.add_argument("--shape", default="small", choices=["small", "tiny"])
    ap.add_argument("--keep", help="folder to keep the checkpoint and exports in (reused when present)")
    ap.add_argument("--hfx", default=str(ROOT / "build" / "hfx"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--lengths", default="512,2048")
    ap.add_argument("--max-chunked-gib", type=float, default=1.0,
                    help="Mamba-1: skip the chunked lowering where one of its chunk products passes this")
    ap.add_argument("--peak-rss", action="store_true", help="also each run's peak resident memory, in a child process")
    args = ap.parse_args()
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="hfx-ssm-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    name = f"{args.family}-{args.shape}"
    ckpt = make_checkpoint(args.family, args.shape, base / f"ckpt-{name}")
    rows, rss = [], {}
    for lowering in LOWERINGS:
        export(args.hfx, ckpt, base / f"out-{name}-{lowering}", lowering)
    for length in [int(x) for x in args.lengths.split(",")]:
        times, logits = {}, {}
        for lowering in LOWERINGS:
            if lowering == "chunked" and args.family == "mamba" and mamba_chunked_gib(args.shape, length) > args.max_chunked_gib:
                continue
            model = base / f"out-{name}-{lowering}" / "onnx" / "model.onnx"
            times[lowering], logits[lowering] = prefill(model, length, args.runs)
            if args.peak_rss:
                rss[(length, lowering)] = peak_rss_mib(model, length)
        rows.append((length, times, {k: float(np.abs(v - logits["ort"]).max()) for k, v in logits.items()}))
    print(f"{args.family}, shape {args.shape}, median of {args.runs} runs after a warm-up, batch 1")
    print("| prompt tokens | ort ms | chunked ms | scan ms | chunked / ort | scan / ort | scan / chunked "
          "| logits max abs diff to ort (chunked, scan) |")
    print("|---|---|---|---|---|---|---|---|")

    def ms(t, k):
        return f"{t[k] * 1000:.1f}" if k in t else "not run"

    def ratio(t, a, b):
        return f"{t[a] / t[b]:.2f}" if a in t and b in t else "-"

    for length, t, diff in rows:
        chunked_diff = f"{diff['chunked']:.2e}" if "chunked" in diff else "-"
        print(f"| {length} | {ms(t, 'ort')} | {ms(t, 'chunked')} | {ms(t, 'scan')} | {ratio(t, 'chunked', 'ort')} "
              f"| {ratio(t, 'scan', 'ort')} | {ratio(t, 'scan', 'chunked')} | {chunked_diff}, {diff['scan']:.2e} |")
    if rss:
        print("\npeak resident MiB of one session and one prefill (child process)")
        print("| prompt tokens | ort | chunked | scan |")
        print("|---|---|---|---|")
        for length, _, _ in rows:
            cells = [f"{rss[(length, k)]:.0f}" if (length, k) in rss else "not run" for k in LOWERINGS]
            print(f"| {length} | {' | '.join(cells)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
