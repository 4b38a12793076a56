"""Bad input gives one clear line naming the file, tensor or field, a non-zero exit, and no output."""
from __future__ import annotations

import json
import struct

import pytest

import tiny_models
from conftest import run_hfx


@pytest.fixture
def good(tmp_path):
    return tiny_models.make("llama", tmp_path / "model")


def export_fails(model, tmp_path, *expected):
    out = tmp_path / "out"
    proc = run_hfx("export", "--model", model, "--quiet", out, check=False)
    assert proc.returncode != 0, "export should have failed"
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, f"expected one error line, got: {proc.stderr!r}"
    for text in expected:
        assert text in lines[0], f"{text!r} not in {lines[0]!r}"
    assert not out.exists(), "a failed export must leave nothing behind"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.hfx-partial")], "staging folder left behind"
    return lines[0]


def edit_config(folder, **changes):
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(changes)
    (folder / "config.json").write_text(json.dumps(cfg))


def test_missing_config(good, tmp_path):
    (good / "config.json").unlink()
    export_fails(good, tmp_path, "config.json")


def test_unknown_model_type(good, tmp_path):
    edit_config(good, model_type="not_a_model")
    export_fails(good, tmp_path, "not_a_model", "llama")


def test_phi_qk_layernorm_is_refused(tmp_path):
    model = tiny_models.make("phi", tmp_path / "model")
    edit_config(model, qk_layernorm=True)
    export_fails(model, tmp_path, "config.json", "qk_layernorm", "phi")


def test_cohere_qk_norm_is_refused(tmp_path):
    model = tiny_models.make("cohere", tmp_path / "model")
    edit_config(model, use_qk_norm=True)
    export_fails(model, tmp_path, "config.json", "use_qk_norm", "cohere")


def test_pickle_only_folder_is_refused(good, tmp_path):
    (good / "model.safetensors").unlink()
    (good / "pytorch_model.bin").write_bytes(b"\x80\x04this would be a pickle")
    export_fails(good, tmp_path, "pytorch_model.bin", "never unpickles")


def test_truncated_header(good, tmp_path):
    data = (good / "model.safetensors").read_bytes()
    (good / "model.safetensors").write_bytes(data[:20])
    export_fails(good, tmp_path, "model.safetensors")


def test_header_length_past_end(good, tmp_path):
    data = bytearray((good / "model.safetensors").read_bytes())
    data[:8] = struct.pack("<Q", len(data) * 4)
    (good / "model.safetensors").write_bytes(bytes(data))
    export_fails(good, tmp_path, "model.safetensors")


def test_tensor_out_of_bounds(good, tmp_path):
    path = good / "model.safetensors"
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    name = "model.norm.weight"
    begin, end = header[name]["data_offsets"]
    header[name]["data_offsets"] = [begin + 10**9, end + 10**9]
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data[8 + n:])
    export_fails(good, tmp_path, name)


def test_shape_contradicting_config(good, tmp_path):
    edit_config(good, intermediate_size=100)
    line = export_fails(good, tmp_path, "mlp", "intermediate_size")
    assert "[100, 64]" in line or "[64, 100]" in line


def test_bad_config_field(good, tmp_path):
    edit_config(good, num_attention_heads="four")
    export_fails(good, tmp_path, "num_attention_heads", "four")


def test_missing_tensor(good, tmp_path):
    from safetensors.numpy import load_file, save_file
    tensors = load_file(str(good / "model.safetensors"))
    del tensors["model.layers.1.mlp.up_proj.weight"]
    save_file(tensors, str(good / "model.safetensors"))
    export_fails(good, tmp_path, "model.layers.1.mlp.up_proj.weight")


def test_unexpected_tensor(good, tmp_path):
    from safetensors.numpy import load_file, save_file
    import numpy as np
    tensors = load_file(str(good / "model.safetensors"))
    tensors["model.layers.0.extra.weight"] = np.zeros((2, 2), np.float32)
    save_file(tensors, str(good / "model.safetensors"))
    export_fails(good, tmp_path, "model.layers.0.extra.weight", "not used")


