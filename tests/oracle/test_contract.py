"""The shape contract, the manifest and the recipe: bounds written and enforced, `hfx check`,
`--recipe` reproducing an export byte for byte, and clear errors for broken exports."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from safetensors.numpy import save_file

from conftest import run_hfx

BOUNDS = ["--dim", "batch_size=1:2", "--dim", "sequence_length=1:8", "--dim", "total_sequence_length=1:12"]


@pytest.fixture(scope="module")
def bounded(tiny_checkpoint, tmp_path_factory):
    out = tmp_path_factory.mktemp("bounded") / "out"
    # The portable contract: position_ids is an input (the ort profile computes it in the graph).
    run_hfx("export", "--model", tiny_checkpoint("llama"), "--quiet", "--onnx-profile", "portable", *BOUNDS, out)
    return out


def step_inputs(batch, seq, past, layers=2, kv=2, hd=16):
    feed = {"input_ids": np.full((batch, seq), 5, np.int64),
            "attention_mask": np.ones((batch, past + seq), np.int64),
            "position_ids": np.tile(np.arange(past, past + seq, dtype=np.int64), (batch, 1))}
    for i in range(layers):
        for kvn in ("key", "value"):
            feed[f"past_key_values.{i}.{kvn}"] = np.zeros((batch, kv, past, hd), np.float32)
    return feed


def run_step(out, tmp_path, feed):
    save_file(feed, str(tmp_path / "in.safetensors"))
    return run_hfx("run", "--artifact", out, "--inputs", tmp_path / "in.safetensors", "--output",
                   tmp_path / "o.safetensors", check=False)


def test_bounds_are_written_to_onnx_and_manifest(bounded):
    model = onnx.load(str(bounded / "onnx" / "model.onnx"), load_external_data=False)
    meta = {p.key: p.value for p in model.metadata_props}
    assert meta["hfx.dim.batch_size"] == "[1, 2]"
    assert meta["hfx.dim.sequence_length"] == "[1, 8]"
    assert meta["hfx.relation.total_sequence_length"] == "past_sequence_length + sequence_length"
    dims = json.loads((bounded / "hfx.json").read_text())["components"][0]["dims"]
    assert dims["batch_size"] == {"min": 1, "max": 2}
    assert dims["total_sequence_length"] == {"min": 1, "max": 12}


@pytest.mark.parametrize("batch,seq,past", [(1, 1, 0), (2, 8, 0), (2, 1, 11), (1, 8, 4)])
def test_values_at_the_bounds_are_accepted(bounded, tmp_path, batch, seq, past):
    proc = run_step(bounded, tmp_path, step_inputs(batch, seq, past))
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("batch,seq,past,dim,value,bounds", [
    (3, 1, 0, "batch_size", 3, "[1, 2]"),
    (1, 9, 0, "sequence_length", 9, "[1, 8]"),
    (1, 2, 11, "total_sequence_length", 13, "[1, 12]"),
])
def test_values_outside_are_rejected_naming_dim_value_bounds(bounded, tmp_path, batch, seq, past, dim, value, bounds):
    proc = run_step(bounded, tmp_path, step_inputs(batch, seq, past))
    assert proc.returncode == 1
    err = proc.stderr.strip()
    assert len(err.splitlines()) == 1 and dim in err and str(value) in err and bounds in err, err


def test_prompt_longer_than_the_contract_is_rejected(bounded):
    proc = run_hfx("generate", bounded, "--prompt-ids", ",".join(["5"] * 9), "-n", "2", check=False)
    assert proc.returncode == 1
    assert "sequence_length" in proc.stderr and "9" in proc.stderr and "[1, 8]" in proc.stderr


def test_recipe_reproduces_the_export_byte_for_byte(tiny_checkpoint, tmp_path):
    first = tmp_path / "first"
    run_hfx("export", "--model", tiny_checkpoint("qwen2-window"), "--quiet", "--static-cache", "--max-cache-len", "32",
            "--split-prefill", "--dim", "batch_size=1:4", first)
    again = tmp_path / "again"
    run_hfx("export", "--recipe", first / "hfx.json", "--quiet", again)
    files = sorted(p.relative_to(first) for p in first.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(again) for p in again.rglob("*") if p.is_file())
    for f in files:
        assert (first / f).read_bytes() == (again / f).read_bytes(), f
    recipe = json.loads((first / "hfx.json").read_text())["recipe"]
    assert recipe["static_cache"] and recipe["split_prefill"] and recipe["max_cache_len"] == 32


def test_check_accepts_a_good_export(bounded):
    proc = run_hfx("check", bounded)
    assert "ok" in proc.stdout


@pytest.fixture
def copy_of(bounded, tmp_path):
    import shutil
    dst = tmp_path / "copy"
    shutil.copytree(bounded, dst)
    return dst


def test_checksum_mismatch(copy_of):
    with open(copy_of / "onnx" / "model.onnx_data", "r+b") as f:
        f.seek(100)
        f.write(b"\x01\x02\x03")
    proc = run_hfx("check", copy_of, check=False)
    assert proc.returncode == 1 and "model.onnx_data" in proc.stderr and "sha256 mismatch" in proc.stderr


def test_missing_manifest(copy_of):
    (copy_of / "hfx.json").unlink()
    for cmd in (["check"], ["generate", "--prompt-ids", "1,2"]):
        proc = run_hfx(cmd[0], copy_of, *cmd[1:], check=False)
        assert proc.returncode == 1 and "hfx.json" in proc.stderr


def test_corrupt_manifest(copy_of):
    (copy_of / "hfx.json").write_text("{ not json")
    proc = run_hfx("check", copy_of, check=False)
    assert proc.returncode == 1 and "not valid JSON" in proc.stderr


def test_missing_component_file(copy_of):
    (copy_of / "onnx" / "model.onnx").unlink()
    proc = run_hfx("check", copy_of, check=False)
    assert proc.returncode == 1 and "model.onnx" in proc.stderr and "missing" in proc.stderr
    proc = run_hfx("generate", copy_of, "--prompt-ids", "1,2", check=False)
    assert proc.returncode == 1 and "model.onnx" in proc.stderr


def test_bad_dim_flags(tiny_checkpoint, tmp_path):
    for args, text in [(["--dim", "batch=1:2"], "unknown dim"), (["--dim", "batch_size=4:2"], "above max"),
                       (["--static-cache"], "--max-cache-len"), (["--dim", "batch_size"], "NAME=MIN:MAX")]:
        proc = run_hfx("export", "--model", tiny_checkpoint("llama"), *args, tmp_path / "x", check=False)
        assert proc.returncode == 2 and text in proc.stderr, proc.stderr  # the flags are wrong: usage
        assert not (tmp_path / "x").exists()


def test_recipe_tolerance_is_recorded_and_used(tiny_checkpoint, tmp_path):
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps({"formats": ["onnx"], "tolerances": {"f32": 2e-4}}))
    out = tmp_path / "out"
    run_hfx("export", "--model", tiny_checkpoint("llama"), "--recipe", recipe, "--quiet", out)
    assert json.loads((out / "hfx.json").read_text())["recipe"]["tolerances"] == {"f32": 2e-4}
    run_hfx("verify", out, "--no-reexport", "--tokens", "4")
    report = json.loads((out / "verify" / "reference" / "report.json").read_text())
    numbers = [c for c in report["checks"] if c["name"].startswith("numbers")]
    assert numbers and all("0.0002" in c["tolerance"] for c in numbers)


def test_generate_from_text_prompt_uses_the_tokenizer(tiny_checkpoint, tmp_path):
    """--prompt TEXT is encoded with the export's tokenizer.json: the same tokens as --prompt-ids with
    the ids `tokenizers` gives for that text."""
    import shutil
    from tokenizers import Tokenizer, models, pre_tokenizers
    words = ["[UNK]"] + [f"w{i}" for i in range(120)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    model = tmp_path / "model"
    shutil.copytree(tiny_checkpoint("llama"), model)
    tok.save(str(model / "tokenizer.json"))
    out = tmp_path / "out"
    run_hfx("export", "--model", model, "--quiet", out)
    text = "w5 w17 w33 w8 w91"
    ids = tok.encode(text).ids
    by_text = run_hfx("generate", out, "--prompt", text, "-n", "8", "--print-ids").stdout
    by_ids = run_hfx("generate", out, "--prompt-ids", ",".join(map(str, ids)), "-n", "8", "--print-ids").stdout
    assert by_text == by_ids and len(by_text.strip().split(",")) == 8
    streamed = run_hfx("generate", out, "--prompt", text, "-n", "8").stdout
    assert streamed.strip().startswith("w") or streamed.strip().startswith("[UNK]")


def test_formats_lists_each_backend_as_a_unit():
    """`hfx formats` prints the backend registry: per format its status, files, options (with the recipe
    field each is recorded as), the runtimes that run it (`verify/generate --runtime`) and the tested
    runtime versions."""
    out = run_hfx("formats").stdout
    sections = [s for s in out.split("\n") if s and not s.startswith(" ")]
    assert sections == ["onnx", "openvino", "pt2", "executorch"], sections
    assert "runtimes: reference, onnxruntime" in out and "runtimes: openvino" in out and "runtimes: torch" in out
    assert "runtimes: executorch" in out and "--executorch-backend xnnpack|portable (recipe: executorch_backend)" in out
    assert "--onnx-profile ort|portable (recipe: onnx_profile)" in out
    assert "--stateless (recipe: openvino_stateful)" in out
    import onnxruntime
    assert f"onnxruntime {onnxruntime.__version__}" in out
