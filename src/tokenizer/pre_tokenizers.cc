// Pre-tokenizers of tokenizer.json (tokenizers/src/pre_tokenizers), and hand-written matchers for the
// regexes real tokenizers split with. Those use \p{L}, \p{N} and the lookahead (?!\S), which
// std::regex cannot express; each known pattern string is recognised exactly and matched with
// Oniguruma's semantics (leftmost match, first alternative that succeeds, greedy with backtracking).
#include <algorithm>

#include "core/error.h"
#include "tokenizer/stages.h"

namespace hfx::tokenizer {

namespace {

using unicode::props;

inline bool is_letter(char32_t c) { return props(c) & unicode::kLetter; }
inline bool is_number(char32_t c) { return props(c) & unicode::kNumber; }
inline bool is_space(char32_t c) { return props(c) & unicode::kWhiteSpace; }
// [^\s\p{L}\p{N}]
inline bool is_other(char32_t c) {
  return !(props(c) & (unicode::kWhiteSpace | unicode::kLetter | unicode::kNumber));
}
inline bool is_newline(char32_t c) { return c == '\r' || c == '\n'; }

}  // namespace

class KnownRegex {
 public:
  enum Kind { Gpt2, Llama3, Qwen2 };
  explicit KnownRegex(Kind kind) : kind_(kind) {}

  // End of the match starting exactly at `i`, or `i` when no alternative matches there.
  size_t match_at(const std::u32string& s, size_t i) const {
    const size_t n = s.size();
    char32_t c = s[i];
    // Contractions: 's|'t|'re|'ve|'m|'ll|'d, case-insensitive (with Unicode case folding, where
    // U+017F LATIN SMALL LETTER LONG S folds to s) in Llama 3 and Qwen2.
    if (c == '\'' && i + 1 < n) {
      bool fold = kind_ != Gpt2;
      auto eq = [&](size_t k, char32_t lower) {
        if (k >= n) return false;
        char32_t x = s[k];
        if (x == lower) return true;
        if (!fold) return false;
        return x == lower - 32 || (lower == 's' && x == 0x17F);
      };
      if (eq(i + 1, 's') || eq(i + 1, 't') || eq(i + 1, 'm') || eq(i + 1, 'd')) return i + 2;
      if ((eq(i + 1, 'r') || eq(i + 1, 'v')) && eq(i + 2, 'e')) return i + 3;
      if (eq(i + 1, 'l') && eq(i + 2, 'l')) return i + 3;
    }
    if (kind_ == Gpt2) {
      // ` ?\p{L}+|` ?\p{N}+| ?[^\s\p{L}\p{N}]+`
      size_t j = i + (c == ' ' ? 1 : 0);
      if (j < n) {
        for (auto cls : {is_letter, is_number, is_other}) {
          if (cls(s[j])) {
            size_t k = j;
            while (k < n && cls(s[k])) ++k;
            return k;
          }
        }
      }
    } else {
      // [^\r\n\p{L}\p{N}]?\p{L}+
      if (!is_newline(c) && !is_letter(c) && !is_number(c) && i + 1 < n && is_letter(s[i + 1])) {
        size_t k = i + 1;
        while (k < n && is_letter(s[k])) ++k;
        return k;
      }
      if (is_letter(c)) {
        size_t k = i;
        while (k < n && is_letter(s[k])) ++k;
        return k;
      }
      // \p{N}{1,3} (Llama 3) or \p{N} (Qwen2)
      if (is_number(c)) {
        size_t limit = kind_ == Llama3 ? 3 : 1, k = i;
        while (k < n && k - i < limit && is_number(s[k])) ++k;
        return k;
      }
      //  ?[^\s\p{L}\p{N}]+[\r\n]*
      size_t j = i + (c == ' ' ? 1 : 0);
      if (j < n && is_other(s[j])) {
        size_t k = j;
        while (k < n && is_other(s[k])) ++k;
        while (k < n && is_newline(s[k])) ++k;
        return k;
      }
      // \s*[\r\n]+ : the whitespace run up to and including its last line break
      size_t run = i;
      while (run < n && is_space(s[run])) ++run;
      for (size_t k = run; k > i; --k)
        if (is_newline(s[k - 1])) return k;
    }
    // \s+(?!\S)|\s+ : a whitespace run, less its last character when a non-space follows it
    // (that character then starts the next match, e.g. " world").
    size_t run = i;
    while (run < n && is_space(s[run])) ++run;
    if (run == i) return i;
    if (run == n || run - i == 1) return run;
    return run - 1;
  }

