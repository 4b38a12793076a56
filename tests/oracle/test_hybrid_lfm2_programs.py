"""LFM2 (short convolution + attention) as PyTorch and ExecuTorch programs, against Transformers eager, fp32.

pt2 (`torch.export.load(...).module()`): the conv states are plain inputs and outputs (past_conv.{i} ->
present_conv.{i}) in both layouts; the static layout's key/value buffers are mutated user inputs, as
for every other family. Each case: a left-padded batch of 2, then 3 single-token steps, every logit
and every carried state within 1e-4 of Transformers with no mismatching element; 64 greedy tokens
from `hfx generate --runtime torch` (growing, static, split) identical to Transformers' generate().

ExecuTorch (`executorch.runtime`, both backends): forward(input_ids, cache_position) -> logits, with
the key/value cache and the conv states as the program's mutable buffers (the conv state copied back
whole each step). Batch 1 (the program's): prefill + 3 steps within 1e-4, 64 greedy tokens identical;
ExecuTorch's C++ runtime through `hfx generate --runtime executorch` and the export's built-in check.
"""
from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import torch

from conftest import export_once, record_coverage, run_hfx
from test_executorch import greedy, load_forward, pte_of
from test_hybrid_lfm2 import CASES, MAX_CACHE_LEN, NEW_TOKENS, PROMPTS, compare, run_steps, transformers_greedy, \
    transformers_steps
from test_decoder_parity import decode_feeds
from test_pt2 import compare as compare_torch
from tiny_models import load_reference

# static: the parity test's buffer (MAX_CACHE_LEN slots, as the ONNX test's); static-long: room for 64 new tokens
PT2_LAYOUTS = {"growing": [], "static": ["--static-cache", "--max-cache-len", str(MAX_CACHE_LEN)],
               "static-long": ["--static-cache", "--max-cache-len", "80"], "split": ["--split-prefill"]}
ET_CACHE_LEN = 96  # the longest prompt + 64 new tokens
BACKENDS = ["xnnpack", "portable"]


@pytest.fixture(autouse=True)
def torch_python(monkeypatch):
    """hfx's torch and executorch drivers run under $HFX_PYTHON: the venv's, which has both."""
    monkeypatch.setenv("HFX_PYTHON", sys.executable)


@pytest.fixture(scope="module")
def lfm2_pt2(tiny_checkpoint, tmp_path_factory):
    return export_once(tmp_path_factory.mktemp("lfm2-pt2"), lambda case, layout: (
        "--model", tiny_checkpoint(case), "--format", "pt2", "--no-verify", "--quiet", *PT2_LAYOUTS[layout]))


def pt2_component(folder):
    manifest = json.loads((folder / "hfx.json").read_text())
    (comp,) = [c for c in manifest["components"] if c["format"] == "pt2"]
    return comp


@pytest.mark.parametrize("layout", ["growing", "static"])
@pytest.mark.parametrize("case", CASES)
def test_pt2_matches_transformers(case, layout, tiny_checkpoint, lfm2_pt2):
    folder = lfm2_pt2(case, layout)
    comp = pt2_component(folder)
    names = [i["name"] for i in comp["inputs"]]
    shared = {o: i for i, o in comp.get("cache", {}).get("shared_buffers", [])}  # present -> past, updated in place
    assert all(not o.startswith("present_conv.") for o in shared), "conv states are plain outputs in pt2"
    module = torch.export.load(str(folder / comp["file"])).module()
    model = load_reference(tiny_checkpoint(case))
    steps = decode_feeds(model.config.vocab_size)

    def run_one(feed):
        args = {n: torch.from_numpy(np.ascontiguousarray(feed[n])) for n in names}  # shares memory: in-place updates land in feed
        outs = {k: v.numpy() for k, v in module(*[args[n] for n in names]).items()}
        for present, past in shared.items():
            outs[present] = args[past].numpy()
        return outs

    worst = compare(case, run_steps(run_one, steps, model, layout), transformers_steps(model, steps), layout, steps)
    record_coverage(case, f"torch-{layout}", "pt2 logits and states max abs diff", worst)


def prompt_args():
    args = []
    for p in PROMPTS:
        args += ["--prompt-ids", ",".join(map(str, p))]
    return args


def rows_of(proc):
    return [[int(t) for t in line.split(",")] for line in proc.stdout.strip().splitlines()]


