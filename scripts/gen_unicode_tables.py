#!/usr/bin/env python3
"""Generates src/tokenizer/unicode_tables.cc: the Unicode data hfx's tokenizer needs to equal `tokenizers`.

    .venv/bin/python scripts/gen_unicode_tables.py            # rewrites src/tokenizer/unicode_tables.cc
    .venv/bin/python scripts/gen_unicode_tables.py --check    # exits 1 if the checked-in file differs

Where the data comes from, and why not all of it from `unicodedata`:

* General categories (\\p{L}, \\p{N}), combining classes and canonical decompositions come from
  `unicodedata`. The regex engine inside `tokenizers` (Oniguruma) is at Unicode 16.0, so install
  `unicodedata2==16.0.0` (imported in preference to the standard module, which is at 14.0 in
  Python 3.11) before running this. White_Space is the fixed list of PropList.txt.
* `tokenizers` is built on Rust crates of several older Unicode versions: BertNormalizer's control /
  non-spacing-mark tests and BertPreTokenizer's punctuation come from the `unicode_categories` crate
  (about Unicode 8.0), StripAccents and NFC/NFD/NFKC/NFKD from `unicode-normalization-alignments`
  (about Unicode 12), lowercasing from Rust's std (Unicode 16), and the added-token `\\w` test from
  the `regex` crate. No one Unicode version reproduces them all, so the sets those steps use are read
  from the installed `tokenizers` itself, one code point at a time (it is the oracle the tests compare
  against), and checked against `unicodedata` where the two should agree. This needs `tokenizers`
  (in requirements-test.txt) and takes about half a minute.
"""
from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

try:
    import unicodedata2 as unicodedata  # type: ignore
except ImportError:  # pragma: no cover
    import unicodedata

import tokenizers
from tokenizers import AddedToken, Regex, Tokenizer, models, normalizers, pre_tokenizers

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "tokenizer" / "unicode_tables.cc"

MAX_CP = 0x110000
CHARS = [c for c in range(MAX_CP) if not 0xD800 <= c < 0xE000]

# PropList.txt White_Space: Rust's char::is_whitespace, the `regex` crate's and Oniguruma's \s.
WHITE_SPACE = {0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028,
               0x2029, 0x202F, 0x205F, 0x3000}

# Property bits; keep in sync with src/tokenizer/unicode_tables.h.
LETTER, NUMBER, WHITE, BERT_REMOVE, BERT_MN, BERT_PUNCT, COMBINING_MARK, WORD = (1 << i for i in range(8))

HANGUL_FIRST, HANGUL_LAST = 0xAC00, 0xD7A3


def oracle_set(pred_name: str, test) -> set[int]:
    found = {c for c in CHARS if test(chr(c))}
    print(f"  {pred_name}: {len(found)} code points", file=sys.stderr)
    return found


def split_matches(pattern: str) -> set[int]:
    """Code points a one-class regex matches in Oniguruma, as `tokenizers` runs it."""
    split = pre_tokenizers.Split(Regex(pattern), behavior="removed")
    rest: set[str] = set()
    for k in range(0, len(CHARS), 65536):
        text = "".join(map(chr, CHARS[k:k + 65536]))
        for piece, _ in split.pre_tokenize_str(text):
            rest.update(piece)
    return {c for c in CHARS if chr(c) not in rest}


def check_same(name: str, ours: set[int], oracle: set[int]) -> None:
    if ours != oracle:
        extra, missing = sorted(ours - oracle), sorted(oracle - ours)
        sys.exit(f"{name}: unicodedata {unicodedata.unidata_version} disagrees with tokenizers "
                 f"{tokenizers.__version__}: +{[hex(c) for c in extra[:8]]} -{[hex(c) for c in missing[:8]]} "
                 "(pip install unicodedata2==16.0.0, the Unicode version tokenizers 0.23 uses, and rerun)")


