"""Whisper against Transformers eager, fp32, on tiny random checkpoints (tiny_models.SEQ2SEQ_CASES):
the conv stem over log-mel features, pre-norm layers, key projections without bias, no source mask,
tied proj_out; a decoder deeper than its encoder with other head counts, relu, another start token.

The export is Optimum's speech layout (encoder_model.onnx reads input_features; the decoder steps read
no encoder_attention_mask). Through ONNX Runtime, for a batch of 2 random feature rows: the encoder
output, a 3-token first step (logits, self and cross presents) and 3 cached steps of
decoder_with_past, within 1e-4 of Transformers with no mismatching element; 64 greedy tokens
identical to Transformers' generate(). `hfx verify --oracle transformers` on the reference executor,
ONNX Runtime, OpenVINO and torch (pt2), which runs every graph over its shape matrix and 64 greedy
tokens against Transformers.

From audio: speech made offline by espeak-ng, `hfx generate --audio` (libsndfile, soxr, the log-mel
features in C++) gives the tokens Whisper's own generate() gives on WhisperFeatureExtractor's
features, with a multilingual generation_config.json's language, task, <|notimestamps|> and
suppressed tokens; malformed input is refused in one line.
"""
from __future__ import annotations

import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import ROOT, export_once, hfx_has_openvino, record_coverage, run_hfx
from test_decoder_parity import assert_close
from tiny_models import load_reference

sys.path.insert(0, str(ROOT / "python"))
from hfx_ort_seq2seq import generate, open_sessions, run, verify_speech_features  # noqa: E402

CASES = ["whisper", "whisper-shapes"]
FIRST_STEP_LEN, CACHED_STEPS, NEW_TOKENS = 3, 3, 64


@pytest.fixture(scope="session")
def whisper_export(tiny_checkpoint, tmp_path_factory):
    formats = "onnx,openvino,pt2" if hfx_has_openvino() else "onnx,pt2"
    return export_once(tmp_path_factory.mktemp("whisper"), lambda case, variant: (
        "--model", tiny_checkpoint(case), "--format", formats if case in CASES else "onnx,openvino", "--quiet"))


def features(config, rows: int = 2, seed: int = 5) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((rows, config.num_mel_bins, 2 * config.max_source_positions)).astype(np.float32)


@pytest.mark.parametrize("case", CASES)
def test_io_contract(case, tiny_checkpoint, whisper_export):
    """ORTModelForSpeechSeq2Seq's names: input_features -> last_hidden_state (lengths fixed, as
    Whisper's encoder takes one length only), decoder steps without encoder_attention_mask."""
    sessions = open_sessions(whisper_export(case))
    model = load_reference(tiny_checkpoint(case))
    c = model.config
    enc = {i.name: i.shape for i in sessions["encoder"].get_inputs()}
    assert list(enc) == ["input_features"]
    assert enc["input_features"][1:] == [c.num_mel_bins, 2 * c.max_source_positions]
    out = {o.name: o.shape for o in sessions["encoder"].get_outputs()}
    assert out["last_hidden_state"][1:] == [c.max_source_positions, c.d_model]
    for role in ("decoder", "decoder_with_past"):
        names = [i.name for i in sessions[role].get_inputs()]
        assert "encoder_attention_mask" not in names and names[0] == "input_ids", (role, names)


