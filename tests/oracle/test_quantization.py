"""Precision and weight-only quantization (`hfx export --dtype`, `--quantize`): error budgets against the
fp32 Transformers reference, ONNX Runtime's quantizer bytes, tensor sizes, recipes and errors.

For each family and mode: logits of a 16-token prompt (ONNX Runtime, decoder graph, empty cache) against
Transformers fp32 eager (max abs diff and NMSE = sum (a - b)^2 / sum b^2), and 64 greedy tokens from the
ONNX Runtime decode loop against Transformers' greedy generate (prefix: fraction of tokens before the
first divergence; overall: fraction of identical positions). The figures are written to
build/quantization.json; docs/quantization.md lists them (reproduce with the command there).
"""
from __future__ import annotations

import json
import sys

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper

from conftest import ROOT, export_once, run_hfx
from tiny_models import load_reference

sys.path.insert(0, str(ROOT / "python"))
from hfx_ort import OrtGenerator  # noqa: E402

# Families: untied Llama (GQA), tied Qwen2 with q/k/v biases (lm_head = embedding), Phi-3's fused
# qkv/gate_up, GPT-2's Conv1D weights. The tiny cases have hidden 64 (K = 64: two blocks of 32) and
# intermediate 96 (down_proj: three blocks); enough for int4 blocks to be real.
FAMILIES = ["llama", "qwen2-tied", "phi3", "gpt2"]
MODES = {
    "f16": ["--dtype", "f16"],
    "bf16": ["--dtype", "bf16"],
    "int8": ["--quantize", "int8"],
    "int8-channel": ["--quantize", "int8:channel"],
    "int4-sym": ["--quantize", "int4"],
    "int4-asym": ["--quantize", "int4:asym"],
}
# Budgets per mode, gated on the worst family (docs/quantization.md has every figure). Logit thresholds
# are ~2-3x the worst measured figure (llama-like families; GPT-2 is 10-50x below), so another seed or
# platform passes and a layout/scale/rounding bug, which gives NMSE ~1 (unrelated logits), does not;
# test_quantized_export_equals_transformers_with_the_same_weights is the exact correctness gate.
# Greedy agreement: these random tiny networks are chaotic (bf16 weight rounding alone flips llama's
# greedy path after 24 tokens): once a token differs the rest differ, so agreement is gated only where
# it is stable (f16, bf16); for int8/int4 it is measured and reported, not gated (threshold 0).
BUDGETS = {
    # f16: activations rounded to f16 (11-bit mantissa) around Linear layers; measured 0.027 / 3.7e-6.
    "f16": dict(max_abs=0.1, nmse=1.5e-5, prefix=0.5, overall=0.5),
    # bf16: weights rounded to an 8-bit mantissa (~0.4% per weight); measured 0.20 / 2.0e-4 / 0.375.
    "bf16": dict(max_abs=0.6, nmse=6e-4, prefix=0.15, overall=0.15),
    # int8 blocks (MatMulNBits; 128, halved to 64 for K = 64): step max|w| / 128; measured 0.53 / 2.0e-3.
    "int8": dict(max_abs=1.6, nmse=6e-3, prefix=0.0, overall=0.0),
    # int8 per channel (DequantizeLinear + MatMul): ONNX Runtime fuses the pair into MatMulNBits and, by
    # default (session.qdq_matmulnbits_accuracy_level = 4), quantizes the activations to int8 too;
    # measured 0.71 / 3.4e-3.
    "int8-channel": dict(max_abs=2.1, nmse=1e-2, prefix=0.0, overall=0.0),
    # int4 blocks of 32: step max|w| / 8 per block, ~8% noise on every weight, amplified by these random
    # networks (bf16 vs gpt2 shows the llama-like ones amplify 40x); measured 7.1 / 0.33 (sym),
    # 4.2 / 0.20 (asym).
    "int4-sym": dict(max_abs=15.0, nmse=0.6, prefix=0.0, overall=0.0),
    "int4-asym": dict(max_abs=10.0, nmse=0.4, prefix=0.0, overall=0.0),
}
# The precision is measured on the portable ONNX profile (standard ops: blockwise int4/int8 as
# DequantizeLinear + MatMul, numerically the same quantization as MatMulNBits), so the figures are those
# of the weights and Linear layers alone; the ort profile's fused attention is measured in its own tests.
PORTABLE = ["--onnx-profile", "portable"]
# MatMulNBits (its bytes, accuracy_level) is the ort profile's; llama-headdim-bias keeps portable attention
# there (head_dim 24: GroupQueryAttention's rotary needs a multiple of 16) with llama's seven Linear layers
# per layer unpacked, so each MatMulNBits weight is one checkpoint tensor.
ORT = ["--onnx-profile", "ort"]
NBITS_CASE = "llama-headdim-bias"
PROMPT = [5, 17, 33, 8, 91, 4, 60, 12, 77, 3, 45, 101, 6, 23, 64, 30]
NEW_TOKENS = 64
RESULTS: dict = {}


