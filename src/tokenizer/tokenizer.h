// Hugging Face tokenizer.json, encoded and decoded natively so that the ids equal those of the
// `tokenizers` library (the oracle of tests/oracle/test_tokenizer.py).
//
// Supported pipeline pieces (anything else is refused with Unsupported, naming the field):
//   added_tokens    special and non-special, single_word / lstrip / rstrip / normalized flags
//   normalizer      NFC NFD NFKC NFKD Lowercase Strip StripAccents Replace(String, or the regex
//                   "c{n,}" such as SpmConverter's " {2,}") Prepend BertNormalizer Precompiled
//                   (SentencePiece charsmap) Sequence
//   pre_tokenizer   ByteLevel (GPT-2 regex), Split (String, or the GPT-2 / Llama 3 / Qwen2 regexes,
//                   any behavior, invert), Metaspace, BertPreTokenizer, Whitespace,
//                   WhitespaceSplit, Punctuation, Digits, CharDelimiterSplit, Sequence
//   model           BPE (merges as "a b" or ["a", "b"], byte_fallback, fuse_unk, ignore_merges,
//                   continuing_subword_prefix, end_of_word_suffix; dropout must be off),
//                   WordPiece, WordLevel, Unigram (unk_id, byte_fallback)
//   post_processor  TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel, Sequence
//   decoder         ByteLevel ByteFallback Fuse Strip Replace(String) Metaspace WordPiece
//                   BPEDecoder Sequence
//   truncation / padding of a single sequence
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hfx::tokenizer {

class Tokenizer {
 public:
  // `path` is a tokenizer.json file or a folder holding one (or, for Marian, which ships none, its
  // source.spm and vocab.json: sentencepiece_model.h). Io when it cannot be read, BadInput
  // when it is malformed, Unsupported for valid pipelines hfx does not implement; every message
  // names the file and the field ("tokenizer.json: field \"model.merges[3]\": ...").
  static Tokenizer load(const std::filesystem::path& path);

  // BadInput when `text` is not valid UTF-8.
  std::vector<int64_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // Unknown ids are skipped, as `tokenizers` does. Ill-formed byte sequences become U+FFFD.
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens = true) const;

  std::optional<int64_t> token_to_id(std::string_view token) const;  // added tokens first
  std::optional<std::string> id_to_token(int64_t id) const;
  // Model vocabulary plus the added tokens that are not in it (tokenizers' get_vocab_size()).
  int64_t vocab_size() const;
  const std::filesystem::path& path() const;

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  static Tokenizer from_impl(std::shared_ptr<Impl> impl);  // builds the pipeline from impl->file
  std::shared_ptr<const Impl> impl_;
};

}  // namespace hfx::tokenizer