@pytest.mark.parametrize("case", CASES)
def test_onnxruntime_matches_transformers(case, tiny_checkpoint, whisper_export):
    from transformers import DynamicCache, EncoderDecoderCache
    model = load_reference(tiny_checkpoint(case))
    sessions = open_sessions(whisper_export(case))
    x = features(model.config)
    worst = 0.0
    with torch.no_grad():
        ref_hidden = model.get_encoder()(input_features=torch.from_numpy(x)).last_hidden_state
    hidden = run(sessions["encoder"], {"input_features": x})["last_hidden_state"]
    worst = max(worst, assert_close("encoder last_hidden_state", hidden, ref_hidden.numpy()))
    rng = np.random.default_rng(3)
    ids = np.concatenate([np.full((2, 1), model.config.decoder_start_token_id),
                          rng.integers(4, model.config.vocab_size, (2, FIRST_STEP_LEN - 1))], axis=1).astype(np.int64)
    cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
    state = {}
    for step in range(1 + CACHED_STEPS):
        with torch.no_grad():
            ref = model(encoder_outputs=(ref_hidden,), decoder_input_ids=torch.from_numpy(ids), past_key_values=cache,
                        use_cache=True)
        cache = ref.past_key_values
        if step == 0:
            got = run(sessions["decoder"], {"input_ids": ids, "encoder_hidden_states": hidden})
        else:
            feed = {"input_ids": ids}
            feed.update({i.name: state["present." + i.name[len("past_key_values."):]]
                         for i in sessions["decoder_with_past"].get_inputs() if i.name.startswith("past_key_values.")})
            got = run(sessions["decoder_with_past"], feed)
        worst = max(worst, assert_close(f"step {step} logits", got["logits"], ref.logits.numpy()))
        for layer, entry in enumerate(cache.self_attention_cache.layers):
            worst = max(worst, assert_close(f"step {step} present.{layer}.decoder.key", got[f"present.{layer}.decoder.key"],
                                            entry.keys.numpy()))
            worst = max(worst, assert_close(f"step {step} present.{layer}.decoder.value",
                                            got[f"present.{layer}.decoder.value"], entry.values.numpy()))
            if step == 0:
                cross = cache.cross_attention_cache.layers[layer]
                worst = max(worst, assert_close(f"present.{layer}.encoder.key", got[f"present.{layer}.encoder.key"],
                                                cross.keys.numpy()))
        state.update({k: v for k, v in got.items() if k.startswith("present.")})
        ids = ref.logits[:, -1:].argmax(-1).numpy().astype(np.int64)
    print(f"\n{case}: encoder + first step + {CACHED_STEPS} cached steps, max abs diff {worst:.2e}")
    record_coverage(case, "onnxruntime", "encoder+steps max abs", f"{worst:.2e}")


@pytest.mark.parametrize("case", CASES)
def test_greedy_tokens_match_transformers(case, tiny_checkpoint, whisper_export):
    """64 greedy tokens through ONNX Runtime equal Transformers' generate() (GenerationMixin's, as
    verify's oracle runs it) on the features hfx's checks feed a speech model."""
    import transformers
    model = load_reference(tiny_checkpoint(case))
    c = model.config
    prompts = [[5, 9, 14], [7, 3]]
    x = verify_speech_features(prompts, c.num_mel_bins, 2 * c.max_source_positions)
    config = transformers.GenerationConfig(max_new_tokens=NEW_TOKENS, do_sample=False, num_beams=1,
                                           eos_token_id=c.eos_token_id, pad_token_id=c.pad_token_id,
                                           decoder_start_token_id=c.decoder_start_token_id)
    with torch.no_grad():
        want = transformers.GenerationMixin.generate(model, input_features=torch.from_numpy(x),
                                                     generation_config=config).numpy()
    got = generate(whisper_export(case), {"input_features": x}, NEW_TOKENS, c.decoder_start_token_id, c.eos_token_id,
                   c.pad_token_id)
    assert got.tolist() == want.tolist()
    assert len(set(want[:, 1:].ravel().tolist())) > 4, "degenerate tokens: the check would be weak"
    record_coverage(case, "onnxruntime", f"greedy {NEW_TOKENS} batch2", "identical")


def runtimes():
    out = ["reference", "onnxruntime", "torch"]
    return out + (["openvino"] if hfx_has_openvino() else [])


