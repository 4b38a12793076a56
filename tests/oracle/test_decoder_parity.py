"""hfx against Transformers eager, fp32, on tiny random checkpoints of every supported model_type.

For each case: a batch of 2 left-padded prompts (empty cache), then 3 single-token steps through
the cache, each step fed the previous step's present.* outputs. Every logit (pad positions too)
and every cache entry must agree within 1e-4 absolute: the gate is max abs diff <= 1e-4 with no
mismatching element.

Runners: ONNX Runtime on the exported model.onnx, and hfx's own reference executor (`hfx run`),
both with fused composite kernels and through the primitive decompositions.
"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from safetensors.numpy import load_file, save_file

import decode_inputs as D
from conftest import record_coverage, run_hfx
from tiny_models import CASES, load_reference

ATOL = 1e-4  # fp32 end to end: only summation order differs from Transformers


def transformers_steps(model, steps):
    """Runs Transformers eager over the steps; returns [(logits, [(k, v) per layer])]."""
    out, cache = [], None
    with torch.no_grad():
        for feed in steps:
            r = model(input_ids=torch.from_numpy(feed["input_ids"]),
                      attention_mask=torch.from_numpy(feed["attention_mask"]),
                      position_ids=torch.from_numpy(feed["position_ids"]),
                      past_key_values=cache, use_cache=True)
            cache = r.past_key_values
            layers = [(layer.keys.numpy().copy(), layer.values.numpy().copy()) for layer in cache.layers]
            out.append((r.logits.float().numpy(), layers))
    return out


def decode_feeds(vocab: int):
    """The step inputs (ids, mask, positions) without the cache, which each runner threads itself."""
    ids, mask = D.prompt(vocab)
    steps = [dict(input_ids=ids, attention_mask=mask, position_ids=D.positions(mask, ids.shape[1]))]
    for s in range(D.DECODE_STEPS):
        mask = np.concatenate([mask, np.ones((mask.shape[0], 1), np.int64)], axis=1)
        steps.append(dict(input_ids=D.next_tokens(vocab, s, mask.shape[0]), attention_mask=mask,
                          position_ids=D.positions(mask, 1)))
    return steps


def run_steps(run_one, steps, num_layers, kv_heads, head_dim):
    """Threads the cache through `run_one(feed) -> outputs`; returns [(logits, [(k, v)])]."""
    batch = steps[0]["input_ids"].shape[0]
    past = [(np.zeros((batch, kv_heads, 0, head_dim), np.float32),) * 2 for _ in range(num_layers)]
    results = []
    for feed in steps:
        full = dict(feed)
        for i, (k, v) in enumerate(past):
            full[f"past_key_values.{i}.key"] = k
            full[f"past_key_values.{i}.value"] = v
        outs = run_one(full)
        past = [(outs[f"present.{i}.key"], outs[f"present.{i}.value"]) for i in range(num_layers)]
        results.append((outs["logits"], past))
    return results


def reference_step_runner(ckpt, scratch, decomposed=False):
    """One step on hfx's reference executor over the checkpoint (`hfx run`), as run_one(feed) -> outputs."""
    def run_one(feed):
        inputs, outputs = scratch / "in.safetensors", scratch / "out.safetensors"
        save_file({k: np.ascontiguousarray(v) for k, v in feed.items()}, str(inputs))
        run_hfx("run", "--model", ckpt, "--inputs", inputs, "--output", outputs, *(["--decomposed"] if decomposed else []))
        return load_file(str(outputs))
    return run_one


def assert_close(name, ours, ref):
    assert ours.shape == ref.shape, f"{name}: shape {ours.shape} vs Transformers {ref.shape}"
    diff = np.abs(ours.astype(np.float64) - ref.astype(np.float64))
    bad = int((diff > ATOL).sum())
    assert bad == 0, f"{name}: {bad}/{diff.size} elements differ by > {ATOL} (max {diff.max():.3g})"
    return float(diff.max())


def compare(case, ours, ref):
    worst = 0.0
    for step, ((logits, cache), (ref_logits, ref_cache)) in enumerate(zip(ours, ref)):
        worst = max(worst, assert_close(f"{case} step {step} logits", logits, ref_logits))
        for i, ((k, v), (rk, rv)) in enumerate(zip(cache, ref_cache)):
            # A sliding-window cache layer in Transformers may keep only its last tokens.
            n = rk.shape[2]
            assert_close(f"{case} step {step} present.{i}.key", k[:, :, -n:], rk)
            assert_close(f"{case} step {step} present.{i}.value", v[:, :, -n:], rv)
    return worst


def geometry(model):
    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    return c.num_hidden_layers, c.num_key_value_heads, head_dim


@pytest.mark.parametrize("case", sorted(CASES))
def test_onnxruntime_matches_transformers(case, tiny_checkpoint, exported):
    folder = exported(case)
    model_path = folder / "onnx" / "model.onnx"
    onnx.checker.check_model(str(model_path), full_check=True)
    model = load_reference(tiny_checkpoint(case))
    steps = decode_feeds(model.config.vocab_size)
    ref = transformers_steps(model, steps)

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(str(model_path), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    ours = run_steps(lambda feed: dict(zip(names, sess.run(None, feed))), steps, *geometry(model))
    worst = compare(case, ours, ref)
    record_coverage(case, "onnxruntime", "logits max abs diff", worst)
    print(f"{case}: onnxruntime max abs diff {worst:.2e}")


@pytest.mark.parametrize("decomposed", [False, True], ids=["fused", "decomposed"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_reference_executor_matches_transformers(case, decomposed, tiny_checkpoint, tmp_path):
    ckpt = tiny_checkpoint(case)
    model = load_reference(ckpt)
    steps = decode_feeds(model.config.vocab_size)
    ref = transformers_steps(model, steps)

    run_one = reference_step_runner(ckpt, tmp_path, decomposed)
    ours = run_steps(run_one, steps, *geometry(model))
    worst = compare(case, ours, ref)
    record_coverage(case, "reference" + ("-decomposed" if decomposed else ""), "logits max abs diff", worst)
    print(f"{case}: reference executor ({'decomposed' if decomposed else 'fused'}) max abs diff {worst:.2e}")
