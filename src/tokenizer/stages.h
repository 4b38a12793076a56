// Internals of the tokenizer (src/tokenizer/*.cc): the pipeline stages as small classes built from
// their tokenizer.json objects. Text flows through normalizers and pre-tokenizers as UTF-32 pieces
// and reaches the model as UTF-8.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/json_node.h"
#include "tokenizer/unicode_tables.h"

namespace hfx::tokenizer {

// A stretch of text between the pipeline stages. `id` >= 0 marks an added token, which no later
// stage touches. `at_start` tells Metaspace's prepend_scheme "first" that the piece begins the input.
struct Piece {
  std::u32string text;
  int64_t id = -1;
  bool at_start = false;
};
using Pieces = std::vector<Piece>;

// ---- normalizers (normalizers.cc)

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::u32string& s) const = 0;
};
std::unique_ptr<Normalizer> make_normalizer(const Node& node);

// ---- pre-tokenizers (pre_tokenizers.cc)

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits every piece that is not an added token, dropping empty results.
  virtual void apply(Pieces& pieces) const;

 protected:
  virtual void split(Piece& piece, Pieces& out) const = 0;
};
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const Node& node);

// [start, end) of each match, in order, not overlapping.
using Matches = std::vector<std::pair<size_t, size_t>>;
// The known tokenizer regexes (GPT-2, Llama 3, Qwen2); nullptr for any other pattern.
class KnownRegex;
const KnownRegex* find_known_regex(std::string_view pattern);
Matches find_regex_matches(const KnownRegex& re, const std::u32string& s);

// ---- models (models.cc)

class Model {
 public:
  virtual ~Model() = default;
  // Appends the ids of one pre-tokenized piece.
  virtual void tokenize(const std::string& piece, std::vector<int64_t>& out) const = 0;

  std::optional<int64_t> token_to_id(std::string_view token) const;
  const std::string* id_to_token(int64_t id) const;
  // Unigram counts its entries, repeated tokens too (tokenizers' get_vocab_size()).
  virtual int64_t vocab_size() const { return int64_t(vocab_.size()); }

 protected:
  void set_vocab(const Node& vocab_node);  // {"token": id, ...}
  // Ids decode through this vocabulary instead (Marian's separate target vocabulary).
  void set_decode_vocab(const Node& vocab_node);
  int64_t require_token(const Node& where, const std::string& token) const;

  struct Hash {  // lets find() take a string_view without building a std::string
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, int64_t, Hash, std::equal_to<>> vocab_;
  std::unordered_map<int64_t, std::string> vocab_r_;
};
std::unique_ptr<Model> make_model(const Node& node);

// ---- decoders (decoders.cc)

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};
std::unique_ptr<Decoder> make_decoder(const Node& node);

// The GPT-2 byte <-> printable character map of ByteLevel.
char32_t byte_to_char(uint8_t b);
std::optional<uint8_t> char_to_byte(char32_t c);

}  // namespace hfx::tokenizer