def test_existing_output_is_kept_on_failure(good, tmp_path):
    out = tmp_path / "out"
    run_hfx("export", "--model", good, "--quiet", out)
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    edit_config(good, model_type="not_a_model")
    proc = run_hfx("export", "--model", good, "--quiet", "--overwrite", out, check=False)
    assert proc.returncode != 0
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert before == after, "a failed export must leave the previous artifact intact"


def test_output_exists_without_overwrite(good, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    proc = run_hfx("export", "--model", good, "--quiet", out, check=False)
    assert proc.returncode != 0 and "--overwrite" in proc.stderr


def test_inspect_reports_contract_and_preflight(good):
    proc = run_hfx("inspect", "--json", good)
    info = json.loads(proc.stdout)
    assert info["model_type"] == "llama"
    names = [i["name"] for i in info["inputs"]]
    # the default (ort) profile's contract: positions come from attention_mask (F#7)
    assert names[:3] == ["input_ids", "attention_mask", "past_key_values.0.key"]
    assert info["inputs"][2]["shape"] == ["batch_size", "2", "past_sequence_length", "16"]
    portable = json.loads(run_hfx("inspect", "--json", "--onnx-profile", "portable", good).stdout)
    assert [i["name"] for i in portable["inputs"]][:3] == ["input_ids", "attention_mask", "position_ids"]
    assert info["outputs"][0]["shape"] == ["batch_size", "sequence_length", "128"]
    assert info["preflight"]["disk_bytes"] > 0 and info["preflight"]["peak_memory_bytes"] > 0


def test_recipe_with_a_misspelt_field_is_refused(good, tmp_path):
    """F#12: `"quantise"` at the top of a recipe gave an f32 export without a word."""
    recipe = tmp_path / "bad.json"
    recipe.write_text(json.dumps({"formats": ["onnx"], "quantise": "int4"}))
    proc = run_hfx("export", "--model", good, "--recipe", recipe, "--quiet", tmp_path / "out", check=False)
    assert proc.returncode == 1
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and 'unknown recipe field "quantise"' in lines[0] and "quantize" in lines[0], proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("dim, expected", [
    ({"mx": 32}, 'unknown recipe field "dims.sequence_length.mx" (known: min, max)'),
    (32, "recipe dims.sequence_length must be an object"),
])
def test_recipe_dims_with_a_misspelt_bound_is_refused(good, tmp_path, dim, expected):
    """One level down from F#12: `"mx"` in a dims entry (or a bare number) left the dim unbounded."""
    recipe = tmp_path / "bad.json"
    recipe.write_text(json.dumps({"formats": ["onnx"], "dims": {"sequence_length": dim}}))
    proc = run_hfx("export", "--model", good, "--recipe", recipe, "--quiet", tmp_path / "out", check=False)
    assert proc.returncode == 1
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and expected in lines[0], proc.stderr
    assert not (tmp_path / "out").exists()


def test_an_exports_manifest_is_still_a_recipe(good, tmp_path):
    """The strict field check reads an hfx.json's "recipe" object, not its other sections."""
    run_hfx("export", "--model", good, "--quiet", tmp_path / "a")
    run_hfx("export", "--recipe", tmp_path / "a" / "hfx.json", "--quiet", tmp_path / "b")
    assert (tmp_path / "b" / "onnx" / "model.onnx").read_bytes() == (tmp_path / "a" / "onnx" / "model.onnx").read_bytes()


def test_options_of_a_format_not_written_are_noted(good, tmp_path):
    """F#13: `--stateless` without `--format openvino` changed nothing and said nothing."""
    proc = run_hfx("export", "--model", good, "--stateless", "--quiet", tmp_path / "out")
    assert "--stateless only applies to --format openvino" in proc.stderr, proc.stderr
