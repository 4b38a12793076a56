#include "ir/weight_scan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace hfx::ir {

namespace {

// An all-ones exponent is Inf (zero mantissa) or NaN; `Bits` is the element's integer type. Blocks
// of elements are first counted without a branch (a loop the compiler vectorises: every weight byte
// of an export passes here); only a block with a hit is scanned element by element.
template <typename Bits>
void scan(std::span<const uint8_t> bytes, Bits exponent, Bits mantissa, int64_t base, NonFiniteCount& into) {
  const size_t n = bytes.size() / sizeof(Bits);
  constexpr size_t kBlock = 256;
  for (size_t b0 = 0; b0 < n; b0 += kBlock) {
    const size_t b1 = std::min(n, b0 + kBlock);
    unsigned hits = 0;
    for (size_t i = b0; i < b1; ++i) {
      Bits v;
      std::memcpy(&v, bytes.data() + i * sizeof(Bits), sizeof(Bits));
      hits += (v & exponent) == exponent;
    }
    if (!hits) continue;  // the common case
    for (size_t i = b0; i < b1; ++i) {
      Bits v;
      std::memcpy(&v, bytes.data() + i * sizeof(Bits), sizeof(Bits));
      if ((v & exponent) != exponent) continue;
      if (v & mantissa) ++into.nan;
      else ++into.inf;
      if (into.first < 0) into.first = base + int64_t(i);
    }
  }
}

}  // namespace

void count_non_finite(std::span<const uint8_t> bytes, DType dtype, int64_t base, NonFiniteCount& into) {
  switch (dtype) {
    case DType::F32: return scan<uint32_t>(bytes, 0x7f800000u, 0x007fffffu, base, into);
    case DType::F16: return scan<uint16_t>(bytes, 0x7c00u, 0x03ffu, base, into);
    case DType::BF16: return scan<uint16_t>(bytes, 0x7f80u, 0x007fu, base, into);
    default: return;
  }
}

std::string describe_non_finite(const WeightRef& w, const NonFiniteCount& c) {
  const auto names = w.source_names();
  const std::string source = names.empty() ? w.describe() : fmt::format("{}", fmt::join(names, ", "));
  std::vector<std::string> kinds;
  if (c.nan) kinds.push_back(fmt::format("{} nan", c.nan));
  if (c.inf) kinds.push_back(fmt::format("{} inf", c.inf));
  // The first one's index in the written tensor's own layout.
  std::vector<int64_t> at(w.shape().size(), 0);
  int64_t rest = c.first;
  for (size_t i = at.size(); i-- > 0;) {
    const int64_t d = std::max<int64_t>(w.shape()[i], 1);
    at[i] = rest % d;
    rest /= d;
  }
  std::string out = fmt::format("{}: {} non-finite value{} ({}), first at [{}]", source, c.total(), c.total() == 1 ? "" : "s",
                                fmt::join(kinds, ", "), fmt::join(at, ", "));
  const std::string written = w.describe();
  if (names.size() != 1 || written != names[0]) out += fmt::format(" of {}", written);
  if (w.dtype() == DType::F16 && written.find(" as f16") != std::string::npos && c.inf)
    out += " (f16 holds at most +-65504: larger values of the checkpoint become inf)";
  return out;
}

}  // namespace hfx::ir
