"""`hfx tokenize` equals the `tokenizers` library, id for id and character for character.

For each tokenizer of make_tokenizers.py (byte-level BPE in the GPT-2, RoBERTa, Llama 3 and Qwen2
styles, byte-fallback BPE in the Llama 2 style, Metaspace BPE in the Mistral style, WordPiece in the
BERT style, SentencePiece Unigram with a Precompiled charsmap in the T5 style, with byte fallback, and
with custom charsmap rules), a few hundred deterministic strings (ASCII, accents precomposed and decomposed, CJK,
Arabic, emoji with ZWJ and skin tones, lone combining marks, whitespace runs, digit runs,
punctuation runs, contractions, the tokenizer's special tokens embedded in text, empty strings) are
encoded by `tokenizers` and by one `hfx tokenize` process each, and the ids must be identical; the
decodings of those ids, and of random id lists, must be identical too.
"""
from __future__ import annotations

import base64
import json
import random
import subprocess
from pathlib import Path

import pytest
from tokenizers import Tokenizer

import make_tokenizers
from conftest import hfx_binary, run_hfx

NAMES = list(make_tokenizers.MAKERS)

# Pieces of text that stress one rule each; the strings below are these, alone and combined.
FRAGMENTS = [
    # ASCII, contractions (the regexes special-case them, case-insensitively in Llama 3 / Qwen2)
    "Hello world", "hello", "HELLO", "The quick brown fox.", "she's", "I'M", "we'LL", "don't", "they're",
    "you've", "I'd", "'s", "'S", "'t", "'Re", "'ve", "'m", "'ll", "'d", "'x", "''", "'", "\"quoted\"",
    "'ſ", "ſ", "\u212a", "it's'", "rock'n'roll",
    # accents, precomposed and decomposed, compatibility characters (NFC, BERT accent stripping)
    "café", "cafe\u0301", "naïve", "nai\u0308ve", "Ångström", "\u212bngstro\u0308m", "résumé", "ﬁnance",
    "Œuvre", "ß", "İstanbul", "ΣΊΣΥΦΟΣ", "ǅemal", "ＡＢＣ１２３", "①②", "Ⅻ", "½", "x²", "ǆ",
    "q\u0307\u0323", "a\u0301\u0302\u0323", "e\u0301\u0300", "\u1e0b\u0323", "o\u0328\u0304",
    # lone and stacked combining marks, zero-width and format characters
    "\u0301", "\u0323\u0301", "\u0301abc", " \u0301", "\u200b", "\u200d", "\u200c", "\ufeff", "\u2060",
    "\u00ad", "\ufe0f", "a\u0300\u0300\u0300\u0300",
    # CJK, kana, Hangul (precomposed and jamo), other scripts
    "東京", "北京是中国的首都。", "我爱自然语言处理", "ひらがな カタカナ", "한국어 토큰화", "\u1100\u1161\u11a8",
    "\u1112\u1161\u11ab\u1100\u1173\u11af", "مرحبا بالعالم", "שלום עולם", "ภาษาไทย", "हिन्दी में", "Привет, мир!",
    "Ελληνικά", "𠀀𠀁", "\U0002a6d6",
    # emoji: ZWJ families, skin tones, flags, keycaps, variation selectors
    "😀", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷🇩🇪", "❤️", "🏳️‍🌈", "1️⃣", "🎉🎉🎉", "👩🏿‍💻", "✨",
    # whitespace of every kind, and runs of it
    " ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r", " \n ", "\n \n", "\u00a0", "\u3000", "\u2009",
    "\u2028", "\u0085", "\x0b", "\x0c", "x\u00a0y", "a  b", "a\tb", "a \n b", "line1\nline2\n", "   x", "x   ",
    # digits and numbers
    "1234567", "12", "123", "1234", "3.14159", "1,000,000", "٣٤٥", "१२३", "¹²³", "2024-01-31", "0x1F",
    "v1.2.3", "$5.99", "100%",
    # punctuation runs, code
    "!!!", "...", "?!", "—", "–", "«»", "“curly”", "‘single’", "()", "{[<>]}", "@#$%^&*", "__init__",
    "a--b", "...\n", "!\n\n", "def f(x):\n    return x**2\n", "if (a && b) { return; }",
    "https://example.com/path?q=1&x=2#frag", "user@example.com", "C++", "<html><body>", "a/b\\c",
    # odd code points: NUL, controls, replacement character, private use, noncharacters, tags
    "\x00", "a\x00b", "\x7f", "\x1f", "\ufffd", "\ue000", "\uffff", "\U0010ffff", "\U000e0041",
    # long words (WordPiece max_input_chars_per_word, BPE with many merges)
    "supercalifragilisticexpialidocious", "pneumonoultramicroscopicsilicovolcanoconiosis", "a" * 40,
    "ab" * 30, "unmergeable", " unmergeable", " tokenizer", " é",
]

