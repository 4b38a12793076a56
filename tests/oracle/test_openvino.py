"""hfx's OpenVINO IR against Transformers eager, fp32, run by the OpenVINO runtime (CPU plugin).

For every tiny case (tiny_models.CASES and PARITY_CASES):
  - stateless IR (`--format openvino --stateless`): the decode steps of test_decoder_parity (a left-
    padded batch of 2 on an empty cache, then 3 single-token steps fed the previous present.*); every
    logit and cache entry within 1e-4 absolute, no mismatching element;
  - stateful IR (the default: KV cache as ReadValue/Assign state, beam_idx): the same steps, logits
    and the final state within 1e-4; then 64 greedy tokens for a left-padded batch of 2, identical
    to Transformers generate(do_sample=False).
And OpenVINO GenAI's LLMPipeline on the stateful folder for a few families, with its paged-attention
(PA) and its stateful (SDPA) backends: 64 greedy tokens (batch 1) identical.

Compiled with INFERENCE_PRECISION_HINT=f32 and KV_CACHE_PRECISION=f32: the CPU plugin otherwise
computes in bf16 where the CPU has it and keeps the KV cache in f16/u8, which no fp32 tolerance
survives.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
import xml.etree.ElementTree as ET

import numpy as np
import pytest

pytest.importorskip("openvino")

from conftest import ROOT, export_once, hfx_has_openvino, record_coverage, run_hfx  # noqa: E402
from test_decoder_parity import assert_close, compare, decode_feeds, geometry, run_steps, transformers_steps  # noqa: E402
from test_generation import NEW_TOKENS, PROMPTS  # noqa: E402
from tiny_models import CASES, PARITY_CASES, load_reference  # noqa: E402

sys.path.insert(0, str(ROOT / "python"))
from hfx_ov import OvGenerator, compile_model  # noqa: E402

ALL_CASES = sorted(CASES) + sorted(PARITY_CASES)
LAYOUTS = {"stateful": [], "stateless": ["--stateless"], "split": ["--stateless", "--split-prefill"],
           "static": ["--stateless", "--static-cache", "--max-cache-len", "96"]}


@pytest.fixture(scope="module", autouse=True)
def _needs_openvino_build():
    # The openvino wheel is in this venv (importorskip above), so CMake's AUTO found its SDK: an hfx
    # without the backend here is a broken build, not a reason to skip.
    assert hfx_has_openvino(), "the openvino package is installed but hfx was built without the OpenVINO backend"


@pytest.fixture(scope="module")
def ov_export(tiny_checkpoint, tmp_path_factory):
    """case, layout ('stateless' | 'stateful') -> export folder (once per module)."""
    return export_once(tmp_path_factory.mktemp("ov-exports"), lambda case, layout: (
        "--model", tiny_checkpoint(case), "--format", "openvino", "--quiet", *LAYOUTS[layout]))


@pytest.fixture(scope="module")
def reference(tiny_checkpoint):
    """case -> (model, steps, Transformers outputs of the steps)."""
    cache = {}

    def get(case):
        if case not in cache:
            model = load_reference(tiny_checkpoint(case))
            steps = decode_feeds(model.config.vocab_size)
            cache[case] = (model, steps, transformers_steps(model, steps))
        return cache[case]

    return get


def ir_ops(xml_path):
    return sorted({layer.get("type") for layer in ET.parse(xml_path).getroot().iter("layer")})


@pytest.mark.parametrize("case", ALL_CASES)
def test_stateless_ir_matches_transformers(case, ov_export, reference):
    folder = ov_export(case, "stateless")
    xml = folder / "openvino" / "openvino_model.xml"
    assert xml.exists() and xml.with_suffix(".bin").exists()
    model, steps, ref = reference(case)
    compiled = compile_model(xml)
    names = {n for o in compiled.outputs for n in o.get_names()}
    assert "logits" in names and "present.0.key" in names
    request = compiled.create_infer_request()

    def run_one(feed):
        r = request.infer(feed)
        return {name: r[name].copy() for name in names}

    ours = run_steps(run_one, steps, *geometry(model))
    worst = compare(case, ours, ref)
    record_coverage(case, "openvino", "logits max abs diff", worst)
    print(f"{case}: openvino stateless max abs diff {worst:.2e}")


@pytest.mark.parametrize("case", ALL_CASES)
def test_stateful_ir_matches_transformers(case, ov_export, reference):
    folder = ov_export(case, "stateful")
    xml = folder / "openvino" / "openvino_model.xml"
    ops = ir_ops(xml)
    assert "ReadValue" in ops and "Assign" in ops
    model, steps, ref = reference(case)
    compiled = compile_model(xml)
    assert sorted(n for i in compiled.inputs for n in i.get_names()) == [
        "attention_mask", "beam_idx", "input_ids", "position_ids"]
    assert [n for o in compiled.outputs for n in o.get_names()] == ["logits"]
    request = compiled.create_infer_request()
    request.reset_state()
    worst = 0.0
    for step, (feed, (ref_logits, _)) in enumerate(zip(steps, ref)):
        batch = feed["input_ids"].shape[0]
        logits = request.infer({**feed, "beam_idx": np.arange(batch, dtype=np.int32)})["logits"]
        worst = max(worst, assert_close(f"{case} step {step} logits (stateful)", logits, ref_logits))
    # The state holds the cache: its last value is Transformers' cache (layer 0 key).
    states = {s.name: s.state.data for s in request.query_state()}
    assert len(states) == 2 * model.config.num_hidden_layers
    k0 = next(v for name, v in states.items() if name.startswith("past_key_values.0.key"))
    rk = ref[-1][1][0][0]
    assert_close(f"{case} state past_key_values.0.key", k0[:, :, -rk.shape[2]:], rk)
    record_coverage(case, "openvino-stateful", "logits max abs diff", worst)
    print(f"{case}: openvino stateful max abs diff {worst:.2e}")


# The left-padded batch of 2 only (batch 1 is its special case, and Transformers' generate() is what
# costs time here: ~20 s for gemma2 on 2 busy cores).
@pytest.mark.parametrize("case", sorted(CASES))
def test_stateful_greedy_equals_transformers(case, ov_export, reference_tokens):
    gen = OvGenerator(ov_export(case, "stateful"))
    assert gen.stateful
    assert gen.generate(PROMPTS["batch2"], NEW_TOKENS) == reference_tokens(case, "batch2")
    record_coverage(case, "openvino", "greedy stateful batch2", "identical")


# OpenVINO GenAI's LLMPipeline on the stateful folder, both attention backends: "PA" converts the
# SDPA ops to paged attention (continuous batching, GenAI's CPU default), "SDPA" runs the model state
# as written. KV_CACHE_PRECISION=f32: the paged KV cache is u8-compressed on CPU by default.
# Not with PA: sliding-window models (the conversion drops hfx's mask, so the window is lost and the
# tokens differ past it) and Gemma 2 (soft-capped attention is not SDPA); see docs/openvino.md.
GENAI_CASES = [("gpt-neox", "PA"), ("gpt-neox", "SDPA"), ("gpt2", "PA"), ("gpt2", "SDPA"), ("llama", "PA"),
               ("llama", "SDPA"), ("qwen3-gqa4", "PA"), ("qwen3-gqa4", "SDPA"), ("mistral-window", "SDPA"),
               ("phi3", "SDPA")]


@pytest.mark.parametrize("case,backend", GENAI_CASES)
def test_genai_llmpipeline_greedy_equals_transformers(case, backend, ov_export, reference_tokens):
    genai = pytest.importorskip("openvino_genai")
    import openvino as ov
    pipe = genai.LLMPipeline(str(ov_export(case, "stateful") / "openvino"), "CPU", ATTENTION_BACKEND=backend,
                             INFERENCE_PRECISION_HINT="f32", KV_CACHE_PRECISION="f32")
    config = genai.GenerationConfig()
    config.max_new_tokens = NEW_TOKENS
    config.do_sample = False
    config.ignore_eos = False
    ids = np.array(PROMPTS["batch1"], np.int64)
    result = pipe.generate(genai.TokenizedInputs(ov.Tensor(ids), ov.Tensor(np.ones_like(ids))), config)
    assert [list(result.tokens[0])] == reference_tokens(case, "batch1")
    record_coverage(case, "openvino-genai", f"greedy {backend} batch1", "identical")


def test_both_formats_from_one_load(tiny_checkpoint, tmp_path):
    out = tmp_path / "both"
    start = time.time()
    run_hfx("export", "--model", tiny_checkpoint("llama"), "--format", "onnx,openvino", "--quiet", out)
    import json
    manifest = json.loads((out / "hfx.json").read_text())
    files = {(c["format"], c["file"]) for c in manifest["components"]}
    assert files == {("onnx", "onnx/model.onnx"), ("openvino", "openvino/openvino_model.xml")}
    assert "openvino/openvino_model.bin" in manifest["files"]
    ov_comp = next(c for c in manifest["components"] if c["format"] == "openvino")
    assert [i["name"] for i in ov_comp["inputs"]] == ["input_ids", "attention_mask", "position_ids", "beam_idx"]
    assert [o["name"] for o in ov_comp["outputs"]] == ["logits"]
    assert manifest["recipe"]["openvino_stateful"] is True
    run_hfx("check", out)
    print(f"onnx + openvino export in {time.time() - start:.2f} s")


def _bytes_read(stdout: str) -> tuple[int, int]:
    """(checkpoint bytes the writers read, bytes in the checkpoint) from `hfx export -v`'s summary line."""
    line = next(x for x in stdout.splitlines() if x.startswith("read ") and "bytes of checkpoint weights" in x)
    words = line.split()
    return int(words[1]), int(words[7])


