"""Quantized embedding tables (`--quantize-embeddings`): ONNX Runtime's GatherBlockQuantized (ort profile)
over the table quantized exactly as MatMulNBits quantizes a Linear layer, so a tied lm_head quantized with
it (`--quantize-lm-head`) reads the same bytes and the f32 table is not written at all (the builder's
layout for tied models); OpenVINO's Gather over the same numbers in its compressed layout.

The oracle is the one of test_quantization.py: Transformers, run with every quantized tensor of the export
dequantized by independent numpy code (the table and lm_head included), gives ONNX Runtime's logits to
fp32 summation-order noise. The precision of int4/int8 itself is measured there.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import export_once, run_hfx
from test_quantization import (EXACT, PROMPT, agreement, dequantized_weights, initializers, load_dequantized,
                               ort_logits, table_of, transformers_outputs)
from tiny_models import load_reference

ORT = ["--onnx-profile", "ort"]
# qwen2-tied: lm_head = embedding (one tensor shared); llama: untied (the table alone); gpt2: tied, and a
# position table, a second Gather.
CASES = {
    "qwen2-tied": ["--quantize-lm-head", "--quantize-embeddings"],
    "llama": ["--quantize-embeddings"],
    "gpt2": ["--quantize-lm-head", "--quantize-embeddings"],
}
SPECS = ["int4", "int4:asym", "int8"]


@pytest.fixture(scope="module")
def emb_export(tiny_checkpoint, tmp_path_factory):
    return export_once(tmp_path_factory.mktemp("quant-emb"), lambda case, spec: (
        "--model", tiny_checkpoint(case), "--quiet", *ORT, "--quantize", spec, *CASES[case]))


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_quantized_tables_equal_transformers_with_the_same_weights(case, spec, emb_export, tiny_checkpoint):
    out = emb_export(case, spec)
    model, inits = initializers(out)
    gbq = [n for n in model.graph.node if n.op_type == "GatherBlockQuantized"]
    assert len(gbq) == (2 if case == "gpt2" else 1) and all(n.domain == "com.microsoft" for n in gbq)
    assert not any(n.op_type == "Gather" and n.input[0] in inits and inits[n.input[0]].ndim == 2 for n in model.graph.node)
    ref = load_reference(tiny_checkpoint(case))
    params = dict(ref.named_parameters())
    weights = dequantized_weights(model, inits, params)
    with torch.no_grad():
        load_dequantized(params, weights, conv1d=case == "gpt2")
        want = ref(torch.tensor([PROMPT])).logits.numpy()
    got, _ = ort_logits(out, EXACT)
    diff = float(np.abs(got - want).max())
    assert diff < 1e-4 * max(1.0, float(np.abs(want).max())), diff
    print(f"\n{case} {spec}: {len(gbq)} GatherBlockQuantized, ORT vs Transformers on the same weights {diff:.2e}")


@pytest.mark.parametrize("case", ["qwen2-tied", "gpt2"])
def test_tied_lm_head_reads_the_table_bytes(case, emb_export, tiny_checkpoint):
    """One quantized tensor for the tied table: lm_head's MatMulNBits and the GatherBlockQuantized read it
    (no f32 table), and the export is smaller than the one quantizing lm_head alone."""
    out = emb_export(case, "int4")
    model, inits = initializers(out)
    wte = "model.embed_tokens.weight" if case != "gpt2" else "transformer.wte.weight"
    (head,) = [n for n in model.graph.node if n.op_type == "MatMulNBits" and n.input[1].startswith(wte)]
    gathers = {table_of(model, inits, n.input[0]) for n in model.graph.node if n.op_type == "GatherBlockQuantized"}
    assert head.input[1] in gathers
    assert wte not in inits
    alone = out.parent / f"{case}-lm-head-only"
    run_hfx("export", "--model", tiny_checkpoint(case), "--quiet", *ORT, "--quantize", "int4", "--quantize-lm-head", alone)
    a = (out / "onnx" / "model.onnx_data").stat().st_size
    b = (alone / "onnx" / "model.onnx_data").stat().st_size
    assert a < b, (a, b)


@pytest.mark.parametrize("spec", ["int4", "int4:asym", "int8"])
@pytest.mark.parametrize("case", ["qwen2-tied", "llama"])
def test_openvino_quantized_tables_equal_transformers_with_the_same_weights(case, spec, emb_export, tiny_checkpoint,
                                                                            tmp_path):
    """OpenVINO: the table quantized with the same numbers in its compressed [V, H/block, block] layout (int8's
    one block over H: [V, H]), read by a Gather over its decompression and, tied, by lm_head's MatMul. The IR's
    logits equal Transformers run with the ort export's dequantized weights (the same quantization in
    MatMulNBits' layout, dequantized by numpy), the .bin holds no f32 table, and a tied table is stored once."""
    from conftest import hfx_has_openvino
    if not hfx_has_openvino():
        pytest.skip("hfx built without OpenVINO")
    import xml.etree.ElementTree as ET
    from hfx_ov import compile_model
    out = tmp_path / "ov"
    run_hfx("export", "--model", tiny_checkpoint(case), "--quiet", "--format", "openvino", "--quantize", spec,
            *CASES[case], out)
    xml = out / "openvino" / "openvino_model.xml"
    consts = [(l.get("name"), l.find("data").attrib) for l in ET.parse(xml).getroot().iter("layer") if l.get("type") == "Const"]
    tables = [(name, a) for name, a in consts if name.startswith("model.embed_tokens.weight")]
    assert not any(a["element_type"] == "f32" and a["shape"].count(",") == 1 and not n.endswith(".scales")
                   for n, a in tables), tables  # no f32 table
    assert len([n for n, _ in tables if n.endswith((".q4", ".q8"))]) == 1, tables  # one data tensor, tied or not
    compiled = compile_model(xml)
    # The CPU plugin gathers rows from the compressed table: its runtime Gather reads the i4/u4/i8 constant.
    gathers = [[i.get_element_type().get_type_name() for i in op.inputs()][0] for op in compiled.get_runtime_model().get_ordered_ops()
               if op.get_rt_info()["layerType"].astype(str) == "Gather"]
    assert {"i4", "u4", "i8", "u8"} & set(gathers), gathers
    req = compiled.create_infer_request()
    req.reset_state()
    got = req.infer({"input_ids": np.array([PROMPT], np.int64), "attention_mask": np.ones((1, len(PROMPT)), np.int64),
                     "position_ids": np.arange(len(PROMPT), dtype=np.int64)[None], "beam_idx": np.zeros(1, np.int32)})["logits"]
    model, inits = initializers(emb_export(case, spec))
    ref = load_reference(tiny_checkpoint(case))
    params = dict(ref.named_parameters())
    with torch.no_grad():
        load_dequantized(params, dequantized_weights(model, inits, params), conv1d=False)
        want = ref(torch.tensor([PROMPT])).logits.numpy()
    diff = float(np.abs(got - want).max())
    print(f"\n{case} {spec}: OpenVINO vs Transformers on the same quantized weights {diff:.2e}")
    assert diff < 1e-4 * max(1.0, float(np.abs(want).max())), diff