SEPARATORS = ["", " ", "  ", "\n", "\t", ", ", " \n"]


def special_strings(tok: Tokenizer) -> list[str]:
    """The tokenizer's added tokens, embedded in text in every way that matters to their flags."""
    out = []
    for t in tok.get_added_tokens_decoder().values():
        c = t.content
        out += [c, f"a{c}b", f" {c} ", f"x {c}", f"{c}{c}", f"Hello{c}world", f"{c}\n", f"  {c}  x",
                c[:-1], c.lower(), c.upper()]
    return out


def sample_strings(tok: Tokenizer) -> list[str]:
    rng = random.Random(20240531)
    singles = FRAGMENTS + special_strings(tok) + ["", "x", " x", "x "]
    combos = []
    pool = FRAGMENTS + special_strings(tok)
    for _ in range(160):
        parts = [rng.choice(pool) for _ in range(rng.randint(2, 6))]
        text = parts[0]
        for p in parts[1:]:
            text += rng.choice(SEPARATORS) + p
        combos.append(text)
    for s in make_tokenizers.corpus()[:40]:
        combos.append(s)
    return singles + combos


def tokenize(path: Path, inputs: list[str], *args: str) -> list:
    """Runs one `hfx tokenize` over all inputs (JSON a line each way) and returns the parsed outputs."""
    stdin = "".join(json.dumps(x) + "\n" for x in inputs)
    proc = subprocess.run([str(hfx_binary()), "tokenize", "--tokenizer", str(path), *args], input=stdin,
                          capture_output=True, text=True, encoding="utf-8")
    assert proc.returncode == 0, f"hfx tokenize {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}"
    lines = proc.stdout.split("\n")  # not splitlines(): U+2028 or U+0085 may stand raw in a JSON string
    assert lines.pop() == "", "output does not end with a newline"
    assert len(lines) == len(inputs), f"{len(inputs)} inputs but {len(lines)} output lines:\n{proc.stderr}"
    return [json.loads(line) for line in lines]


@pytest.fixture(scope="session")
def tokenizer_file(tmp_path_factory):
    base = tmp_path_factory.mktemp("tokenizers")
    made: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in made:
            made[name] = make_tokenizers.make(name, base / name)
        return made[name]

    return get


def describe(tok: Tokenizer, text: str, want: list[int], got: list[int]) -> str:
    return (f"{text!r}\n    tokenizers: {want} {[tok.id_to_token(i) for i in want]}\n"
            f"    hfx:        {got} {[tok.id_to_token(i) if i < tok.get_vocab_size() else i for i in got]}")


def compare(tok, inputs, want, got) -> None:
    bad = [describe(tok, s, w, g) if isinstance(w, list) else f"{s!r}\n    tokenizers: {w!r}\n    hfx:        {g!r}"
           for s, w, g in zip(inputs, want, got) if w != g]
    assert not bad, f"{len(bad)} of {len(inputs)} differ, first ones:\n" + "\n".join(bad[:8])


@pytest.mark.parametrize("name", NAMES)
def test_encode_matches_tokenizers(name, tokenizer_file):
    path = tokenizer_file(name)
    tok = Tokenizer.from_file(str(path))
    strings = sample_strings(tok)
    assert len(strings) >= 200
    want = [tok.encode(s, add_special_tokens=True).ids for s in strings]
    got = tokenize(path, strings, "--jsonl")
    compare(tok, strings, want, got)


@pytest.mark.parametrize("name", NAMES)
def test_encode_without_special_tokens(name, tokenizer_file):
    path = tokenizer_file(name)
    tok = Tokenizer.from_file(str(path))
    strings = sample_strings(tok)[::3]
    want = [tok.encode(s, add_special_tokens=False).ids for s in strings]
    compare(tok, strings, want, tokenize(path, strings, "--jsonl", "--no-special-tokens"))


