"""hfx's ExecuTorch export beside Transformers' ExecutorchExporter, in one run (issue #17).

Saves one random-initialised checkpoint (export_bench.CONFIGS; default Qwen3-0.6B's shape, bf16 as published,
nothing downloaded) and exports it to ExecuTorch with a static cache of --cache-len slots:
  - hfx:  `hfx export -m CKPT --format executorch --static-cache --max-cache-len N --no-verify OUT`
          (one forward method, f32, the default --executorch-backend xnnpack: linear layers in XNNPACK);
  - peer: Transformers' ExecutorchExporter as its docs show for generation: the model loaded in float32,
          `export_for_generation(model, {input_ids, attention_mask}, ExecutorchConfig(backend="xnnpack"),
          generation_config=GenerationConfig(cache_implementation="static", max_cache_len=N))`, then
          `save_pretrained` (prefill.pte + decode.pte).
Each export runs in a child process: wall time and peak RSS (export_bench.measure), the model load included.
Then decode tokens/s of each artifact in ExecuTorch's runtime (executorch.runtime), in a child of its own: hfx's
forward method one token at a time after an 8-token prefill; the peer's decode program through its own runner
(ExportedModel.from_pretrained(...).runners["decode"]) on the decode inputs Transformers captured. Reports the
ratios hfx / peer and the issue's goals (export >= 50x faster, peak RSS <= 1 GiB + 2 x the largest tensor,
decode tokens/s >= the peer's). A row that fails is reported with the last line of its error.

Usage: .venv/bin/python bench/executorch_bench.py [--model qwen3-0.6b|qwen3-tiny] [--cache-len 128] [--tokens 16]
                                                 [--skip hfx,peer] [--keep DIR] [--hfx build/hfx]
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from export_bench import CONFIGS, largest_tensor, make_checkpoint  # noqa: E402
from peer_bench import MB, child, timed_export  # noqa: E402

SPEEDUP_GOAL = 50


def sample_ids():
    import torch
    return torch.arange(8, dtype=torch.int64)[None] + 1000


def worker_peer(ckpt: str, out: str, cache_len: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig
    from transformers.exporters.configs import ExecutorchConfig
    from transformers.exporters.exporter_executorch import ExecutorchExporter
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32).eval()
    ids = sample_ids()
    gc = GenerationConfig(cache_implementation="static", max_cache_len=int(cache_len))
    with torch.no_grad():
        exported = ExecutorchExporter().export_for_generation(
            model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, ExecutorchConfig(backend="xnnpack"),
            generation_config=gc)
    exported.save_pretrained(out)


def worker_decode_hfx(pte: str, tokens: str) -> None:
    import torch
    from executorch.runtime import Runtime
    forward = Runtime.get().load_program(Path(pte)).load_method("forward")
    ids = sample_ids()
    forward.execute([ids, torch.arange(ids.shape[1])])
    pos, tok = ids.shape[1], torch.tensor([[1000]])
    t = time.perf_counter()
    for _ in range(int(tokens)):
        (logits,) = forward.execute([tok, torch.tensor([pos])])
        tok, pos = logits[:, -1:].argmax(-1), pos + 1
    dt = time.perf_counter() - t
    print("RESULT " + json.dumps({"tokens_per_s": int(tokens) / dt}))


def worker_decode_peer(ckpt: str, folder: str, cache_len: str, tokens: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig
    from transformers.exporters.base import ExportedModel
    from transformers.exporters.utils import decompose_for_generation
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32).eval()
    ids = sample_ids()
    gc = GenerationConfig(cache_implementation="static", max_cache_len=int(cache_len))
    _, decode_inputs = decompose_for_generation(model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)},
                                                generation_config=gc)["decode"]
    del model
    decode = ExportedModel.from_pretrained(folder).runners["decode"]
    decode(**decode_inputs)
    t = time.perf_counter()
    for _ in range(int(tokens)):
        decode(**decode_inputs)
    dt = time.perf_counter() - t
    print("RESULT " + json.dumps({"tokens_per_s": int(tokens) / dt}))


WORKERS = {"_peer": worker_peer, "_decode_hfx": worker_decode_hfx, "_decode_peer": worker_decode_peer}


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] in WORKERS:
        WORKERS[sys.argv[1]](*sys.argv[2:])
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen3-0.6b", choices=sorted(CONFIGS))
    ap.add_argument("--cache-len", type=int, default=128)
    ap.add_argument("--tokens", type=int, default=16, help="decode steps timed per artifact")
    ap.add_argument("--skip", default="", help="comma-separated: hfx, peer")
    ap.add_argument("--keep", help="folder for the checkpoint (reused when present), artifacts and logs (kept)")
    ap.add_argument("--hfx", default=str(ROOT / "build" / "hfx"))
    args = ap.parse_args()
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="hfx-et-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    ckpt, arts, logs = work / "checkpoint", work / "artifacts", work / "logs"
    try:
        if not (ckpt / "model.safetensors").exists():
            make_checkpoint(args.model, ckpt)
        shutil.rmtree(arts, ignore_errors=True)
        arts.mkdir()
        logs.mkdir(exist_ok=True)
        rows: dict[str, dict] = {}
        me = [sys.executable, str(Path(__file__).resolve())]
        if "hfx" not in skip:
            out = arts / "hfx"
            print("export hfx ...", flush=True)
            rows["hfx"] = {"export": timed_export([args.hfx, "export", "-m", str(ckpt), "--format", "executorch", "--static-cache",
                                                   "--max-cache-len", str(args.cache_len), "--no-verify", "--quiet", str(out)],
                                                  logs / "export-hfx.log")}
            if rows["hfx"]["export"]["ok"]:
                rows["hfx"]["decode"] = child(["_decode_hfx", str(out / "executorch" / "model.pte"), str(args.tokens)],
                                              logs / "decode-hfx.log", script=__file__)
        if "peer" not in skip:
            out = arts / "peer"
            print("export peer (ExecutorchExporter, xnnpack) ...", flush=True)
            rows["peer"] = {"export": timed_export(me + ["_peer", str(ckpt), str(out), str(args.cache_len)], logs / "export-peer.log")}
            if rows["peer"]["export"]["ok"]:
                rows["peer"]["decode"] = child(["_decode_peer", str(ckpt), str(out), str(args.cache_len), str(args.tokens)],
                                               logs / "decode-peer.log", script=__file__)
        name, _, _, largest = largest_tensor(ckpt)
        print(f"\n{args.model}, static cache {args.cache_len}, largest tensor {name} {largest / MB:.0f} MiB")
        print(f"{'tool':6} {'export s':>9} {'peak RSS MiB':>13} {'decode tok/s':>13}")
        for tool, row in rows.items():
            e, d = row["export"], row.get("decode", {})
            if not e["ok"]:
                print(f"{tool:6} FAILED: {e['error']}")
                continue
            dec = f"{d['tokens_per_s']:.2f}" if d.get("ok") else f"FAILED: {d.get('error', '-')}"
            print(f"{tool:6} {e['wall_s']:9.1f} {e['rss'] / MB:13.0f} {dec:>13}")
        h, p = rows.get("hfx", {}), rows.get("peer", {})
        if h.get("export", {}).get("ok") and p.get("export", {}).get("ok"):
            speed = p["export"]["wall_s"] / h["export"]["wall_s"]
            print(f"export: hfx {speed:.1f}x faster (goal >= {SPEEDUP_GOAL}x); peak RSS hfx / peer "
                  f"{h['export']['rss'] / p['export']['rss']:.2f}")
            if h.get("decode", {}).get("ok") and p.get("decode", {}).get("ok"):
                print(f"decode tokens/s hfx / peer: {h['decode']['tokens_per_s'] / p['decode']['tokens_per_s']:.2f} (goal >= 1)")
        if h.get("export", {}).get("ok"):
            bound = 1024 * MB + 2 * largest
            print(f"hfx peak RSS {h['export']['rss'] / MB:.0f} MiB against the bound {bound / MB:.0f} MiB "
                  f"(1 GiB + 2 x the largest tensor): {'within' if h['export']['rss'] <= bound else 'OVER'}")
        (work / "results.json").write_text(json.dumps({"model": args.model, "rows": rows}, default=str, indent=1))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
