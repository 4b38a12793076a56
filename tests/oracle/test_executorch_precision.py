"""f16, bf16 and weight-only int8 ExecuTorch programs (`--format executorch --dtype f16|bf16`, both
backends; `--quantize int8:channel`, XNNPACK).

The forms (passes/precision.h, target ExecuTorch): Linear layers stay Linear, so XNNPACK's
FullyConnected delegate takes the weight as stored. f16: Cast(Linear(Cast(x, f16), W f16), f32), computed
by XNNPACK as one FullyConnected of the f32 activations and the f16 weight (in f32, whatever the CPU's f16
arithmetic; `xnnpack`) or in f16 by the portable linear kernel (`portable`); bf16: the
weight stored in bf16 and cast to f32 at use (XNNPACK has no bf16 FullyConnected, so those layers stay
in portable kernels). int8:channel (symmetric, one scale per output row): Linear(x, dequantize_per_channel(
W.q int8, scales)), taken whole by an XNNPACK FullyConnected delegate with a qcint8 weight (XNNPACK's f32 x
qc8w kernels: weight-only, f32 activations). Embedding tables are stored in the dtype; norms, biases, the KV cache and logits
stay f32.

Checked per family and backend:
  - the error against fp32 Transformers eager within test_quantization.BUDGETS (the ONNX budgets of the
    same precision: the weights are rounded the same way; a layout or dtype bug gives NMSE ~1), and the
    greedy agreement those budgets gate;
  - `hfx verify` passes: the reference executor on the same rounded weights, at the f16 / bf16
    tolerance of docs/verify.md, and greedy tokens (f16 may part only at a near-tie of the reference);
  - the export's built-in check ran the program (C++ runtime), the weights take about half the bytes of
    the f32 program, and an XNNPACK f16 program delegates as many linear layers as the f32 one.
XNNPACK's blockwise int4/int8 kernels quantize the activations too (not weight-only) and the portable kernels
have no quantized linear: those are refused in one line, before any work.
"""
from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

from conftest import export_once, run_hfx
from test_executorch import CACHE_LEN, ET_ARGS, greedy, load_forward, pte_of
from test_quantization import BUDGETS, NEW_TOKENS, PROMPT, agreement, transformers_outputs

FAMILIES = ["llama", "qwen2-tied", "phi3", "gpt2"]  # untied GQA, tied with biases, fused qkv, Conv1D
MODES = {"f16": ["--dtype", "f16"], "bf16": ["--dtype", "bf16"], "int8-channel": ["--quantize", "int8:channel"]}
# (backend, mode): int8 runs in XNNPACK delegates only.
VARIANTS = [(b, m) for b in ("xnnpack", "portable") for m in MODES if b == "xnnpack" or m != "int8-channel"]


@pytest.fixture(scope="module")
def reference(tiny_checkpoint):
    return transformers_outputs(tiny_checkpoint, NEW_TOKENS)


@pytest.fixture(scope="module")
def precision_export(tiny_checkpoint, tmp_path_factory):
    """(case, "backend/dtype") -> export folder; dtype "f32" for the baseline. The built-in check runs."""
    def args(case, variant):
        backend, mode = variant.split("/")
        extra = MODES.get(mode, [])  # "f32": none
        return ("--model", tiny_checkpoint(case), *ET_ARGS, "--executorch-backend", backend, *extra)
    return export_once(tmp_path_factory.mktemp("et-precision"), lambda case, variant: args(case, variant))


@pytest.mark.parametrize("backend, dtype", VARIANTS)
@pytest.mark.parametrize("case", FAMILIES)
def test_error_budget_against_transformers(case, backend, dtype, precision_export, reference):
    ref_logits, ref_tokens = reference(case)
    _, forward = load_forward(pte_of(precision_export(case, f"{backend}/{dtype}")))
    (logits,) = forward.execute([torch.tensor([PROMPT]), torch.arange(len(PROMPT))])
    assert logits.dtype == torch.float32  # logits stay f32
    diff = logits.double().numpy() - ref_logits
    max_abs = float(np.abs(diff).max())
    nmse = float((diff ** 2).sum() / (ref_logits.astype(np.float64) ** 2).sum())
    prefix, overall = agreement(ref_tokens, greedy(load_forward(pte_of(precision_export(case, f"{backend}/{dtype}")))[1],
                                                   PROMPT, NEW_TOKENS))
    b = BUDGETS[dtype]
    print(f"{case} {backend} {dtype}: max abs {max_abs:.4g}, NMSE {nmse:.3g}, greedy prefix {prefix:.3f}, overall {overall:.3f}")
    assert max_abs <= b["max_abs"], f"{case} {backend} {dtype}: logits max abs {max_abs:.4g} > {b['max_abs']}"
    assert nmse <= b["nmse"], f"{case} {backend} {dtype}: logits NMSE {nmse:.3g} > {b['nmse']}"
    assert prefix >= b["prefix"], f"{case} {backend} {dtype}: greedy prefix agreement {prefix:.3f} < {b['prefix']}"
    assert overall >= b["overall"], f"{case} {backend} {dtype}: greedy agreement {overall:.3f} < {b['overall']}"


