"""Export wall time and peak RSS of hfx beside `cp -r` of the same checkpoint, in one run (issue #21).

Saves a random-initialised checkpoint of real size with Transformers (default: Qwen3-0.6B's config,
bf16 as published; nothing is downloaded; `--model qwen3-1.7b` is the second point), then measures,
each command in a child process (wall time and ru_maxrss), the median of --runs runs from a warm page
cache, in this order per run so the load of the machine falls on every row alike, each after a `sync`
(untimed: the f32 row, which fsyncs 2.3 GB, moved by ±50 % with the writeback the rows before it left):
  - cp:         `cp -r CKPT OUT` (the floor for any tool that writes every weight once)
  - cp-sync:    the same, then `sync OUT/*` (fsync of each file: the bytes on disk, as hfx's commit leaves
                them; cp alone leaves them in dirty pages the kernel writes back later)
  - hfx f32:    `hfx export --no-verify` (bf16 -> f32 ONNX: twice the bytes cp writes)
  - hfx bf16:   `hfx export --dtype bf16 --no-verify` (the same bytes as cp)
  - hfx int4:   `hfx export --quantize int4 --no-verify` (MatMulNBits blocks of 32)
  - hfx check:  `hfx export` with its default built-in check (what a user gets), against the f32 row
  - hfx check-int4: `hfx export --quantize int4` with its check, against the int4 row
  - hfx check-ort: `hfx export` with HFX_PYTHON naming this venv's Python: the check runs the graph on
                ONNX Runtime (what a user with onnxruntime installed gets), against the f32 row
  - hfx check-int4-ort: the same for `--quantize int4`, against the int4 row
Reports each row's wall time as a ratio to cp's, and the issue's goals: the bf16 export <= 1.5x cp, the
export with its check <= 2x the --no-verify one, peak RSS <= 1 GiB + 2 x the checkpoint's largest tensor
(read from its safetensors header) in every precision. Prints what hfx said about its check (the
runtimes and oracle it ran).

Usage: .venv/bin/python bench/export_bench.py [--model qwen3-0.6b|qwen3-1.7b|qwen3-tiny] [--keep DIR] [--runs 3]
                                              [--rows cp,cp-sync,f32,bf16,int4,check,check-int4,check-ort,check-int4-ort] [--hfx build/hfx]
                                              [--markdown]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MIB = 1 << 20

CONFIGS = {
    # Qwen/Qwen3-0.6B config.json (architecture fields only)
    "qwen3-0.6b": dict(model_type="qwen3", vocab_size=151936, hidden_size=1024, intermediate_size=3072,
                       num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                       max_position_embeddings=40960, rms_norm_eps=1e-6, tie_word_embeddings=True,
                       rope_theta=1000000.0, bos_token_id=151643, eos_token_id=151645),
    # Qwen/Qwen3-1.7B config.json (architecture fields only)
    "qwen3-1.7b": dict(model_type="qwen3", vocab_size=151936, hidden_size=2048, intermediate_size=6144,
                       num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                       max_position_embeddings=40960, rms_norm_eps=1e-6, tie_word_embeddings=True,
                       rope_theta=1000000.0, bos_token_id=151643, eos_token_id=151645),
    # A small model, where an export's fixed costs (the check's interpreter and imports) are most of it
    "qwen3-tiny": dict(model_type="qwen3", vocab_size=1000, hidden_size=64, intermediate_size=128,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                       max_position_embeddings=4096, rms_norm_eps=1e-6, tie_word_embeddings=True,
                       rope_theta=1000000.0, bos_token_id=1, eos_token_id=2),
}

# The rows: (name, what it runs, extra hfx arguments; None for cp).
ROWS = {
    "cp": ("cp -r CKPT", None),
    # cp, then fsync of every copied file: the bytes on disk, as hfx's commit leaves them (it fsyncs the
    # staged files before the rename that publishes them), where cp leaves them in dirty pages.
    "cp-sync": ("cp -r CKPT && sync OUT/*", None),
    "f32": ("hfx export --no-verify", ["--no-verify"]),
    "bf16": ("hfx export --dtype bf16 --no-verify", ["--dtype", "bf16", "--no-verify"]),
    # The same export of the same files, found by Hub id in a Hugging Face cache (the checkpoint's files
    # hard-linked into a cache layout): the weights' sha256 is their blob's name, not hashed again.
    "bf16-hub": ("hfx export -m bench/CKPT --dtype bf16 --no-verify (from a Hugging Face cache)",
                 ["--dtype", "bf16", "--no-verify"]),
    "int4": ("hfx export --quantize int4 --no-verify", ["--quantize", "int4", "--no-verify"]),
    "check": ("hfx export (its default check)", []),
    "check-int4": ("hfx export --quantize int4 (its default check)", ["--quantize", "int4"]),
    # What a user with onnxruntime installed gets: the check runs the graph on ONNX Runtime
    # (HFX_PYTHON names this venv's Python, which has it).
    "check-ort": ("HFX_PYTHON=.venv/bin/python hfx export (its check, on ONNX Runtime)", []),
    "check-int4-ort": ("HFX_PYTHON=.venv/bin/python hfx export --quantize int4 (its check, on ONNX Runtime)",
                       ["--quantize", "int4"]),
}


def make_checkpoint(name: str, folder: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = dict(CONFIGS[name])
    config = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16)
    model.save_pretrained(folder, safe_serialization=True)


def measure(cmd: list[str], env: dict | None = None) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes) of one command, run in a child so RUSAGE_CHILDREN is its own
    (ru_maxrss of the largest process of its tree: for check-ort, hfx or its ONNX Runtime child)."""
    code = (
        "import resource, subprocess, sys, time, json\n"
        "t = time.perf_counter(); subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)\n"
        "dt = time.perf_counter() - t\n"
        "print(json.dumps([dt, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code, *cmd], check=True, capture_output=True, text=True,
                         env=env).stdout
    dt, rss = json.loads(out.strip().splitlines()[-1])
    return dt, rss


