"""hfx's `.pt2` export beside Transformers' DynamoExporter, in one run (issue #18).

Saves one random-initialised checkpoint (export_bench.CONFIGS; default Qwen3-0.6B's shape, bf16 as published,
nothing downloaded) and exports it to a torch.export archive with:
  - hfx:  `hfx export -m CKPT --format pt2 --no-verify OUT` (writes OUT/pt2/model.pt2)
  - peer: Transformers' DynamoExporter as its docs show for a generative model: the model loaded from the
          checkpoint, `export_for_generation(model, {input_ids, attention_mask}, DynamoConfig(dynamic=True))`
          (a prefill and a decode program, the KV cache a DynamicCache), then `save_pretrained`, which
          `torch.export.save`s prefill.pt2 and decode.pt2. Loaded in --peer-dtype (default: the dtype of hfx's
          archive, so both write the same weights; float32 when hfx did not run).
Each export runs in a child process: wall time and peak RSS (export_bench.measure, ru_maxrss of the child), the
model load included on both sides. Then every archive is loaded with `torch.export.load` in a child of its own,
only torch imported; an archive that fails is tried again the way Transformers' ExportedModel.from_pretrained
loads it (the cache classes named in its export.json registered as pytree nodes first), and the table says which.

Reports a table, the ratios hfx / peer, and the issue's goals: hfx's export >= 50x faster than the peer's, hfx's
peak RSS <= 1 GiB + 2 x the checkpoint's largest tensor (read from its safetensors header). A row that fails is
reported as failed with the last line of its error; the run goes on.

Usage: .venv/bin/python bench/pt2_bench.py [--model qwen3-0.6b|qwen3-tiny] [--skip hfx|peer] [--keep DIR]
                                          [--hfx build/hfx] [--peer-dtype match|float32|bfloat16] [--markdown]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from export_bench import CONFIGS, drop_caches_hint, largest_tensor, make_checkpoint  # noqa: E402
# peer_bench registers the qwen3-tiny shape in CONFIGS and holds the failure-reporting helpers.
from peer_bench import MB, child, dir_size, last_line, timed_export  # noqa: E402

TOOLS = ("hfx", "peer")
SPEEDUP_GOAL = 50  # hfx's export at least 50x faster than the peer's (issue #18)


# ----------------------------------------------------------------------------------------------
# Child-process workers (run as `pt2_bench.py _worker ...`, so each has its own RSS and memory)
# ----------------------------------------------------------------------------------------------

def worker_dynamo(ckpt: str, out: str, dtype: str, phases: str) -> None:
    """Transformers' DynamoExporter, used as its docstrings show for generation; phase times go to `phases`."""
    t0 = time.perf_counter()
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.exporters.configs import DynamoConfig
    from transformers.exporters.exporter_dynamo import DynamoExporter

    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=getattr(torch, dtype))
    model.eval()
    t1 = time.perf_counter()
    ids = torch.arange(8, dtype=torch.int64)[None] + 1000  # generate() sample: 8 tokens, batch 1
    with torch.no_grad():
        exported = DynamoExporter().export_for_generation(
            model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, DynamoConfig(dynamic=True))
    t2 = time.perf_counter()
    exported.save_pretrained(out)  # torch.export.save of each component, + export.json and the configs
    t3 = time.perf_counter()
    Path(phases).write_text(json.dumps({"import_load_s": t1 - t0, "export_s": t2 - t1, "save_s": t3 - t2,
                                        "components": sorted(exported.components)}))


def _register_transformers_pytrees(folder: Path) -> None:
    """What ExportedModel.from_pretrained does before torch.export.load: register the cache classes the
    export.json specs name as pytree nodes (a program whose inputs hold a DynamicCache needs them)."""
    from transformers.exporters.metadata import register_treespec_types

    for manifest in folder.rglob("export.json"):
        for entry in json.loads(manifest.read_text())["components"].values():
            for key in ("in_spec", "out_spec"):
                if entry["metadata"].get(key):
                    register_treespec_types(entry["metadata"][key])


