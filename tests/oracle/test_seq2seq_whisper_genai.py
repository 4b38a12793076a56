"""onnxruntime-genai's Whisper layout (`hfx export --onnx-layout genai`) against Transformers eager,
fp32, on tiny random checkpoints at the input genai feeds (80 mel bins x 3000 frames):
`whisper-audio` and `whisper-audio-shapes` (a decoder deeper than its encoder, 2 decoder heads
against 8 in the encoder, relu, another start token).

The layout (tasks/seq2seq.cc, genai 0.18's src/models/whisper.cpp): encoder.onnx reads
audio_features and returns hidden_states and the cross state present_key|value_cross_{i};
decoder.onnx reads int32 input_ids, past_key|value_self_{i} (empty on the first step) and
past_key|value_cross_{i}, and returns logits and present_key|value_self_{i}; genai_config.json.

- Through ONNX Runtime, batch 2: the encoder's hidden_states and every layer's cross keys/values, a
  3-token first step from an empty past and 3 cached steps (logits and self presents), within 1e-4 of
  Transformers with no mismatching element.
- onnxruntime_genai 0.18 loads OUT/onnx unmodified and generates exactly Transformers' greedy
  generate() tokens, 64 new tokens for a batch of 2. genai's own audio front end (its processor and
  audio_processor_config.json) is not used: the features are fed to it directly
  (`generator.set_inputs` with `audio_features`), the same array Transformers gets.
- `hfx verify` (shape matrix and 64 greedy tokens) on the reference executor, and on ONNX Runtime
  against Transformers, and `hfx check`, pass on the layout; `hfx generate --audio` (espeak-ng
  speech) gives Whisper's generate() tokens.
- A text encoder-decoder, a decoder-only model, a Whisper whose encoder does not read 3000 frames,
  and the layout beside another format are refused in one line, nothing written.
"""
from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import torch

from conftest import ROOT, export_once, record_coverage, run_hfx
from test_decoder_parity import assert_close
from test_seq2seq_whisper import speech_wav, transformers_transcription  # noqa: F401 (a fixture)
from tiny_models import load_reference

sys.path.insert(0, str(ROOT / "python"))
from hfx_ort_seq2seq import open_sessions, run, verify_speech_features  # noqa: E402

CASES = ["whisper-audio", "whisper-audio-shapes"]
FIRST_STEP_LEN, CACHED_STEPS, NEW_TOKENS = 3, 3, 64


@pytest.fixture(scope="session")
def genai_export(tiny_checkpoint, tmp_path_factory):
    # The export's own check runs on the reference executor; the tests below run ONNX Runtime and genai.
    return export_once(tmp_path_factory.mktemp("whisper-genai"), lambda case, variant: (
        "--model", tiny_checkpoint(case), "--onnx-layout", "genai", "--verify-runtime", "reference", "--quiet"))


def features(config, rows: int = 2, seed: int = 5) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((rows, config.num_mel_bins, 2 * config.max_source_positions)).astype(np.float32)


