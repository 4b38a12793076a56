"""`--recipe` with per-component overrides (recipe "components": {"<role>": {...}}): a split export whose
prefill graph is f16 and whose decode graph is int4, written for ONNX and OpenVINO from one load.

Each component is checked against the reference executor running that component's own precision
(so the gate is the fp32 gate for the int4 decode graph, whose weights the reference quantizes the
same way, and the f16 gate of docs/quantization.md for the f16 prefill graph), on every runtime.
"""
from __future__ import annotations

import json

import pytest

from conftest import run_hfx

RECIPE = {"formats": ["onnx", "openvino"], "onnx_profile": "portable", "split_prefill": True, "openvino_stateful": False,
          "components": {"prefill": {"dtype": "f16"}, "decode": {"quantize": "int4:block=32"}}}


@pytest.fixture(scope="module")
def mixed_export(tiny_checkpoint, tmp_path_factory):
    base = tmp_path_factory.mktemp("overrides")
    (base / "recipe.json").write_text(json.dumps(RECIPE))
    out = base / "out"
    run_hfx("export", "--model", tiny_checkpoint("qwen3"), "--recipe", base / "recipe.json", "--quiet", out)
    return out


def test_overrides_are_recorded_and_applied(mixed_export):
    manifest = json.loads((mixed_export / "hfx.json").read_text())
    assert manifest["recipe"]["components"] == {
        "decode": {"dtype": "f32", "quantize": "int4:block=32:sym", "quantize_lm_head": False},
        "prefill": {"dtype": "f16"}}
    import onnx
    decode = onnx.load(str(mixed_export / "onnx" / "decode.onnx"), load_external_data=False)
    prefill = onnx.load(str(mixed_export / "onnx" / "prefill.onnx"), load_external_data=False)
    decode_ops = {n.op_type for n in decode.graph.node}
    prefill_types = {t.data_type for t in prefill.graph.initializer}
    assert "DequantizeLinear" in decode_ops  # int4 in the portable profile: standard ops
    assert onnx.TensorProto.FLOAT16 in prefill_types and onnx.TensorProto.INT4 not in prefill_types
    assert onnx.TensorProto.FLOAT16 not in {t.data_type for t in decode.graph.initializer}


@pytest.mark.parametrize("runtime", ["reference", "onnxruntime", "openvino"])
def test_each_component_verified_at_its_precision(mixed_export, runtime):
    proc = run_hfx("verify", mixed_export, "--runtime", runtime, "--no-reexport", "--tokens", "16", check=False)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((mixed_export / "verify" / runtime / "report.json").read_text())
    gates = {c["name"].split(" / ")[0]: c["tolerance"] for c in report["checks"] if c["name"].startswith("numbers:")}
    assert "same precision, f16" in gates["numbers: prefill"]
    assert "int4" in gates["numbers: decode"] and "<= 0.0001," in gates["numbers: decode"]


def test_reexport_from_the_manifest_reproduces_bytes(mixed_export):
    proc = run_hfx("verify", mixed_export, "--tokens", "4", check=False)
    assert proc.returncode == 0 and "pass re-export reproduces bytes" in proc.stdout, proc.stdout


@pytest.mark.parametrize("components, message", [
    ({"decode": {"dtype": "f16"}}, "components.decode: this export has no decode component (it has: decoder)"),
    ({"lm_head": {"dtype": "f16"}}, "components.lm_head: unknown role"),
    ({"decoder": {"dtype": "f8"}}, "components.decoder"),
    ({"decoder": {"quantize_lm_head": True}}, "quantize_lm_head needs quantize"),
    ({"decoder": {"block": 32}}, 'unknown field "block"'),
    ({"decoder": {"onnx_profile": "fast"}}, "onnx profile `fast`"),
    ([1, 2], "must be an object of roles"),
])
def test_bad_overrides_fail_in_one_line(components, message, tiny_checkpoint, tmp_path):
    recipe = tmp_path / "r.json"
    recipe.write_text(json.dumps({"formats": ["onnx"], "components": components}))
    proc = run_hfx("export", "--model", tiny_checkpoint("llama"), "--recipe", recipe, tmp_path / "out", check=False)
    assert proc.returncode == 1, proc.stderr
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "out").exists()
