"""`hfx export --onnx-opset 23`: the portable profile with ONNX opset-23 RMSNormalization, RotaryEmbedding
and Attention where they compute the model exactly (passes/onnx_standard_ops.cc), against Transformers eager.

For each tiny family:
  (a) onnx.checker (full check) passes and the fused standard ops are where the model has them;
  (b) ORT logits and present.* vs Transformers eager on a left-padded batch of 2 plus 3 decode steps
      (test_decoder_parity's feeds): max abs <= 1e-4, no mismatching element;
  (c) greedy 64 tokens through python/hfx_ort.py (left-padded batch 2) equal Transformers';
  (d) an ORT profiling run places every node on CPUExecutionProvider.
One export is also checked by `hfx verify --runtime onnxruntime`, and one with --static-cache.
"""
from __future__ import annotations

import json
import sys
from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from conftest import ROOT, empty_cache_feed, export_once, ort_ops_per_provider, run_hfx
from test_decoder_parity import compare, decode_feeds, geometry, run_steps, transformers_steps
from tiny_models import load_reference

sys.path.insert(0, str(ROOT / "python"))
from hfx_ort import OrtGenerator  # noqa: E402

NEW_TOKENS = 64
# case -> opset-23 ops expected in the graph (count per op: one per layer, norms per layer + final).
CASES = {
    "llama": {"RMSNormalization", "RotaryEmbedding", "Attention"},
    "llama-mha-tied": {"RMSNormalization", "RotaryEmbedding", "Attention"},
    "qwen2-tied": {"RMSNormalization", "RotaryEmbedding", "Attention"},
    "qwen3": {"RMSNormalization", "RotaryEmbedding", "Attention"},
    "gemma": {"RMSNormalization", "RotaryEmbedding", "Attention"},
    "gemma2": {"RMSNormalization", "RotaryEmbedding", "Attention"},  # softcap and sliding windows in the mask
    "phi3": {"RMSNormalization", "RotaryEmbedding", "Attention"},
    "gpt2": {"Attention"},  # LayerNorm is LayerNormalization (opset 17, every opset); learned positions stay
    "gpt-neox": {"RotaryEmbedding", "Attention"},  # partial rotary: rotary_embedding_dim
    "mistral-window": {"RMSNormalization", "RotaryEmbedding", "Attention"},
    "olmo2": {"RMSNormalization", "RotaryEmbedding", "Attention"},
    "granite": {"RMSNormalization", "RotaryEmbedding", "Attention"},
    "llama-rope-dynamic": {"RMSNormalization", "RotaryEmbedding", "Attention"},
    "phi3-longrope": {"RMSNormalization", "RotaryEmbedding", "Attention"},
    "helium": {"RMSNormalization", "RotaryEmbedding", "Attention"},  # RotaryEmbedding interleaved=1
    "phi": {"RotaryEmbedding", "Attention"},  # partial rotary, LayerNormalization
}
OPSET23 = {"RMSNormalization", "RotaryEmbedding", "Attention"}


@pytest.fixture(scope="module")
def op23_export(tiny_checkpoint, tmp_path_factory):
    return export_once(tmp_path_factory.mktemp("opset23"), lambda case, variant: (
        "--model", tiny_checkpoint(case), "--quiet", "--onnx-opset", "23", *(variant.split() if variant else [])))


def op_counts(path):
    return Counter(n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node)


