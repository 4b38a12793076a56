// Lookups into the generated Unicode tables, normalization forms, and UTF-8 helpers.
#include <algorithm>
#include <array>
#include <optional>

#include "core/error.h"
#include "tokenizer/unicode_tables.h"

namespace hfx::tokenizer::unicode {

namespace {

uint32_t range_lookup(const PropRange* table, size_t count, char32_t c) {
  const PropRange* end = table + count;
  const PropRange* it =
      std::upper_bound(table, end, c, [](char32_t v, const PropRange& r) { return v < r.first; });
  if (it == table) return 0;
  --it;
  return c <= it->last ? it->value : 0;
}

// Properties of the BMP, expanded once: the tokenizer asks for nearly every character it sees.
const std::array<uint8_t, 0x10000>& bmp_props() {
  static const std::array<uint8_t, 0x10000> table = [] {
    std::array<uint8_t, 0x10000> t{};
    for (size_t i = 0; i < kPropRangesCount; ++i) {
      const auto& r = kPropRanges[i];
      if (r.first >= 0x10000) break;
      for (char32_t c = r.first; c <= r.last && c < 0x10000; ++c) t[c] = uint8_t(r.value);
    }
    return t;
  }();
  return table;
}

const MapEntry* map_lookup(const MapEntry* table, size_t count, char32_t c) {
  const MapEntry* end = table + count;
  const MapEntry* it =
      std::lower_bound(table, end, c, [](const MapEntry& e, char32_t v) { return e.cp < v; });
  return it != end && it->cp == c ? it : nullptr;
}

constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;

void decompose(char32_t c, bool compat, std::u32string& out) {
  if (c >= kSBase && c < kSBase + kSCount) {
    char32_t s = c - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  const MapEntry* e = compat ? map_lookup(kNfkdMap, kNfkdMapCount, c) : map_lookup(kNfdMap, kNfdMapCount, c);
  if (!e) {
    out.push_back(c);
    return;
  }
  out.append(kMapData + e->offset, e->length);
}

// Canonical ordering: stable sort of each run of non-starters by combining class.
void reorder(std::u32string& s) {
  size_t i = 0;
  while (i < s.size()) {
    if (combining_class(s[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < s.size() && combining_class(s[j]) != 0) ++j;
    if (j - i > 1)
      std::stable_sort(s.begin() + i, s.begin() + j,
                       [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
    i = j;
  }
}

std::optional<char32_t> compose_pair(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount)
    return a + (b - kTBase);
  const Composition* end = kCompositions + kCompositionsCount;
  const Composition* it = std::lower_bound(kCompositions, end, std::pair(a, b), [](const Composition& c, auto v) {
    return c.first != v.first ? c.first < v.first : c.second < v.second;
  });
  if (it != end && it->first == a && it->second == b) return it->composite;
  return std::nullopt;
}

void compose(std::u32string& s) {
  if (s.empty()) return;
  std::u32string out;
  out.reserve(s.size());
  size_t starter = std::u32string::npos;  // index in `out`
  int last_class = -1;                    // class of the last character appended after the starter
  for (char32_t c : s) {
    int cc = combining_class(c);
    if (starter != std::u32string::npos) {
      bool blocked = last_class != -1 && (last_class == 0 || last_class >= cc);
      if (!blocked) {
        if (auto comp = compose_pair(out[starter], c)) {
          out[starter] = *comp;
          continue;
        }
      }
    }
    if (cc == 0) {
      starter = out.size();
      last_class = -1;
    } else {
      last_class = cc;
    }
    out.push_back(c);
  }
  s = std::move(out);
}

}  // namespace

uint32_t props(char32_t c) {
  if (c < 0x10000) return bmp_props()[c];
  return range_lookup(kPropRanges, kPropRangesCount, c);
}

uint8_t combining_class(char32_t c) {
  if (c < 0x300) return 0;
  return uint8_t(range_lookup(kCombiningClasses, kCombiningClassesCount, c));
}

std::u32string normalize(std::u32string_view s, Form form) {
  bool compat = form == Form::NFKC || form == Form::NFKD;
  std::u32string out;
  out.reserve(s.size());
  for (char32_t c : s) {
    if (c < 0xA0) {
      out.push_back(c);  // nothing below U+00A0 decomposes, in any form
      continue;
    }
    decompose(c, compat, out);
  }
  reorder(out);
  if (form == Form::NFC || form == Form::NFKC) compose(out);
  return out;
}

std::u32string lowercase(std::u32string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (char32_t c : s) {
    if (c < 0x80) {
      out.push_back(c >= 'A' && c <= 'Z' ? c + 32 : c);
      continue;
    }
    if (const MapEntry* e = map_lookup(kLowercaseMap, kLowercaseMapCount, c))
      out.append(kMapData + e->offset, e->length);
    else
      out.push_back(c);
  }
  return out;
}

// ---- UTF-8

namespace {

// Length of the well-formed sequence at s[i], or 0; `valid_prefix` gets the length of the longest
// prefix that could still start a well-formed sequence (the "maximal subpart" of Unicode ch. 3).
size_t utf8_sequence(std::string_view s, size_t i, size_t& valid_prefix) {
  auto b = [&](size_t k) { return uint8_t(s[k]); };
  uint8_t lead = b(i);
  valid_prefix = 0;
  if (lead < 0x80) return 1;
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    need = 1;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    need = 2;
    if (lead == 0xE0) lo = 0xA0;
    if (lead == 0xED) hi = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    need = 3;
    if (lead == 0xF0) lo = 0x90;
    if (lead == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  valid_prefix = 1;
  for (size_t k = 1; k <= need; ++k) {
    if (i + k >= s.size()) return 0;
    uint8_t c = b(i + k);
    uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (c < l || c > h) return 0;
    valid_prefix = k + 1;
  }
  return need + 1;
}

char32_t decode_at(std::string_view s, size_t i, size_t len) {
  auto b = [&](size_t k) { return char32_t(uint8_t(s[i + k])); };
  switch (len) {
    case 1: return b(0);
    case 2: return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3: return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default: return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

}  // namespace

bool decode_utf8(std::string_view s, std::u32string& out) {
  out.reserve(out.size() + s.size());
  for (size_t i = 0; i < s.size();) {
    size_t prefix;
    size_t len = utf8_sequence(s, i, prefix);
    if (!len) return false;
    out.push_back(decode_at(s, i, len));
    i += len;
  }
  return true;
}

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    size_t prefix;
    size_t len = utf8_sequence(s, i, prefix);
    if (!len) return false;
    i += len;
  }
  return true;
}

std::u32string from_utf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t prefix;
    size_t len = utf8_sequence(s, i, prefix);
    if (!len) bad_input("text is not valid UTF-8: ill-formed sequence at byte offset {} (byte 0x{:02X})", i, uint8_t(s[i]));
    out.push_back(decode_at(s, i, len));
    i += len;
  }
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(char(c));
  } else if (c < 0x800) {
    out.push_back(char(0xC0 | (c >> 6)));
    out.push_back(char(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(char(0xE0 | (c >> 12)));
    out.push_back(char(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(char(0x80 | (c & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (c >> 18)));
    out.push_back(char(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(char(0x80 | (c & 0x3F)));
  }
}

std::string to_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size() * 2);
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    size_t prefix;
    size_t len = utf8_sequence(bytes, i, prefix);
    if (len) {
      out.append(bytes.substr(i, len));
      i += len;
    } else {
      out.append("\xEF\xBF\xBD");
      i += std::max<size_t>(prefix, 1);
    }
  }
  return out;
}

}  // namespace hfx::tokenizer::unicode