 private:
  Kind kind_;
};

const KnownRegex* find_known_regex(std::string_view pattern) {
  static const KnownRegex gpt2(KnownRegex::Gpt2), llama3(KnownRegex::Llama3), qwen2(KnownRegex::Qwen2);
  static constexpr std::string_view kGpt2 =
      R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
  static constexpr std::string_view kLlama3 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  static constexpr std::string_view kQwen2 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  if (pattern == kGpt2) return &gpt2;
  if (pattern == kLlama3) return &llama3;
  if (pattern == kQwen2) return &qwen2;
  return nullptr;
}

Matches find_regex_matches(const KnownRegex& re, const std::u32string& s) {
  Matches out;
  for (size_t i = 0; i < s.size();) {
    size_t end = re.match_at(s, i);
    if (end > i) {
      out.emplace_back(i, end);
      i = end;
    } else {
      ++i;
    }
  }
  return out;
}

void PreTokenizer::apply(Pieces& pieces) const {
  Pieces out;
  out.reserve(pieces.size() * 2);
  for (auto& p : pieces) {
    if (p.id >= 0) {
      out.push_back(std::move(p));
      continue;
    }
    size_t first = out.size();
    split(p, out);
    // Drop what came out empty; only the first piece can still begin the input.
    size_t w = first;
    for (size_t r = first; r < out.size(); ++r)
      if (!out[r].text.empty()) {
        if (w != r) out[w] = std::move(out[r]);
        ++w;
      }
    out.resize(w);
    for (size_t r = first; r < out.size(); ++r) out[r].at_start = p.at_start && r == first;
  }
  pieces = std::move(out);
}

namespace {

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

Behavior parse_behavior(const Node& node) {
  std::string b = node.str();
  if (b == "Removed") return Behavior::Removed;
  if (b == "Isolated") return Behavior::Isolated;
  if (b == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::MergedWithNext;
  if (b == "Contiguous") return Behavior::Contiguous;
  node.wrong("one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
}

// NormalizedString::split: `matches` become (offsets, is_match) spans covering the text, combined
// by `behavior`, and appended to `out` (empty spans are dropped later by apply()).
void split_by(const Piece& piece, const Matches& matches, Behavior behavior, bool invert, Pieces& out) {
  struct Span {
    size_t b, e;
    bool is_match;
  };
  const std::u32string& s = piece.text;
  std::vector<Span> spans;
  if (s.empty()) {
    spans.push_back({0, 0, false});
  } else {
    size_t prev = 0;
    for (auto [b, e] : matches) {
      if (prev != b) spans.push_back({prev, b, false});
      spans.push_back({b, e, true});
      prev = e;
    }
    if (prev != s.size()) spans.push_back({prev, s.size(), false});
  }
  if (invert)
    for (auto& sp : spans) sp.is_match = !sp.is_match;

  std::vector<std::pair<size_t, size_t>> keep;
  switch (behavior) {
    case Behavior::Isolated:
      for (auto& sp : spans) keep.emplace_back(sp.b, sp.e);
      break;
    case Behavior::Removed:
      for (auto& sp : spans)
        if (!sp.is_match) keep.emplace_back(sp.b, sp.e);
      break;
    case Behavior::Contiguous: {
      bool prev_match = false;
      for (auto& sp : spans) {
        if (sp.is_match == prev_match && !keep.empty())
          keep.back().second = sp.e;
        else
          keep.emplace_back(sp.b, sp.e);
        prev_match = sp.is_match;
      }
      break;
    }
    case Behavior::MergedWithPrevious: {
      bool prev_match = false;
      for (auto& sp : spans) {
        if (sp.is_match && !prev_match && !keep.empty())
          keep.back().second = sp.e;
        else
          keep.emplace_back(sp.b, sp.e);
        prev_match = sp.is_match;
      }
      break;
    }
    case Behavior::MergedWithNext: {
      bool prev_match = false;
      for (size_t k = spans.size(); k-- > 0;) {
        auto& sp = spans[k];
        if (sp.is_match && !prev_match && !keep.empty())
          keep.back().first = sp.b;
        else
          keep.emplace_back(sp.b, sp.e);
        prev_match = sp.is_match;
      }
      std::reverse(keep.begin(), keep.end());
      break;
    }
  }
  for (auto [b, e] : keep) out.push_back(Piece{s.substr(b, e - b), -1, false});
}

// Every character for which `pred` holds is a match of its own.
template <typename Pred>
Matches char_matches(const std::u32string& s, Pred pred) {
  Matches m;
  for (size_t i = 0; i < s.size(); ++i)
    if (pred(s[i])) m.emplace_back(i, i + 1);
  return m;
}

Matches literal_matches(const std::u32string& s, const std::u32string& lit) {
  Matches m;
  if (lit.empty()) return m;
  for (size_t pos = s.find(lit); pos != std::u32string::npos; pos = s.find(lit, pos + lit.size()))
    m.emplace_back(pos, pos + lit.size());
  return m;
}

void byte_level_map(std::u32string& s) {
  std::string bytes = unicode::to_utf8(s);
  std::u32string out;
  out.reserve(bytes.size());
  for (unsigned char b : bytes) out.push_back(byte_to_char(b));
  s = std::move(out);
}

class ByteLevel : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, bool use_regex) : add_prefix_space_(add_prefix_space), use_regex_(use_regex) {}
  void split(Piece& p, Pieces& out) const override {
    if (add_prefix_space_ && (p.text.empty() || p.text[0] != U' ')) p.text.insert(p.text.begin(), U' ');
    size_t first = out.size();
    if (use_regex_) {
      static const KnownRegex* gpt2 = find_known_regex(kGpt2Pattern);
      split_by(p, find_regex_matches(*gpt2, p.text), Behavior::Isolated, false, out);
    } else {
      out.push_back(Piece{std::move(p.text), -1, false});
    }
    for (size_t i = first; i < out.size(); ++i) byte_level_map(out[i].text);
  }
  static constexpr std::string_view kGpt2Pattern =
      R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

 private:
  bool add_prefix_space_, use_regex_;
};

class Split : public PreTokenizer {
 public:
  Split(const KnownRegex* re, std::u32string literal, Behavior behavior, bool invert)
      : re_(re), literal_(std::move(literal)), behavior_(behavior), invert_(invert) {}
  void split(Piece& p, Pieces& out) const override {
    Matches m = re_ ? find_regex_matches(*re_, p.text) : literal_matches(p.text, literal_);
    split_by(p, m, behavior_, invert_, out);
  }

