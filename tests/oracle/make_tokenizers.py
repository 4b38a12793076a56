"""Small tokenizer.json files in the styles of real checkpoints, built offline with `tokenizers`.

Nothing is downloaded: each tokenizer is trained on a corpus written here, then its pipeline
(normalizer, pre-tokenizer, model flags, decoder, post-processor, added tokens) is set up the way
the real checkpoint's tokenizer.json has it.

  gpt2           byte-level BPE, ByteLevel pre-tokenizer with the GPT-2 regex, <|endoftext|>
  roberta        byte-level BPE, add_prefix_space, RobertaProcessing, <mask> with lstrip
  (gpt2 and llama2 write merges as "a b" strings, the others as ["a", "b"] pairs)
  llama3         Split(Llama 3 regex, Isolated) + ByteLevel(use_regex=false), ignore_merges,
                 merges written as ["a", "b"] pairs, TemplateProcessing "<|begin_of_text|> $A"
  qwen2          NFC + Split(Qwen2 regex) + ByteLevel, special and non-special added tokens
  llama2         Prepend("▁") + Replace(" ", "▁"), byte_fallback <0xNN>, fuse_unk, SentencePiece
                 decoders (Replace, ByteFallback, Fuse, Strip), "<s> $A"
  mistral        Metaspace(prepend_scheme="first") pre-tokenizer and decoder, unk without byte
                 fallback (fuse_unk), "<s> $A"
  bert           BertNormalizer (lowercase, strip accents), BertPreTokenizer, WordPiece with ##,
                 [CLS] $A [SEP], WordPiece decoder
  bert_cased     BertNormalizer without lowercase or accent stripping, max_input_chars_per_word 12
  t5             SentencePiece Unigram (trained with `sentencepiece`, nmt_nfkc rules, characters left
                 out so that unk appears) converted by transformers' T5Converter: Precompiled charsmap,
                 Strip, Replace(" {2,}"), Metaspace, "$A </s>", <extra_id_N> special tokens, unk_id 2
  spm_fallback   Unigram with byte_fallback, SpmConverter.build_tokenizer_from_spm_proto's pipeline
                 (Precompiled + Replace(" ", "▁"), Replace/ByteFallback/Fuse decoders)
  spm_rules      Unigram whose charsmap comes from custom rules (a -> A, c -> "", x and "x U+0301" both
                 mapped, ...): shows which extended grapheme clusters the Precompiled normalizer sees

`python make_tokenizers.py OUT` writes OUT/<name>/tokenizer.json for every name.
"""
from __future__ import annotations

import io
import json
import sys
import tempfile
import types
from pathlib import Path

from tokenizers import (Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors,
                        trainers, AddedToken)

GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

_SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "She's sure they'll say we've done what I'd planned, isn't it? You're right, I'm late.",
    "Numbers like 1234567, 3.14159 and 2024-01-31 show up in text; so do $5.99 and 100%.",
    "def encode(self, text: str) -> list[int]:\n    return [ord(c) for c in text]\n",
    "Café, naïve, résumé, façade, jalapeño, São Paulo, Zürich, Ångström, œuvre.",
    "Привет, как дела? Всё хорошо, спасибо. Москва и Санкт-Петербург.",
    "東京は日本の首都です。北京是中国的首都。我爱自然语言处理。",
    "안녕하세요, 만나서 반갑습니다. 한국어 토큰화 테스트입니다.",
    "مرحبا بالعالم، هذه جملة باللغة العربية للاختبار.",
    "Ελληνικά: Καλημέρα κόσμε, ΣΊΣΥΦΟΣ και σοφία.",
    "Emoji: 😀 👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️ 🎉🎉 ✨",
    "Tabs\tand  double  spaces,\nnew lines\n\nand   trailing spaces   ",
    "HTTP/1.1 200 OK -- https://example.com/path?query=value&x=1#frag",
    "I can't believe it's not butter! THEY'RE HERE. We'LL see.",
    "हिन्दी में एक वाक्य। ภาษาไทยก็มีด้วย",
    "Unicode punctuation: «quotes», “curly”, ‘single’, — dash … ellipsis ¿qué? ¡sí!",
]