@pytest.mark.parametrize("backend, dtype", VARIANTS)
@pytest.mark.parametrize("case", FAMILIES)
def test_verify_passes_on_the_same_precision(case, backend, dtype, precision_export):
    out = precision_export(case, f"{backend}/{dtype}")
    proc = run_hfx("verify", out, "--runtime", "executorch", check=False)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text
    assert re.search(r"pass numbers: decoder", text) and "pass greedy generation" in text, text


@pytest.mark.parametrize("backend, dtype", VARIANTS)
def test_weights_are_stored_in_the_dtype(backend, dtype, precision_export, tiny_checkpoint):
    case = "llama"
    out = precision_export(case, f"{backend}/{dtype}")
    recipe = json.loads((out / "hfx.json").read_text())["recipe"]
    assert (recipe["dtype"], recipe.get("quantize")) == ((dtype, None) if dtype != "int8-channel" else ("f32", "int8:channel:sym")), recipe
    f32 = pte_of(precision_export(case, f"{backend}/f32")).stat().st_size
    size = pte_of(out).stat().st_size
    # Linear and embedding weights are the bulk of a tiny llama; norms, rope tables and the program stay.
    assert size < 0.65 * f32, f"{dtype} program {size} bytes against f32 {f32}"
    placement = run_hfx("verify", out, "--runtime", "executorch").stdout
    delegates = re.findall(r"XnnpackBackend \(delegate\) x(\d+)", placement)
    if backend == "xnnpack" and dtype != "bf16":  # bf16 layers cast their weight at use: not constants XNNPACK takes
        f32_placement = run_hfx("verify", precision_export(case, f"{backend}/f32"), "--runtime", "executorch").stdout
        assert delegates and delegates == re.findall(r"XnnpackBackend \(delegate\) x(\d+)", f32_placement), placement
    if backend == "portable":
        assert not delegates, placement


def test_builtin_check_names_the_precision(tiny_checkpoint, tmp_path):
    out = tmp_path / "f16"
    proc = run_hfx("export", "--model", tiny_checkpoint("qwen2-tied"), *ET_ARGS, "--dtype", "f16", out)
    assert re.search(r"executorch: \d+ greedy tokens .*XNNPACK, f16\)", proc.stdout + proc.stderr), proc.stdout + proc.stderr


@pytest.mark.parametrize("extra, message", [
    (["--quantize", "int4"], "has no weight-only XNNPACK kernel"),
    (["--quantize", "int8"], "has no weight-only XNNPACK kernel"),  # blocks of 128
    (["--quantize", "int8:channel:asym"], "has no weight-only XNNPACK kernel"),
    (["--quantize", "int8:channel", "--executorch-backend", "portable"], "the portable kernels have no quantized linear"),
    (["--quantize", "int4", "--quantize-embeddings"], "has no weight-only XNNPACK kernel"),
])
def test_other_quantizations_are_refused_in_one_line(extra, message, tiny_checkpoint, tmp_path):
    out = tmp_path / "refused"
    proc = run_hfx("export", "--model", tiny_checkpoint("llama"), *ET_ARGS, *extra, out, check=False)
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("hfx:") and "warning" not in line]
    assert len(errors) == 1 and message in errors[0], proc.stderr
    assert not out.exists()


def test_cache_length_is_the_programs(precision_export):
    program, _ = load_forward(pte_of(precision_export("llama", "xnnpack/f16")))
    assert program.load_method("get_max_context_len").execute([]) == [CACHE_LEN]
