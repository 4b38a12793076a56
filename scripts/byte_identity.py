#!/usr/bin/env python3
"""Byte-identity of hfx's artifacts between two builds: every tiny case of every family, exported in
every format and the options that change what is written (ONNX ort / portable / opset 23, every
precision, static cache and split prefill, OpenVINO stateful / stateless, pt2, the encoders), by each
binary; every file's sha256 compared. A refusal counts as an outcome too: both builds must refuse the
same export with the same message.

    scripts/byte_identity.sh BASE_REV          # builds BASE_REV and the working tree, then this
    scripts/byte_identity.py --hfx A=path/to/hfx --hfx B=path/to/hfx --work DIR

Refactors that promise "every artifact stays byte-identical" are checked with it; the output names
every export and file that differs.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "oracle"))

# variant name -> export options. Each one writes every format it applies to in one job.
DECODER_VARIANTS: dict[str, list[str]] = {
    "default": ["-f", "onnx,openvino,pt2"],
    "portable": ["-f", "onnx", "--onnx-profile", "portable"],
    "opset23": ["-f", "onnx", "--onnx-opset", "23"],
    "f16": ["-f", "onnx,openvino", "--dtype", "f16"],  # pt2 writes f32 programs only
    "bf16": ["-f", "onnx,openvino", "--dtype", "bf16"],
    "int4": ["-f", "onnx,openvino", "--quantize", "int4"],
    "int4-portable": ["-f", "onnx", "--onnx-profile", "portable", "--quantize", "int4:block=16:asym"],
    "int8-channel": ["-f", "onnx,openvino", "--quantize", "int8:channel"],
    "int4-all": ["-f", "onnx,openvino", "--quantize", "int4", "--quantize-lm-head", "--quantize-embeddings"],
    # OpenVINO's stateful layout is one decoder graph with a growing cache: the others are stateless
    "static": ["-f", "onnx,pt2", "--static-cache", "--max-cache-len", "32"],
    "split": ["-f", "onnx,pt2", "--split-prefill"],
    "stateless": ["-f", "openvino", "--stateless"],
    "stateless-split": ["-f", "openvino", "--stateless", "--split-prefill"],
    "bounded": ["-f", "onnx,pt2", "--dim", "batch_size=1:4", "--dim", "sequence_length=1:16"],
}
ENCODER_VARIANTS: dict[str, list[str]] = {
    "default": ["-f", "onnx,openvino,pt2"],
    "portable": ["-f", "onnx", "--onnx-profile", "portable"],
    "opset23": ["-f", "onnx", "--onnx-opset", "23"],
    "f16": ["-f", "onnx,openvino", "--dtype", "f16"],
    "int8-channel": ["-f", "onnx,openvino", "--quantize", "int8:channel"],
}


def make_models(folder: Path) -> dict[str, str]:
    """Every decoder case of tiny_models.py and every encoder case of test_encoders.py, saved once
    (a stamp file marks a complete folder). Returns case -> kind."""
    import tiny_models
    import test_encoders

    kinds = {}
    for case in tiny_models.CASES:
        kinds[case] = "decoder"
        target = folder / case
        if not (target / ".complete").exists():
            tiny_models.make(case, target)
            (target / ".complete").write_text("")
    for case in test_encoders.CASES:
        kinds[case] = "encoder"
        target = folder / case
        if not (target / ".complete").exists():
            test_encoders.make_checkpoint(case, target)
            (target / ".complete").write_text("")
    return kinds


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def export_one(hfx: str, model: Path, out: Path, options: list[str]) -> dict[str, str]:
    """file (relative) -> sha256, or {"<refused>": first line of the error}."""
    if out.exists():
        subprocess.run(["rm", "-rf", str(out)], check=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    r = subprocess.run([hfx, "export", "-m", str(model), str(out), "-q", "--no-verify", *options],
                       capture_output=True, text=True)
    if r.returncode != 0:
        line = (r.stderr.strip().splitlines() or ["(no message)"])[-1]  # notes come first
        # the message may name the output folder; that differs between the two runs
        return {"<refused>": f"exit {r.returncode}: " + line.replace(str(out), "OUT")}
    return {str(p.relative_to(out)): sha256(p) for p in sorted(out.rglob("*")) if p.is_file()}


def run_matrix(label: str, hfx: str, models: Path, kinds: dict[str, str], work: Path, jobs: int) -> dict:
    tasks = []
    for case, kind in kinds.items():
        variants = DECODER_VARIANTS if kind == "decoder" else ENCODER_VARIANTS
        for variant, options in variants.items():
            tasks.append((f"{case}/{variant}", models / case, work / f"out-{label}" / case / variant, options))
    results: dict[str, dict[str, str]] = {}
    done = 0
    with ThreadPoolExecutor(jobs) as pool:
        futures = {key: pool.submit(export_one, hfx, model, out, options) for key, model, out, options in tasks}
        for key, future in futures.items():
            results[key] = future.result()
            done += 1
            if done % 50 == 0:
                print(f"  {label}: {done}/{len(tasks)} exports", flush=True)
    # the exports are only needed for their hashes
    subprocess.run(["rm", "-rf", str(work / f"out-{label}")], check=True)
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hfx", action="append", required=True, metavar="LABEL=PATH",
                    help="a build to compare (give two); LABEL names its results file")
    ap.add_argument("--work", required=True, type=Path, help="scratch folder (checkpoints are kept there)")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    builds = [item.split("=", 1) for item in args.hfx]
    if len(builds) != 2 or any(len(b) != 2 for b in builds):
        ap.error("give --hfx LABEL=PATH twice")
    args.work.mkdir(parents=True, exist_ok=True)
    models = args.work / "models"
    kinds = make_models(models)
    print(f"byte-identity: {len(kinds)} checkpoints", flush=True)

    results = {}
    for label, hfx in builds:
        results[label] = run_matrix(label, hfx, models, kinds, args.work, args.jobs)
        (args.work / f"sums-{label}.json").write_text(json.dumps(results[label], indent=1, sort_keys=True))

    (a_label, _), (b_label, _) = builds
    a, b = results[a_label], results[b_label]
    differing = []
    for key in sorted(set(a) | set(b)):
        if a.get(key) != b.get(key):
            files = sorted(set(a.get(key, {})) | set(b.get(key, {})))
            differing.append((key, [f for f in files if a.get(key, {}).get(f) != b.get(key, {}).get(f)]))
    exports = len(a)
    refused = sum(1 for r in a.values() if "<refused>" in r)
    files = sum(len(r) for r in a.values() if "<refused>" not in r)
    if differing:
        print(f"byte-identity: {len(differing)} of {exports} exports differ between {a_label} and {b_label}:")
        for key, names in differing:
            print(f"  {key}: {', '.join(names)}")
        return 1
    print(f"byte-identity: {a_label} and {b_label} identical: {exports} exports ({len(kinds)} checkpoints), "
          f"{files} files, {refused} refusals with the same message")
    return 0


if __name__ == "__main__":
    sys.exit(main())