def corpus() -> list[str]:
    """A deterministic corpus: the sentences, and word-shuffled variants of them."""
    lines = []
    for rep in range(40):
        for i, s in enumerate(_SENTENCES):
            words = s.split(" ")
            k = (rep * 7 + i * 3) % max(1, len(words))
            lines.append(" ".join(words[k:] + words[:k]))
            lines.append(s.lower() if rep % 2 else s)
    return lines


def _bpe_bytelevel(vocab_size: int, special: list[str]) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=special, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer)
    return tok


def make_gpt2() -> Tokenizer:
    tok = _bpe_bytelevel(700, ["<|endoftext|>"])
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def make_roberta() -> Tokenizer:
    tok = _bpe_bytelevel(650, ["<s>", "<pad>", "</s>", "<unk>"])
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=False, normalized=False)])
    tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")),
                                                      ("<s>", tok.token_to_id("<s>")),
                                                      add_prefix_space=True, trim_offsets=True)
    return tok


def _split_bytelevel(pattern: str, vocab_size: int, special: list[str]) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=special, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer)
    tok.decoder = decoders.ByteLevel()
    return tok


def make_llama3() -> Tokenizer:
    special = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
               "<|eot_id|>"]
    tok = _split_bytelevel(LLAMA3_PATTERN, 800, special)
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                      special_tokens=[("<|begin_of_text|>",
                                                       tok.token_to_id("<|begin_of_text|>"))]),
    ])
    data = json.loads(tok.to_str())
    data["model"]["ignore_merges"] = True
    # Llama 3 writes merges as pairs; some whole words are in the vocab without a merge path.
    data["model"]["merges"] = [m.split(" ") if isinstance(m, str) else m for m in data["model"]["merges"]]
    vocab = data["model"]["vocab"]
    for word in ["Ġunmergeable", "Ġtokenizer", "ĠÃ©"]:
        if word not in vocab:
            vocab[word] = len(vocab) + len(data["added_tokens"])
    return Tokenizer.from_str(json.dumps(data))


def make_qwen2() -> Tokenizer:
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = _split_bytelevel(QWEN2_PATTERN, 750, special)
    tok.normalizer = normalizers.NFC()
    tok.add_tokens([AddedToken("<tool_call>", special=False, normalized=False),
                    AddedToken("</tool_call>", special=False, normalized=False)])
    return tok


def _byte_fallback_vocab(tok: Tokenizer, special: list[str]) -> Tokenizer:
    """Rebuilds a trained BPE's vocab SentencePiece-style: specials, then <0x00>..<0xFF>, then the rest."""
    data = json.loads(tok.to_str())
    old = sorted(data["model"]["vocab"].items(), key=lambda kv: kv[1])
    vocab: dict[str, int] = {}
    for t in special + [f"<0x{b:02X}>" for b in range(256)]:
        vocab[t] = len(vocab)
    for t, _ in old:
        if t not in vocab:
            vocab[t] = len(vocab)
    data["model"]["vocab"] = vocab
    for added in data["added_tokens"]:
        added["id"] = vocab[added["content"]]
    return Tokenizer.from_str(json.dumps(data))


def make_llama2() -> Tokenizer:
    special = ["<unk>", "<s>", "</s>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=special, show_progress=False,
                                  limit_alphabet=90)
    tok.train_from_iterator(corpus(), trainer)
    tok = _byte_fallback_vocab(tok, special)
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B:1",
                                                       special_tokens=[("<s>", 1)])
    return tok


def make_mistral() -> Tokenizer:
    special = ["<unk>", "<s>", "</s>", "[INST]", "[/INST]"]
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=special, show_progress=False,
                                  limit_alphabet=70)
    tok.train_from_iterator(corpus(), trainer)
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B:1",
                                                       special_tokens=[("<s>", tok.token_to_id("<s>"))])
    return tok


def _make_bert(lowercase: bool, max_chars: int) -> Tokenizer:
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=max_chars))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                strip_accents=None if lowercase else False,
                                                lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=700, special_tokens=special, show_progress=False,
                                        limit_alphabet=120)
    tok.train_from_iterator(corpus(), trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))])
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    return tok


