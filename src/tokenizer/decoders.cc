// Decoders of tokenizer.json (tokenizers/src/decoders): each rewrites the list of token strings.
#include <array>

#include "core/error.h"
#include "tokenizer/stages.h"

namespace hfx::tokenizer {

namespace {

// GPT-2's bytes_to_unicode(): printable bytes stand for themselves, the others for U+0100 onwards.
struct ByteMap {
  std::array<char32_t, 256> to_char{};
  std::unordered_map<char32_t, uint8_t> to_byte;
  ByteMap() {
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_char[b] = printable ? char32_t(b) : next++;
      to_byte[to_char[b]] = uint8_t(b);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap map;
  return map;
}

class ByteLevel : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    std::u32string chars;
    for (const auto& t : tokens) {
      chars.clear();
      unicode::decode_utf8(t, chars);
      std::string mapped;
      bool all = true;
      for (char32_t c : chars) {
        auto b = char_to_byte(c);
        if (!b) {
          all = false;
          break;
        }
        mapped.push_back(char(*b));
      }
      bytes += all ? mapped : t;  // a token with a character outside the map stays as it is
    }
    tokens.assign(1, unicode::utf8_lossy(bytes));
  }
};

class ByteFallback : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    auto flush = [&] {
      if (pending.empty()) return;
      if (unicode::is_valid_utf8(pending))
        out.push_back(pending);
      else
        for (size_t i = 0; i < pending.size(); ++i) out.push_back("\xEF\xBF\xBD");
      pending.clear();
    };
    for (auto& t : tokens) {
      if (auto b = parse_byte(t)) {
        pending.push_back(char(*b));
        continue;
      }
      flush();
      out.push_back(std::move(t));
    }
    flush();
    tokens = std::move(out);
  }

 private:
  static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  // "<0xNN>"
  static std::optional<uint8_t> parse_byte(const std::string& t) {
    if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return std::nullopt;
    int hi = hex(t[3]), lo = hex(t[4]);
    if (hi < 0 || lo < 0) return std::nullopt;
    return uint8_t(hi * 16 + lo);
  }
};

class Fuse : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

class Strip : public Decoder {
 public:
  Strip(char32_t content, size_t start, size_t stop) : content_(content), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) {
      std::u32string chars = unicode::from_utf8(t);
      size_t b = 0;
      for (size_t i = 0; i < start_ && i < chars.size() && chars[i] == content_; ++i) b = i + 1;
      size_t e = chars.size();
      for (size_t i = 0; i < stop_ && i < chars.size(); ++i) {
        size_t idx = chars.size() - i - 1;
        if (chars[idx] != content_) break;
        e = idx;
      }
      t = e > b ? unicode::to_utf8(std::u32string_view(chars).substr(b, e - b)) : std::string();
    }
  }

 private:
  char32_t content_;
  size_t start_, stop_;
};

class Replace : public Decoder {
 public:
  Replace(std::string pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) {
      std::string out;
      size_t pos = 0;
      for (size_t hit = t.find(pattern_); hit != std::string::npos; hit = t.find(pattern_, pos)) {
        out.append(t, pos, hit - pos);
        out += content_;
        pos = hit + pattern_.size();
      }
      out.append(t, pos, std::string::npos);
      t = std::move(out);
    }
  }

 private:
  std::string pattern_, content_;
};

class Metaspace : public Decoder {
 public:
  Metaspace(char32_t replacement, bool prepend) : replacement_(replacement), prepend_(prepend) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::u32string chars = unicode::from_utf8(tokens[i]);
      std::u32string out;
      for (char32_t c : chars) {
        if (c != replacement_)
          out.push_back(c);
        else if (!(i == 0 && prepend_))  // the first token's replacement characters go
          out.push_back(U' ');
      }
      tokens[i] = unicode::to_utf8(out);
    }
  }

 private:
  char32_t replacement_;
  bool prepend_;
};

