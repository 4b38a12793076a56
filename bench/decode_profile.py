"""Where a decode step's time goes, per ONNX operator, for hfx's artifact beside the onnxruntime-genai
builder's (issue #21, item 3): ONNX Runtime's own profiler on the same greedy loop bench/peer_bench.py
times (a prompt, then decode steps with the KV cache bound through IO binding), the prompt step left
out, summed per op type and divided by the steps.

Takes the artifacts bench/peer_bench.py keeps (`--keep DIR`: DIR/artifacts/hfx-fp32, builder-fp32, ...):

  .venv/bin/python bench/decode_profile.py --keep /work/bench-tmp/full --pair fp32
  .venv/bin/python bench/decode_profile.py --keep /work/bench-tmp/full --pair int4+lm+emb+acc4:int4

Prints per op type: nodes run per step, ms per step for each artifact, and the difference; then the
step's total and the node count (ORT's per-node dispatch is a few microseconds: a graph with more
nodes pays for them on every token whatever their work).
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
from peer_bench import _session_options, decode_setup, ort_loop  # noqa: E402


def profile(model: Path, ckpt: Path, prompt_len: int, steps: int) -> tuple[dict[str, float], dict[str, float], int]:
    """(ms per decode step per op type, nodes run per step per op type, decode steps profiled)."""
    import onnxruntime as ort

    kv_heads, head_dim, prompt = decode_setup(ckpt, prompt_len)
    plain = ort.InferenceSession(str(model), _session_options(), providers=["CPUExecutionProvider"])
    ort_loop(plain, plain, prompt, 4, kv_heads, head_dim)  # warm-up, unprofiled
    del plain
    opts = _session_options()
    opts.enable_profiling = True
    opts.profile_file_prefix = str(Path(tempfile.mkdtemp(prefix="hfx-decode-profile-")) / "ort")
    sess = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
    ort_loop(sess, sess, prompt, steps, kv_heads, head_dim)
    events = json.loads(Path(sess.end_profiling()).read_text())
    runs = sorted(e["ts"] for e in events if e.get("name") == "model_run")
    first_end = runs[1] if len(runs) > 1 else float("inf")  # the prompt step's events come before the 2nd run
    ms: dict[str, float] = collections.defaultdict(float)
    count: dict[str, float] = collections.defaultdict(float)
    for e in events:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time") or e["ts"] < first_end:
            continue
        op = e["args"].get("op_name", "?")
        ms[op] += e["dur"] / 1000.0
        count[op] += 1
    decode_steps = max(len(runs) - 1, 1)
    return ({k: v / decode_steps for k, v in ms.items()}, {k: v / decode_steps for k, v in count.items()},
            decode_steps)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keep", required=True, help="bench/peer_bench.py's --keep folder")
    ap.add_argument("--pair", default="fp32", help="HFX_ROW[:BUILDER_ROW], e.g. fp32 or int4+lm+emb+acc4:int4")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--steps", type=int, default=20, help="decode steps profiled")
    args = ap.parse_args()
    keep = Path(args.keep)
    hfx_row, _, builder_row = args.pair.partition(":")
    builder_row = builder_row or hfx_row
    models = {"hfx": keep / "artifacts" / f"hfx-{hfx_row.replace('+', '-')}" / "onnx" / "model.onnx",
              "builder": keep / "artifacts" / f"builder-{builder_row}" / "model.onnx"}
    for name, m in models.items():
        if not m.exists():
            raise SystemExit(f"{name}: no {m} (run bench/peer_bench.py --keep {keep} first)")
    ckpt = keep / "checkpoint"
    res = {name: profile(m, ckpt, args.prompt, args.steps) for name, m in models.items()}
    ops = sorted(set(res["hfx"][0]) | set(res["builder"][0]),
                 key=lambda op: -max(res["hfx"][0].get(op, 0), res["builder"][0].get(op, 0)))
    print(f"decode step, per op type ({res['hfx'][2]} steps after a {args.prompt}-token prompt): "
          f"hfx {hfx_row} vs builder {builder_row}")
    print("| op | hfx nodes/step | builder nodes/step | hfx ms/step | builder ms/step | hfx - builder ms |")
    print("|---|---|---|---|---|---|")
    for op in ops:
        h, b = res["hfx"][0].get(op, 0.0), res["builder"][0].get(op, 0.0)
        print(f"| {op} | {res['hfx'][1].get(op, 0):.0f} | {res['builder'][1].get(op, 0):.0f} | {h:.2f} | {b:.2f} | "
              f"{h - b:+.2f} |")
    th, tb = sum(res["hfx"][0].values()), sum(res["builder"][0].values())
    nh, nb = sum(res["hfx"][1].values()), sum(res["builder"][1].values())
    print(f"| **all** | {nh:.0f} | {nb:.0f} | {th:.2f} | {tb:.2f} | {th - tb:+.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