@pytest.fixture(scope="module")
def mode_export(tiny_checkpoint, tmp_path_factory):
    return export_once(tmp_path_factory.mktemp("quant-exports"), lambda case, mode: (
        "--model", tiny_checkpoint(case), "--quiet", *PORTABLE, *MODES.get(mode, [])))


def transformers_outputs(tiny_checkpoint, new_tokens: int):
    """(case, f16=False) -> (fp32 Transformers logits of PROMPT, `new_tokens` greedy tokens). f16 first
    rounds every 2-D weight (Linear, embeddings, lm_head) to f16, norms and biases f32, computing in f32:
    what an f16 export holds."""
    cache = {}

    def get(case, f16=False):
        if (case, f16) not in cache:
            model = load_reference(tiny_checkpoint(case))
            with torch.no_grad():
                if f16:
                    for p in model.parameters():
                        if p.ndim == 2:
                            p.copy_(p.half().float())
                logits = model(torch.tensor([PROMPT])).logits.float().numpy()
                gen = model.generate(input_ids=torch.tensor([PROMPT]), attention_mask=torch.ones(1, len(PROMPT), dtype=torch.long),
                                     max_new_tokens=new_tokens, do_sample=False)
            cache[(case, f16)] = (logits, gen[0, len(PROMPT):].tolist())
        return cache[(case, f16)]

    return get


@pytest.fixture(scope="module")
def reference(tiny_checkpoint):
    return transformers_outputs(tiny_checkpoint, NEW_TOKENS)


# ONNX Runtime fuses the portable DequantizeLinear + MatMul into MatMulNBits and by default lets it round
# activations to int8 (session.qdq_matmulnbits_accuracy_level = 4): a different computation. Checks
# that compare files to fp32 summation-order noise turn that off; the budgets are measured with ORT's
# defaults, as a user runs them.
EXACT = {"session.qdq_matmulnbits_accuracy_level": "0"}


def ort_logits(out, session_config=None):
    gen = OrtGenerator(out, session_config=session_config)
    sess = gen.first
    wanted = {i.name for i in sess.get_inputs()}
    feed = {"input_ids": np.array([PROMPT], np.int64), "attention_mask": np.ones((1, len(PROMPT)), np.int64),
            "position_ids": np.arange(len(PROMPT), dtype=np.int64)[None]}
    feed.update(gen._empty_states(1))  # every carried state before the first token
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, {k: v for k, v in feed.items() if k in wanted})))["logits"], gen