 private:
  const KnownRegex* re_;
  std::u32string literal_;
  Behavior behavior_;
  bool invert_;
};

enum class PrependScheme { Always, First, Never };

class Metaspace : public PreTokenizer {
 public:
  Metaspace(char32_t replacement, PrependScheme scheme, bool split)
      : replacement_(replacement), scheme_(scheme), split_(split) {}
  void split(Piece& p, Pieces& out) const override {
    for (auto& c : p.text)
      if (c == U' ') c = replacement_;
    bool starts = !p.text.empty() && p.text[0] == replacement_;
    if ((scheme_ == PrependScheme::Always && !starts) || (scheme_ == PrependScheme::First && !starts && p.at_start))
      p.text.insert(p.text.begin(), replacement_);
    if (split_) {
      char32_t r = replacement_;
      split_by(p, char_matches(p.text, [r](char32_t c) { return c == r; }), Behavior::MergedWithNext, false, out);
    } else {
      out.push_back(Piece{std::move(p.text), -1, false});
    }
  }

 private:
  char32_t replacement_;
  PrependScheme scheme_;
  bool split_;
};

class CharClassSplit : public PreTokenizer {
 public:
  // Splits on characters having any of `props` (or equal to `ch`), with `behavior`.
  CharClassSplit(uint32_t props, Behavior behavior, char32_t ch = 0) : props_(props), ch_(ch), behavior_(behavior) {}
  void split(Piece& p, Pieces& out) const override {
    uint32_t mask = props_;
    char32_t ch = ch_;
    split_by(p, char_matches(p.text, [&](char32_t c) { return ch ? c == ch : (props(c) & mask) != 0; }), behavior_,
             false, out);
  }

