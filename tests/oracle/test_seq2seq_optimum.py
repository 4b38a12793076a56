"""Optimum's ORTModelForSeq2SeqLM (and ORTModelForSpeechSeq2Seq for Whisper), a client users run, loads hfx's encoder-decoder export unmodified
(OUT/onnx: encoder_model.onnx with decoder_model.onnx + decoder_with_past_model.onnx, or with
decoder_model_merged.onnx, the graph transformers.js loads too; config.json, generation_config.json) and
generates Transformers' greedy tokens. optimum-onnx pins transformers <
4.58, so Optimum runs in its own venv (.venv-optimum, made by scripts/setup.sh from
requirements-optimum.txt) in a subprocess; Transformers 5's tokens come from this process."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, run_hfx
from test_seq2seq_cli import transformers_tokens

OPTIMUM_PYTHON = Path(os.environ.get("HFX_OPTIMUM_PYTHON", ROOT / ".venv-optimum" / "bin" / "python"))

# Run by Optimum's Python: greedy tokens for right-padded sources, the start token dropped.
DRIVER = """
import json, sys, torch
from optimum.onnxruntime import ORTModelForSeq2SeqLM
folder, sources, new, merged = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "merged"
model = ORTModelForSeq2SeqLM.from_pretrained(folder, use_cache=True, use_merged=merged, provider="CPUExecutionProvider")
assert model.decoder.is_merged == merged, "Optimum did not load the decoder asked for"
length = max(len(s) for s in sources)
ids = torch.zeros((len(sources), length), dtype=torch.long)
mask = torch.zeros_like(ids)
for b, s in enumerate(sources):
    ids[b, :len(s)] = torch.tensor(s)
    mask[b, :len(s)] = 1
out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new, do_sample=False, num_beams=1)
print(json.dumps(out[:, 1:].tolist()))
"""


# Every family through each decoder layout, half the cases each (an Optimum run starts a process of
# its own). The merged path is not given "bart": Optimum makes the first step's empty past with the
# encoder's head count (encoder_attention_heads), so "bart", whose decoder has 4 heads to its encoder's
# 8, is fed [.., 8, 0, 8] where the graph declares [.., 4, past, 16] and ONNX Runtime refuses it.
# Released BART checkpoints have equal counts; the split path runs "bart".
RUNS = [(c, "split") for c in ["t5", "t5-v5-config", "bart", "marian-vocabs"]] + \
       [(c, "merged") for c in ["t5-gated-tied", "mt5", "bart-tied-scaled", "mbart", "marian"]]


@pytest.mark.parametrize("case,decoder", RUNS)
def test_optimum_generates_transformers_tokens(case, decoder, tiny_checkpoint, tmp_path):
    if not OPTIMUM_PYTHON.exists():
        pytest.fail(f"{OPTIMUM_PYTHON} is missing: bash scripts/setup.sh makes .venv-optimum")
    ckpt = tiny_checkpoint(case)
    out = tmp_path / "out"
    run_hfx("export", "--model", ckpt, "--format", "onnx", "--quiet", out)
    sources = [[5, 9, 17, 33, 2, 60, 1], [7, 7, 40, 1]]
    proc = subprocess.run([str(OPTIMUM_PYTHON), "-c", DRIVER, str(out / "onnx"), json.dumps(sources), "32", decoder],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    tokens = json.loads(proc.stdout.strip().splitlines()[-1])
    assert tokens == transformers_tokens(ckpt, sources, 32)


# Run by Optimum's Python: ORTModelForSpeechSeq2Seq over hfx's Whisper export, and the same venv's
# Transformers (4.57, Whisper's generate() of that version, which Optimum's generate() follows) on the
# checkpoint, for the same features (the ones hfx's checks feed a speech model).
SPEECH_DRIVER = """
import json, sys, numpy as np, torch
from optimum.onnxruntime import ORTModelForSpeechSeq2Seq
from transformers import WhisperForConditionalGeneration
folder, ckpt, features, new, merged = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5] == "merged"
x = torch.from_numpy(np.load(features))
model = ORTModelForSpeechSeq2Seq.from_pretrained(folder, use_cache=True, use_merged=merged, provider="CPUExecutionProvider")
assert model.decoder.is_merged == merged, "Optimum did not load the decoder asked for"
got = model.generate(input_features=x, max_new_tokens=new, do_sample=False, num_beams=1).tolist()
ref = WhisperForConditionalGeneration.from_pretrained(ckpt, attn_implementation="eager").eval()
with torch.no_grad():
    want = ref.generate(input_features=x, max_new_tokens=new, do_sample=False, num_beams=1).tolist()
print(json.dumps({"got": got, "want": want}))
"""


# (merged: "whisper", whose encoder and decoder have equal head counts, for the reason RUNS gives)
@pytest.mark.parametrize("case,decoder", [("whisper-shapes", "split"), ("whisper", "merged")])
def test_optimum_speech_generates_transformers_tokens(case, decoder, tiny_checkpoint, tmp_path):
    import sys

    import numpy as np
    sys.path.insert(0, str(ROOT / "python"))
    from hfx_ort_seq2seq import verify_speech_features
    if not OPTIMUM_PYTHON.exists():
        pytest.fail(f"{OPTIMUM_PYTHON} is missing: bash scripts/setup.sh makes .venv-optimum")
    ckpt = tiny_checkpoint(case)
    config = json.loads((ckpt / "config.json").read_text())
    out = tmp_path / "out"
    run_hfx("export", "--model", ckpt, "--format", "onnx", "--quiet", out)
    features = tmp_path / "features.npy"
    np.save(features, verify_speech_features([[5, 9, 14], [7, 3]], config["num_mel_bins"],
                                             2 * config["max_source_positions"]))
    proc = subprocess.run([str(OPTIMUM_PYTHON), "-c", SPEECH_DRIVER, str(out / "onnx"), str(ckpt), str(features), "32",
                           decoder], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["got"] == result["want"]
    assert len({t for row in result["want"] for t in row}) > 4, "degenerate tokens: the check would be weak"
