// Normalizers of tokenizer.json, each as `tokenizers` implements it (tokenizers/src/normalizers).
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

// The pattern of Replace: {"String": "..."}; a {"Regex": ...} is refused.
std::u32string string_pattern(const Node& pattern) {
  if (!pattern.present() || !pattern.value().is_object()) pattern.wrong("an object {\"String\": ...}");
  if (pattern["Regex"].present())
    pattern["Regex"].unsupported_value("a Replace with a regex pattern (only {\"String\": ...} is supported)");
  return unicode::from_utf8(pattern["String"].str());
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
  if (type == "Replace")
    return std::make_unique<Replace>(string_pattern(node["pattern"]), unicode::from_utf8(node["content"].str()));
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