def test_verify_and_genai_run_quantized_tables(emb_export):
    """`hfx verify --runtime onnxruntime` passes (shape matrix, greedy tokens, re-export bytes), and
    onnxruntime-genai loads the folder as written and generates the reference executor's greedy tokens."""
    og = pytest.importorskip("onnxruntime_genai")
    out = emb_export("qwen2-tied", "int4")
    proc = run_hfx("verify", out, "--runtime", "onnxruntime", "--tokens", "16", check=False)
    assert proc.returncode == 0 and "GatherBlockQuantized x1 on CPUExecutionProvider" in proc.stdout, proc.stdout + proc.stderr
    prompt = [5, 17, 33, 8, 91]
    ours = run_hfx("generate", out, "--prompt-ids", ",".join(map(str, prompt)), "-n", "24", "--print-ids").stdout.strip().split(",")
    gm = og.Model(str(out / "onnx"))
    params = og.GeneratorParams(gm)
    params.set_search_options(do_sample=False, max_length=len(prompt) + 24, min_length=len(prompt) + 24)
    gen = og.Generator(gm, params)
    gen.append_tokens([prompt])
    while not gen.is_done():
        gen.generate_next_token()
    theirs = [str(t) for t in list(gen.get_sequence(0))[len(prompt):]]
    assert theirs == ours[-len(theirs):], (theirs, ours)


