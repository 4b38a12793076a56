"""hfx's C++ ExecuTorch driver (src/runtime/executorch: the Module API linked against the pinned wheel's
libraries) on every decoder case of tiny_models.CASES, both backends: `hfx generate --runtime executorch`
gives Transformers' 64 greedy tokens, and `hfx verify --runtime executorch --oracle transformers` puts this
driver's logits beside Transformers eager's over verify's shape cases (prefill, chunks and single steps into
the static cache) at 1e-4 with no mismatching element. test_executorch.py runs the same programs through
Python's executorch.runtime (logits within 1e-4 and the same tokens).
"""
from __future__ import annotations

import pytest

from conftest import export_once, run_hfx
from test_transformers_oracle import checks_of, report_of
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


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_cpp_driver_logits_match_transformers(case, backend, et_export):
    """This build's `--runtime executorch` is the C++ driver (test_the_build_has_the_cpp_driver)."""
    out = et_export(case, backend)
    proc = run_hfx("verify", out, "--runtime", "executorch", "--oracle", "transformers", "--no-reexport",
                   "--tokens", "8", check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = report_of(out, "executorch")
    assert report["passed"] and report["oracle"].startswith("Transformers ")
    numbers = checks_of(report, "numbers: decoder")
    assert len(numbers) >= 4 and any("past 0" in c["name"] for c in numbers) and any("seq 1," in c["name"] for c in numbers)
    for c in numbers:
        assert "against Transformers" in c["tolerance"]
        per_output = c["measured"]["outputs"]
        assert "logits" in per_output
        assert all(o["mismatched"] == 0 and o["max_abs"] <= 1e-4 for o in per_output.values()), (c["name"], per_output)
    (greedy,) = checks_of(report, "greedy generation")
    assert greedy["measured"]["expected"] == greedy["measured"]["actual"]
