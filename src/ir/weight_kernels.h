// The element loops behind WeightRef's transforms: dtype conversion and the 2-D transpose every
// Linear weight needs (optionally converting on the way), over a block of output rows so a writer can
// stream a tensor without holding it whole. Written to vectorise (no call per element) and
// cache-blocked; they produce exactly the bytes convert_elements does.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace hfx::ir {

// `count` elements from `src` (dtype `from`) to `dst` (dtype `to`). Neither needs any alignment.
void convert_run(DType from, const uint8_t* src, DType to, uint8_t* dst, size_t count);

// Output rows [c0, c1) of the transpose of the [rows, cols] matrix `src` (dtype `from`): output row c
// is column c of src, converted to `to`, written at dst + (c - c0) * dst_stride.
void transpose_block(DType from, const uint8_t* src, int64_t rows, int64_t cols, DType to, int64_t c0, int64_t c1,
                     uint8_t* dst, size_t dst_stride);

}  // namespace hfx::ir
