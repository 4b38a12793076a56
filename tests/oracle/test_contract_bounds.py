"""Contract bounds against what the tools do with them (issue #14, field report F#4, F#5, F#11, F#15):
the built-in check and `hfx verify` stay inside small bounds, contradictory or duplicate `--dim` bounds
are refused as `--dim` errors, a bound past max_position_embeddings is warned about and recorded as
used, eos/pad ids outside the vocabulary are ignored with a warning, and bad numeric options of
`hfx verify` / `hfx generate` are one-line errors."""
from __future__ import annotations

import json
import shutil

import pytest

from conftest import hfx_has_openvino, run_hfx


def manifest(out):
    return json.loads((out / "hfx.json").read_text())


def component_dims(out, role="decoder", fmt="onnx"):
    for c in manifest(out)["components"]:
        if c["role"] == role and c["format"] == fmt:
            return c["dims"]
    raise AssertionError(f"no {fmt} {role} component")


def one_error_line(proc, text):
    assert proc.returncode != 0, proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and text in lines[0], proc.stderr
    return lines[0]


# F#4: `--dim total_sequence_length=1:5` used to fail inside the export's own check (its greedy prompt
# of 7 tokens: "dim `total_sequence_length` = 7 is outside the contract's bounds [1, 5]"), and `hfx
# verify` on a --no-verify export failed the same way.
@pytest.mark.parametrize("profile", ["ort", "portable"])
def test_small_total_bound_exports_and_verifies(tiny_checkpoint, tmp_path, profile):
    out = tmp_path / "tsl5"
    run_hfx("export", "-q", "-m", tiny_checkpoint("llama"), "--onnx-profile", profile,
            "--dim", "total_sequence_length=1:5", out)
    assert component_dims(out)["total_sequence_length"] == {"min": 1, "max": 5}
    proc = run_hfx("verify", out, "--no-reexport", check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((out / "verify" / "reference" / "report.json").read_text())
    for c in report["checks"]:
        if c["name"].startswith("numbers:"):
            m = c["name"]  # "... (batch B, seq S, past P)"
            seq, past = (int(x.split()[-1]) for x in m[m.rindex("(") + 1:-1].split(",")[1:])
            assert seq + past <= 5, m


@pytest.mark.skipif(not hfx_has_openvino(), reason="hfx built without OpenVINO")
def test_small_total_bound_openvino_check(tiny_checkpoint, tmp_path):
    """The OpenVINO export check picks its own prompts: they stay inside the bounds too."""
    out = tmp_path / "ov5"
    proc = run_hfx("export", "-m", tiny_checkpoint("llama"), "--format", "onnx,openvino",
                   "--dim", "total_sequence_length=1:5", out)
    assert "openvino: 1 greedy tokens x 2 rows" in proc.stdout, proc.stdout
    proc = run_hfx("verify", out, "--runtime", "openvino", "--no-reexport", check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_total_bound_of_one_verifies(tiny_checkpoint, tmp_path):
    """The smallest contract: one token in, one out. The check runs one prompt token and one new one."""
    out = tmp_path / "tsl1"
    run_hfx("export", "-q", "-m", tiny_checkpoint("llama"), "--dim", "total_sequence_length=1:1", out)
    proc = run_hfx("verify", out, "--no-reexport", check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "greedy generation (1 tokens" in proc.stdout


@pytest.mark.parametrize("dims,text", [
    # total = past + sequence: a cache of 10 needs a total of 11
    (["past_sequence_length=0:10", "total_sequence_length=1:5"],
     "--dim past_sequence_length max 10 contradicts total_sequence_length max 5"),
    (["sequence_length=1:16", "total_sequence_length=1:8"],
     "--dim sequence_length max 16 contradicts total_sequence_length max 8"),
    (["batch_size=4:2"], "--dim batch_size: min 4 is above max 2"),
    (["batch_size=0:4"], "--dim batch_size=0:4: batch_size is at least 1"),
    (["sequence_length=0:4"], "--dim sequence_length=0:4: sequence_length is at least 1"),
    (["batch_size=1:4", "batch_size=2:8"], "--dim batch_size is given twice (batch_size=1:4 and batch_size=2:8)"),
])
def test_contradictory_dims_are_refused(tiny_checkpoint, tmp_path, dims, text):
    args = [a for d in dims for a in ("--dim", d)]
    proc = run_hfx("export", "-q", "-m", tiny_checkpoint("llama"), *args, tmp_path / "x", check=False)
    one_error_line(proc, text)
    assert not (tmp_path / "x").exists()


# F#5: the tiny llama has 64 positions (rotary): a larger bound is kept, as Transformers runs past
# max_position_embeddings, with a warning, and recorded as used in the recipe and the component.
def test_bound_past_the_context_is_warned_about_and_recorded(tiny_checkpoint, tmp_path):
    out = tmp_path / "x1"
    proc = run_hfx("export", "-q", "-m", tiny_checkpoint("llama"), "--dim", "total_sequence_length=1:100000", out)
    assert ("hfx: warning: --dim total_sequence_length max 100000 is beyond max_position_embeddings 64 (kept: "
            in proc.stderr), proc.stderr
    assert manifest(out)["recipe"]["dims"]["total_sequence_length"] == {"min": 1, "max": 100000}
    # the ort profile's rotary caches now hold the rows the bound asks for, so its component says so too
    assert component_dims(out)["total_sequence_length"] == {"min": 1, "max": 100000}


def test_static_cache_past_the_context_is_warned_about(tiny_checkpoint, tmp_path):
    out = tmp_path / "static"
    proc = run_hfx("export", "-q", "-m", tiny_checkpoint("llama"), "--static-cache", "--max-cache-len", "96", out)
    assert "hfx: warning: --max-cache-len 96 is beyond max_position_embeddings 64 (kept: " in proc.stderr, proc.stderr
    assert manifest(out)["recipe"]["max_cache_len"] == 96


def test_learned_positions_lower_the_bound(tiny_checkpoint, tmp_path):
    """GPT-2's positions are rows of a table (n_positions 128): no position exists past it, so the
    bound is lowered to it, said, and recorded in the recipe and the component."""
    out = tmp_path / "gpt2"
    proc = run_hfx("export", "-q", "-m", tiny_checkpoint("gpt2"), "--dim", "total_sequence_length=1:1000", out)
    assert ("hfx: warning: --dim total_sequence_length max 1000 is beyond n_positions 128 (a learned position "
            "table); using 128" in proc.stderr), proc.stderr
    assert manifest(out)["recipe"]["dims"]["total_sequence_length"] == {"min": 1, "max": 128}
    assert component_dims(out)["total_sequence_length"] == {"min": 1, "max": 128}


def test_ids_outside_the_vocabulary_are_ignored_with_a_warning(tiny_checkpoint, tmp_path):
    """GPT-2's 50256 kept as eos/pad in a 128-token model: the export used to fail inside its own check
    ("Gather: index 50256 is out of range", padding a batch-2 prompt with it)."""
    src = tmp_path / "oov"
    shutil.copytree(tiny_checkpoint("llama"), src)
    for name in ("config.json", "generation_config.json"):
        path = src / name
        if path.exists():
            cfg = json.loads(path.read_text())
            cfg.update(eos_token_id=50256, pad_token_id=50256, bos_token_id=50256)
            path.write_text(json.dumps(cfg))
    out = tmp_path / "oov-out"
    proc = run_hfx("export", "-m", src, out)
    assert "eos_token_id 50256 \u2265 vocab_size 128: ignored for generation" in proc.stderr, proc.stderr
    assert "pad_token_id 50256 \u2265 vocab_size 128: ignored for generation" in proc.stderr, proc.stderr
    model = manifest(out)["model"]
    assert model["eos_token_ids"] == [] and model["pad_token_id"] is None and model["bos_token_id"] is None
    proc = run_hfx("verify", out, "--no-reexport", "--tokens", "8", check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# F#11's numbers (verify --atol/--tokens, generate -n, --dim, --max-cache-len): test_cli_habits.py.


@pytest.fixture(scope="module")
def ort_export(tiny_checkpoint, tmp_path_factory):
    """The default (ort profile) export: its rotary caches bound total_sequence_length to the 64 positions."""
    out = tmp_path_factory.mktemp("bounds") / "llama"
    run_hfx("export", "-q", "-m", tiny_checkpoint("llama"), out)
    return out


# F#15: what the export cannot run is refused up front, with the numbers.
@pytest.mark.parametrize("args,text", [
    (["--prompt-ids", "1,2", "-n", "300"], "prompt 2 + 300 new tokens > context 64"),
    (["--prompt-ids", "600"], "token 600 \u2265 vocab 128"),
    (["--prompt", ""], "--prompt is empty"),
    (["--prompt-ids", "1,2", "-n", "0"], "--max-new-tokens 0: expected at least 1"),
])
def test_generate_arguments_are_checked_up_front(ort_export, args, text):
    proc = run_hfx("generate", ort_export, *args, check=False)
    one_error_line(proc, text)
