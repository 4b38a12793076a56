"""Whisper's OpenVINO export as optimum-intel writes it, run by OpenVINO GenAI's WhisperPipeline.

The default OpenVINO layout of an encoder-decoder is stateful: `openvino_encoder_model.xml` and one
`openvino_decoder_model.xml` (the merged decoder) whose self-attention cache and cross-attention
keys/values are variables (the cross ones initialised from `encoder_hidden_states` on the first call
after a reset and kept), with a `beam_idx` input, no `use_cache_branch` and no past/present ports.
`--stateless` keeps Optimum's four graphs.

- The files and the stateful decoder's ports and variables.
- OpenVINO GenAI's WhisperPipeline loads the export folder unmodified (only the tokenizer IRs a
  pipeline needs are added beside it: the tiny checkpoint has no tokenizer, make_tokenizers.py's
  GPT-2 style one converted by openvino-tokenizers) and, from espeak-ng speech through its own C++
  feature extractor, greedy-generates exactly the tokens Whisper's generate() gives on
  WhisperFeatureExtractor's features (language, task, <|notimestamps|>, suppressed tokens).
- `hfx verify --oracle transformers` (shape matrix and 64 greedy tokens) on the stateless layout, and
  `hfx generate --audio` on it; the stateful layout's are in test_seq2seq_whisper.py and
  test_seq2seq_t5.py, which export the default.
"""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, hfx_has_openvino, record_coverage, run_hfx
from test_seq2seq_whisper import speech_wav, transformers_transcription  # noqa: F401 (a fixture)

CASE = "whisper-multilingual"
NEW_TOKENS = 24


@pytest.fixture(scope="module")
def exports(tiny_checkpoint, tmp_path_factory):
    if not hfx_has_openvino():
        pytest.skip("hfx built without OpenVINO")
    root = tmp_path_factory.mktemp("ov-seq2seq")
    made = {}

    def export(layout: str):
        if layout not in made:
            out = root / layout
            flags = ["--stateless"] if layout == "stateless" else []
            run_hfx("export", "--model", tiny_checkpoint(CASE), "--format", "openvino", "--quiet", *flags, out)
            made[layout] = out
        return made[layout]
    return export


def test_stateful_files_and_ports(exports):
    import openvino as ov
    folder = exports("stateful") / "openvino"
    xml = sorted(p.name for p in folder.glob("*.xml"))
    assert xml == ["openvino_decoder_model.xml", "openvino_encoder_model.xml"]
    decoder = ov.Core().read_model(folder / "openvino_decoder_model.xml")
    inputs = [i.get_any_name() for i in decoder.inputs]
    assert inputs == ["input_ids", "encoder_hidden_states", "beam_idx"]
    assert [o.get_any_name() for o in decoder.outputs] == ["logits"]
    layers = 2
    variables = {v.get_info().variable_id for v in decoder.get_variables()}
    assert len(variables) == 4 * layers, variables
    for i in range(layers):  # optimum-intel's variable ids: the past input's name, then the present output's
        for part in ("decoder.key", "decoder.value", "encoder.key", "encoder.value"):
            assert f"past_key_values.{i}.{part}present.{i}.{part}" in variables
    stateless = sorted(p.name for p in (exports("stateless") / "openvino").glob("*.xml"))
    assert stateless == ["openvino_decoder_model.xml", "openvino_decoder_model_merged.xml",
                         "openvino_decoder_with_past_model.xml", "openvino_encoder_model.xml"], stateless


def whisper_pipeline_tokens(folder, wav, tmp_path, **kwargs) -> list[int]:
    genai = pytest.importorskip("openvino_genai")
    ovt = pytest.importorskip("openvino_tokenizers")
    import openvino as ov
    from transformers import PreTrainedTokenizerFast
    from transformers.audio_utils import load_audio

    toks = tmp_path / "toks"
    subprocess.run([sys.executable, str(ROOT / "tests" / "oracle" / "make_tokenizers.py"), str(toks)], check=True,
                   capture_output=True)
    pipeline_dir = tmp_path / "pipeline"
    shutil.copytree(folder, pipeline_dir)
    tokenizer, detokenizer = ovt.convert_tokenizer(
        PreTrainedTokenizerFast(tokenizer_file=str(toks / "gpt2" / "tokenizer.json")), with_detokenizer=True)
    ov.save_model(tokenizer, pipeline_dir / "openvino_tokenizer.xml")
    ov.save_model(detokenizer, pipeline_dir / "openvino_detokenizer.xml")

    class Collect(genai.StreamerBase):
        def __init__(self):
            super().__init__()
            self.ids = []

        def write(self, token):
            self.ids.extend(token if isinstance(token, list) else [token])
            return genai.StreamingStatus.RUNNING

        def end(self):
            pass

    # f32 inference and an f32 cache: this CPU's defaults are bf16 inference and a compressed cache, which
    # move the tiny network's logits by more than its near-ties (1.75e-3 at the 11th en/transcribe token)
    pipe = genai.WhisperPipeline(str(pipeline_dir), "CPU", INFERENCE_PRECISION_HINT="f32", KV_CACHE_PRECISION="f32")
    config = pipe.get_generation_config()
    config.max_new_tokens = NEW_TOKENS
    config.return_timestamps = False
    for key, value in kwargs.items():
        setattr(config, key, value)
    streamer = Collect()
    pipe.generate(load_audio(str(wav), 16000).tolist(), config, streamer=streamer)
    return streamer.ids


@pytest.mark.parametrize("language,task", [("en", "transcribe"), ("de", "translate")])
def test_whisper_pipeline_generates_transformers_tokens(language, task, exports, tiny_checkpoint, speech_wav,
                                                        tmp_path):
    want = transformers_transcription(tiny_checkpoint(CASE), speech_wav, NEW_TOKENS, language=language, task=task)
    got = whisper_pipeline_tokens(exports("stateful") / "openvino", speech_wav, tmp_path,
                                  language=f"<|{language}|>", task=task)
    assert got == want, f"{got}\n{want}"  # both the new tokens only, without Whisper's prompt
    assert len(set(got)) > 4, "degenerate tokens: the check would be weak"
    record_coverage(CASE, "openvino-genai", f"WhisperPipeline {language} {task} greedy {NEW_TOKENS}", "identical")


def test_stateless_layout_verify_and_generate(exports, tiny_checkpoint, speech_wav):
    out = exports("stateless")
    proc = run_hfx("verify", out, "--runtime", "openvino", "--oracle", "transformers", "--no-reexport", check=False)
    failed = [line for line in proc.stdout.splitlines() if line.startswith("FAIL")]
    assert proc.returncode == 0, "\n".join(failed + proc.stderr.strip().splitlines()[-3:])
    assert "greedy generation (64 tokens" in proc.stdout
    want = transformers_transcription(tiny_checkpoint(CASE), speech_wav, NEW_TOKENS, language="en")
    proc = run_hfx("generate", out, "--audio", speech_wav, "--language", "en", "--print-ids", "-n", NEW_TOKENS,
                   "--runtime", "openvino")
    assert [int(t) for t in proc.stdout.strip().split(",")] == want
    record_coverage(CASE, "openvino", "stateless: hfx verify --oracle transformers, generate --audio", "pass")