@pytest.mark.parametrize("case", ["llama", "qwen2-tied", "gpt2"])
def test_two_formats_read_each_weight_once(case, tiny_checkpoint, tmp_path):
    """`--format onnx,openvino` reads the checkpoint's weight bytes once: the OpenVINO writer maps what
    the ONNX writer wrote (ir/written_weights.h). Counted by the writers (WeightRef::source_bytes of
    every weight they take from the checkpoint, the mapped bytes they read), printed by `hfx export`."""
    reads = {}
    for formats in ("onnx", "openvino", "onnx,openvino", "openvino,onnx"):
        proc = run_hfx("export", "-v", "--model", tiny_checkpoint(case), "--format", formats, "--no-verify",
                       tmp_path / formats.replace(",", "-"))
        reads[formats] = _bytes_read(proc.stdout)
    size = reads["onnx"][1]
    print(f"{case}: checkpoint {size} bytes; read " + ", ".join(f"{f}: {r[0]} ({r[0] / size:.3f}x)" for f, r in reads.items()))
    # One format alone reads the model once, a tied embedding too (its lm_head reads the table through
    # a Transpose node: fold-weight-transforms keeps one tensor).
    assert reads["openvino"][0] == reads["onnx"][0] == size
    # Both formats: exactly the bytes of one, whatever the order they are asked in (ONNX is written
    # first; OpenVINO maps its external data and copies the small tensors ONNX stored inline).
    for both in ("onnx,openvino", "openvino,onnx"):
        assert reads[both][0] == reads["onnx"][0], (both, reads)
    # Two graphs (prefill + decode) in two formats: still once (decode copies prefill's written bytes).
    proc = run_hfx("export", "-v", "--model", tiny_checkpoint(case), "--format", "onnx,openvino", "--split-prefill",
                   "--stateless", "--no-verify", tmp_path / "split")
    assert _bytes_read(proc.stdout)[0] == reads["onnx"][0]