def agreement(expected, actual):
    n = min(len(expected), len(actual))
    first = next((i for i in range(n) if expected[i] != actual[i]), n)
    same = sum(expected[i] == actual[i] for i in range(n))
    return first / max(1, len(expected)), same / max(1, len(expected))


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("case", FAMILIES)
def test_error_budget(case, mode, mode_export, reference):
    ref_logits, ref_tokens = reference(case)
    logits, gen = ort_logits(mode_export(case, mode))
    assert logits.dtype == np.float32  # logits stay f32 in every mode
    diff = logits.astype(np.float64) - ref_logits
    max_abs = float(np.abs(diff).max())
    nmse = float((diff ** 2).sum() / (ref_logits.astype(np.float64) ** 2).sum())
    tokens = gen.generate([PROMPT], max_new_tokens=NEW_TOKENS)[0]
    prefix, overall = agreement(ref_tokens, tokens)
    RESULTS[f"{case}|{mode}"] = dict(max_abs=max_abs, nmse=nmse, prefix=prefix, overall=overall)
    out = ROOT / "build" / "quantization.json"
    out.parent.mkdir(exist_ok=True)
    old = json.loads(out.read_text()) if out.exists() else {}
    old.update(RESULTS)
    out.write_text(json.dumps(old, indent=1, sort_keys=True))
    b = BUDGETS[mode]
    assert max_abs <= b["max_abs"], f"{case} {mode}: logits max abs {max_abs:.4g} > {b['max_abs']}"
    assert nmse <= b["nmse"], f"{case} {mode}: logits NMSE {nmse:.3g} > {b['nmse']}"
    assert prefix >= b["prefix"], f"{case} {mode}: greedy prefix agreement {prefix:.3f} < {b['prefix']}"
    assert overall >= b["overall"], f"{case} {mode}: greedy agreement {overall:.3f} < {b['overall']}"


def dequantize_blocked(q, scales, zp, block):
    """W[K, N] from DequantizeLinear(axis 0, block_size) (ONNX operator spec), written independently of hfx."""
    K = q.shape[0]
    rows = np.arange(K) // block
    z = np.zeros_like(scales) if zp is None else zp.astype(np.float32)
    return (q.astype(np.float32) - z[rows]) * scales.astype(np.float32)[rows]


def dequantize_nbits(B, scales, zp, K, N, bits, block):
    """W[K, N] from MatMulNBits' layout (com.microsoft ContribOperators.md), written independently of hfx."""
    kb = (K + block - 1) // block
    B = B.reshape(N, kb, -1)
    q = np.stack([B & 0xF, B >> 4], -1).reshape(N, kb, block) if bits == 4 else B.reshape(N, kb, block)
    if zp is None:
        z = np.full((N, kb), 2 ** (bits - 1))
    else:
        zp = zp.reshape(N, -1)
        z = np.stack([zp & 0xF, zp >> 4], -1).reshape(N, -1)[:, :kb] if bits == 4 else zp[:, :kb]
    w = (q.astype(np.float32) - z[..., None].astype(np.float32)) * scales.reshape(N, kb)[..., None].astype(np.float32)
    return w.reshape(N, kb * block)[:, :K].T


def table_of(model, inits, value):
    """The initializer behind `value` (GatherBlockQuantized reads MatMulNBits' tensors through a Reshape)."""
    if value in inits:
        return value
    (reshape,) = [n for n in model.graph.node if value in n.output]
    assert reshape.op_type == "Reshape", reshape
    return reshape.input[0]


PACKED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}


def dequantized_weights(model, inits, params):
    """{checkpoint parameter: W[K, N]} (a table: [H, V]) for every quantized tensor of an export: MatMulNBits,
    the portable profile's blocked DequantizeLinear, GatherBlockQuantized tables, and the ort profile's
    packed q | k | v split back; dequantized by the independent numpy code above."""
    out = {}
    for node in model.graph.node:
        a = {x.name: onnx.helper.get_attribute_value(x) for x in node.attribute}
        if node.op_type == "MatMulNBits":
            zp = inits[node.input[3]] if len(node.input) > 3 else None
            w = dequantize_nbits(inits[node.input[1]], inits[node.input[2]], zp, a["K"], a["N"], a["bits"], a["block_size"])
            name = node.input[1].rsplit(".q", 1)[0]
        elif node.op_type == "DequantizeLinear":  # the portable profile's blocked DequantizeLinear over W[K, N]
            zp = inits[node.input[2]] if len(node.input) > 2 and node.input[2] else None
            w = dequantize_blocked(inits[node.input[0]], inits[node.input[1]], zp, a["block_size"])
            name = node.input[0].rsplit(".q", 1)[0]
        elif node.op_type == "GatherBlockQuantized":
            assert (a["gather_axis"], a["quantize_axis"]) == (0, 1)
            data = table_of(model, inits, node.input[0])
            name = data.rsplit(".q", 1)[0]
            V, H = params[name.removesuffix(".T")].shape
            zp = inits[table_of(model, inits, node.input[3])] if len(node.input) > 3 else None
            w = dequantize_nbits(inits[data], inits[table_of(model, inits, node.input[2])], zp, H, V, a["bits"], a["block_size"])
        else:
            continue
        name = name.removesuffix(".T")
        # the ort profile packs q | k | v, and a gated MLP's gate | up, into one MatMulNBits each
        packed = next((p for p in PACKED if name not in params and f".{p}." in name), None)
        if packed:
            for part in PACKED[packed]:
                n = params[name.replace(packed, part)].shape[0]
                out[name.replace(packed, part)], w = w[:, :n], w[:, n:]
            continue
        out[name] = w
    return out