def make_bert() -> Tokenizer:
    return _make_bert(lowercase=True, max_chars=100)


def make_bert_cased() -> Tokenizer:
    return _make_bert(lowercase=False, max_chars=12)


def _train_spm(**options) -> bytes:
    """A SentencePiece unigram model trained on the corpus, as the bytes of its .model file."""
    import sentencepiece as spm
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(corpus()), model_writer=buf, model_type="unigram",
                                   num_threads=1, minloglevel=2, hard_vocab_limit=False, **options)
    return buf.getvalue()


def _spm_proto(model: bytes):
    from transformers.convert_slow_tokenizer import import_protobuf
    proto = import_protobuf().ModelProto()
    proto.ParseFromString(model)
    return proto


def make_t5() -> Tokenizer:
    from transformers.convert_slow_tokenizer import T5Converter
    # T5's layout: pad 0, eos 1, unk 2, no bos; 98% character coverage leaves rare characters to unk.
    model = _train_spm(vocab_size=300, normalization_rule_name="nmt_nfkc", character_coverage=0.98,
                       pad_id=0, eos_id=1, unk_id=2, bos_id=-1)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "spiece.model"
        path.write_bytes(model)
        ids = {p.piece: i for i, p in enumerate(_spm_proto(model).pieces)}
        original = types.SimpleNamespace(vocab_file=str(path), _extra_ids=3, legacy=True,
                                         convert_tokens_to_ids=lambda t: ids[t])
        tok = T5Converter(original).converted()
    tok.add_special_tokens([f"<extra_id_{i}>" for i in range(3)])
    return tok


def _from_spm_proto(model: bytes) -> Tokenizer:
    from transformers.convert_slow_tokenizer import SpmConverter
    proto = _spm_proto(model)
    vocab = [(p.piece, p.score) for p in proto.pieces]
    return SpmConverter.build_tokenizer_from_spm_proto(proto, vocab)


def make_spm_fallback() -> Tokenizer:
    return _from_spm_proto(_train_spm(vocab_size=600, normalization_rule_name="nmt_nfkc", byte_fallback=True,
                                      character_coverage=0.98))


# Rules of spm_rules' charsmap, "source code points<TAB>target code points" (hex). Mapping the first
# character of a cluster reveals the cluster: tokenizers replaces the whole of a cluster under 6 bytes.
SPM_RULES = {"61": "41", "62": "62 62", "63": "", "31": "6F 6E 65", "65 301": "C9", "78": "58", "78 301": "59",
             "915": "4B", "600": "50", "1100": "4C", "200D": "5A", "FB01": "66 69", "2460": "31", "D": "20",
             "A": "20", "30": "", "3000": "20"}


def make_spm_rules() -> Tokenizer:
    with tempfile.TemporaryDirectory() as tmp:
        rules = Path(tmp) / "rules.tsv"
        rules.write_text("".join(f"{k}\t{v}\n" for k, v in SPM_RULES.items()), encoding="utf-8")
        return _from_spm_proto(_train_spm(vocab_size=250, normalization_rule_tsv=str(rules)))


MAKERS = {
    "gpt2": make_gpt2,
    "roberta": make_roberta,
    "llama3": make_llama3,
    "qwen2": make_qwen2,
    "llama2": make_llama2,
    "mistral": make_mistral,
    "bert": make_bert,
    "bert_cased": make_bert_cased,
    "t5": make_t5,
    "spm_fallback": make_spm_fallback,
    "spm_rules": make_spm_rules,
}


# Tokenizers whose merges are written as "a b" strings; the others keep ["a", "b"] pairs.
STRING_MERGES = {"gpt2", "llama2"}


def make(name: str, folder: Path) -> Path:
    """Writes folder/tokenizer.json for `name` and returns its path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tokenizer.json"
    data = json.loads(MAKERS[name]().to_str())
    if name in STRING_MERGES:
        # The older spelling of merges (GPT-2, Llama 2 files on the Hub): "a b" strings.
        data["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in data["model"]["merges"]]
    path.write_text(json.dumps(data, ensure_ascii=False, indent=2), encoding="utf-8")
    return path


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "tokenizers_out")
    for name in MAKERS:
        print(make(name, out / name))
