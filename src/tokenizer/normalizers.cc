// Normalizers of tokenizer.json, each as `tokenizers` implements it (tokenizers/src/normalizers).
#include <fmt/format.h>

#include "core/error.h"
#include "tokenizer/stages.h"

namespace hfx::tokenizer {

namespace {

using unicode::has;
using unicode::Prop;

// Normalized text may be at most kGrowthFactor x the input + kGrowthSlack characters: real normalizers
// grow text by a small factor (NFKC at most 18x a character, BertNormalizer's Chinese spacing 3x,
// Prepend one piece), while a Sequence of Replace "a" -> "aa" doubles it per step. The limit of the
// normalization under way (one text at a time per thread); every step that can grow text checks it.
constexpr size_t kGrowthFactor = 64, kGrowthSlack = 4096;
thread_local size_t growth_limit = SIZE_MAX;
thread_local const std::filesystem::path* growth_file = nullptr;

void check_growth(size_t length) {
  if (length <= growth_limit) return;
  bad_input("{}: the normalizer makes the text longer than {} characters ({} x the input + {}): a normalizer that "
            "grows text without bound (e.g. a Sequence of Replace steps that each lengthen it) is refused",
            growth_file ? growth_file->string() : std::string("tokenizer.json"), growth_limit, kGrowthFactor, kGrowthSlack);
}

class UnicodeForm : public Normalizer {
 public:
  explicit UnicodeForm(unicode::Form form) : form_(form) {}
  void normalize(std::u32string& s) const override { s = unicode::normalize(s, form_); }

 private:
  unicode::Form form_;
};

class Lowercase : public Normalizer {
 public:
  void normalize(std::u32string& s) const override { s = unicode::lowercase(s); }
};

class Strip : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::u32string& s) const override {
    size_t b = 0, e = s.size();
    if (left_)
      while (b < e && has(s[b], unicode::kWhiteSpace)) ++b;
    if (right_)
      while (e > b && has(s[e - 1], unicode::kWhiteSpace)) --e;
    s = s.substr(b, e - b);
  }

 private:
  bool left_, right_;
};

void filter(std::u32string& s, unicode::Prop drop) {
  std::u32string out;
  out.reserve(s.size());
  for (char32_t c : s)
    if (!has(c, drop)) out.push_back(c);
  s = std::move(out);
}

class StripAccents : public Normalizer {
 public:
  void normalize(std::u32string& s) const override { filter(s, unicode::kCombiningMark); }
};

// Literal replacement, left to right, matches not overlapping.
void replace_all(std::u32string& s, const std::u32string& pattern, const std::u32string& content) {
  if (pattern.empty()) return;
  std::u32string out;
  size_t pos = 0;
  while (true) {
    size_t hit = s.find(pattern, pos);
    if (hit == std::u32string::npos) break;
    out.append(s, pos, hit - pos);
    check_growth(out.size() + content.size());
    out += content;
    pos = hit + pattern.size();
  }
  if (pos == 0) return;
  out.append(s, pos, std::u32string::npos);
  s = std::move(out);
}

class Replace : public Normalizer {
 public:
  Replace(std::u32string pattern, std::u32string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(std::u32string& s) const override { replace_all(s, pattern_, content_); }

 private:
  std::u32string pattern_, content_;
};

class Prepend : public Normalizer {
 public:
  explicit Prepend(std::u32string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::u32string& s) const override {
    if (!s.empty()) s.insert(0, prefix_);
  }