@pytest.mark.parametrize("name", NAMES)
def test_decode_matches_tokenizers(name, tokenizer_file):
    path = tokenizer_file(name)
    tok = Tokenizer.from_file(str(path))
    id_lists = [tok.encode(s, add_special_tokens=True).ids for s in sample_strings(tok)]
    # Random ids too: byte tokens out of order (ill-formed UTF-8), special tokens anywhere, unknown ids.
    rng = random.Random(7)
    size = tok.get_vocab_size()
    for _ in range(120):
        id_lists.append([rng.randrange(size + 3) for _ in range(rng.randint(0, 24))])
    id_lists.append([])
    want = [tok.decode(ids, skip_special_tokens=True) for ids in id_lists]
    got = tokenize(path, id_lists, "--decode")
    compare(tok, id_lists, want, got)
    keep = id_lists[::4]
    want = [tok.decode(ids, skip_special_tokens=False) for ids in keep]
    compare(tok, keep, want, tokenize(path, keep, "--decode", "--keep-special-tokens"))


# The SentencePiece Unigram tokenizers (Precompiled charsmap normalizer, Unigram model).
UNIGRAM_NAMES = ["t5", "spm_fallback", "spm_rules"]

# What the charsmap and the lattice make of: compatibility characters (NFKC), extended grapheme clusters
# of each kind under 6 UTF-8 bytes (looked up whole, shortest key first) and over (per character),
# characters in no token (unk, fused; or bytes), long words, the rule characters of spm_rules.
SPM_FRAGMENTS = [
    "ﬁ", "ﬁ\u0301", "ﬁne ﬂow", "①②⑩", "①\u0301", "ＡＢＣ", "ａ\u0301", "Ⅻ", "㍿", "™", "…", "ｶﾀｶﾅ", "ǆ", "x²",
    "a\u0301", "e\u0301", "x\u0301", "x\u0301\u0301", "c\u0301", "1\u0301", "b\u0308", "o\u0308\u0304\u0323",
    "\u1100\u1161", "\u1100\u1161\u11a8", "\u1100\u1100\u1161", "각\u11a8", "\u1100x",
    "क्ष", "क\u094d\u200dष", "क्क्क", "कि", "क\u094d", "\u0915\u093f\u0902", "क\u094dx",
    "\u0600\u0661", "\u0600a", "\u0600 ", "\u0600\n",
    "a\u200d", "\u200d", "\u200da", "x\u200d😀", "😀\u200d😀", "👨‍👩‍👧", "\u2764\ufe0f", "☝🏽", "a\ufe0f",
    "🇫", "🇫🇷🇩", "🇫🇷🇩🇪🇮", "a🇫🇷",
    "\r\n", "a\r\nb", "\n\r", "\r\r\n", "\x00", "a\x00\u0301", "\t\u0301", "\x7f\u0301",
    "  ", "a  b", "   a   ", "a   ", "\u3000x", "a\u00a0b", "\u2003\u2003", "0a0", "00", "a0\u0301",
    "ꙮꙮꙮ ᚠᚡᚢ", "ꙮaꙮ", "\ue000\ue001", "\U0001d49c\U0001d4b7", "𠀀𠀁x",
    "a" * 1000, "x\u0301" * 50, "qzqzqz" * 100, "\U0001F600" * 30, "supercalifragilisticexpialidocious" * 8,
    "<unk>", "ꙮ<unk>ꙮ", "</s>", "<extra_id_0>", "x<extra_id_1>y", "<pad>", "<0x41>", "▁", "▁▁a", "a▁ b",
]


@pytest.mark.parametrize("name", UNIGRAM_NAMES)
def test_unigram_and_precompiled(name, tokenizer_file):
    path = tokenizer_file(name)
    tok = Tokenizer.from_file(str(path))
    rng = random.Random(1234)
    pool = SPM_FRAGMENTS + FRAGMENTS
    strings = SPM_FRAGMENTS + ["".join(rng.choice(pool) + rng.choice(SEPARATORS) for _ in range(rng.randint(2, 5)))
                               for _ in range(300)]
    want = [tok.encode(s, add_special_tokens=True).ids for s in strings]
    compare(tok, strings, want, tokenize(path, strings, "--jsonl"))
    ids = want + [[rng.randrange(tok.get_vocab_size() + 2) for _ in range(rng.randint(0, 30))] for _ in range(100)]
    compare(tok, ids, [tok.decode(i) for i in ids], tokenize(path, ids, "--decode"))