def load_dequantized(params, weights, conv1d: bool):
    """Copies dequantized_weights() into Transformers' parameters: Linear weights and tables transposed,
    GPT-2's Conv1D weights (stored [in, out] = [K, N]) as they are."""
    for name, w in weights.items():
        table = "embed" in name or name.endswith(("wte.weight", "wpe.weight"))
        params[name].copy_(torch.from_numpy(w.T.copy() if table or not conv1d else w))


@pytest.mark.parametrize("mode", ["int4-sym", "int4-asym", "int8"])
@pytest.mark.parametrize("case", ["llama", "qwen2-tied", "gpt2"])
def test_quantized_export_equals_transformers_with_the_same_weights(case, mode, mode_export, tiny_checkpoint):
    """The error above is the quantization's alone: Transformers run with the dequantized weights read back
    from the export gives ONNX Runtime's logits to fp32 summation-order noise."""
    out = mode_export(case, mode)
    model, inits = initializers(out)
    ref = load_reference(tiny_checkpoint(case))
    params = dict(ref.named_parameters())
    weights = dequantized_weights(model, inits, params)
    replaced = len(weights)
    with torch.no_grad():
        load_dequantized(params, weights, conv1d=tiny_checkpoint(case).name.startswith("gpt2"))
        assert replaced >= 2 * 4
        want = ref(torch.tensor([PROMPT])).logits.numpy()
    got, _ = ort_logits(out, EXACT)
    assert np.abs(got - want).max() < 1e-4 * max(1.0, float(np.abs(want).max()))