 private:
  uint32_t props_;
  char32_t ch_;
  Behavior behavior_;
};

class BertPreTokenizer : public PreTokenizer {
 public:
  void split(Piece& p, Pieces& out) const override {
    Pieces words;
    split_by(p, char_matches(p.text, is_space), Behavior::Removed, false, words);
    for (auto& w : words)
      split_by(w, char_matches(w.text, [](char32_t c) { return (props(c) & unicode::kBertPunct) != 0; }),
               Behavior::Isolated, false, out);
  }
};

// Whitespace: the regex \w+|[^\w\s]+, keeping the matches.
class Whitespace : public PreTokenizer {
 public:
  void split(Piece& p, Pieces& out) const override {
    const auto& s = p.text;
    Matches m;
    for (size_t i = 0; i < s.size();) {
      auto word = [](char32_t c) { return (props(c) & unicode::kWord) != 0; };
      auto other = [&](char32_t c) { return !word(c) && !is_space(c); };
      size_t k = i;
      if (word(s[i])) {
        while (k < s.size() && word(s[k])) ++k;
      } else if (other(s[i])) {
        while (k < s.size() && other(s[k])) ++k;
      }
      if (k > i) {
        m.emplace_back(i, k);
        i = k;
      } else {
        ++i;
      }
    }
    split_by(p, m, Behavior::Removed, true, out);
  }
};

class Sequence : public PreTokenizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {}
  void apply(Pieces& pieces) const override {
    for (const auto& s : steps_) s->apply(pieces);
  }
  void split(Piece&, Pieces&) const override {}

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const Node& node) {
  std::string type = node.type();
  if (type == "ByteLevel")
    return std::make_unique<ByteLevel>(node["add_prefix_space"].boolean_or(true), node["use_regex"].boolean_or(true));
  if (type == "Split") {
    Node pattern = node["pattern"];
    if (!pattern.present() || !pattern.value().is_object()) pattern.wrong("an object {\"Regex\": ...} or {\"String\": ...}");
    Behavior behavior = parse_behavior(node["behavior"]);
    bool invert = node["invert"].boolean_or(false);
    if (pattern["Regex"].present()) {
      std::string re = pattern["Regex"].str();
      const KnownRegex* known = find_known_regex(re);
      if (!known)
        pattern["Regex"].unsupported_value(
            "a Split regex other than the GPT-2, Llama 3 and Qwen2 patterns (hfx matches those by hand)");
      return std::make_unique<Split>(known, std::u32string(), behavior, invert);
    }
    std::u32string lit = unicode::from_utf8(pattern["String"].str());
    if (lit.empty()) pattern["String"].wrong("a non-empty string");
    return std::make_unique<Split>(nullptr, std::move(lit), behavior, invert);
  }
  if (type == "Metaspace") {
    char32_t replacement = node["replacement"].single_char();
    PrependScheme scheme = PrependScheme::Always;
    if (node["prepend_scheme"].present()) {
      std::string s = node["prepend_scheme"].str();
      if (s == "always") scheme = PrependScheme::Always;
      else if (s == "first") scheme = PrependScheme::First;
      else if (s == "never") scheme = PrependScheme::Never;
      else node["prepend_scheme"].wrong("one of always, first, never");
    } else if (!node["add_prefix_space"].boolean_or(true)) {
      scheme = PrependScheme::Never;  // the spelling before prepend_scheme
    }
    return std::make_unique<Metaspace>(replacement, scheme, node["split"].boolean_or(true));
  }
  if (type == "BertPreTokenizer") return std::make_unique<BertPreTokenizer>();
  if (type == "Whitespace") return std::make_unique<Whitespace>();
  if (type == "WhitespaceSplit") return std::make_unique<CharClassSplit>(unicode::kWhiteSpace, Behavior::Removed);
  if (type == "Punctuation")
    return std::make_unique<CharClassSplit>(
        unicode::kBertPunct, node["behavior"].present() ? parse_behavior(node["behavior"]) : Behavior::Isolated);
  if (type == "Digits")
    return std::make_unique<CharClassSplit>(
        unicode::kNumber, node["individual_digits"].boolean_or(false) ? Behavior::Isolated : Behavior::Contiguous);
  if (type == "CharDelimiterSplit")
    return std::make_unique<CharClassSplit>(0, Behavior::Removed, node["delimiter"].single_char());
  if (type == "Sequence") {
    Node list = node["pretokenizers"];
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (size_t i = 0; i < list.array().size(); ++i) steps.push_back(make_pre_tokenizer(list[i]));
    return std::make_unique<Sequence>(std::move(steps));
  }
  node["type"].unsupported_value("pre-tokenizer");
}

}  // namespace hfx::tokenizer