def drop_caches_hint(path: Path) -> None:
    # Read the files once so both tools start from the same (warm) page cache.
    for f in path.iterdir():
        if f.is_file():
            with open(f, "rb") as fh:
                while fh.read(1 << 24):
                    pass


def largest_tensor(ckpt: Path) -> tuple[str, str, list[int], int]:
    """(name, dtype, shape, bytes) of the largest tensor in the checkpoint, from its safetensors headers."""
    best = ("", "", [], -1)
    for f in sorted(ckpt.glob("*.safetensors")):
        with open(f, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        for name, info in header.items():
            if name == "__metadata__":
                continue
            start, end = info["data_offsets"]
            if end - start > best[3]:
                best = (name, info["dtype"], info["shape"], end - start)
    if best[3] < 0:
        raise SystemExit(f"{ckpt}: no tensor found in any *.safetensors header")
    return best


def print_table(table: list) -> None:
    """Rows of strings (the first is the header) in aligned columns."""
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)))


def print_markdown(table: list) -> None:
    """The same rows as a Markdown table, for docs/benchmarks.md."""
    print()
    print("| " + " | ".join(table[0]) + " |")
    print("|" + "---|" * len(table[0]))
    for row in table[1:]:
        print("| " + " | ".join(row) + " |")


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


HUB_ID = "bench/checkpoint"


def hub_cache_of(ckpt: Path, cache: Path) -> Path:
    """A Hugging Face cache holding `ckpt` as HUB_ID, as `hf download` lays it out: each file a link from
    snapshots/<commit>/ into blobs/, the weights' blobs named by their sha256 (hard links to the
    checkpoint's files, so both share the page cache). Returns the cache folder."""
    repo = cache / ("models--" + HUB_ID.replace("/", "--"))
    commit = "0" * 40
    snapshot = repo / "snapshots" / commit
    if snapshot.exists():
        return cache
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True)
    for f in sorted(ckpt.iterdir()):
        if not f.is_file():
            continue
        if f.suffix == ".safetensors":
            h = hashlib.sha256()
            with open(f, "rb") as fh:
                while chunk := fh.read(1 << 24):
                    h.update(chunk)
            blob_name = h.hexdigest()  # an LFS file's blob: its sha256
        else:
            blob_name = hashlib.sha1(b"blob %d\0" % f.stat().st_size + f.read_bytes()).hexdigest()  # a git blob
        blob = repo / "blobs" / blob_name
        if not blob.exists():
            os.link(f, blob)
        (snapshot / f.name).symlink_to(Path("../../blobs") / blob_name)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return cache


def command(row: str, hfx: str, ckpt: Path, out: Path) -> list[str]:
    extra = ROWS[row][1]
    if row == "cp-sync":
        return ["sh", "-c", 'cp -r "$1" "$2" && sync "$2"/*', "cp-sync", str(ckpt), str(out)]
    if extra is None:
        return ["cp", "-r", str(ckpt), str(out)]
    model = HUB_ID if row.endswith("-hub") else str(ckpt)
    return [hfx, "export", "--model", model, "--quiet", *extra, str(out)]