 private:
  std::u32string prefix_;
};

bool is_chinese_char(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

class BertNormalizer : public Normalizer {
 public:
  BertNormalizer(bool clean_text, bool chinese, bool strip_accents, bool lowercase)
      : clean_text_(clean_text), chinese_(chinese), strip_accents_(strip_accents), lowercase_(lowercase) {}

  void normalize(std::u32string& s) const override {
    if (clean_text_) {
      std::u32string out;
      out.reserve(s.size());
      for (char32_t c : s) {
        uint32_t p = unicode::props(c);
        if (c != '\t' && c != '\n' && c != '\r' && (p & unicode::kBertRemove)) continue;
        out.push_back((p & unicode::kWhiteSpace) ? U' ' : c);
      }
      s = std::move(out);
    }
    if (chinese_) {
      std::u32string out;
      out.reserve(s.size());
      for (char32_t c : s) {
        if (is_chinese_char(c)) {
          out.push_back(U' ');
          out.push_back(c);
          out.push_back(U' ');
        } else {
          out.push_back(c);
        }
      }
      s = std::move(out);
    }
    if (strip_accents_) {
      s = unicode::normalize(s, unicode::Form::NFD);
      filter(s, unicode::kBertMn);
    }
    if (lowercase_) s = unicode::lowercase(s);
  }

 private:
  bool clean_text_, chinese_, strip_accents_, lowercase_;
};

class Sequence : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  void normalize(std::u32string& s) const override {
    for (const auto& n : steps_) {
      n->normalize(s);
      check_growth(s.size());  // each step grows by a bounded factor; a chain of them must not multiply
    }
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

// Replace with the regex "c{n,}" (SpmConverter's " {2,}"): every run of at least n c's, leftmost
// first and greedy, becomes `content`. The only regexes of Replace that hfx implements.
class ReplaceRuns : public Normalizer {
 public:
  ReplaceRuns(char32_t c, size_t min, std::u32string content) : c_(c), min_(min), content_(std::move(content)) {}
  void normalize(std::u32string& s) const override {
    std::u32string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
      if (s[i] != c_) {
        out.push_back(s[i++]);
        continue;
      }
      size_t j = i;
      while (j < s.size() && s[j] == c_) ++j;
      if (j - i >= min_) {  // min_ >= 1
        out += content_;
        check_growth(out.size());
      } else {
        out.append(s, i, j - i);
      }
      i = j;
    }
    s = std::move(out);
  }

 private:
  char32_t c_;
  size_t min_;
  std::u32string content_;
};

// Base64 as the `base64` crate's STANDARD engine decodes it: padded to a multiple of 4, canonical
// (no bits left over in the last character). nullopt when malformed.
std::optional<std::string> base64_decode(std::string_view in) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (in.size() % 4) return std::nullopt;
  std::string out;
  out.reserve(in.size() / 4 * 3);
  for (size_t i = 0; i < in.size(); i += 4) {
    bool last = i + 4 == in.size();
    size_t pad = last ? (in[i + 3] == '=') + (in[i + 2] == '=' && in[i + 3] == '=') : 0;
    uint32_t bits = 0;
    for (size_t k = 0; k < 4 - pad; ++k) {
      int v = value(in[i + k]);
      if (v < 0) return std::nullopt;
      bits |= uint32_t(v) << (18 - 6 * k);
    }
    if ((pad == 1 && (bits & 0xFF)) || (pad == 2 && (bits & 0xFFFF))) return std::nullopt;  // non-canonical
    out.push_back(char(bits >> 16));
    if (pad < 2) out.push_back(char(bits >> 8));
    if (pad < 1) out.push_back(char(bits));
  }
  return out;
}

// SentencePiece's normalizer (spm_precompiled): precompiled_charsmap is
//   u32 LE trie size in bytes | the Darts double-array trie, u32 LE units | replacement strings
// where the trie maps a UTF-8 key to the offset of its replacement, a '\0'-terminated string.
// `tokenizers` (normalizers/precompiled.rs) looks up each extended grapheme cluster of fewer than 6
// UTF-8 bytes whole, else each of its characters; a lookup takes the *shortest* key that prefixes the
// looked-up bytes and replaces the whole cluster (or character) with its string. That last rule is
// SentencePiece's own oddity (a cluster "<mapped char><combining mark>" loses the mark) and is kept.
class Precompiled : public Normalizer {
 public:
  explicit Precompiled(const Node& node) : where_(node.path()), file_(node.file().path.string()) {
    std::string blob;
    if (auto decoded = base64_decode(node.str())) blob = std::move(*decoded);
    else node.wrong("a base64 string (standard alphabet, padded)");
    if (blob.size() < 4) node.wrong("a charsmap of at least 4 bytes (the trie size)");
    uint32_t trie_bytes = read_u32(blob, 0);
    size_t units = trie_bytes / 4;  // as spm_precompiled: a size not a multiple of 4 leaves bytes to the strings
    if (units > (blob.size() - 4) / 4)
      bad_input("{}: field \"{}\": the charsmap's trie is {} bytes but only {} bytes follow", file_, where_,
                trie_bytes, blob.size() - 4);
    if (units == 0) bad_input("{}: field \"{}\": the charsmap's trie is empty", file_, where_);
    trie_.resize(units);
    for (size_t i = 0; i < units; ++i) trie_[i] = read_u32(blob, 4 + 4 * i);
    normalized_ = blob.substr(4 + 4 * units);
    if (!unicode::is_valid_utf8(normalized_))
      bad_input("{}: field \"{}\": the charsmap's replacement strings are not valid UTF-8", file_, where_);
  }

