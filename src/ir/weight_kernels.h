// The element loop behind WeightRef's transpose: the 2-D transpose every Linear weight needs
// (optionally converting on the way; plain conversion is core/dtype's convert_elements), over a
// block of output rows so a writer can stream a tensor without holding it whole. Cache-blocked, with
// an SSE2 path for bf16 -> f32; it produces exactly the bytes convert_elements does.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace hfx::ir {

// Output rows [c0, c1) of the transpose of the [rows, cols] matrix `src` (dtype `from`): output row c
// is column c of src, converted to `to`, written at dst + (c - c0) * dst_stride.
void transpose_block(DType from, const uint8_t* src, int64_t rows, int64_t cols, DType to, int64_t c0, int64_t c1,
                     uint8_t* dst, size_t dst_stride);

}  // namespace hfx::ir