def properties() -> list[int]:
    print("properties", file=sys.stderr)
    props = [0] * MAX_CP
    cat = unicodedata.category
    letters = {c for c in CHARS if cat(chr(c)).startswith("L")}
    numbers = {c for c in CHARS if cat(chr(c)).startswith("N")}
    check_same("\\p{L}", letters, split_matches(r"\p{L}"))
    check_same("\\p{N}", numbers, split_matches(r"\p{N}"))
    check_same("\\s", WHITE_SPACE, split_matches(r"\s"))

    clean = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=False, strip_accents=False,
                                       lowercase=False)
    removed = oracle_set("BertNormalizer clean_text removes", lambda s: clean.normalize_str(s) == "")
    nfd = normalizers.NFD()
    strip = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=False, strip_accents=True,
                                       lowercase=False)
    # BertNormalizer strips accents after NFD, so only NFD-stable code points matter.
    bert_mn = oracle_set("BertNormalizer non-spacing marks",
                         lambda s: nfd.normalize_str(s) == s and strip.normalize_str(s) == "")
    bert_pre = pre_tokenizers.BertPreTokenizer()
    punct = oracle_set("BertPreTokenizer punctuation", lambda s: len(bert_pre.pre_tokenize_str("a" + s + "a")) == 3)
    accents = normalizers.StripAccents()
    marks = oracle_set("StripAccents combining marks", lambda s: accents.normalize_str(s) == "")
    word = word_chars()
    for c in letters:
        props[c] |= LETTER
    for c in numbers:
        props[c] |= NUMBER
    for c in WHITE_SPACE:
        props[c] |= WHITE
    for c in removed:
        props[c] |= BERT_REMOVE
    for c in bert_mn:
        props[c] |= BERT_MN
    for c in punct:
        props[c] |= BERT_PUNCT
    for c in marks:
        props[c] |= COMBINING_MARK
    for c in word:
        props[c] |= WORD
    return props


def word_chars() -> set[int]:
    """The `regex` crate's \\w, which single_word added tokens test their neighbours with."""
    vocab = {"[UNK]": 0, "a": 1}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.add_tokens([AddedToken("@@", single_word=True, normalized=False)])
    at = tok.token_to_id("@@")
    # "@@" after a word character is not a single word and is not split out.
    return oracle_set("added-token \\w", lambda s: s != "@" and at not in tok.encode(s + "@@").ids)


def mapping(name: str, norm) -> dict[int, list[int]]:
    out = {}
    for c in CHARS:
        if HANGUL_FIRST <= c <= HANGUL_LAST:
            continue
        r = norm.normalize_str(chr(c))
        if r != chr(c):
            out[c] = [ord(x) for x in r]
    print(f"  {name}: {len(out)} entries", file=sys.stderr)
    return out


def combining_classes() -> dict[int, int]:
    """unicodedata's classes, for the marks tokenizers' normalizer also knows to be non-starters."""
    nfd = normalizers.NFD()
    out = {}
    for c in CHARS:
        ccc = unicodedata.combining(chr(c))
        if not ccc:
            continue
        s = chr(c)
        # A non-starter reorders before U+0334 (class 1) when its class is above 1, after U+0301
        # (class 230) when below 230; a class the normalizer does not know is 0 and never moves.
        # Both tests on their own are blind to classes 1 and 230 respectively.
        # Both tests together see every class: the first is blind to class 1, the second to 230.
        moves = nfd.normalize_str(s + "\u0334") != nfd.normalize_str(s) + "\u0334" or \
            nfd.normalize_str("\u0301" + s) != "\u0301" + nfd.normalize_str(s)
        if moves:
            out[c] = ccc
    print(f"  combining classes: {len(out)} entries", file=sys.stderr)
    return out


def compositions() -> list[tuple[int, int, int]]:
    nfc = normalizers.NFC()
    out = []
    for c in CHARS:
        if HANGUL_FIRST <= c <= HANGUL_LAST:
            continue
        d = unicodedata.decomposition(chr(c))
        if not d or d.startswith("<"):
            continue
        parts = [int(x, 16) for x in d.split()]
        if len(parts) != 2:
            continue
        if nfc.normalize_str(chr(parts[0]) + chr(parts[1])) == chr(c):
            out.append((parts[0], parts[1], c))
    out.sort()
    print(f"  compositions: {len(out)} pairs", file=sys.stderr)
    return out