READ_ONCE_MODES = {"f32": [], "f16": ["--dtype", "f16"], "bf16": ["--dtype", "bf16"], "int4": ["--quantize", "int4"],
                   "int8-channel-asym": ["--quantize", "int8:channel:asym"],
                   "int4-asym-lm": ["--quantize", "int4:asym", "--quantize-lm-head"]}
READ_ONCE_CASES = [(p, m) for p in ("ort", "portable") for m in READ_ONCE_MODES] + [("ort", "int4-lm-emb")]
READ_ONCE_MODES["int4-lm-emb"] = ["--quantize", "int4", "--quantize-lm-head", "--quantize-embeddings"]  # ort only


@pytest.mark.parametrize("profile,mode_id", READ_ONCE_CASES)
def test_two_formats_read_once_in_every_precision(profile, mode_id, tiny_checkpoint, tmp_path):
    """With either ONNX profile and any precision, `--format onnx,openvino` reads the checkpoint bytes one
    format alone reads, and OpenVINO's weights are byte for byte those of an OpenVINO-only export: the ort
    profile's packed q|k|v gathered by part, f16/bf16 weights transposed back to OpenVINO's [N, K], and
    quantized weights relaid from ONNX's MatMulNBits or DequantizeLinear bytes (ir/written_weights.h).
    The export's built-in check runs the OpenVINO model too."""
    ckpt = tiny_checkpoint("qwen2-tied")  # biases (packed inline), a tied table
    mode = READ_ONCE_MODES[mode_id]
    alone = run_hfx("export", "-v", "--model", ckpt, "--format", "openvino", *mode, "--no-verify", tmp_path / "ov")
    both = run_hfx("export", "-v", "--model", ckpt, "--format", "onnx,openvino", "--onnx-profile", profile, *mode,
                   tmp_path / "both")
    (read_alone, size), read_both = _bytes_read(alone.stdout), _bytes_read(both.stdout)[0]
    print(f"{profile} {' '.join(mode) or 'f32'}: openvino alone {read_alone}, onnx+openvino {read_both} bytes read")
    assert read_both == read_alone
    # One format alone reads the tied table once too: an f16/bf16 lm_head reads the embedding's table
    # through a Transpose. A quantized lm_head beside an unquantized table needs both forms of it.
    if mode_id != "int4-asym-lm":
        assert read_alone == size, (read_alone, size)
    bin_name = Path("openvino") / "openvino_model.bin"
    assert (tmp_path / "both" / bin_name).read_bytes() == (tmp_path / "ov" / bin_name).read_bytes()


