"""`hfx verify` at model scale beside Transformers eager doing the same greedy tokens, in one run (issue #21).

On the checkpoint of bench/export_bench.py (default: Qwen3-0.6B's config, bf16 as published; built with
Transformers from the config, nothing downloaded), exports it once with `hfx export --no-verify` (f32
ONNX), then measures, each command in a child process (wall time and ru_maxrss, whole process: loading
included), the median of --runs runs from a warm page cache:
  - hfx verify:    `hfx verify OUT --tokens 64 --no-reexport --runtime reference`: the full shape matrix and
                   64 greedy tokens on a left-padded batch of 2, the artifact against hfx's reference
                   executor on the checkpoint (both sides run, each reading the weights in place;
                   --reference-weights auto, so streamed at this size)
  - transformers:  Transformers eager, f32 (the precision of the export), 64 greedy tokens on a left-padded
                   batch of 2 prompts of 7 tokens (min_new_tokens 64: a random model's EOS does not stop it)
Reports the ratio hfx / Transformers (the issue's goal: hfx no slower, so <= 1) and both peak RSS.

Usage: .venv/bin/python bench/verify_bench.py [--model qwen3-0.6b|qwen3-1.7b] [--keep DIR] [--runs 3]
                                              [--hfx build/hfx] [--markdown]
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from export_bench import (CONFIGS, MIB, ROOT, drop_caches_hint, make_checkpoint, measure, print_markdown,  # noqa: E402
                          print_table)

TOKENS = 64

TRANSFORMERS_GREEDY = f"""
import sys, torch
from transformers import AutoModelForCausalLM
torch.manual_seed(0)
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32, attn_implementation="eager").eval()
vocab = model.config.vocab_size
ids = torch.randint(3, vocab, (2, 7))
mask = torch.ones_like(ids)
ids[1, :2] = 0
mask[1, :2] = 0  # left-padded second row, as hfx verify's greedy prompts
with torch.inference_mode():
    out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens={TOKENS}, min_new_tokens={TOKENS},
                         do_sample=False, pad_token_id=0)
assert out.shape[1] == 7 + {TOKENS}, out.shape
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen3-0.6b", choices=sorted(CONFIGS))
    ap.add_argument("--keep", help="folder to keep the checkpoint in (reused when present)")
    ap.add_argument("--hfx", default=str(ROOT / "build" / "hfx"))
    ap.add_argument("--runs", type=int, default=3, help="runs per row; the median is reported (default 3)")
    ap.add_argument("--markdown", action="store_true", help="also print the table as Markdown (for docs/benchmarks.md)")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="hfx-verify-bench-"))
    ckpt = Path(args.keep) if args.keep else work / "checkpoint"
    try:
        if not (ckpt / "config.json").exists():
            make_checkpoint(args.model, ckpt)
        out = work / "export"
        subprocess.run([args.hfx, "export", "--model", str(ckpt), "--no-verify", "--quiet", str(out)], check=True)
        script = work / "transformers_greedy.py"
        script.write_text(TRANSFORMERS_GREEDY)
        rows = {
            "hfx verify": [args.hfx, "verify", str(out), "--tokens", str(TOKENS), "--no-reexport", "--runtime", "reference"],
            "transformers": [sys.executable, str(script), str(ckpt)],
        }
        times: dict[str, list[float]] = {r: [] for r in rows}
        rss: dict[str, int] = {r: 0 for r in rows}
        for run in range(args.runs):
            drop_caches_hint(ckpt)
            for r, cmd in rows.items():
                dt, peak = measure(cmd)
                times[r].append(dt)
                rss[r] = max(rss[r], peak)
            print(f"run {run + 1}: " + ", ".join(f"{r} {times[r][-1]:.2f} s" for r in rows), flush=True)
        med = {r: statistics.median(v) for r, v in times.items()}
        table = [["row", "command", "wall s (median)", "runs s", "peak RSS MiB"]]
        for r, cmd in rows.items():
            shown = " ".join(Path(c).name if i < 2 else c for i, c in enumerate(cmd))
            table.append([r, shown, f"{med[r]:.2f}", " / ".join(f"{t:.2f}" for t in times[r]), f"{rss[r] / MIB:.0f}"])
        print(f"\nmodel {args.model}, {TOKENS} greedy tokens, batch 2")
        print_table(table)
        ratio = med["hfx verify"] / med["transformers"]
        print(f"\ngoal (issue #21): hfx verify / Transformers eager: {ratio:.2f}x (goal <= 1: {'met' if ratio <= 1 else 'NOT met'})")
        if args.markdown:
            print_markdown(table)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