def check_notice(hfx: str, ckpt: Path, work: Path) -> str:
    """What hfx says about its built-in check on this checkpoint (one export, not timed)."""
    out = work / "notice"
    p = subprocess.run([hfx, "export", "--model", str(ckpt), str(out)], capture_output=True, text=True)
    shutil.rmtree(out, ignore_errors=True)
    lines = [l.strip() for l in (p.stdout + p.stderr).splitlines() if "check" in l.lower() or "verif" in l.lower()]
    return lines[-1] if lines else "(hfx printed nothing about its check)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen3-0.6b", choices=sorted(CONFIGS))
    ap.add_argument("--keep", help="folder to keep the checkpoint in (reused when present)")
    ap.add_argument("--hfx", default=str(ROOT / "build" / "hfx"))
    ap.add_argument("--runs", type=int, default=3, help="runs per row; the median is reported (default 3)")
    ap.add_argument("--rows", default=",".join(ROWS), help="comma-separated rows: " + ",".join(ROWS))
    ap.add_argument("--markdown", action="store_true", help="also print the table as Markdown (for docs/benchmarks.md)")
    args = ap.parse_args()
    rows = [r for r in args.rows.split(",") if r]
    for r in rows:
        if r not in ROWS:
            raise SystemExit(f"--rows: unknown row {r!r}; known: {', '.join(ROWS)}")
    if "cp" not in rows:
        rows.insert(0, "cp")  # every ratio is to cp

    work = Path(tempfile.mkdtemp(prefix="hfx-bench-"))
    ckpt = Path(args.keep) if args.keep else work / "checkpoint"
    try:
        if not (ckpt / "config.json").exists():
            t = time.perf_counter()
            make_checkpoint(args.model, ckpt)
            print(f"saved {args.model} checkpoint in {time.perf_counter() - t:.1f} s")
        if any(r.endswith("-hub") for r in rows):
            os.environ["HF_HUB_CACHE"] = str(hub_cache_of(ckpt, ckpt.parent / (ckpt.name + "-hub-cache")))
        size = sum(f.stat().st_size for f in ckpt.glob("*.safetensors"))
        name, dtype, shape, largest = largest_tensor(ckpt)
        rss_goal = (1 << 30) + 2 * largest
        times: dict[str, list[float]] = {r: [] for r in rows}
        rss: dict[str, int] = {r: 0 for r in rows}
        written: dict[str, int] = {}
        for run in range(args.runs):
            drop_caches_hint(ckpt)
            for r in rows:
                out = work / f"out-{r}"
                shutil.rmtree(out, ignore_errors=True)
                env = {**os.environ, "HFX_PYTHON": str(ROOT / ".venv" / "bin" / "python")} if r.endswith("-ort") else None
                os.sync()  # no row starts behind the disk's writeback of another's files (untimed)
                dt, peak = measure(command(r, args.hfx, ckpt, out), env)
                times[r].append(dt)
                rss[r] = max(rss[r], peak)
                written[r] = folder_bytes(out)
                shutil.rmtree(out, ignore_errors=True)
            print(f"run {run + 1}: " + ", ".join(f"{r} {times[r][-1]:.2f} s" for r in rows), flush=True)
        notice = check_notice(args.hfx, ckpt, work) if "check" in rows else ""

        med = {r: statistics.median(times[r]) for r in rows}
        print(f"\nmodel {args.model}: checkpoint {size / MIB:.0f} MiB; largest tensor {name} {dtype} {shape} = "
              f"{largest / MIB:.0f} MiB; peak RSS goal 1 GiB + 2 x largest = {rss_goal / MIB:.0f} MiB")
        table = [("row", "command", "wall s (median)", "runs s", "× cp", "peak RSS MiB", "RSS goal", "written MiB")]
        for r in rows:
            table.append((r, ROWS[r][0], f"{med[r]:.2f}", " / ".join(f"{t:.2f}" for t in times[r]),
                          f"{med[r] / med['cp']:.2f}", f"{rss[r] / MIB:.0f}",
                          "-" if r in ("cp", "cp-sync") else ("met" if rss[r] <= rss_goal else "NOT met"), f"{written[r] / MIB:.0f}"))
        print_table(table)
        print("\ngoals (issue #21):")
        for r in ("bf16", "bf16-hub"):
            if r in rows:
                ratio = med[r] / med["cp"]
                print(f"  {r} export / cp -r: {ratio:.2f}x (goal <= 1.5x: {'met' if ratio <= 1.5 else 'NOT met'})"
                      + (f"; / cp -r + sync: {med[r] / med['cp-sync']:.2f}x" if "cp-sync" in rows else ""))
        if "check" in rows and "f32" in rows:
            ratio = med["check"] / med["f32"]
            verdict = "met" if ratio <= 2 else "NOT met"
            print(f"  export with its check / --no-verify: {ratio:.2f}x (goal <= 2x: {verdict}); hfx said: {notice}")
        if "check-ort" in rows and "f32" in rows:
            ratio = med["check-ort"] / med["f32"]
            print(f"  export with its check on ONNX Runtime / --no-verify: {ratio:.2f}x "
                  f"(goal <= 2x: {'met' if ratio <= 2 else 'NOT met'})")
        for r, where in (("check-int4", ""), ("check-int4-ort", " on ONNX Runtime")):
            if r in rows and "int4" in rows:
                ratio = med[r] / med["int4"]
                print(f"  int4 export with its check{where} / --no-verify: {ratio:.2f}x "
                      f"(goal <= 2x: {'met' if ratio <= 2 else 'NOT met'})")
        over = [r for r in rows if r not in ("cp", "cp-sync") and rss[r] > rss_goal]
        print(f"  peak RSS <= {rss_goal / MIB:.0f} MiB in every row: {'met' if not over else 'NOT met: ' + ', '.join(over)}")
        if args.markdown:
            print_markdown(table)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
