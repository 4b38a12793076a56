#include "tokenizer/sentencepiece_model.h"

#include <openssl/evp.h>

#include <cstring>
#include <optional>
#include <string_view>

#include "core/error.h"
#include "core/files.h"
#include "io/json_fields.h"

namespace hfx::tokenizer {

namespace {

namespace fs = std::filesystem;

// SentencePiece models of real tokenizers are a few MB; a bound keeps a hostile file from being read whole.
constexpr uint64_t kMaxModelBytes = 64ull << 20;

// The protobuf wire format, for the handful of fields read here (a generated class would carry the
// whole schema for them). Every read is bounds-checked; a malformed file is one BadInput line.
class Wire {
 public:
  Wire(std::string_view bytes, const std::string& file) : p_(bytes), file_(file) {}
  bool done() const { return p_.empty(); }

  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_.empty()) malformed("a truncated varint");
      const auto b = uint8_t(p_.front());
      p_.remove_prefix(1);
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    malformed("a varint longer than 10 bytes");
  }
  std::string_view bytes() {
    const uint64_t n = varint();
    if (n > p_.size()) malformed("a field longer than the file");
    std::string_view out = p_.substr(0, size_t(n));
    p_.remove_prefix(size_t(n));
    return out;
  }
  float fixed32() {
    if (p_.size() < 4) malformed("a truncated float");
    float f;
    std::memcpy(&f, p_.data(), 4);
    p_.remove_prefix(4);
    return f;
  }
  // Skips a field of wire type `type` that is not read.
  void skip(uint32_t type) {
    switch (type) {
      case 0: varint(); return;
      case 1: take(8); return;
      case 2: bytes(); return;
      case 5: take(4); return;
      default: malformed(fmt::format("wire type {}", type));
    }
  }
  [[noreturn]] void malformed(const std::string& what) const {
    bad_input("{}: not a SentencePiece model ({})", file_, what);
  }

 private:
  void take(size_t n) {
    if (p_.size() < n) malformed("a truncated field");
    p_.remove_prefix(n);
  }
  std::string_view p_;
  const std::string& file_;
};

// Reads the fields of one message, calling `on(field, type, wire)` for each; `on` returns false for a
// field it does not read, which is skipped.
template <typename F>
void fields(Wire& w, F&& on) {
  while (!w.done()) {
    const uint64_t key = w.varint();
    const uint32_t field = uint32_t(key >> 3), type = uint32_t(key & 7);
    if (!on(field, type, w)) w.skip(type);
  }
}

std::string base64(const std::string& bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()), int(bytes.size()));
  out.resize(size_t(n));
  return out;
}

}  // namespace

SentencePieceModel read_sentencepiece_model(const fs::path& file) {
  const std::string data = read_text_file(file, kMaxModelBytes);
  const std::string name = file.string();
  SentencePieceModel m;
  Wire top(data, name);
  fields(top, [&](uint32_t field, uint32_t type, Wire& w) {
    if (field == 1 && type == 2) {  // pieces
      Wire pw(w.bytes(), name);
      SentencePieceModel::Piece piece;
      fields(pw, [&](uint32_t f, uint32_t t, Wire& x) {
        if (f == 1 && t == 2) piece.text = std::string(x.bytes());
        else if (f == 2 && t == 5) piece.score = x.fixed32();
        else if (f == 3 && t == 0) piece.type = int(x.varint());
        else return false;
        return true;
      });
      m.pieces.push_back(std::move(piece));
    } else if (field == 2 && type == 2) {  // trainer_spec
      Wire tw(w.bytes(), name);
      fields(tw, [&](uint32_t f, uint32_t t, Wire& x) {
        if (f == 3 && t == 0) m.model_type = int(x.varint());
        else if (f == 40 && t == 0) m.unk_id = int64_t(int32_t(x.varint()));
        else if (f == 35 && t == 0) m.byte_fallback = x.varint() != 0;
        else return false;
        return true;
      });
    } else if (field == 3 && type == 2) {  // normalizer_spec
      Wire nw(w.bytes(), name);
      fields(nw, [&](uint32_t f, uint32_t t, Wire& x) {
        if (f == 2 && t == 2) m.precompiled_charsmap = std::string(x.bytes());
        else if (f == 3 && t == 0) m.add_dummy_prefix = x.varint() != 0;
        else return false;
        return true;
      });
    } else {
      return false;
    }
    return true;
  });
  if (m.pieces.empty()) top.malformed("no pieces");
  if (m.unk_id < 0 || m.unk_id >= int64_t(m.pieces.size()))
    top.malformed(fmt::format("unk_id {} outside its {} pieces", m.unk_id, m.pieces.size()));
  return m;
}

