"""Phi-3 longrope across the switch point, forward parity only.

The graph picks the short or long factors per step from the longest position, as Transformers'
longrope_frequency_update does, so a prompt within original_max_position_embeddings followed by decode
steps past it must match Transformers eager step by step (keys already cached keep their short-factor
rope). Greedy generation across the switch is not in the generation matrix: Transformers' Phi-3
prepare_inputs_for_generation drops the cache and re-encodes the whole sequence the first time it
crosses, which is decode-loop policy rather than graph semantics.
"""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from conftest import run_hfx
from test_decoder_parity import compare, decode_feeds, geometry, reference_step_runner, run_steps, transformers_steps
from tiny_models import PARITY_CASES, load_reference

CASE = "phi3-longrope-switch"


def _steps_cross_the_switch(model, steps):
    original = model.config.rope_parameters["original_max_position_embeddings"]
    longest = [int(feed["position_ids"].max()) + 1 for feed in steps]
    assert longest[0] <= original < longest[-1], f"steps {longest} do not cross {original}"


def test_case_is_parity_only():
    assert CASE in PARITY_CASES


def test_onnxruntime_across_the_switch(tiny_checkpoint, exported):
    model = load_reference(tiny_checkpoint(CASE))
    steps = decode_feeds(model.config.vocab_size)
    _steps_cross_the_switch(model, steps)
    ref = transformers_steps(model, steps)
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(str(exported(CASE) / "onnx" / "model.onnx"), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    ours = run_steps(lambda feed: dict(zip(names, sess.run(None, feed))), steps, *geometry(model))
    print(f"{CASE}: onnxruntime max abs diff {compare(CASE, ours, ref):.2e}")


@pytest.mark.parametrize("decomposed", [False, True], ids=["fused", "decomposed"])
def test_reference_executor_across_the_switch(decomposed, tiny_checkpoint, tmp_path):
    ckpt = tiny_checkpoint(CASE)
    model = load_reference(ckpt)
    steps = decode_feeds(model.config.vocab_size)
    _steps_cross_the_switch(model, steps)
    ref = transformers_steps(model, steps)

    run_one = reference_step_runner(ckpt, tmp_path, decomposed)
    ours = run_steps(run_one, steps, *geometry(model))
    print(f"{CASE}: reference executor ({'decomposed' if decomposed else 'fused'}) max abs diff {compare(CASE, ours, ref):.2e}")