@pytest.mark.parametrize("layout", ["stateful", "split", "static"])
def test_verify_runtime_openvino(layout, tiny_checkpoint, tmp_path):
    """`hfx verify --runtime openvino`: the shape matrix (a stateful IR gets its cache by running the
    past tokens first), greedy tokens, the I/O signature, the compiled layers' precision and the
    re-export, on OpenVINO's CPU plugin through the C++ runner."""
    out = tmp_path / layout
    run_hfx("export", "--model", tiny_checkpoint("qwen3"), "--format", "onnx,openvino", "--quiet", *LAYOUTS[layout], out)
    proc = run_hfx("verify", out, "--runtime", "openvino", "--tokens", "16", check=False)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "pass greedy generation (16 tokens, batch 2)" in proc.stdout
    assert "openvino on CPU:" in proc.stdout and " in bf16" not in proc.stdout
    import json
    report = json.loads((out / "verify" / "openvino" / "report.json").read_text())
    assert report["runtime"] == "openvino" and report["passed"]
    numbers = [c for c in report["checks"] if c["name"].startswith("numbers:")]
    assert len(numbers) >= 6 and all(c["measured"]["mismatched"] == 0 for c in numbers)
    assert any(c["measured"]["max_abs"] > 0 for c in numbers)  # really compared, not a copy
    # a past > 0 case ran (the stateful IR through its prefix step)
    assert any("past 0)" not in c["name"] for c in numbers)


