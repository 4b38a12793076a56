// Unicode data for the tokenizer (src/tokenizer/*.cc): character properties, combining classes,
// decompositions, compositions and lowercase mappings. The tables in unicode_tables.cc are generated
// by scripts/gen_unicode_tables.py (see there for where each set comes from: `unicodedata` for the
// general categories, the `tokenizers` library itself for the sets its Rust crates define in older
// Unicode versions). The functions below are implemented in unicode.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace hfx::tokenizer::unicode {

// Property bits of kPropRanges; keep in sync with scripts/gen_unicode_tables.py.
enum Prop : uint32_t {
  kLetter = 1,          // \p{L} (Oniguruma, Unicode 16)
  kNumber = 2,          // \p{N}
  kWhiteSpace = 4,      // White_Space: \s, Rust char::is_whitespace
  kBertRemove = 8,      // removed by BertNormalizer clean_text (NUL, U+FFFD, Cc/Cf/Co but \t \n \r)
  kBertMn = 16,         // dropped by BertNormalizer strip_accents (after NFD)
  kBertPunct = 32,      // split out by BertPreTokenizer
  kCombiningMark = 64,  // dropped by the StripAccents normalizer
  kWord = 128,          // \w of the `regex` crate (single_word added tokens)
};

struct PropRange {
  char32_t first, last;
  uint32_t value;
};
struct MapEntry {
  char32_t cp;
  uint32_t offset;  // into kMapData
  uint32_t length;
};
struct Composition {
  char32_t first, second, composite;
};

extern const PropRange kPropRanges[];
extern const size_t kPropRangesCount;
extern const PropRange kCombiningClasses[];
extern const size_t kCombiningClassesCount;
extern const MapEntry kNfdMap[];  // full canonical decomposition, Hangul syllables excluded
extern const size_t kNfdMapCount;
extern const MapEntry kNfkdMap[];  // full compatibility decomposition, Hangul syllables excluded
extern const size_t kNfkdMapCount;
extern const MapEntry kLowercaseMap[];  // Rust char::to_lowercase where it changes the character
extern const size_t kLowercaseMapCount;
extern const Composition kCompositions[];  // sorted by (first, second)
extern const size_t kCompositionsCount;
extern const char32_t kMapData[];

// Grapheme cluster data of unicode-segmentation (grapheme_tables.cc, generated from the crate's
// tables.rs): the categories of its GraphemeCat enum, in its order.
enum GraphemeCat : uint8_t {
  kGcAny, kGcCR, kGcControl, kGcExtend, kGcExtPict, kGcInCBConsonant, kGcL, kGcLF, kGcLV, kGcLVT,
  kGcPrepend, kGcRegional, kGcSpacingMark, kGcT, kGcV, kGcZWJ
};
struct GraphemeRange {
  char32_t first, last;
  uint8_t cat;  // GraphemeCat
};
struct CharRange {
  char32_t first, last;
};
extern const GraphemeRange kGraphemeRanges[];  // sorted, not overlapping; absent: kGcAny
extern const size_t kGraphemeRangesCount;
extern const CharRange kIncbExtendRanges[];  // Indic_Conjunct_Break=Extend
extern const size_t kIncbExtendRangesCount;
extern const char32_t kIncbLinkers[];  // Indic_Conjunct_Break=Linker
extern const size_t kIncbLinkersCount;

// ---- lookups (unicode.cc)

uint32_t props(char32_t c);
inline bool has(char32_t c, Prop p) { return (props(c) & p) != 0; }
uint8_t combining_class(char32_t c);

enum class Form { NFC, NFD, NFKC, NFKD };
std::u32string normalize(std::u32string_view s, Form form);
std::u32string lowercase(std::u32string_view s);  // per character, no final-sigma rule
// End of the extended grapheme cluster that starts at s[i] (i < s.size()), as unicode-segmentation's
// graphemes(true) splits it (graphemes.cc).
size_t grapheme_end(std::u32string_view s, size_t i);

// UTF-8 <-> UTF-32. decode_utf8 returns false on ill-formed input (and leaves `out` partial).
bool decode_utf8(std::string_view s, std::u32string& out);
std::u32string from_utf8(std::string_view s);  // throws BadInput on ill-formed UTF-8
void append_utf8(std::string& out, char32_t c);
std::string to_utf8(std::u32string_view s);
// Rust's String::from_utf8_lossy: each maximal ill-formed subsequence becomes U+FFFD.
std::string utf8_lossy(std::string_view bytes);
bool is_valid_utf8(std::string_view s);

}  // namespace hfx::tokenizer::unicode