  void normalize(std::u32string& s) const override {
    std::u32string out;
    out.reserve(s.size());
    std::string key;
    for (size_t b = 0; b < s.size();) {
      size_t e = unicode::grapheme_end(s, b);
      key.clear();
      for (size_t i = b; i < e; ++i) unicode::append_utf8(key, s[i]);
      if (!(key.size() < 6 && transform(key, out))) {
        for (size_t i = b; i < e; ++i) {
          key.clear();
          unicode::append_utf8(key, s[i]);
          if (!transform(key, out)) out.push_back(s[i]);
        }
      }
      check_growth(out.size());
      b = e;
    }
    s = std::move(out);
  }

 private:
  static uint32_t read_u32(const std::string& b, size_t at) {
    return uint32_t(uint8_t(b[at])) | uint32_t(uint8_t(b[at + 1])) << 8 | uint32_t(uint8_t(b[at + 2])) << 16 |
           uint32_t(uint8_t(b[at + 3])) << 24;
  }

  [[noreturn]] void corrupt(std::string_view what) const {
    bad_input("{}: field \"{}\": the charsmap is corrupt: {}", file_, where_, what);
  }
  uint32_t unit(size_t pos) const {
    if (pos >= trie_.size()) corrupt(fmt::format("the trie points to unit {} of {}", pos, trie_.size()));
    return trie_[pos];
  }

  // Appends the replacement of the shortest key prefixing `key` (DoubleArray::common_prefix_search,
  // first result); false when none does.
  bool transform(const std::string& key, std::u32string& out) const {
    auto offset = [](uint32_t u) -> size_t { return size_t(u >> 10) << ((u & (1u << 9)) >> 6); };
    size_t pos = offset(unit(0));
    for (unsigned char c : key) {
      if (c == 0) return false;
      pos ^= c;
      uint32_t u = unit(pos);
      if ((u & ((1u << 31) | 0xFF)) != c) return false;  // label
      pos ^= offset(u);
      if ((u >> 8) & 1) {                                 // has a leaf: its value is the string's offset
        size_t at = unit(pos) & ((1u << 31) - 1);
        if (at > normalized_.size() || (at < normalized_.size() && (uint8_t(normalized_[at]) & 0xC0) == 0x80))
          corrupt(fmt::format("a replacement starts at byte {} of {}, not at a character", at, normalized_.size()));
        size_t end = normalized_.find('\0', at);
        out += unicode::from_utf8(std::string_view(normalized_).substr(at, end == std::string::npos ? end : end - at));
        return true;
      }
    }
    return false;
  }

  std::string where_, file_;
  std::vector<uint32_t> trie_;
  std::string normalized_;
};

// The whole normalizer of a tokenizer.json: sets the growth limit from the input's length.
class Bounded : public Normalizer {
 public:
  Bounded(std::unique_ptr<Normalizer> inner, std::filesystem::path file) : inner_(std::move(inner)), file_(std::move(file)) {}
  void normalize(std::u32string& s) const override {
    struct Scope {  // restores the enclosing limit (none) however normalize() leaves
      size_t limit = growth_limit;
      const std::filesystem::path* file = growth_file;
      ~Scope() {
        growth_limit = limit;
        growth_file = file;
      }
    } scope;
    growth_limit = s.size() > (SIZE_MAX - kGrowthSlack) / kGrowthFactor ? SIZE_MAX : s.size() * kGrowthFactor + kGrowthSlack;
    growth_file = &file_;
    inner_->normalize(s);
    check_growth(s.size());
  }

