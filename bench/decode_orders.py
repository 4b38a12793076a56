"""Decode step time of several artifacts, their sessions loaded in every order (issue #21, item 3).

On this machine the session a process loads first decodes 3-5 % slower than the ones loaded after it,
whichever file it is (docs/benchmarks.md, run H16: the same file loaded twice). A comparison that loads
its artifacts in one order measures that order. This one runs one child process per permutation of the
artifacts; each loads them in its order, warms each up, then runs `--rounds` rounds of `--steps` greedy
decode steps over each in turn (the order reversed every other round), timing `run_with_iobinding` alone
(the graph, not the Python loop around it). Per process it keeps each artifact's median step (the median
over rounds of each round's median); the report is the mean over processes, so every artifact has had
every load position equally often, and each artifact's ratio to the first one, per process and as a
geometric mean.

Takes the artifacts bench/peer_bench.py keeps, as NAME=KIND:PATH (KIND hfx or builder):

  .venv/bin/python bench/decode_orders.py --checkpoint DIR/checkpoint \\
      builder=builder:DIR/artifacts/builder-int4 hfx=hfx:DIR/artifacts/hfx-int4-lm-emb-acc4
"""
from __future__ import annotations

import argparse
import itertools
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))


def one_order(specs: dict[str, tuple[str, str]], order: list[str], ckpt: str, prompt_len: int, steps: int,
              rounds: int) -> dict:
    from peer_bench import _artifact_sessions, decode_setup, ort_loop

    kv_heads, head_dim, prompt = decode_setup(ckpt, prompt_len)
    inside: dict[str, list[float]] = {name: [] for name in order}

    class Timed:
        """The session, its run_with_iobinding timed."""

        def __init__(self, sess, name):
            self.sess, self.name = sess, name

        def __getattr__(self, attr):
            return getattr(self.sess, attr)

        def run_with_iobinding(self, binding):
            t = time.perf_counter()
            self.sess.run_with_iobinding(binding)
            inside[self.name].append(time.perf_counter() - t)

    sessions = {}
    for name in order:  # loaded in this process's order: what the permutations vary
        kind, path = specs[name]
        first, nxt, _ = _artifact_sessions(kind, Path(path))
        sessions[name] = (Timed(first, name), Timed(nxt, name))
    tokens = {}
    for name, (first, nxt) in sessions.items():
        ort_loop(first, nxt, prompt, 4, kv_heads, head_dim)  # warm-up
    medians: dict[str, list[float]] = {name: [] for name in order}
    for r in range(rounds):
        for name in order if r % 2 == 0 else order[::-1]:
            first, nxt = sessions[name]
            inside[name].clear()
            _, _, tokens[name] = ort_loop(first, nxt, prompt, steps, kv_heads, head_dim)
            medians[name].append(statistics.median(inside[name][1:]))  # the decode steps, not the prompt's
    return {"step_ms": {n: statistics.median(m) * 1000 for n, m in medians.items()},
            "same_tokens": len({tuple(t) for t in tokens.values()}) == 1}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("artifacts", nargs="+", help="NAME=KIND:PATH, KIND hfx or builder; the first is the baseline")
    ap.add_argument("--checkpoint", required=True, help="the checkpoint the artifacts were exported from (its prompt)")
    ap.add_argument("--prompt", type=int, default=128, help="prompt tokens (default 128, as peer_bench)")
    ap.add_argument("--steps", type=int, default=64, help="decode steps a round (default 64)")
    ap.add_argument("--rounds", type=int, default=6, help="rounds per process (default 6)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of all the orders (default 1)")
    ap.add_argument("--malloc-hugetlb", action="store_true",
                    help="run the children with GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (peer_bench.hugetlb_env)")
    ap.add_argument("--_order", help=argparse.SUPPRESS)
    args = ap.parse_args()
    specs = {}
    for a in args.artifacts:
        name, _, rest = a.partition("=")
        kind, _, path = rest.partition(":")
        if not name or kind not in ("hfx", "builder") or not Path(path).is_dir():
            ap.error(f"{a}: expected NAME=KIND:PATH with KIND hfx or builder and PATH an artifact folder")
        specs[name] = (kind, path)
    if args._order:
        print("RESULT " + json.dumps(one_order(specs, args._order.split(","), args.checkpoint, args.prompt,
                                               args.steps, args.rounds)))
        return
    names = list(specs)
    from peer_bench import hugetlb_env

    env = hugetlb_env() if args.malloc_hugetlb else None
    rows = []
    for _ in range(args.repeat):
        for order in itertools.permutations(names):
            p = subprocess.run([sys.executable, __file__, *args.artifacts, "--checkpoint", args.checkpoint,
                                "--prompt", str(args.prompt), "--steps", str(args.steps), "--rounds",
                                str(args.rounds), "--_order", ",".join(order)], capture_output=True, text=True, env=env)
            got = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
            if not got:
                sys.exit(f"order {' > '.join(order)} failed: {(p.stderr or p.stdout).strip().splitlines()[-1:]}")
            r = json.loads(got[0][7:])
            rows.append(r["step_ms"])
            print(f"{' > '.join(order)}: " + ", ".join(f"{n} {r['step_ms'][n]:.2f} ms" for n in names)
                  + ("" if r["same_tokens"] else "  (greedy tokens differ)"), flush=True)
    base = names[0]
    print(f"\n{len(rows)} processes, every artifact in every load position alike:")
    for n in names:
        ratios = [r[n] / r[base] for r in rows]
        print(f"  {n}: mean step {statistics.mean(r[n] for r in rows):.3f} ms, step / {base} "
              f"{statistics.geometric_mean(ratios):.4f} (per process {min(ratios):.3f}-{max(ratios):.3f})")


if __name__ == "__main__":
    main()