@pytest.mark.parametrize("case", CASES)
def test_files_and_genai_config(case, tiny_checkpoint, genai_export):
    """encoder.onnx + decoder.onnx + genai_config.json in OUT/onnx, genai's names and geometry."""
    out = genai_export(case) / "onnx"
    c = load_reference(tiny_checkpoint(case)).config
    assert {p.name for p in out.glob("*.onnx")} == {"encoder.onnx", "decoder.onnx"}
    cfg = json.loads((out / "genai_config.json").read_text())
    m = cfg["model"]
    assert m["type"] == "whisper" and m["context_length"] == c.max_target_positions
    assert (m["bos_token_id"], m["eos_token_id"], m["pad_token_id"], m["decoder_start_token_id"], m["vocab_size"]) == (
        c.bos_token_id, c.eos_token_id, c.pad_token_id, c.decoder_start_token_id, c.vocab_size)
    d = m["decoder"]
    assert (d["filename"], d["num_hidden_layers"], d["num_attention_heads"], d["head_size"]) == (
        "decoder.onnx", c.decoder_layers, c.decoder_attention_heads, c.d_model // c.decoder_attention_heads)
    assert d["inputs"]["cross_past_key_names"] == "past_key_cross_%d"
    assert m["encoder"]["outputs"]["cross_present_key_names"] == "present_key_cross_%d"
    assert cfg["search"]["past_present_share_buffer"] is False
    # genai's processor's front end: Whisper's, as preprocessor_config.json (WhisperFeatureExtractor) says
    fe = json.loads((out / "preprocessor_config.json").read_text())
    ops = {o["operation"]["type"]: o["operation"].get("attrs") for o in
           json.loads((out / "audio_processor_config.json").read_text())["feature_extraction"]["sequence"]}
    mel = ops["LogMelSpectrum"]
    assert (mel["n_mel"], mel["n_fft"], mel["hop_length"], mel["chunk_size"]) == (
        fe["feature_size"], fe["n_fft"], fe["hop_length"], fe["chunk_length"])
    sessions = open_sessions(genai_export(case))
    ids = {i.name: i.type for i in sessions["decoder_with_past"].get_inputs()}
    assert ids["input_ids"] == "tensor(int32)"
    assert [i.name for i in sessions["encoder"].get_inputs()] == ["audio_features"]


@pytest.mark.parametrize("case", CASES)
def test_onnxruntime_matches_transformers(case, tiny_checkpoint, genai_export):
    from transformers import DynamicCache, EncoderDecoderCache
    model = load_reference(tiny_checkpoint(case))
    c = model.config
    sessions = open_sessions(genai_export(case))
    x = features(c)
    worst = 0.0
    with torch.no_grad():
        ref_hidden = model.get_encoder()(input_features=torch.from_numpy(x)).last_hidden_state
    encoded = run(sessions["encoder"], {"audio_features": x})
    worst = max(worst, assert_close("encoder hidden_states", encoded["hidden_states"], ref_hidden.numpy()))
    rng = np.random.default_rng(3)
    ids = np.concatenate([np.full((2, 1), c.decoder_start_token_id),
                          rng.integers(4, c.vocab_size, (2, FIRST_STEP_LEN - 1))], axis=1).astype(np.int64)
    heads, head_dim = c.decoder_attention_heads, c.d_model // c.decoder_attention_heads
    state = {k: v for k, v in encoded.items() if k.startswith("present_")}
    for layer in range(c.decoder_layers):
        for kind in ("key", "value"):
            state[f"present_{kind}_self_{layer}"] = np.zeros((2, heads, 0, head_dim), np.float32)
    cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
    decoder = sessions["decoder_with_past"]
    for step in range(1 + CACHED_STEPS):
        with torch.no_grad():
            ref = model(encoder_outputs=(ref_hidden,), decoder_input_ids=torch.from_numpy(ids), past_key_values=cache,
                        use_cache=True)
        cache = ref.past_key_values
        feed = {"input_ids": ids.astype(np.int32)}
        feed.update({i.name: state["present_" + i.name[len("past_"):]] for i in decoder.get_inputs()
                     if i.name.startswith("past_")})
        got = run(decoder, feed)
        worst = max(worst, assert_close(f"step {step} logits", got["logits"], ref.logits.numpy()))
        for layer, entry in enumerate(cache.self_attention_cache.layers):
            worst = max(worst, assert_close(f"step {step} present_key_self_{layer}", got[f"present_key_self_{layer}"],
                                            entry.keys.numpy()))
            worst = max(worst, assert_close(f"step {step} present_value_self_{layer}",
                                            got[f"present_value_self_{layer}"], entry.values.numpy()))
            if step == 0:  # the cross state Transformers computes on its first step, which the encoder returned
                cross = cache.cross_attention_cache.layers[layer]
                worst = max(worst, assert_close(f"present_key_cross_{layer}", encoded[f"present_key_cross_{layer}"],
                                                cross.keys.numpy()))
                worst = max(worst, assert_close(f"present_value_cross_{layer}", encoded[f"present_value_cross_{layer}"],
                                                cross.values.numpy()))
        state.update({k: v for k, v in got.items() if k.startswith("present_")})
        ids = ref.logits[:, -1:].argmax(-1).numpy().astype(np.int64)
    print(f"\n{case}: encoder + cross state + first step + {CACHED_STEPS} cached steps, max abs diff {worst:.2e}")
    record_coverage(case, "onnxruntime (genai layout)", "encoder+steps max abs", f"{worst:.2e}")


def genai_greedy(genai, features: np.ndarray, start: int, new_tokens: int) -> list[list[int]]:
    """onnxruntime-genai's greedy search from features, every row starting from `start`: the rows'
    sequences, the start token included (genai stops a row at EOS)."""
    import onnxruntime_genai as og
    rows = features.shape[0]
    params = og.GeneratorParams(genai)
    # max_length counts the decoder prompt (the start token)
    params.set_search_options(do_sample=False, num_beams=1, max_length=1 + new_tokens, batch_size=rows)
    generator = og.Generator(genai, params)
    inputs = og.NamedTensors()
    inputs["audio_features"] = features
    inputs["input_ids"] = np.full((rows, 1), start, np.int32)
    generator.set_inputs(inputs)
    while not generator.is_done():
        generator.generate_next_token()
    return [[int(t) for t in generator.get_sequence(i)] for i in range(rows)]


@pytest.mark.parametrize("case", CASES)
def test_onnxruntime_genai_generates_transformers_tokens(case, tiny_checkpoint, genai_export):
    """onnxruntime_genai loads OUT/onnx as written and its greedy search gives generate()'s tokens."""
    import onnxruntime_genai as og
    import transformers
    model = load_reference(tiny_checkpoint(case))
    c = model.config
    # The features hfx's checks feed a speech model: these cases' tokens vary over 64 steps on them.
    x = verify_speech_features([[5, 9, 14], [7, 3]], c.num_mel_bins, 2 * c.max_source_positions)
    config = transformers.GenerationConfig(max_new_tokens=NEW_TOKENS, do_sample=False, num_beams=1,
                                           eos_token_id=c.eos_token_id, pad_token_id=c.pad_token_id,
                                           decoder_start_token_id=c.decoder_start_token_id)
    with torch.no_grad():
        want = transformers.GenerationMixin.generate(model, input_features=torch.from_numpy(x),
                                                     generation_config=config).numpy()
    genai = og.Model(str(genai_export(case) / "onnx"))
    got = genai_greedy(genai, x, c.decoder_start_token_id, NEW_TOKENS)
    # Transformers pads a row that met EOS while the other runs on; genai stops the row there.
    for row, ref in zip(got, want.tolist()):
        assert row == ref[:len(row)] and all(t == c.pad_token_id for t in ref[len(row):]), (row, ref)
    assert len(got[0]) == 1 + NEW_TOKENS or got[0][-1] == c.eos_token_id
    assert len(set(want[:, 1:].ravel().tolist())) > 4, "degenerate tokens: the check would be weak"
    record_coverage(case, "onnxruntime-genai", f"greedy {NEW_TOKENS} batch2", "identical")


def test_genai_audio_front_end_and_transcription(tiny_checkpoint, genai_export, speech_wav, tmp_path):
    """genai's own audio path: its multimodal processor runs audio_processor_config.json (onnxruntime-
    extensions' AudioDecoder, STFTNorm, LogMelSpectrum) on a 16 kHz WAV into features within 1e-4 of
    WhisperFeatureExtractor's, and the generator on them gives Whisper's generate() tokens. The processor
    needs a tokenizer beside the model (the tiny case has none: make_tokenizers.py's GPT-2 style one);
    its prompt ids are not used (this vocabulary has no <|startoftranscript|>: the start token is fed).
    The speech is resampled to 16 kHz first: AudioDecoder's own resampler is not soxr's (espeak-ng's
    22.05 kHz file gives features up to 1.0 apart), so a file at another rate is Transformers' input only
    after the same resampling."""
    import shutil
    import subprocess
    import onnxruntime_genai as og
    import soundfile
    from transformers import WhisperFeatureExtractor
    from transformers.audio_utils import load_audio
    folder = tiny_checkpoint("whisper-audio")
    samples = load_audio(str(speech_wav), 16000)
    wav16 = tmp_path / "speech16.wav"
    soundfile.write(wav16, samples, 16000, subtype="FLOAT")
    model_dir = tmp_path / "genai"
    shutil.copytree(genai_export("whisper-audio") / "onnx", model_dir)
    toks = tmp_path / "toks"
    subprocess.run([sys.executable, str(ROOT / "tests" / "oracle" / "make_tokenizers.py"), str(toks)], check=True,
                   capture_output=True)
    shutil.copy(toks / "gpt2" / "tokenizer.json", model_dir / "tokenizer.json")
    (model_dir / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "GPT2Tokenizer"}))

    genai = og.Model(str(model_dir))
    inputs = genai.create_multimodal_processor()("transcribe", audios=og.Audios.open(str(wav16)))
    features = inputs["audio_features"].as_numpy()
    want_features = WhisperFeatureExtractor.from_pretrained(folder)(samples, sampling_rate=16000,
                                                                    return_tensors="np").input_features
    assert_close("genai's log-mel features", features, want_features)

    c = load_reference(folder).config
    got = genai_greedy(genai, features, c.decoder_start_token_id, 24)[0][1:]
    want = transformers_transcription(folder, wav16, 24)
    # genai stops a row at EOS; Transformers pads it to the length asked
    assert got == want[:len(got)] and all(t == c.pad_token_id for t in want[len(got):]), (got, want)
    assert len(set(got)) > 4, "degenerate tokens: the check would be weak"
    record_coverage("whisper-audio", "onnxruntime-genai", "its audio processor + greedy 24", "identical")