def worker_load(folder: str, how: str) -> None:
    """torch.export.load every .pt2 under `folder`; `how` = plain (torch only) or transformers."""
    import logging

    import torch

    root = Path(folder)
    if how == "transformers":
        _register_transformers_pytrees(root)
    files = sorted(root.rglob("*.pt2"))
    if not files:
        raise SystemExit(f"{folder}: no .pt2 file found")

    # torch.export.load logs the deserializer's exception as a warning and raises a generic RuntimeError;
    # keep the logged cause so the failure line names it.
    causes: list[str] = []

    class _Cause(logging.Handler):
        def emit(self, record):
            if record.exc_info and record.exc_info[1] is not None:
                causes.append(f"{type(record.exc_info[1]).__name__}: {record.exc_info[1]}")

    logging.getLogger("torch.export").addHandler(_Cause())
    result = []
    for f in files:
        t = time.perf_counter()
        try:
            ep = torch.export.load(str(f))
        except Exception as e:  # noqa: BLE001 - reported as the row's failure line
            cause = causes[-1] if causes else f"{type(e).__name__}: {e}"
            raise SystemExit(f"{f.relative_to(root)}: {last_line(cause)}") from None
        dt = time.perf_counter() - t
        by_dtype: dict[str, int] = {}
        seen: set[int] = set()  # a tied weight is one storage under two names: count it once
        for v in list(ep.state_dict.values()) + [c for c in ep.constants.values() if isinstance(c, torch.Tensor)]:
            if v.untyped_storage().data_ptr() in seen:
                continue
            seen.add(v.untyped_storage().data_ptr())
            name = str(v.dtype).removeprefix("torch.")
            by_dtype[name] = by_dtype.get(name, 0) + v.numel() * v.element_size()
        inputs = [s.arg.name for s in ep.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
        result.append({"file": str(f.relative_to(root)), "load_s": dt, "weights": len(ep.state_dict),
                       "bytes_by_dtype": by_dtype, "user_inputs": len(inputs)})
    print("RESULT " + json.dumps({"files": result}))


# ----------------------------------------------------------------------------------------------
# The parent: checkpoint, exports, load checks, table
# ----------------------------------------------------------------------------------------------

def hfx_has_pt2(hfx: str) -> str | None:
    """None when the binary can write pt2 (`hfx formats` lists it available), else why the hfx row cannot run."""
    try:
        p = subprocess.run([hfx, "formats"], capture_output=True, text=True, timeout=60)
    except OSError as e:
        return f"cannot run {hfx}: {e.strerror}"
    lines = p.stdout.splitlines()
    if p.returncode != 0 or "pt2" not in lines:
        return f"pending: {hfx} has no pt2 format yet (`hfx formats` does not list it)"
    status = lines[lines.index("pt2") + 1].strip() if lines.index("pt2") + 1 < len(lines) else ""
    return None if status.startswith("status:") and "available" in status else f"pending: {hfx}: pt2 {status}"


def main_dtype(load: dict) -> str | None:
    """The floating dtype holding most of an archive's weight bytes."""
    if not load.get("ok"):
        return None
    totals: dict[str, int] = {}
    for f in load["files"]:
        for dt, b in f["bytes_by_dtype"].items():
            totals[dt] = totals.get(dt, 0) + b
    floats = {dt: b for dt, b in totals.items() if dt.startswith(("float", "bfloat"))}
    return max(floats, key=floats.get) if floats else None


def load_check(folder: Path, logs: Path, tool: str) -> dict:
    """Plain torch.export.load first; on failure, the way Transformers loads its own exports."""
    plain = child(["_load", str(folder), "plain"], logs / f"load-{tool}-plain.log", script=__file__)
    if plain["ok"]:
        return {"ok": True, "how": "plain", "files": plain["files"]}
    if not any(folder.rglob("export.json")):
        return {"ok": False, "error": plain["error"]}
    tf = child(["_load", str(folder), "transformers"], logs / f"load-{tool}-transformers.log", script=__file__)
    if tf["ok"]:
        return {"ok": True, "how": "transformers", "plain_error": plain["error"], "files": tf["files"]}
    return {"ok": False, "error": tf["error"], "plain_error": plain["error"]}


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1].startswith("_"):
        name, rest = sys.argv[1], sys.argv[2:]
        if name == "_dynamo":
            worker_dynamo(*rest)
        elif name == "_load":
            worker_load(*rest)
        else:
            raise SystemExit(f"unknown worker {name}")
        return 0

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen3-0.6b", choices=sorted(CONFIGS))
    ap.add_argument("--skip", default="", help="comma-separated tools to leave out: " + ",".join(TOOLS))
    ap.add_argument("--keep", help="folder for the checkpoint (reused when present), artifacts and logs (kept)")
    ap.add_argument("--hfx", default=str(ROOT / "build" / "hfx"))
    ap.add_argument("--peer-dtype", default="match", choices=("match", "float32", "bfloat16"),
                    help="dtype the peer loads the model in; match = the dtype of hfx's archive (float32 without one)")
    ap.add_argument("--markdown", action="store_true", help="also print the table as Markdown (for docs/benchmarks.md)")
    args = ap.parse_args()
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    if skip - set(TOOLS):
        ap.error(f"--skip: unknown tool(s) {sorted(skip - set(TOOLS))}; choose from {','.join(TOOLS)}")

    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="hfx-pt2-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    ckpt, arts, logs = work / "checkpoint", work / "artifacts", work / "logs"
    try:
        if not (ckpt / "model.safetensors").exists():
            t = time.perf_counter()
            make_checkpoint(args.model, ckpt)
            print(f"saved {args.model} checkpoint in {time.perf_counter() - t:.1f} s", flush=True)
        shutil.rmtree(arts, ignore_errors=True)
        arts.mkdir()
        logs.mkdir(exist_ok=True)
        cfg = json.loads((ckpt / "config.json").read_text())
        largest = largest_tensor(ckpt)
        rows: dict[str, dict] = {}

        def run(tool: str, cmd: list[str], out: Path, note: str) -> dict:
            # As in peer_bench: no export pays for the previous one's write-back, both start from a warm checkpoint.
            os.sync()
            drop_caches_hint(ckpt)
            print(f"export {tool} ({note}) ...", flush=True)
            r = timed_export(cmd, logs / f"export-{tool}.log")
            row = {"tool": tool, "note": note, "export": r, "dir": str(out)}
            if r["ok"]:
                row["bytes"] = dir_size(out)
                print(f"  {r['wall_s']:.1f} s, peak RSS {r['rss'] / MB:.0f} MiB, {row['bytes'] / MB:.0f} MiB written",
                      flush=True)
                row["load"] = load_check(out, logs, tool)
                ld = row["load"]
                print("  torch.export.load: " + (f"ok ({ld['how']})" if ld["ok"] else f"FAILED: {ld['error']}"),
                      flush=True)
            else:
                print(f"  FAILED: {r['error']}", flush=True)
            rows[tool] = row
            return row

        if "hfx" not in skip:
            pending = hfx_has_pt2(args.hfx)
            if pending:
                print(f"hfx: {pending}", flush=True)
                rows["hfx"] = {"tool": "hfx", "note": "", "export": {"ok": False, "error": pending}}
            else:
                run("hfx", [args.hfx, "export", "-m", str(ckpt), "--format", "pt2", "--no-verify", "--quiet",
                            str(arts / "hfx")], arts / "hfx", "export --format pt2 --no-verify")
        if "peer" not in skip:
            dtype = args.peer_dtype
            if dtype == "match":
                dtype = main_dtype(rows.get("hfx", {}).get("load", {})) or "float32"
            phases = logs / "peer-phases.json"
            phases.unlink(missing_ok=True)
            me = [sys.executable, str(Path(__file__).resolve())]
            row = run("peer", me + ["_dynamo", str(ckpt), str(arts / "peer"), dtype, str(phases)], arts / "peer",
                      f"DynamoExporter.export_for_generation, {dtype}")
            if phases.exists():
                row["phases"] = json.loads(phases.read_text())

        report(args, rows, largest, cfg)
        (work / "results.json").write_text(json.dumps(
            {"model": args.model, "largest_tensor": largest, "rows": rows}, default=str, indent=1))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def load_cell(row: dict) -> str:
    ld = row.get("load")
    if not ld:
        return "—"
    if not ld["ok"]:
        return f"failed: {ld['error']}"
    files = ", ".join(f"{f['file']} ({f['load_s']:.1f} s)" for f in ld["files"])
    if ld["how"] == "plain":
        return f"loads: {files}"
    return (f"loads only with Transformers' cache classes registered as pytree nodes: {files}; "
            f"plain torch.export.load failed: {ld['plain_error']}")