def test_plain_lines_and_command_line_forms(tokenizer_file):
    path = tokenizer_file("llama3")
    tok = Tokenizer.from_file(str(path))
    proc = subprocess.run([str(hfx_binary()), "tokenize", "-t", str(path.parent)], input="Hello world\n\nsecond line\n",
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert [json.loads(l) for l in proc.stdout.splitlines()] == [tok.encode(s).ids for s in ["Hello world", "", "second line"]]
    ids = tok.encode("Hi there").ids
    out = run_hfx("tokenize", "-t", path, "--ids", ",".join(map(str, ids))).stdout
    assert json.loads(out) == tok.decode(ids)
    out = run_hfx("tokenize", "-t", path, "--text", "Hi there", "--no-special-tokens").stdout
    assert json.loads(out) == tok.encode("Hi there", add_special_tokens=False).ids


def one_error_line(proc) -> str:
    assert proc.returncode == 1, f"expected exit 1, got {proc.returncode}: {proc.stderr}"
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_errors_name_file_and_field(tokenizer_file, tmp_path):
    line = one_error_line(run_hfx("tokenize", "-t", tmp_path / "nope.json", "--text", "x", check=False))
    assert "nope.json" in line

    data = json.loads(tokenizer_file("llama3").read_text(encoding="utf-8"))
    data["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = r"\p{L}+|\s+"
    bad = tmp_path / "regex" / "tokenizer.json"
    bad.parent.mkdir()
    bad.write_text(json.dumps(data), encoding="utf-8")
    line = one_error_line(run_hfx("tokenize", "-t", bad, "--text", "x", check=False))
    assert "unsupported" in line and "tokenizer.json" in line and "pre_tokenizer.pretokenizers[0].pattern.Regex" in line

    data = json.loads(tokenizer_file("gpt2").read_text(encoding="utf-8"))
    data["model"]["merges"][3] = "Ġ"
    bad = tmp_path / "merge.json"
    bad.write_text(json.dumps(data), encoding="utf-8")
    line = one_error_line(run_hfx("tokenize", "-t", bad, "--text", "x", check=False))
    assert "merge.json" in line and "model.merges[3]" in line

    # A hostile charsmap: a trie that points outside itself, then one that does not fit the blob.
    data = json.loads(tokenizer_file("t5").read_text(encoding="utf-8"))
    charsmap = data["normalizer"]["normalizers"][0]
    blob = bytearray(base64.b64decode(charsmap["precompiled_charsmap"]))
    blob[4:8] = (0xFFFFFC00).to_bytes(4, "little")  # the root's offset: far past the trie
    charsmap["precompiled_charsmap"] = base64.b64encode(bytes(blob)).decode()
    bad = tmp_path / "charsmap.json"
    bad.write_text(json.dumps(data), encoding="utf-8")
    line = one_error_line(run_hfx("tokenize", "-t", bad, "--text", "x", check=False))
    assert "charsmap.json" in line and "normalizer.normalizers[0].precompiled_charsmap" in line and "corrupt" in line
    charsmap["precompiled_charsmap"] = base64.b64encode(b"\xff\xff\x00\x00" + bytes(blob[4:40])).decode()
    bad.write_text(json.dumps(data), encoding="utf-8")
    line = one_error_line(run_hfx("tokenize", "-t", bad, "--text", "x", check=False))
    assert "normalizer.normalizers[0].precompiled_charsmap" in line and "trie" in line
    data["model"]["unk_id"] = len(data["model"]["vocab"])
    bad.write_text(json.dumps(data), encoding="utf-8")
    line = one_error_line(run_hfx("tokenize", "-t", bad, "--text", "x", check=False))
    assert "model.unk_id" in line

    proc = subprocess.run([str(hfx_binary()), "tokenize", "-t", str(tokenizer_file("gpt2")), "--jsonl"],
                          input="\"ok\"\nnot json\n", capture_output=True, text=True)
    assert "stdin line 2" in one_error_line(proc)
