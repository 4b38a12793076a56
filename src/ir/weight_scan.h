// Non-finite values (NaN, +-Inf) in the weights an export writes. Transformers loads such a checkpoint
// without a word and a NaN in an unused embedding row changes nothing, so an export is not refused
// for one: the writer scans each weight's bytes as it streams them (one pass over bytes it touches
// anyway) and the export reports every tensor that holds any, by name, count and first index. When
// the built-in verification then fails on non-finite outputs, those tensors are the diagnosis.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/dtype.h"
#include "ir/weight.h"

namespace hfx::ir {

struct NonFiniteCount {
  int64_t nan = 0, inf = 0;
  int64_t first = -1;  // element index (row-major, as written) of the first one
  int64_t total() const { return nan + inf; }
};

// Adds the NaN / Inf among `bytes`, elements of `dtype` starting at element `base` of the tensor, to
// `into`. Floating dtypes only (f32, f16, bf16); other dtypes (integers, packed quantized data) have
// no non-finite values and are skipped.
void count_non_finite(std::span<const uint8_t> bytes, DType dtype, int64_t base, NonFiniteCount& into);

// One line for a weight holding non-finite values: "model.embed_tokens.weight: 1 non-finite value
// (inf), first at [5, 0]", naming the checkpoint tensors it reads and, when it is transformed, the
// written form; f16 weights cast from the checkpoint say that values past f16's range became inf.
std::string describe_non_finite(const WeightRef& w, const NonFiniteCount& count);

}  // namespace hfx::ir