def test_verify_runtime_openvino_catches_a_wrong_weight(tiny_checkpoint, tmp_path):
    """A .bin edited after export (checksums re-signed so only the numbers can tell) fails the numbers
    and greedy checks on OpenVINO."""
    import hashlib
    import json
    out = tmp_path / "bad"
    run_hfx("export", "--model", tiny_checkpoint("llama"), "--format", "openvino", "--quiet", out)
    bin_path = out / "openvino" / "openvino_model.bin"
    data = bytearray(bin_path.read_bytes())
    floats = np.frombuffer(bytes(data), np.float32, count=len(data) // 4).copy()
    big = np.argsort(-np.abs(floats))[:64]
    floats[big] *= -3.0
    data[:floats.nbytes] = floats.tobytes()
    bin_path.write_bytes(bytes(data))
    manifest = json.loads((out / "hfx.json").read_text())
    manifest["files"]["openvino/openvino_model.bin"] = hashlib.sha256(bytes(data)).hexdigest()
    (out / "hfx.json").write_text(json.dumps(manifest, indent=2))
    proc = run_hfx("verify", out, "--runtime", "openvino", "--no-reexport", check=False)
    assert proc.returncode == 1
    assert "FAIL numbers:" in proc.stdout


def test_stateful_needs_growing_cache(tiny_checkpoint, tmp_path):
    proc = run_hfx("export", "--model", tiny_checkpoint("llama"), "--format", "openvino", "--split-prefill", "--quiet",
                   tmp_path / "x", check=False)
    assert proc.returncode == 1
    assert "--stateless" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


# Encoders (BERT family, test_encoders.py's checkpoints and batches): last_hidden_state (and logits)
# within 1e-4 of Transformers eager, pad rows included.
@pytest.fixture(scope="module")
def encoder_ov_export(tmp_path_factory):
    import test_encoders as E
    done = {}
    base = tmp_path_factory.mktemp("ov-encoders")

    def get(case):
        if case not in done:
            ckpt = E.make_checkpoint(case, base / "ckpt" / case, seed=sorted(E.CASES).index(case))
            out = base / "out" / case
            run_hfx("export", "--model", ckpt, "--format", "openvino", "--quiet", out)
            done[case] = (ckpt, out)
        return done[case]

    return get


def _encoder_cases():
    import test_encoders as E
    return sorted(E.CASES)


@pytest.mark.parametrize("padding", ["right", "left"])
@pytest.mark.parametrize("case", _encoder_cases())
def test_encoder_ir_matches_transformers(case, padding, encoder_ov_export):
    import json
    import test_encoders as E

    model_type, head, _ = E.CASES[case]
    ckpt, out = encoder_ov_export(case)
    config = json.loads((ckpt / "config.json").read_text())
    ids, mask, types = E.make_batch(config, padding)
    compiled = compile_model(out / "openvino" / "openvino_model.xml")
    in_names = [i.get_any_name() for i in compiled.inputs]
    assert in_names == ["input_ids", "attention_mask"] + (["token_type_ids"] if model_type == "bert" else [])
    feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    result = compiled.create_infer_request().infer({n: feeds[n] for n in in_names})
    got = {o.get_any_name(): result[o] for o in compiled.outputs}

    expected = E.transformers_outputs(ckpt, head, ids, mask, types if "token_type_ids" in in_names else None)
    assert sorted(got) == sorted(expected)
    diffs = {k: E.compare(f"{case}/{padding}/{k}", got[k], v) for k, v in expected.items()}
    record_coverage(case, "openvino", f"encoder {padding} max abs diff", max(diffs.values()))
    print(f"{case} [{padding} padding]: openvino " + ", ".join(f"{k} max abs {d:.2e}" for k, d in diffs.items()))


# hfx's own decode loop (runtime/generate.cc) on OpenVINO through the C++ API (backends/openvino/ov_runner.cc):
# every layout the openvino backend writes, the left-padded batch of 2, 64 tokens.
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("case", ["llama", "qwen3-gqa4"])
def test_hfx_generate_openvino_equals_transformers(case, layout, ov_export, reference_tokens):
    args = [a for p in PROMPTS["batch2"] for a in ("--prompt-ids", ",".join(map(str, p)))]
    proc = run_hfx("generate", ov_export(case, layout), "--runtime", "openvino", *args, "-n", NEW_TOKENS, "--print-ids")
    rows = [[int(x) for x in line.split(",")] for line in proc.stdout.strip().splitlines()]
    assert rows == reference_tokens(case, "batch2")
    record_coverage(case, "openvino-cpp", f"hfx generate {layout} batch2", "identical")


# Text in, text out through OpenVINO GenAI: a tiny llama whose vocabulary is make_tokenizers.py's GPT-2
# style tokenizer (700 tokens), the tokenizer IRs converted from the export's tokenizer.json with
# openvino-tokenizers (into a copy: hfx check covers what hfx wrote). 32 greedy tokens, EOS ignored on
# both sides, the decoded text identical to Transformers + tokenizers.
def test_genai_text_in_text_out(tmp_path):
    genai = pytest.importorskip("openvino_genai")
    ovt = pytest.importorskip("openvino_tokenizers")
    import shutil
    import subprocess
    import openvino as ov
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast
    from tiny_models import BASE

    toks = tmp_path / "toks"
    subprocess.run([sys.executable, str(ROOT / "tests" / "oracle" / "make_tokenizers.py"), str(toks)], check=True,
                   capture_output=True)
    hf_tok = PreTrainedTokenizerFast(tokenizer_file=str(toks / "gpt2" / "tokenizer.json"))
    ckpt = tmp_path / "ckpt"
    config = AutoConfig.for_model("llama", **dict(BASE, vocab_size=len(hf_tok)))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            p.copy_(torch.randn(p.shape) * (0.25 if p.dim() > 1 else 0.2) + (1.0 if "norm" in name else 0.0))
    model.save_pretrained(ckpt, safe_serialization=True)
    shutil.copy(toks / "gpt2" / "tokenizer.json", ckpt / "tokenizer.json")

    out = tmp_path / "out"
    run_hfx("export", "--model", ckpt, "--format", "openvino", "--quiet", out)
    assert (out / "openvino" / "tokenizer.json").exists()
    folder = tmp_path / "genai"
    shutil.copytree(out / "openvino", folder)
    tokenizer, detokenizer = ovt.convert_tokenizer(hf_tok, with_detokenizer=True)
    ov.save_model(tokenizer, folder / "openvino_tokenizer.xml")
    ov.save_model(detokenizer, folder / "openvino_detokenizer.xml")

    prompt = "The quick brown fox"
    ids = hf_tok(prompt, return_tensors="pt").input_ids
    model.eval()
    model.generation_config.eos_token_id = None
    with torch.no_grad():
        ref_ids = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=32, do_sample=False,
                                 min_new_tokens=32)[0, ids.shape[1]:]
    expected = hf_tok.decode(ref_ids, skip_special_tokens=True)

    pipe = genai.LLMPipeline(str(folder), "CPU", INFERENCE_PRECISION_HINT="f32", KV_CACHE_PRECISION="f32")
    cfg = genai.GenerationConfig()
    cfg.max_new_tokens = 32
    cfg.do_sample = False
    cfg.ignore_eos = True
    text = pipe.generate(prompt, cfg, apply_chat_template=False)
    assert str(text) == expected
    print(f"genai text: {str(text)!r}")
