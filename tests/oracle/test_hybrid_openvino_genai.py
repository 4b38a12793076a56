"""OpenVINO GenAI's LLMPipeline, the client users already run, on hfx's stateful OpenVINO export of
every state-space and hybrid family: it loads the folder unmodified (the conv, scan and delta-rule
states are variables beside the attention layers' keys and values, zeros at the start, reordered by
beam_idx) and its greedy tokens equal Transformers' generate().

The SDPA attention backend runs the model state as written. GenAI's CPU default, "PA" (paged
attention: continuous batching), refuses these graphs: its SDPA-to-PagedAttention conversion leaves
the non-attention state variables as unregistered parameters (or, for a model without attention,
finds no ScaledDotProductAttention to convert); docs/ssm.md.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import hfx_has_openvino, record_coverage, run_hfx
from tiny_models import HYBRID_CASES, load_reference

# The first case of each family.
FAMILY_CASES = sorted({min(c for c, (t, _) in HYBRID_CASES.items() if t == family)
                       for family in {t for t, _ in HYBRID_CASES.values()}})
PROMPT = [5, 9, 17, 33, 2, 60, 1, 44, 23, 11]
NEW_TOKENS = 16


@pytest.mark.parametrize("case", FAMILY_CASES)
def test_llmpipeline_greedy_equals_transformers(case, tiny_checkpoint, tmp_path):
    if not hfx_has_openvino():
        pytest.skip("hfx built without OpenVINO")
    genai = pytest.importorskip("openvino_genai")
    import openvino as ov
    out = tmp_path / "out"
    run_hfx("export", "--model", tiny_checkpoint(case), "--format", "openvino", "--quiet", "--no-verify", out)
    model = load_reference(tiny_checkpoint(case))
    model.generation_config.eos_token_id = None  # both sides run all NEW_TOKENS steps
    with torch.no_grad():
        want = model.generate(torch.tensor([PROMPT]), attention_mask=torch.ones(1, len(PROMPT), dtype=torch.long),
                              max_new_tokens=NEW_TOKENS, do_sample=False)[0, len(PROMPT):].tolist()
    pipe = genai.LLMPipeline(str(out / "openvino"), "CPU", ATTENTION_BACKEND="SDPA", INFERENCE_PRECISION_HINT="f32",
                             KV_CACHE_PRECISION="f32")
    config = genai.GenerationConfig()
    config.max_new_tokens = NEW_TOKENS
    config.do_sample = False
    config.ignore_eos = True
    ids = np.array([PROMPT], np.int64)
    result = pipe.generate(genai.TokenizedInputs(ov.Tensor(ids), ov.Tensor(np.ones_like(ids))), config)
    assert list(result.tokens[0]) == want
    record_coverage(case, "openvino-genai", f"LLMPipeline SDPA greedy {NEW_TOKENS} batch1", "identical")
