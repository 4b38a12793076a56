"""Mamba-2 (a pure state-space model) against Transformers eager, fp32, on tiny random checkpoints.

Each case: a left-padded batch of 2 whose 10-token prompt spans several scan chunks (chunk_size 4
and 3, the last chunk padded), then 3 single-token steps, each fed the previous step's present
outputs: every logit and every carried state (past_conv.{i} [batch, conv_dim, conv_kernel - 1] and
past_ssm.{i} [batch, heads, head_dim, state_size]) within 1e-4 of Transformers with no mismatching
element, through ONNX Runtime and the reference executor (fused and decomposed); then 64 greedy
tokens identical to Transformers' generate() from `hfx generate`, a plain ONNX Runtime loop, the
prefill + decode split, and OpenVINO (stateful and stateless, with `hfx verify`).

Transformers' conv cache keeps conv_kernel columns, the first of which no later step reads; hfx's
state is the last conv_kernel - 1 (ONNX CausalConvWithState's shape), compared with those.
"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from safetensors.numpy import load_file, save_file

from conftest import export_once, hfx_has_openvino, record_coverage, run_hfx
from test_decoder_parity import assert_close, decode_feeds
from test_hybrid_lfm2 import NEW_TOKENS, PROMPTS, ort_greedy, transformers_greedy
from tiny_models import HYBRID_CASES, load_reference

CASES = sorted(c for c, (model_type, _) in HYBRID_CASES.items() if model_type == "mamba2")


def transformers_steps(model, steps):
    """[(logits, {present port: state})] per step; a conv state as its last conv_kernel - 1 columns."""
    out, cache = [], None
    with torch.no_grad():
        for feed in steps:
            r = model(input_ids=torch.from_numpy(feed["input_ids"]),
                      attention_mask=torch.from_numpy(feed["attention_mask"]),
                      cache_params=cache, use_cache=True)
            cache = r.cache_params
            states = {}
            for i in range(model.config.num_hidden_layers):
                states[f"present_conv.{i}"] = cache.get_conv_state(i).numpy()[:, :, 1:].copy()
                states[f"present_ssm.{i}"] = cache.get_recurrent_state(i).numpy().copy()
            out.append((r.logits.float().numpy(), states))
    return out


def initial_state(config, batch):
    c = config
    conv_dim = c.expand * c.hidden_size + 2 * c.n_groups * c.state_size
    past = {}
    for i in range(c.num_hidden_layers):
        past[f"past_conv.{i}"] = np.zeros((batch, conv_dim, c.conv_kernel - 1), np.float32)
        past[f"past_ssm.{i}"] = np.zeros((batch, c.num_heads, c.head_dim, c.state_size), np.float32)
    return past


def run_steps(run_one, steps, config):
    past = initial_state(config, steps[0]["input_ids"].shape[0])
    results = []
    for feed in steps:
        outs = run_one({**feed, **past})
        past = {name: outs[name.replace("past_", "present_")] for name in past}
        results.append((outs["logits"], {k: v for k, v in outs.items() if k != "logits"}))
    return results


def compare(case, ours, ref):
    worst = 0.0
    for step, ((logits, states), (ref_logits, ref_states)) in enumerate(zip(ours, ref)):
        worst = max(worst, assert_close(f"{case} step {step} logits", logits, ref_logits))
        assert set(states) == set(ref_states), f"{case}: state ports {sorted(states)} vs {sorted(ref_states)}"
        for name, r in ref_states.items():
            worst = max(worst, assert_close(f"{case} step {step} {name}", states[name], r))
    return worst


@pytest.fixture(scope="session")
def mamba2_export(tiny_checkpoint, tmp_path_factory):
    return export_once(tmp_path_factory.mktemp("mamba2"), lambda case, layout: (
        "--model", tiny_checkpoint(case), "--format", "onnx", "--onnx-profile", layout, "--quiet"))


@pytest.mark.parametrize("profile", ["portable", "ort"])
@pytest.mark.parametrize("case", CASES)
def test_onnxruntime_matches_transformers(case, profile, tiny_checkpoint, mamba2_export):
    folder = mamba2_export(case, profile)
    model_path = folder / "onnx" / "model.onnx"
    onnx.checker.check_model(str(model_path), full_check=True)
    model = load_reference(tiny_checkpoint(case))
    steps = decode_feeds(model.config.vocab_size)
    assert steps[0]["input_ids"].shape[1] > model.config.chunk_size, "the prompt must span more than one scan chunk"
    ref = transformers_steps(model, steps)
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(str(model_path), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    wanted = {i.name for i in sess.get_inputs()}
    ours = run_steps(lambda feed: dict(zip(names, sess.run(None, {k: v for k, v in feed.items() if k in wanted}))),
                     steps, model.config)
    worst = compare(case, ours, ref)
    record_coverage(case, f"onnxruntime-{profile}", "logits and states max abs diff", worst)


@pytest.mark.parametrize("decomposed", [False, True], ids=["fused", "decomposed"])
@pytest.mark.parametrize("case", CASES)
def test_reference_executor_matches_transformers(case, decomposed, tiny_checkpoint, tmp_path):
    ckpt = tiny_checkpoint(case)
    model = load_reference(ckpt)
    steps = decode_feeds(model.config.vocab_size)
    ref = transformers_steps(model, steps)

    def run_one(feed):
        inputs, outputs = tmp_path / "in.safetensors", tmp_path / "out.safetensors"
        save_file({k: np.ascontiguousarray(v) for k, v in feed.items()}, str(inputs))
        run_hfx("run", "--model", ckpt, "--inputs", inputs, "--output", outputs, *(["--decomposed"] if decomposed else []))
        return load_file(str(outputs))

    worst = compare(case, run_steps(run_one, steps, model.config), ref)
    record_coverage(case, "reference" + ("-decomposed" if decomposed else ""), "logits and states max abs diff", worst)


def generated(folder, *flags):
    args = []
    for p in PROMPTS:
        args += ["--prompt-ids", ",".join(map(str, p))]
    proc = run_hfx("generate", folder, *args, "-n", NEW_TOKENS, "--print-ids", *flags)
    return [[int(t) for t in line.split(",")] for line in proc.stdout.strip().splitlines()]


@pytest.mark.parametrize("case", CASES)
def test_greedy_tokens_match_transformers(case, tiny_checkpoint, mamba2_export):
    model = load_reference(tiny_checkpoint(case))
    want = transformers_greedy(model)
    folder = mamba2_export(case, "portable")
    assert generated(folder) == want
    eos = model.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos])
    assert ort_greedy(folder / "onnx" / "model.onnx", eos, model.generation_config.pad_token_id or 0) == want
    record_coverage(case, "reference+onnxruntime", f"greedy {NEW_TOKENS} batch2", "identical")


@pytest.mark.parametrize("case", CASES)
def test_split_prefill_greedy_tokens(case, tiny_checkpoint, tmp_path):
    """Prefill + decode graphs: the prefill starts both states from zeros; the decode graph, one token
    by its shape, has no padding mask and scans one padded chunk."""
    model = load_reference(tiny_checkpoint(case))
    folder = tmp_path / "split"
    run_hfx("export", "--model", tiny_checkpoint(case), "--format", "onnx", "--onnx-profile", "portable", "--quiet",
            "--split-prefill", folder)
    assert generated(folder) == transformers_greedy(model)
    record_coverage(case, "reference-split", f"greedy {NEW_TOKENS} batch2", "identical")


@pytest.fixture(scope="session")
def mamba2_openvino(tiny_checkpoint, tmp_path_factory):
    if not hfx_has_openvino():
        pytest.skip("hfx built without OpenVINO")
    return export_once(tmp_path_factory.mktemp("mamba2-ov"), lambda case, layout: (
        "--model", tiny_checkpoint(case), "--format", "openvino", "--quiet",
        *(["--stateless"] if layout == "stateless" else [])))


@pytest.mark.parametrize("layout", ["stateful", "stateless"])
@pytest.mark.parametrize("case", CASES)
def test_openvino_greedy_and_verify(case, layout, tiny_checkpoint, mamba2_openvino):
    """OpenVINO: the stateful IR keeps both states of every layer as variables (zeros at the start,
    replaced each step); 64 greedy tokens equal Transformers', and `hfx verify` passes its numbers."""
    model = load_reference(tiny_checkpoint(case))
    folder = mamba2_openvino(case, layout)
    assert generated(folder, "--runtime", "openvino") == transformers_greedy(model)
    run_hfx("verify", folder, "--runtime", "openvino")
    record_coverage(case, f"openvino-{layout}", f"greedy {NEW_TOKENS} batch2 + verify", "identical")


def test_inspect_lists_the_states_per_layer(tiny_checkpoint):
    out = run_hfx("inspect", tiny_checkpoint("mamba2")).stdout
    assert "mamba2" in out and "Mamba2ForCausalLM" in out
    assert "past_ssm.0" in out or "recurrent" in out, out


@pytest.mark.parametrize("edit, message", [
    (dict(expand=3), "must equal num_heads * head_dim"),
    (dict(n_groups=3), "must be a multiple of n_groups"),
    (dict(time_step_limit=[1.0, 0.5]), "is not a range"),
    (dict(hidden_act="gelu"), "hidden_act"),
])
def test_inconsistent_configs_are_refused(edit, message, tiny_checkpoint, tmp_path):
    import json
    import shutil
    folder = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoint("mamba2"), folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(edit)
    (folder / "config.json").write_text(json.dumps(config))
    proc = run_hfx("export", "--model", folder, "--format", "onnx", tmp_path / "out", check=False)
    assert proc.returncode != 0 and message in proc.stderr and "config.json" in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()