@pytest.mark.parametrize("runtime,oracle", [("reference", "reference"), ("onnxruntime", "transformers")])
def test_hfx_verify_and_check(runtime, oracle, genai_export):
    """The shape matrix (the decoder's first step from an empty past included) and 64 greedy tokens:
    the reference executor against hfx's reference, ONNX Runtime against Transformers eager."""
    out = genai_export("whisper-audio")
    proc = run_hfx("verify", out, "--runtime", runtime, "--oracle", oracle, "--no-reexport", check=False)
    failed = [line for line in proc.stdout.splitlines() if line.startswith("FAIL")]
    assert proc.returncode == 0, f"hfx verify --runtime {runtime} exited {proc.returncode}:\n" + "\n".join(
        failed + proc.stderr.strip().splitlines()[-3:])
    assert "greedy generation (64 tokens" in proc.stdout
    assert "numbers: decoder_with_past / prompt, batch max" in proc.stdout  # past 0: genai's first step
    assert "ok (" in run_hfx("check", out, "--allow-extra").stdout
    record_coverage("whisper-audio", runtime, f"hfx verify --oracle {oracle} (genai layout)", "pass")


def test_generate_from_audio(tiny_checkpoint, genai_export, speech_wav):
    """`hfx generate --audio` over the layout (its C++ front end, the encoder's cross state, decoder.onnx
    from an empty past) gives Whisper's own generate() tokens on WhisperFeatureExtractor's features."""
    want = transformers_transcription(tiny_checkpoint("whisper-audio"), speech_wav, 24)
    proc = run_hfx("generate", genai_export("whisper-audio"), "--audio", speech_wav, "--print-ids", "-n", "24")
    assert [int(t) for t in proc.stdout.strip().split(",")] == want


@pytest.mark.parametrize("case,args,needle", [
    ("t5", [], "t5 is a text encoder-decoder"),
    ("llama", [], "llama is not an encoder-decoder"),
    ("whisper", [], "3000 frames"),
    ("whisper-audio", ["--format", "onnx,openvino"], "for it alone"),
])
def test_refusals(case, args, needle, tiny_checkpoint, tmp_path):
    out = tmp_path / "out"
    proc = run_hfx("export", "--model", tiny_checkpoint(case), "--onnx-layout", "genai", *args, out, check=False)
    assert proc.returncode == 1, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if not line.startswith(("hfx: note:", "exporting "))]
    assert len(errors) == 1 and needle in errors[0] and "--onnx-layout genai" in errors[0], proc.stderr
    assert not out.exists()