def initializers(out):
    model = onnx.load(str(out / "onnx" / "model.onnx"), load_external_data=True)
    return model, {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


@pytest.mark.parametrize("spec,bits,sym", [("int4", 4, True), ("int4:asym", 4, False), ("int8:block=32", 8, True),
                                           ("int8:block=16:asym", 8, False)])
def test_bytes_equal_onnxruntime_quantizer(spec, bits, sym, tiny_checkpoint, tmp_path):
    """Every MatMulNBits weight holds exactly the bytes ONNX Runtime's own quantizer
    (quantize_matmul_4bits / _8bits, what MatMulNBitsQuantizer calls) makes from the checkpoint weight."""
    from onnxruntime.capi._pybind_state import quantize_matmul_4bits, quantize_matmul_8bits
    from safetensors.numpy import load_file

    ckpt = tiny_checkpoint(NBITS_CASE)
    out = tmp_path / "out"
    run_hfx("export", "--model", ckpt, "--quiet", *ORT, "--quantize", spec, out)
    weights = load_file(str(ckpt / "model.safetensors"))
    model, inits = initializers(out)
    nodes = [n for n in model.graph.node if n.op_type == "MatMulNBits"]
    assert len(nodes) == 2 * 7 and all(n.domain == "com.microsoft" for n in nodes)  # 7 Linear per layer, lm_head kept
    for node in nodes:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        name = node.input[1][: -len(f".q{bits}")]
        w = weights[name].astype(np.float32).T.copy()  # [K, N]
        K, N, block = attrs["K"], attrs["N"], attrs["block_size"]
        assert (K, N, attrs["bits"]) == (*w.shape, bits)
        kb = (K + block - 1) // block
        packed = np.zeros((N, kb, block * bits // 8), np.uint8)
        scales = np.zeros((N, kb), np.float32)
        zp = np.zeros((N, (kb * bits + 7) // 8), np.uint8)
        (quantize_matmul_4bits if bits == 4 else quantize_matmul_8bits)(packed, w, scales, zp, block, N, K, sym)
        np.testing.assert_array_equal(inits[node.input[1]], packed, err_msg=name)
        np.testing.assert_array_equal(inits[node.input[2]], scales.reshape(-1), err_msg=name)
        if sym:
            assert len(node.input) == 3
        else:
            np.testing.assert_array_equal(inits[node.input[3]], zp.reshape(-1), err_msg=name)


def test_quantized_sizes(mode_export):
    """int4 stores K*N/2 bytes + one f32 scale per 32 weights: 1/8 + 1/32 of f32 = 0.15625 (sym);
    int8 per channel K*N bytes + N scales; f16/bf16 half of f32. Embeddings and lm_head stay in the
    dtype (f32 here), norms and biases f32."""
    f32_model, f32_inits = initializers(mode_export("llama", "f32"))
    linear = {n.input[1] for n in f32_model.graph.node if n.op_type == "MatMul" and n.input[1] in f32_inits}
    assert len(linear) == 2 * 7 + 1
    f32_bytes = sum(f32_inits[n].nbytes for n in linear if not n.startswith("lm_head"))
    q_model, q_inits = initializers(mode_export("llama", "int4-sym"))
    dq4 = [n for n in q_model.graph.node if n.op_type == "DequantizeLinear"]  # portable: INT4 [K, N] + [K/32, N] scales
    assert len(dq4) == 2 * 7 and all(q_inits[n.input[0]].dtype == onnx.helper.tensor_dtype_to_np_dtype(onnx.TensorProto.INT4)
                                     for n in dq4)
    q_bytes = sum(-(-q_inits[n.input[0]].size // 2) + q_inits[n.input[1]].nbytes for n in dq4)  # 4-bit: two per byte
    assert q_bytes / f32_bytes == pytest.approx(0.15625)
    assert q_inits["lm_head.weight"].dtype == np.float32
    i8_model, i8_inits = initializers(mode_export("llama", "int8-channel"))
    dq = [n for n in i8_model.graph.node if n.op_type == "DequantizeLinear"]
    assert len(dq) == 2 * 7
    assert all(i8_inits[n.input[0]].dtype == np.int8 for n in dq)
    i8_bytes = sum(i8_inits[n.input[0]].nbytes for n in dq)
    assert i8_bytes / f32_bytes == pytest.approx(0.25)
    for dtype, np_dtype in (("f16", np.float16), ("bf16", None)):
        m, inits = initializers(mode_export("llama", dtype))
        weights = [t for t in m.graph.initializer if t.name.endswith("." + dtype)]
        assert len(weights) == 2 * 7 + 2  # Linear layers, lm_head and the embedding table
        assert all(t.data_type == (onnx.TensorProto.FLOAT16 if dtype == "f16" else onnx.TensorProto.BFLOAT16) for t in weights)


def test_recipe_reproduces_quantized_export(mode_export, tmp_path):
    out = mode_export("qwen2-tied", "int4-asym")
    recipe = json.loads((out / "hfx.json").read_text())["recipe"]
    assert recipe["dtype"] == "f32" and recipe["quantize"] == "int4:block=32:asym" and recipe["quantize_lm_head"] is False
    again = tmp_path / "again"
    run_hfx("export", "--recipe", out / "hfx.json", "--quiet", again)
    for f in ("onnx/model.onnx", "onnx/model.onnx_data", "hfx.json"):
        assert (again / f).read_bytes() == (out / f).read_bytes(), f
    proc = run_hfx("export", "--recipe", out / "hfx.json", "--quantize", "int8", tmp_path / "x", check=False)
    assert proc.returncode != 0 and "--quantize cannot be combined with --recipe" in proc.stderr


@pytest.mark.parametrize("mode", ["f16", "bf16", "int4-asym", "int8"])
def test_hfx_verify_runs_quantized_exports(mode, mode_export):
    """The reference executor runs DequantizeLinear / MatMulNBits / f16 casts; `hfx verify` compares the
    artifact with the reference at the same precision, regenerates it byte for byte, and ONNX Runtime
    agrees with it."""
    out = mode_export("llama", mode)
    for runtime in ("reference", "onnxruntime"):
        proc = run_hfx("verify", out, "--runtime", runtime, "--tokens", "16", check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_quantize_lm_head_and_generate(tiny_checkpoint, tmp_path):
    out = tmp_path / "out"
    run_hfx("export", "--model", tiny_checkpoint("qwen2-tied"), "--quiet", *PORTABLE, "--quantize", "int4", "--quantize-lm-head",
            "--dtype", "f16", out)
    model = onnx.load(str(out / "onnx" / "model.onnx"), load_external_data=False)
    assert sum(n.op_type == "DequantizeLinear" for n in model.graph.node) == 2 * 7 + 1
    proc = run_hfx("generate", out, "--prompt-ids", "5,17,33", "-n", "8", "--print-ids")
    assert proc.stdout.strip()


@pytest.mark.parametrize("args,message", [
    (["--quantize", "int3"], "--quantize int3: unknown scheme"),
    (["--quantize", "int4:block=7"], "block=7 is not supported"),
    (["--quantize", "int4:fast"], "unknown option"),
    (["--quantize", "int4:accuracy=5"], "accuracy=5 is not a MatMulNBits accuracy_level"),
    (["--quantize", "int8:channel:accuracy=4"], "accuracy= applies to MatMulNBits"),
    (["--dtype", "f8"], "--dtype f8: unknown dtype"),
    (["--quantize-lm-head"], "--quantize-lm-head needs --quantize"),
])
def test_bad_specs_fail_in_one_line(args, message, tiny_checkpoint, tmp_path):
    proc = run_hfx("export", "--model", tiny_checkpoint("llama"), *args, tmp_path / "out", check=False)
    assert proc.returncode == 2, proc.stderr  # the flags themselves are wrong: a usage error
    assert message in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert not (tmp_path / "out").exists()


def test_error_grows_with_coarser_precision():
    """Per family, logits NMSE orders as the precision: f16 < bf16 < int8 < int4 (both int4 kinds)."""
    for case in FAMILIES:
        r = {m: RESULTS.get(f"{case}|{m}", {}).get("nmse") for m in MODES}
        if any(v is None for v in r.values()):
            pytest.skip("needs the test_error_budget figures of this session")
        assert r["f16"] < r["bf16"] < r["int8"] < min(r["int4-sym"], r["int4-asym"]), (case, r)


def test_accuracy_level_is_written_and_runs(mode_export, tiny_checkpoint, tmp_path):
    """`int4:accuracy=4` writes MatMulNBits accuracy_level=4 (ORT may then quantize activations to int8:
    about 2x decode tokens/s on int4, docs/benchmarks.md) and changes nothing else in the file; ORT runs
    it. Gate: logits NMSE against the accuracy_level=0 export's below 0.01 (measured 1.6e-3: int8
    activation rounding, amplified ~40x by these random tiny networks as every budget here is; a wrong
    layout gives unrelated logits, NMSE ~1)."""
    out = tmp_path / "acc4"
    run_hfx("export", "--model", tiny_checkpoint("llama"), "--quiet", *ORT, "--quantize", "int4:accuracy=4", out)
    recipe = json.loads((out / "hfx.json").read_text())["recipe"]
    assert recipe["quantize"] == "int4:block=32:sym:accuracy=4"
    model = onnx.load(out / "onnx" / "model.onnx", load_external_data=False)
    nbits = [n for n in model.graph.node if n.op_type == "MatMulNBits"]
    assert nbits and all({a.name: a.i for a in n.attribute}.get("accuracy_level") == 4 for n in nbits)
    base = tmp_path / "acc0"
    run_hfx("export", "--model", tiny_checkpoint("llama"), "--quiet", *ORT, "--quantize", "int4", base)
    assert (out / "onnx" / "model.onnx_data").read_bytes() == (base / "onnx" / "model.onnx_data").read_bytes()
    a, _ = ort_logits(out)
    b, _ = ort_logits(base)
    nmse = float(((a - b) ** 2).mean() / (b ** 2).mean())
    print(f"\naccuracy_level=4 vs 0 (ORT): max abs {np.abs(a - b).max():.3f}, NMSE {nmse:.2e}")
    assert nmse < 0.01, nmse