@pytest.mark.parametrize("case", sorted(CASES))
def test_opset23_graph_checks_and_has_fused_ops(case, op23_export):
    out = op23_export(case)
    path = out / "onnx" / "model.onnx"
    onnx.checker.check_model(str(path), full_check=True)
    m = onnx.load(str(path), load_external_data=False)
    assert [(o.domain, o.version) for o in m.opset_import] == [("", 23)] and m.ir_version == 11
    counts = op_counts(path)
    print(f"\n{case}: opset-23 ops {dict((op, counts[op]) for op in sorted(OPSET23) if counts[op])}; all ops {dict(sorted(counts.items()))}")
    assert {op for op in OPSET23 if counts[op]} == CASES[case], counts
    manifest = json.loads((out / "hfx.json").read_text())
    assert manifest["recipe"]["onnx_opset"] == 23
    assert "onnx-standard-ops" in manifest["components"][0]["passes"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_opset23_matches_transformers_left_padded(case, tiny_checkpoint, op23_export):
    out = op23_export(case)
    model = load_reference(tiny_checkpoint(case))
    steps = decode_feeds(model.config.vocab_size)
    ref = transformers_steps(model, steps)
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(str(out / "onnx" / "model.onnx"), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    ours = run_steps(lambda feed: dict(zip(names, sess.run(None, feed))), steps, *geometry(model))
    worst = compare(case, ours, ref)
    print(f"\n{case}: opset 23 ORT vs Transformers eager max abs diff {worst:.2e} (left-padded batch 2, prompt + 3 steps)")


@pytest.mark.parametrize("case", sorted(CASES))
def test_opset23_greedy_equals_transformers(case, op23_export, reference_tokens):
    gen = OrtGenerator(op23_export(case))
    assert gen.generate([[9, 12, 77, 3, 45, 101, 6, 23, 64, 30], [88, 7, 19, 52, 11, 40]], NEW_TOKENS) == \
        reference_tokens(case, "batch2")


@pytest.mark.parametrize("case", ["llama", "gemma2", "gpt-neox"])
def test_opset23_every_node_on_cpu(case, op23_export, tmp_path):
    out = op23_export(case)
    placed = ort_ops_per_provider(
        out / "onnx" / "model.onnx",
        lambda inputs: empty_cache_feed(inputs, [[5, 6, 7], [0, 8, 9]], [[1, 1, 1], [0, 1, 1]], [[0, 1, 2], [1, 0, 1]]),
        tmp_path / "prof", case)
    assert placed and all(ep == "CPUExecutionProvider" for ep, _ in placed), placed
    assert CASES[case] <= {op for _, op in placed}


def test_opset23_static_cache_greedy(op23_export, reference_tokens):
    out = op23_export("llama", "--static-cache --max-cache-len 96")
    assert op_counts(out / "onnx" / "model.onnx")["Attention"] == 2
    gen = OrtGenerator(out)
    assert gen.generate([[9, 12, 77, 3, 45, 101, 6, 23, 64, 30], [88, 7, 19, 52, 11, 40]], NEW_TOKENS) == \
        reference_tokens("llama", "batch2")


def test_opset23_hfx_verify_onnxruntime(op23_export):
    out = op23_export("qwen3")
    proc = run_hfx("verify", out, "--runtime", "onnxruntime")
    print(proc.stdout[-600:])


def test_opset21_recipe_unchanged(tiny_checkpoint, tmp_path):
    run_hfx("export", "--model", tiny_checkpoint("llama"), "--quiet", tmp_path / "o21")
    manifest = json.loads((tmp_path / "o21" / "hfx.json").read_text())
    assert "onnx_opset" not in manifest["recipe"]
    m = onnx.load(str(tmp_path / "o21" / "onnx" / "model.onnx"), load_external_data=False)
    assert m.ir_version == 10 and m.opset_import[0].version == 21
    assert not OPSET23 & set(op_counts(tmp_path / "o21" / "onnx" / "model.onnx"))


def test_opset23_encoder_padding_mask(tmp_path):
    """An encoder's padding bias [b, 1, 1, t] is expanded over the queries for ORT's Attention."""
    from test_encoders import make_checkpoint
    ckpt = make_checkpoint("bert-cls", tmp_path / "bert")
    run_hfx("export", "--model", ckpt, "--quiet", "--onnx-opset", "23", "--verify-runtime", "onnxruntime", tmp_path / "out")
    counts = op_counts(tmp_path / "out" / "onnx" / "model.onnx")
    assert counts["Attention"] == 2 and counts["Expand"] == 1, counts
