// A SentencePiece model file (`*.spm`, `*.model`: the protobuf sentencepiece.ModelProto), read for the
// fields a Unigram tokenizer needs. Marian checkpoints ship their tokenizers only this way
// (source.spm, target.spm and a vocab.json that numbers the pieces), with no tokenizer.json.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace hfx::tokenizer {

struct SentencePieceModel {
  struct Piece {
    std::string text;
    float score = 0;
    int type = 1;  // 1 normal, 2 unknown, 3 control, 4 user defined, 5 unused, 6 byte
  };
  std::vector<Piece> pieces;
  int model_type = 1;  // 1 unigram, 2 bpe, 3 word, 4 char
  int64_t unk_id = 0;
  bool byte_fallback = false;
  std::string precompiled_charsmap;  // the normalizer's compiled rules (nmt_nfkc's), bytes
  bool add_dummy_prefix = true;
};

// Io when the file cannot be read; BadInput naming the file when it is not a SentencePiece model.
SentencePieceModel read_sentencepiece_model(const std::filesystem::path& file);

// The tokenizer.json Transformers' MarianTokenizer amounts to, from a Marian folder's source.spm (the
// SentencePiece Unigram that splits the source text, as SpmConverter converts it) and vocab.json (which
// numbers the pieces; a piece it lacks is <unk>), with </s> appended. Its model is hfx's
// `PieceVocab` (models.cc): the Unigram's pieces looked up in vocab.json.
nlohmann::json marian_tokenizer_json(const std::filesystem::path& dir);

}  // namespace hfx::tokenizer