@pytest.mark.parametrize("runtime", runtimes())
@pytest.mark.parametrize("case", CASES)
def test_hfx_verify_against_transformers(case, runtime, whisper_export):
    proc = run_hfx("verify", whisper_export(case), "--runtime", runtime, "--oracle", "transformers", "--no-reexport",
                   check=False)
    failed = [line for line in proc.stdout.splitlines() if line.startswith("FAIL")]
    assert proc.returncode == 0, f"hfx verify --runtime {runtime} exited {proc.returncode}:\n" + "\n".join(
        failed + proc.stderr.strip().splitlines()[-3:])
    assert "greedy generation (64 tokens" in proc.stdout
    record_coverage(case, runtime, "hfx verify --oracle transformers", "pass")


@pytest.fixture(scope="session")
def speech_wav(tmp_path_factory):
    if not shutil.which("espeak-ng"):
        pytest.fail("espeak-ng is not installed (scripts/setup.sh installs it)")
    path = tmp_path_factory.mktemp("speech") / "fox.wav"
    subprocess.run(["espeak-ng", "-w", str(path), "the quick brown fox jumps over the lazy dog"], check=True)
    return path


def transformers_transcription(folder, wav, new_tokens, **kwargs):
    from transformers import WhisperFeatureExtractor
    from transformers.audio_utils import load_audio
    model = load_reference(folder)
    fe = WhisperFeatureExtractor.from_pretrained(folder)
    x = fe(load_audio(str(wav), 16000), sampling_rate=16000, return_tensors="pt").input_features
    with torch.no_grad():
        return model.generate(x, max_new_tokens=new_tokens, **kwargs)[0].tolist()


@pytest.mark.parametrize("case,flags,kwargs", [
    ("whisper-audio", [], {}),
    ("whisper-multilingual", ["--language", "en"], {"language": "en"}),
    ("whisper-multilingual", ["--language", "de", "--task", "translate"], {"language": "de", "task": "translate"}),
], ids=["plain", "multilingual-en", "multilingual-de-translate"])
@pytest.mark.parametrize("runtime", ["reference", "openvino"])
def test_generate_from_audio(case, flags, kwargs, runtime, tiny_checkpoint, whisper_export, speech_wav):
    """`hfx generate --audio` on espeak-ng speech gives Whisper's own generate() tokens (its prompt of
    language, task and <|notimestamps|>, its suppress_tokens and begin_suppress_tokens)."""
    if runtime == "openvino" and not hfx_has_openvino():
        pytest.skip("hfx built without OpenVINO")
    want = transformers_transcription(tiny_checkpoint(case), speech_wav, 24, **kwargs)
    proc = run_hfx("generate", whisper_export(case), "--audio", speech_wav, "--print-ids", "-n", "24", "--runtime",
                   runtime, *flags)
    got = [int(t) for t in proc.stdout.strip().split(",")]
    assert got == want
    record_coverage(case, runtime, f"generate --audio {' '.join(flags)}", "identical")


def test_audio_refusals(tiny_checkpoint, whisper_export, speech_wav, tmp_path):
    speech = whisper_export("whisper-multilingual")
    not_audio = tmp_path / "notes.wav"
    not_audio.write_text("this is text, not sound\n")
    cases = [
        (["generate", speech, "--audio", not_audio, "--language", "en"], str(not_audio)),
        (["generate", speech, "--audio", speech_wav], "--language"),
        (["generate", speech, "--audio", speech_wav, "--language", "xx"], "lang_to_id"),
        (["generate", speech, "--audio", speech_wav, "--language", "en", "--task", "summarize"], "task_to_id"),
        (["generate", speech, "--prompt-ids", "1,2,3"], "--audio"),
        (["generate", speech, "--audio", speech_wav, "--language", "en", "-n", "200"], "total_decoder_sequence_length"),
    ]
    for args, needle in cases:
        proc = run_hfx(*args, check=False)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode != 0 and len(lines) == 1 and needle in lines[0], (args, proc.stderr)