 private:
  std::unique_ptr<Normalizer> inner_;
  std::filesystem::path file_;
};

// Replace: {"String": "..."}, or {"Regex": "c{n,}"} (a literal character c other than a regex
// metacharacter, n >= 1: SpmConverter's " {2,}"); any other regex is refused.
std::unique_ptr<Normalizer> make_replace(const Node& node) {
  Node pattern = node["pattern"];
  if (!pattern.present() || !pattern.value().is_object()) pattern.wrong("an object {\"String\": ...}");
  std::u32string content = unicode::from_utf8(node["content"].str());
  if (pattern["Regex"].present()) {
    std::u32string re = unicode::from_utf8(pattern["Regex"].str());
    static const std::u32string meta = U"\\^$.|?*+()[]{}#";
    size_t close = re.size() >= 5 ? re.size() - 2 : 0;  // c{n,}: "c", "{", digits, ",", "}"
    bool runs = close > 0 && re[1] == U'{' && re[close] == U',' && re.back() == U'}' &&
                meta.find(re[0]) == meta.npos && close - 2 <= 6;
    size_t min = 0;
    for (size_t i = 2; runs && i < close; ++i) {
      if (re[i] < U'0' || re[i] > U'9') runs = false;
      else min = min * 10 + (re[i] - U'0');
    }
    if (!runs || min == 0)
      pattern["Regex"].unsupported_value("a Replace with a regex pattern (only {\"String\": ...} and \"c{n,}\" are supported)");
    return std::make_unique<ReplaceRuns>(re[0], min, std::move(content));
  }
  return std::make_unique<Replace>(unicode::from_utf8(pattern["String"].str()), std::move(content));
}

}  // namespace

// One normalizer of the tree (a Sequence builds its steps with it), without the growth limit.
static std::unique_ptr<Normalizer> make_step(const Node& node) {
  std::string type = node.type();
  if (type == "NFC") return std::make_unique<UnicodeForm>(unicode::Form::NFC);
  if (type == "NFD") return std::make_unique<UnicodeForm>(unicode::Form::NFD);
  if (type == "NFKC") return std::make_unique<UnicodeForm>(unicode::Form::NFKC);
  if (type == "NFKD") return std::make_unique<UnicodeForm>(unicode::Form::NFKD);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "Strip") return std::make_unique<Strip>(node["strip_left"].boolean_or(true), node["strip_right"].boolean_or(true));
  if (type == "StripAccents") return std::make_unique<StripAccents>();
  if (type == "Replace") return make_replace(node);
  if (type == "Precompiled") return std::make_unique<Precompiled>(node["precompiled_charsmap"]);
  if (type == "Prepend") return std::make_unique<Prepend>(unicode::from_utf8(node["prepend"].str()));
  if (type == "BertNormalizer") {
    bool lowercase = node["lowercase"].boolean_or(true);
    // strip_accents null means "as lowercase".
    bool strip = node["strip_accents"].boolean_or(lowercase);
    return std::make_unique<BertNormalizer>(node["clean_text"].boolean_or(true),
                                            node["handle_chinese_chars"].boolean_or(true), strip, lowercase);
  }
  if (type == "Sequence") {
    Node list = node["normalizers"];
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (size_t i = 0; i < list.array().size(); ++i) steps.push_back(make_step(list[i]));
    return std::make_unique<Sequence>(std::move(steps));
  }
  node["type"].unsupported_value("normalizer");
}

std::unique_ptr<Normalizer> make_normalizer(const Node& node) {
  return std::make_unique<Bounded>(make_step(node), node.file().path);
}

}  // namespace hfx::tokenizer