def report(args, rows: dict, largest, cfg) -> None:
    name, ldtype, shape, lbytes = largest
    print(f"\nmodel {args.model} ({cfg['num_hidden_layers']} layers, hidden {cfg['hidden_size']}, vocab "
          f"{cfg['vocab_size']}); largest checkpoint tensor {name} {ldtype} {shape} = {lbytes / MB:.0f} MiB")
    head = f"{'tool':<5} {'export s':>9} {'peak RSS MiB':>13} {'written MiB':>12} {'weights':>9}  torch.export.load"
    print(head)
    print("-" * len(head))
    for tool in TOOLS:
        r = rows.get(tool)
        if not r:
            continue
        e = r["export"]
        if not e.get("ok"):
            print(f"{tool:<5} {'FAILED':>9}  {e['error']}")
            continue
        print(f"{tool:<5} {e['wall_s']:9.1f} {e['rss'] / MB:13.0f} {r['bytes'] / MB:12.0f} "
              f"{main_dtype(r.get('load', {})) or '?':>9}  {load_cell(r)}")
        print(f"{'':<5} {r['note']}" + (
            "; of it import + model load {import_load_s:.1f} s, export {export_s:.1f} s, save {save_s:.1f} s "
            "(components {components})".format(**r["phases"]) if "phases" in r else ""))

    h, p = rows.get("hfx"), rows.get("peer")
    hok = bool(h and h["export"].get("ok"))
    cap = (1 << 30) + 2 * lbytes
    print(f"\ngoals (issue #18): export >= {SPEEDUP_GOAL}x faster than the peer; hfx peak RSS <= 1 GiB + 2 x largest "
          f"tensor = {cap / MB:.0f} MiB")
    if hok and p and p["export"].get("ok"):
        t = h["export"]["wall_s"] / p["export"]["wall_s"]
        rss = h["export"]["rss"] / p["export"]["rss"]
        print(f"  hfx / peer: export time {t:.4f} ({1 / t:.1f}x faster; goal {SPEEDUP_GOAL}x: "
              f"{'met' if 1 / t >= SPEEDUP_GOAL else 'NOT met'}), peak RSS {rss:.3f}")
    else:
        print("  hfx / peer ratios: — (" + ("peer" if hok else "hfx") + " row missing or failed)")
    if hok:
        print(f"  hfx peak RSS {h['export']['rss'] / MB:.0f} MiB vs {cap / MB:.0f} MiB: "
              f"{'met' if h['export']['rss'] <= cap else 'NOT met'}")

    if args.markdown:
        print("\n| tool | export s | peak RSS MiB | written MiB | weights | torch.export.load |")
        print("|---|---|---|---|---|---|")
        for tool in TOOLS:
            r = rows.get(tool)
            if not r:
                continue
            e = r["export"]
            if not e.get("ok"):
                print(f"| {tool} | {e['error']} | | | | |")
                continue
            print(f"| {tool} | {e['wall_s']:.1f} | {e['rss'] / MB:.0f} | {r['bytes'] / MB:.0f} | "
                  f"{main_dtype(r.get('load', {})) or '?'} | {load_cell(r)} |")


if __name__ == "__main__":
    sys.exit(main())
