"""Greedy generation from hfx exports equals Transformers generate(do_sample=False), token for token.

For every tiny case: 64 new tokens for batch 1 and for a left-padded batch 2, through
  (a) `hfx generate` (the C++ decode loop on the reference executor, graphs read back from the files),
  (b) the ONNX Runtime driver with a growing cache,
  (c) the ONNX Runtime driver with a static cache whose buffers are shared by IO binding,
  (d) split prefill/decode graphs (ONNX Runtime and `hfx generate`).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from conftest import ROOT, export_once, record_coverage, run_hfx
from tiny_models import CASES, load_reference

sys.path.insert(0, str(ROOT / "python"))
from hfx_ort import OrtGenerator  # noqa: E402

NEW_TOKENS = 64
PROMPTS = {"batch1": [[5, 17, 33, 8, 91, 4, 60]], "batch2": [[9, 12, 77, 3, 45, 101, 6, 23, 64, 30], [88, 7, 19, 52, 11, 40]]}
LAYOUTS = {"growing": [], "static": ["--static-cache", "--max-cache-len", "96"], "split": ["--split-prefill"]}


def transformers_generate(model, prompts):
    length = max(len(p) for p in prompts)
    pad = model.generation_config.pad_token_id
    ids = torch.full((len(prompts), length), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), length), dtype=torch.long)
    for b, p in enumerate(prompts):
        ids[b, length - len(p):] = torch.tensor(p)
        mask[b, length - len(p):] = 1
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False)
    return out[:, length:].tolist()


@pytest.fixture(scope="module")
def layout_export(tiny_checkpoint, tmp_path_factory):
    # portable: batch-2 prompts are left-padded (the ort profile serves unpadded rows only)
    return export_once(tmp_path_factory.mktemp("gen-exports"), lambda case, layout: (
        "--model", tiny_checkpoint(case), "--quiet", "--onnx-profile", "portable", *LAYOUTS[layout]))


@pytest.mark.parametrize("batch", sorted(PROMPTS))
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_onnxruntime_greedy_equals_transformers(case, layout, batch, layout_export, reference_tokens):
    gen = OrtGenerator(layout_export(case, layout))
    assert gen.generate(PROMPTS[batch], NEW_TOKENS) == reference_tokens(case, batch)
    record_coverage(case, "onnxruntime", f"greedy {layout} {batch}", "identical")


@pytest.mark.parametrize("batch", sorted(PROMPTS))
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_hfx_generate_equals_transformers(case, layout, batch, layout_export, reference_tokens):
    args = []
    for p in PROMPTS[batch]:
        args += ["--prompt-ids", ",".join(map(str, p))]
    proc = run_hfx("generate", layout_export(case, layout), *args, "-n", NEW_TOKENS, "--print-ids")
    rows = [[int(t) for t in line.split(",")] for line in proc.stdout.strip().splitlines()]
    assert rows == reference_tokens(case, batch)
    record_coverage(case, "reference", f"greedy {layout} {batch}", "identical")


def test_static_buffers_are_shared_in_place(layout_export):
    """With IO binding the same OrtValue is the past input and the present output of every step:
    after generation the buffers hold the whole sequence's keys (written in place, never copied out)."""
    gen = OrtGenerator(layout_export("llama", "static"))
    prompt = PROMPTS["batch1"]
    rows = gen.generate(prompt, 8)
    assert len(rows[0]) == 8
    written = len(prompt[0]) + 7  # the last token is chosen, never fed back
    for name, buf in gen.static_buffers.items():
        data = buf.numpy()
        assert data.shape[2] == 96
        assert (abs(data[:, :, :written]).sum(axis=-1) > 0).all(), f"{name}: slots not written in place"
        assert (data[:, :, written:] == 0).all(), f"{name}: slots past the sequence were touched"


@pytest.mark.parametrize("case", ["llama", "qwen2-tied", "phi3"])
def test_split_graphs_share_one_data_file(case, layout_export):
    """decode.onnx reads its weights in prefill.onnx_data: the split export stores each weight once (it
    wrote them twice before: F#21), and the greedy tests above run both graphs from that one file."""
    import onnx
    from onnx.external_data_helper import ExternalDataInfo, uses_external_data
    folder = layout_export(case, "split") / "onnx"
    assert (folder / "prefill.onnx_data").is_file() and not (folder / "decode.onnx_data").exists()
    prefill = {t.name: t for t in onnx.load(str(folder / "prefill.onnx"), load_external_data=False).graph.initializer}
    decode = onnx.load(str(folder / "decode.onnx"), load_external_data=False)
    external = [t for t in decode.graph.initializer if uses_external_data(t)]
    assert external, "no external weights in decode.onnx"
    for t in external:
        info = ExternalDataInfo(t)
        assert info.location == "prefill.onnx_data", (t.name, info.location)
        mine = ExternalDataInfo(prefill[t.name])
        assert (info.offset, info.length) == (mine.offset, mine.length), t.name
    onnx.load_external_data_for_model(decode, str(folder))  # the bytes are there
    record_coverage(case, "onnx", "split graphs share one data file", f"{len(external)} tensors")