nlohmann::json marian_tokenizer_json(const fs::path& dir) {
  using json = nlohmann::json;
  const fs::path spm_file = file_inside(dir, "source.spm", "tokenizer");
  const SentencePieceModel spm = read_sentencepiece_model(spm_file);
  if (spm.model_type != 1)
    unsupported("{}: a SentencePiece model of type {} (hfx reads Unigram models, type 1)", spm_file.string(), spm.model_type);
  if (spm.byte_fallback) unsupported("{}: byte_fallback (MarianTokenizer's models have none)", spm_file.string());
  const io::JsonFile vocab = io::JsonFile::load(file_inside(dir, "vocab.json", "tokenizer"));
  auto id_of = [&](const char* token) -> int64_t {
    auto it = vocab.json.find(token);
    if (it == vocab.json.end() || !it->is_number_integer())
      bad_input("{}: no integer id for {} (MarianTokenizer's eos and unk tokens)", vocab.path.string(), token);
    return it->get<int64_t>();
  };
  const int64_t eos = id_of("</s>");
  id_of("<unk>");
  // MarianTokenizer(separate_vocabs=True): the target's ids decode through target_vocab.json.
  std::optional<io::JsonFile> target_vocab;
  if (fs::exists(dir / "tokenizer_config.json")) {
    const io::JsonFile config = io::JsonFile::load(file_inside(dir, "tokenizer_config.json", "tokenizer"));
    const auto it = config.json.find("separate_vocabs");
    if (it != config.json.end() && it->is_boolean() && it->get<bool>())
      target_vocab = io::JsonFile::load(file_inside(dir, "target_vocab.json", "tokenizer"));
  }
  json pieces = json::array();
  for (const auto& p : spm.pieces) pieces.push_back(json::array({p.text, p.score}));
  json normalizers = json::array();
  if (!spm.precompiled_charsmap.empty())
    normalizers.push_back({{"type", "Precompiled"}, {"precompiled_charsmap", base64(spm.precompiled_charsmap)}});
  normalizers.push_back({{"type", "Strip"}, {"strip_left", false}, {"strip_right", true}});
  normalizers.push_back({{"type", "Replace"}, {"pattern", {{"Regex", " {2,}"}}}, {"content", "\u2581"}});
  const json metaspace = {{"type", "Metaspace"}, {"replacement", "\u2581"},
                          {"prepend_scheme", spm.add_dummy_prefix ? "always" : "never"}, {"split", true}};
  json added = json::array();
  for (const char* special : {"</s>", "<unk>", "<pad>"})
    if (vocab.json.contains(special) && vocab.json[special].is_number_integer())
      added.push_back({{"id", vocab.json[special]}, {"content", special}, {"single_word", false}, {"lstrip", false},
                       {"rstrip", false}, {"normalized", false}, {"special", true}});
  json out = {{"version", "1.0"},
              {"added_tokens", added},
              {"normalizer", {{"type", "Sequence"}, {"normalizers", normalizers}}},
              {"pre_tokenizer", metaspace},
              {"post_processor",
               {{"type", "TemplateProcessing"},
                {"single", json::array({{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}})},
                {"pair", json::array({{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "B"}, {"type_id", 0}}}},
                                      {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}})},
                {"special_tokens", {{"</s>", {{"id", "</s>"}, {"ids", json::array({eos})}, {"tokens", json::array({"</s>"})}}}}}}},
              {"decoder", metaspace},
              {"model", {{"type", "PieceVocab"},
                         {"pieces", {{"type", "Unigram"}, {"unk_id", spm.unk_id}, {"vocab", pieces}, {"byte_fallback", false}}},
                         {"vocab", vocab.json},
                         {"unk_token", "<unk>"}}}};
  if (target_vocab) out["model"]["target_vocab"] = target_vocab->json;
  return out;
}

}  // namespace hfx::tokenizer
