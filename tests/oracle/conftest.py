"""Shared fixtures of the oracle tests: the hfx binary, tiny checkpoints, and running hfx."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))

import tiny_models  # noqa: E402


def hfx_binary() -> Path:
    path = Path(os.environ.get("HFX_BIN", ROOT / "build" / "hfx"))
    if not path.exists():
        pytest.exit(f"hfx binary not found at {path}: build first (scripts/setup.sh)", returncode=2)
    return path


def run_hfx(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(hfx_binary()), *map(str, args)], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"hfx {' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """Returns a function case -> folder of the saved tiny checkpoint (made once per session)."""
    made: dict[str, Path] = {}
    base = tmp_path_factory.mktemp("checkpoints")

    def get(case: str) -> Path:
        if case not in made:
            made[case] = tiny_models.make(case, base / case)
        return made[case]

    return get


@pytest.fixture(scope="session")
def exported(tiny_checkpoint, tmp_path_factory):
    """Returns a function case -> folder of the hfx ONNX export of that checkpoint (once per session)."""
    done: dict[str, Path] = {}
    base = tmp_path_factory.mktemp("exports")

    def get(case: str) -> Path:
        if case not in done:
            out = base / case
            # portable: these exports are checked on left-padded batches and by onnx.checker, which the
            # ort profile's GroupQueryAttention / ORT-only ops do not serve (test_ort_profile.py covers ort)
            run_hfx("export", "--model", tiny_checkpoint(case), "--format", "onnx", "--onnx-profile", "portable",
                    "--quiet", out)
            done[case] = out
        return done[case]

    return get


def export_once(base: Path, args_of):
    """A function (case, variant) -> export folder, exporting each pair once; args_of(case, variant)
    gives the hfx export arguments before OUT."""
    done: dict = {}

    def get(case: str, variant: str = "") -> Path:
        if (case, variant) not in done:
            out = base / f"{case}-{variant}" if variant else base / case
            run_hfx("export", *args_of(case, variant), out)
            done[(case, variant)] = out
        return done[(case, variant)]

    return get


@pytest.fixture(scope="session")
def reference_tokens(tiny_checkpoint):
    """(case, prompt set of test_generation.PROMPTS) -> Transformers' greedy tokens, computed once per
    session for every runtime's generation test."""
    from test_generation import PROMPTS, transformers_generate

    cache: dict = {}

    def get(case: str, batch: str):
        if (case, batch) not in cache:
            cache[(case, batch)] = transformers_generate(tiny_models.load_reference(tiny_checkpoint(case)), PROMPTS[batch])
        return cache[(case, batch)]

    return get


# Coverage records: (case, model_type, backend, check) -> measured value, written at the end of the
# session to build/coverage.json; scripts/coverage.py turns it into docs/coverage.md.
_COVERAGE: dict = {}


def record_coverage(case: str, backend: str, check: str, value) -> None:
    model_type = tiny_models.CASES[case][0] if case in tiny_models.CASES else case
    _COVERAGE[f"{case}|{model_type}|{backend}|{check}"] = value


def pytest_sessionfinish(session, exitstatus):
    if not _COVERAGE:
        return
    import json
    out = ROOT / "build" / "coverage.json"
    out.parent.mkdir(exist_ok=True)
    old = json.loads(out.read_text()) if out.exists() else {}
    old.update(_COVERAGE)
    out.write_text(json.dumps(old, indent=1, sort_keys=True))


# Seconds spent per test file (setup + call + teardown, summed over workers), printed at the end so
# the suite's time can be kept in bounds where it is spent. Under xdist the reports reach the
# controller, which prints.
_FILE_SECONDS: dict = {}


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::", 1)[0]
    _FILE_SECONDS[path] = _FILE_SECONDS.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    if not _FILE_SECONDS:
        return
    terminalreporter.section("seconds per test file (summed over workers)")
    for path, seconds in sorted(_FILE_SECONDS.items(), key=lambda kv: -kv[1])[:25]:
        terminalreporter.write_line(f"{seconds:8.1f}  {path}")


def hfx_has_openvino() -> bool:
    """Whether this hfx was built with the OpenVINO backend (`hfx formats` says "available")."""
    proc = run_hfx("formats", check=False)
    lines = proc.stdout.splitlines()
    status = next((lines[i + 1] for i, line in enumerate(lines[:-1]) if line == "openvino"), "")
    return proc.returncode == 0 and status.split(":", 1)[-1].strip().startswith("available")


def ort_ops_per_provider(model_path, feed_of, prefix, name: str = "") -> dict:
    """Runs one prompt through ONNX Runtime (CPU) with profiling and returns {(provider, op): count}
    from ORT's own trace, printing the table. feed_of(inputs by name) gives the feed."""
    import json
    from collections import Counter

    import onnxruntime as ort
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(prefix)
    sess = ort.InferenceSession(str(model_path), so, providers=["CPUExecutionProvider"])
    sess.run(None, feed_of({i.name: i for i in sess.get_inputs()}))
    trace = json.loads(open(sess.end_profiling()).read())
    placed = Counter()
    for ev in trace:
        a = ev.get("args", {})
        if ev.get("cat") == "Node" and "op_name" in a and ev["name"].endswith("_kernel_time"):
            placed[(a.get("provider", "?"), a["op_name"])] += 1
    print(f"\n{name}: ops per execution provider (prompt run):")
    for (ep, op), n in sorted(placed.items()):
        print(f"  {ep:24s} {op:36s} x{n}")
    return placed


def empty_cache_feed(inputs, ids, mask, positions=None):
    """A prompt feed with empty past_key_values.* for every cache input the graph declares."""
    import numpy as np
    feed = {"input_ids": np.array(ids, np.int64), "attention_mask": np.array(mask, np.int64)}
    if positions is not None and "position_ids" in inputs:
        feed["position_ids"] = np.array(positions, np.int64)
    for name, i in inputs.items():
        if name.startswith("past_key_values."):
            feed[name] = np.zeros((len(ids), i.shape[1], 0, i.shape[3]), np.float32)
    return feed
