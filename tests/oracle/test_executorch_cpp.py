"""hfx's C++ ExecuTorch driver (src/runtime/executorch: the Module API linked against the pinned wheel's
libraries) on every decoder case of tiny_models.CASES, both backends: `hfx generate --runtime executorch`
gives Transformers' 64 greedy tokens. test_executorch.py runs the same programs through Python's
executorch.runtime (logits within 1e-4 and the same tokens); `hfx verify --runtime executorch` compares this
driver's logits with the reference executor's at 1e-4 (test_executorch.py's builtin-check test).
"""
from __future__ import annotations

import pytest

from conftest import export_once, run_hfx
from test_executorch import BACKENDS, ET_ARGS
from test_generation import NEW_TOKENS, PROMPTS
from tiny_models import CASES


@pytest.fixture(scope="module")
def et_export(tiny_checkpoint, tmp_path_factory):
    return export_once(tmp_path_factory.mktemp("executorch-cpp"), lambda case, backend: (
        "--model", tiny_checkpoint(case), *ET_ARGS, "--executorch-backend", backend, "--no-verify", "--quiet"))


def test_the_build_has_the_cpp_driver(tiny_checkpoint, tmp_path):
    """Without the wheel's libraries the driver is the Python step server; this suite's build has them
    (scripts/setup.sh builds against the venv's executorch wheel), and the built-in check says so."""
    proc = run_hfx("export", "--model", tiny_checkpoint("llama"), *ET_ARGS, tmp_path / "checked")
    assert "(C++ runtime, Module API" in proc.stdout + proc.stderr, proc.stdout + proc.stderr


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_cpp_driver_generates_transformers_tokens(case, backend, et_export, reference_tokens):
    out = et_export(case, backend)
    prompt = PROMPTS["batch1"][0]
    proc = run_hfx("generate", out, "--runtime", "executorch", "--prompt-ids", ",".join(map(str, prompt)),
                   "-n", str(NEW_TOKENS), "--print-ids")
    got = [int(t) for t in proc.stdout.strip().splitlines()[-1].split(",")]
    expected = reference_tokens(case, "batch1")[0]
    # Transformers stops a row at EOS and pads it: compare up to what it generated.
    assert got[:len(expected)] == expected, proc.stderr