def check_hangul() -> None:
    nfd, nfc = normalizers.NFD(), normalizers.NFC()
    for c in range(HANGUL_FIRST, HANGUL_LAST + 1):
        s = c - HANGUL_FIRST
        jamo = chr(0x1100 + s // 588) + chr(0x1161 + (s % 588) // 28) + (chr(0x11A7 + s % 28) if s % 28 else "")
        if nfd.normalize_str(chr(c)) != jamo or nfc.normalize_str(jamo) != chr(c):
            sys.exit(f"Hangul U+{c:04X} does not decompose algorithmically in tokenizers")


def ranges(values: list[int]) -> list[tuple[int, int, int]]:
    out = []
    start = 0
    for c in range(1, MAX_CP + 1):
        if c == MAX_CP or values[c] != values[start]:
            if values[start]:
                out.append((start, c - 1, values[start]))
            start = c
    return out


def emit_map(lines: list[str], data: list[int], name: str, table: dict[int, list[int]]) -> None:
    lines.append(f"const MapEntry {name}[] = {{")
    row = []
    for cp in sorted(table):
        seq = table[cp]
        row.append(f"{{0x{cp:X}, {len(data)}, {len(seq)}}}")
        data.extend(seq)
        if len(row) == 6:
            lines.append("    " + ", ".join(row) + ",")
            row = []
    if row:
        lines.append("    " + ", ".join(row) + ",")
    lines.append("};")
    lines.append(f"const size_t {name}Count = sizeof({name}) / sizeof({name}[0]);")
    lines.append("")


def generate() -> str:
    props = properties()
    print("mappings", file=sys.stderr)
    nfd = mapping("NFD", normalizers.NFD())
    nfkd = mapping("NFKD", normalizers.NFKD())
    lower = mapping("lowercase", normalizers.Lowercase())
    ccc = combining_classes()
    comps = compositions()
    check_hangul()

    lines = [
        "// Generated by scripts/gen_unicode_tables.py from unicodedata "
        f"{unicodedata.unidata_version} and tokenizers {tokenizers.__version__}. Do not edit.",
        "#include \"tokenizer/unicode_tables.h\"",
        "",
        "namespace hfx::tokenizer::unicode {",
        "",
    ]
    prop_ranges = ranges(props)
    lines.append("const PropRange kPropRanges[] = {")
    for i in range(0, len(prop_ranges), 6):
        lines.append("    " + ", ".join(f"{{0x{a:X}, 0x{b:X}, {v}}}" for a, b, v in prop_ranges[i:i + 6]) + ",")
    lines.append("};")
    lines.append("const size_t kPropRangesCount = sizeof(kPropRanges) / sizeof(kPropRanges[0]);")
    lines.append("")

    ccc_list = [0] * MAX_CP
    for c, v in ccc.items():
        ccc_list[c] = v
    ccc_ranges = ranges(ccc_list)
    lines.append("const PropRange kCombiningClasses[] = {")
    for i in range(0, len(ccc_ranges), 6):
        lines.append("    " + ", ".join(f"{{0x{a:X}, 0x{b:X}, {v}}}" for a, b, v in ccc_ranges[i:i + 6]) + ",")
    lines.append("};")
    lines.append("const size_t kCombiningClassesCount = sizeof(kCombiningClasses) / sizeof(kCombiningClasses[0]);")
    lines.append("")

    data: list[int] = []
    emit_map(lines, data, "kNfdMap", nfd)
    emit_map(lines, data, "kNfkdMap", nfkd)
    emit_map(lines, data, "kLowercaseMap", lower)

    lines.append("const Composition kCompositions[] = {")
    for i in range(0, len(comps), 5):
        lines.append("    " + ", ".join(f"{{0x{a:X}, 0x{b:X}, 0x{c:X}}}" for a, b, c in comps[i:i + 5]) + ",")
    lines.append("};")
    lines.append("const size_t kCompositionsCount = sizeof(kCompositions) / sizeof(kCompositions[0]);")
    lines.append("")

    lines.append("const char32_t kMapData[] = {")
    for i in range(0, len(data), 10):
        lines.append("    " + ", ".join(f"0x{x:X}" for x in data[i:i + 10]) + ",")
    lines.append("};")
    lines.append("")
    lines.append("}  // namespace hfx::tokenizer::unicode")
    lines.append("")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with the checked-in file instead of writing")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    text = generate()
    if args.check:
        old = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
        if old != text:
            sys.stdout.writelines(list(difflib.unified_diff(old.splitlines(True), text.splitlines(True)))[:40])
            return 1
        print(f"{args.out} is up to date")
        return 0
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
