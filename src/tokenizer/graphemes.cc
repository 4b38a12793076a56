// Extended grapheme clusters (UAX #29) exactly as the unicode-segmentation crate splits them
// (src/grapheme.rs, GraphemeCursor::next_boundary with is_extended = true): the Precompiled normalizer
// of `tokenizers` looks whole clusters up in its charsmap, so the cluster boundaries change the text.
//
// grapheme_tables.cc is generated from the crate's src/tables.rs, at the version the `tokenizers`
// wheel is built with (`strings tokenizers.abi3.so | grep unicode-segmentation-`), by
// gen_grapheme_tables.py (quoted at the end of this file).
#include <algorithm>

#include "tokenizer/unicode_tables.h"

namespace hfx::tokenizer::unicode {

namespace {

GraphemeCat category(char32_t c) {
  if (c <= 0x7E) {  // the crate's ASCII shortcut (U+007F goes through the table)
    if (c >= 0x20) return kGcAny;
    return c == '\n' ? kGcLF : c == '\r' ? kGcCR : kGcControl;
  }
  const GraphemeRange* end = kGraphemeRanges + kGraphemeRangesCount;
  const GraphemeRange* it = std::upper_bound(kGraphemeRanges, end, c, [](char32_t v, const GraphemeRange& r) { return v < r.first; });
  if (it == kGraphemeRanges || c > (it - 1)->last) return kGcAny;
  return GraphemeCat((it - 1)->cat);
}

bool is_incb_extend(char32_t c) {
  const CharRange* end = kIncbExtendRanges + kIncbExtendRangesCount;
  const CharRange* it = std::upper_bound(kIncbExtendRanges, end, c, [](char32_t v, const CharRange& r) { return v < r.first; });
  return it != kIncbExtendRanges && c <= (it - 1)->last;
}

bool is_incb_linker(char32_t c) { return std::find(kIncbLinkers, kIncbLinkers + kIncbLinkersCount, c) != kIncbLinkers + kIncbLinkersCount; }

bool in(GraphemeCat c, std::initializer_list<GraphemeCat> set) { return std::find(set.begin(), set.end(), c) != set.end(); }

// Whether there is a boundary between s[k - 1] and s[k] (check_pair and its handlers). `ris` counts
// the Regional_Indicators just before k (its parity is all that matters).
bool is_break(std::u32string_view s, size_t k, GraphemeCat before, GraphemeCat after, size_t ris) {
  if (before == kGcCR && after == kGcLF) return false;                                 // GB3
  if (in(before, {kGcControl, kGcCR, kGcLF})) return true;                             // GB4
  if (in(after, {kGcControl, kGcCR, kGcLF})) return true;                              // GB5
  if (before == kGcL && in(after, {kGcL, kGcV, kGcLV, kGcLVT})) return false;          // GB6
  if (in(before, {kGcLV, kGcV}) && in(after, {kGcV, kGcT})) return false;              // GB7
  if (in(before, {kGcLVT, kGcT}) && after == kGcT) return false;                       // GB8
  if (after == kGcExtend || after == kGcZWJ) return false;                             // GB9
  if (after == kGcSpacingMark) return false;                                           // GB9a
  if (before == kGcPrepend) return false;                                              // GB9b
  if (after == kGcInCBConsonant) {                                                     // GB9c
    // Consonant [Extend Linker]* Linker [Extend Linker]* x Consonant. Each scan stops at the
    // previous non-Extend/Linker character, so the scans of a text cover it about once.
    size_t linkers = 0;
    for (size_t j = k; j-- > 0;) {
      if (is_incb_linker(s[j])) ++linkers;
      else if (!is_incb_extend(s[j])) return !(linkers > 0 && category(s[j]) == kGcInCBConsonant);
    }
    return true;
  }
  if (before == kGcZWJ && after == kGcExtPict) {  // GB11: ExtPict Extend* ZWJ x ExtPict
    for (size_t j = k - 1; j-- > 0;) {
      GraphemeCat c = category(s[j]);
      if (c == kGcExtPict) return false;
      if (c != kGcExtend) return true;
    }
    return true;
  }
  if (before == kGcRegional && after == kGcRegional) return ris % 2 == 0;  // GB12, GB13
  return true;                                                              // GB999
}

}  // namespace

size_t grapheme_end(std::u32string_view s, size_t i) {
  // A cluster starts at i, so an even number of Regional_Indicators precedes i when s[i] is one:
  // counting them from i keeps the parity (and avoids rescanning a long run of flags).
  size_t ris = 0;
  for (size_t k = i + 1; k < s.size(); ++k) {
    GraphemeCat before = category(s[k - 1]), after = category(s[k]);
    ris = before == kGcRegional ? ris + 1 : 0;
    if (is_break(s, k, before, after, ris)) return k;
  }
  return s.size();
}

}  // namespace hfx::tokenizer::unicode

// gen_grapheme_tables.py (python gen_grapheme_tables.py tables.rs grapheme_tables.cc 1.13.x):
//
//   import re, sys
//   src = open(sys.argv[1], encoding="utf-8").read()
//   uver = re.search(r"UNICODE_VERSION: \(u64, u64, u64\) = \((\d+), (\d+), (\d+)\)", src).groups()
//   def block(name):
//       return re.search(r"const " + name + r": &\[[^\]]*\] = &\[(.*?)\];", src, re.S).group(1)
//   cats = ["GC_Any", "GC_CR", "GC_Control", "GC_Extend", "GC_Extended_Pictographic", "GC_InCB_Consonant",
//           "GC_L", "GC_LF", "GC_LV", "GC_LVT", "GC_Prepend", "GC_Regional_Indicator", "GC_SpacingMark",
//           "GC_T", "GC_V", "GC_ZWJ"]
//   enum = re.search(r"pub enum GraphemeCat \{(.*?)\}", src, re.S).group(1)
//   assert [c.strip() for c in enum.split(",") if c.strip()] == cats
//   ranges = re.findall(r"\('\\u\{([0-9a-f]+)\}',\s*'\\u\{([0-9a-f]+)\}',\s*(GC_\w+)\)", block("grapheme_cat_table"))
//   incb = re.findall(r"\('\\u\{([0-9a-f]+)\}',\s*'\\u\{([0-9a-f]+)\}'\)", block("InCB_Extend_table"))
//   linkers = re.findall(r"'\\u\{([0-9a-fA-F]+)\}'", re.search(r"fn is_incb_linker.*?\n\}", src, re.S).group(0))
//   then one {0xFIRST, 0xLAST, cats.index(cat)} per range, {0xFIRST, 0xLAST} per InCB range and the
//   linkers as a list, in the layout of grapheme_tables.cc.