class WordPieceDecoder : public Decoder {
 public:
  WordPieceDecoder(std::string prefix, bool cleanup) : prefix_(std::move(prefix)), cleanup_(cleanup) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      if (i != 0) {
        if (t.compare(0, prefix_.size(), prefix_) == 0)
          t.erase(0, prefix_.size());
        else
          t = " " + t;
      }
      if (cleanup_) t = cleanup(t);
    }
  }

  // tokenizers' decoders::wordpiece::cleanup: undoes the spaces BERT puts around punctuation.
  static std::string cleanup(std::string s) {
    static const std::pair<const char*, const char*> kRules[] = {
        {" .", "."},   {" ?", "?"},     {" !", "!"},           {" ,", ","},   {" ' ", "'"},   {" n't", "n't"},
        {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
    for (const auto& [from, to] : kRules) {
      std::string f = from, out;
      size_t pos = 0;
      for (size_t hit = s.find(f); hit != std::string::npos; hit = s.find(f, pos)) {
        out.append(s, pos, hit - pos);
        out += to;
        pos = hit + f.size();
      }
      out.append(s, pos, std::string::npos);
      s = std::move(out);
    }
    return s;
  }

 private:
  std::string prefix_;
  bool cleanup_;
};

class BpeDecoder : public Decoder {
 public:
  explicit BpeDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      std::string with = i + 1 == tokens.size() ? "" : " ", out;
      size_t pos = 0;
      for (size_t hit = suffix_.empty() ? std::string::npos : t.find(suffix_); hit != std::string::npos;
           hit = t.find(suffix_, pos)) {
        out.append(t, pos, hit - pos);
        out += with;
        pos = hit + suffix_.size();
      }
      out.append(t, pos, std::string::npos);
      t = std::move(out);
    }
  }

 private:
  std::string suffix_;
};

class Sequence : public Decoder {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Decoder>> steps) : steps_(std::move(steps)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& d : steps_) d->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

std::string string_pattern(const Node& pattern) {
  if (!pattern.present() || !pattern.value().is_object()) pattern.wrong("an object {\"String\": ...}");
  if (pattern["Regex"].present())
    pattern["Regex"].unsupported_value("a Replace decoder with a regex pattern (only {\"String\": ...} is supported)");
  std::string s = pattern["String"].str();
  if (s.empty()) pattern["String"].wrong("a non-empty string");
  return s;
}

}  // namespace

char32_t byte_to_char(uint8_t b) { return byte_map().to_char[b]; }

std::optional<uint8_t> char_to_byte(char32_t c) {
  if (c >= 0x21 && c <= 0x7E) return uint8_t(c);
  const auto& m = byte_map().to_byte;
  auto it = m.find(c);
  if (it == m.end()) return std::nullopt;
  return it->second;
}

std::unique_ptr<Decoder> make_decoder(const Node& node) {
  std::string type = node.type();
  if (type == "ByteLevel") return std::make_unique<ByteLevel>();
  if (type == "ByteFallback") return std::make_unique<ByteFallback>();
  if (type == "Fuse") return std::make_unique<Fuse>();
  if (type == "Strip")
    return std::make_unique<Strip>(node["content"].single_char(), size_t(node["start"].integer()),
                                   size_t(node["stop"].integer()));
  if (type == "Replace") return std::make_unique<Replace>(string_pattern(node["pattern"]), node["content"].str());
  if (type == "Metaspace") {
    bool prepend = true;
    if (node["prepend_scheme"].present()) {
      std::string s = node["prepend_scheme"].str();
      if (s != "always" && s != "first" && s != "never") node["prepend_scheme"].wrong("one of always, first, never");
      prepend = s != "never";
    } else {
      prepend = node["add_prefix_space"].boolean_or(true);
    }
    return std::make_unique<Metaspace>(node["replacement"].single_char(), prepend);
  }
  if (type == "WordPiece")
    return std::make_unique<WordPieceDecoder>(node["prefix"].str_or("##"), node["cleanup"].boolean_or(true));
  if (type == "BPEDecoder") return std::make_unique<BpeDecoder>(node["suffix"].str_or("</w>"));
  if (type == "Sequence") {
    Node list = node["decoders"];
    std::vector<std::unique_ptr<Decoder>> steps;
    for (size_t i = 0; i < list.array().size(); ++i) steps.push_back(make_decoder(list[i]));
    return std::make_unique<Sequence>(std::move(steps));
  }
  node["type"].unsupported_value("decoder");
}

}  // namespace hfx::tokenizer