# A flag without the one it needs is a usage error (2); what the profile cannot write, the export finds (1).
@pytest.mark.parametrize("args,message,code", [
    (["--quantize-embeddings"], "--quantize-embeddings needs --quantize", 2),
    (["--quantize", "int4", "--quantize-embeddings", "--onnx-profile", "portable"], "written by --onnx-profile ort only", 1),
    (["--quantize", "int8:channel", "--quantize-embeddings", *ORT], "needs a blockwise scheme", 1),
])
def test_bad_combinations_fail_in_one_line(args, message, code, tiny_checkpoint, tmp_path):
    proc = run_hfx("export", "--model", tiny_checkpoint("llama"), *args, tmp_path / "out", check=False)
    assert proc.returncode == code, proc.stderr
    assert message in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert not (tmp_path / "out").exists()


# Error budgets of the tables quantized too, against fp32 Transformers (ORT's default session options,
# as a user runs the file), measured like test_quantization.py's budgets: logits max abs / NMSE of one
# 16-token prompt, greedy agreement over 48 tokens (the ort profile's rope tables end at the tiny models'
# 64 positions) reported, not gated (these random tiny networks are
# chaotic: see there). Thresholds are ~2-3x the worst measured case; the values of the modes without
# quantized tables are test_quantization.BUDGETS (int8 1.6 / 6e-3, int4 sym 15 / 0.6, asym 10 / 0.4).
# Measured (worst family, all llama-like): int4 sym 8.4 / 0.40, asym 5.0 / 0.31, int8 0.72 / 2.8e-3, i.e.
# 1.2-1.4x the Linear-only figures: the table adds its rounding to every token's input, and a tied
# lm_head was quantized in both. A layout or sharing bug gives unrelated logits (NMSE ~1 or more);
# test_quantized_tables_equal_transformers_with_the_same_weights is the exact gate.
EMB_BUDGETS = {
    "int4": dict(max_abs=18.0, nmse=0.8),
    "int4:asym": dict(max_abs=12.0, nmse=0.6),
    "int8": dict(max_abs=2.0, nmse=8e-3),
}


GREEDY_TOKENS = 48


@pytest.fixture(scope="module")
def fp32_reference(tiny_checkpoint):
    return transformers_outputs(tiny_checkpoint, GREEDY_TOKENS)


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_error_budget_with_quantized_tables(case, spec, emb_export, fp32_reference):
    ref_logits, ref_tokens = fp32_reference(case)
    logits, gen = ort_logits(emb_export(case, spec))
    diff = logits.astype(np.float64) - ref_logits
    max_abs = float(np.abs(diff).max())
    nmse = float((diff ** 2).sum() / (ref_logits.astype(np.float64) ** 2).sum())
    prefix, overall = agreement(ref_tokens, gen.generate([PROMPT], max_new_tokens=GREEDY_TOKENS)[0])
    print(f"\n{case} {spec} {' '.join(CASES[case])}: logits max abs {max_abs:.3g}, NMSE {nmse:.2g}, "
          f"greedy prefix {prefix:.3f}, overall {overall:.3f}")
    b = EMB_BUDGETS[spec]
    assert max_abs <= b["max_abs"] and nmse <= b["nmse"], (max_abs, nmse)