@pytest.mark.parametrize("layout", ["growing", "static-long", "split"])
@pytest.mark.parametrize("case", CASES)
def test_pt2_greedy_tokens_match_transformers(case, layout, tiny_checkpoint, lfm2_pt2):
    want = transformers_greedy(load_reference(tiny_checkpoint(case)))
    proc = run_hfx("generate", lfm2_pt2(case, layout), "--runtime", "torch", *prompt_args(), "-n", NEW_TOKENS, "--print-ids")
    assert rows_of(proc) == want
    record_coverage(case, f"torch-{layout}", f"pt2 greedy {NEW_TOKENS} batch2", "identical")


def test_pt2_verify_and_builtin_check(tiny_checkpoint, lfm2_pt2, tmp_path):
    """`hfx verify --runtime torch` compares every state as well as the logits; the export's own check runs torch."""
    proc = run_hfx("verify", lfm2_pt2("lfm2", "static"), "--runtime", "torch", "--report", tmp_path / "report", check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = run_hfx("export", "--model", tiny_checkpoint("lfm2-bias-k4"), "--format", "pt2", tmp_path / "checked")
    said = proc.stdout + proc.stderr
    assert "greedy tokens" in said and "on torch" in said, said


@pytest.fixture(scope="module")
def lfm2_pte(tiny_checkpoint, tmp_path_factory):
    return export_once(tmp_path_factory.mktemp("lfm2-pte"), lambda case, backend: (
        "--model", tiny_checkpoint(case), "--format", "executorch", "--static-cache", "--max-cache-len", str(ET_CACHE_LEN),
        "--executorch-backend", backend, "--no-verify", "--quiet"))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", CASES)
def test_executorch_logits_match_transformers(case, backend, tiny_checkpoint, lfm2_pte):
    _, forward = load_forward(pte_of(lfm2_pte(case, backend)))
    ref = load_reference(tiny_checkpoint(case))
    ids = torch.tensor([PROMPTS[0]])
    written, hf_past, worst = 0, None, 0.0
    for step in range(4):
        cache_position = torch.arange(written, written + ids.shape[1])
        (logits,) = forward.execute([ids, cache_position])
        with torch.no_grad():
            r = ref(input_ids=ids, past_key_values=hf_past, use_cache=True, position_ids=cache_position[None],
                    attention_mask=torch.ones(1, written + ids.shape[1], dtype=torch.long))
        worst = max(worst, compare_torch(f"{case}/{backend} step {step} logits", logits, r.logits))
        hf_past = r.past_key_values
        written += ids.shape[1]
        ids = r.logits[:, -1].argmax(-1, keepdim=True)
    record_coverage(case, f"executorch-{backend}", "logits max abs diff (prefill + 3 steps)", worst)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", CASES)
def test_executorch_greedy_tokens_match_transformers(case, backend, tiny_checkpoint, lfm2_pte):
    """Each prompt on its own (the program's batch is 1), through executorch.runtime and ExecuTorch's
    C++ runtime (`hfx generate --runtime executorch`)."""
    model = load_reference(tiny_checkpoint(case))
    folder = lfm2_pte(case, backend)
    _, forward = load_forward(pte_of(folder))
    for prompt in PROMPTS:
        with torch.no_grad():
            want = model.generate(input_ids=torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                  max_new_tokens=NEW_TOKENS, do_sample=False)[0, len(prompt):].tolist()
        assert greedy(forward, prompt, NEW_TOKENS)[:len(want)] == want
        proc = run_hfx("generate", folder, "--runtime", "executorch", "--prompt-ids", ",".join(map(str, prompt)),
                       "-n", NEW_TOKENS, "--print-ids")
        assert rows_of(proc)[0][:len(want)] == want
    record_coverage(case, f"executorch-{backend}", f"greedy {NEW_TOKENS} (python and C++ runtimes)", "identical")


@pytest.mark.parametrize("backend", BACKENDS)
def test_executorch_builtin_check_and_verify(backend, tiny_checkpoint, tmp_path):
    folder = tmp_path / "out"
    proc = run_hfx("export", "--model", tiny_checkpoint("lfm2"), "--format", "executorch", "--static-cache",
                   "--max-cache-len", str(ET_CACHE_LEN), "--executorch-backend", backend, folder)
    said = proc.stdout + proc.stderr
    assert "greedy tokens" in said and "identical to the reference executor" in said, said
    proc = run_hfx("verify", folder, "--runtime", "executorch", "--report", tmp_path / "report", check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
