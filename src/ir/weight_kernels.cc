#include "ir/weight_kernels.h"

#include <algorithm>
#include <cstring>

namespace hfx::ir {

namespace {

// bf16 is the top half of an f32: a shift, which the compiler vectorises (memcpy keeps it
// alignment-free; a safetensors payload may start at any offset).
void bf16_run(const uint8_t* src, uint8_t* dst, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    const uint32_t bits = uint32_t(h) << 16;
    std::memcpy(dst + 4 * i, &bits, 4);
  }
}

// One element of `from` at `s` as `to` at `d`, for the transposes (a converting one is only ever
// bf16/f16 -> f32, the weights an f32 graph binds).
template <size_t kFromSize>
inline void element(DType from, const uint8_t* s, DType to, uint8_t* d) {
  if constexpr (kFromSize == 2) {
    if (to == DType::F32) {
      uint16_t h;
      std::memcpy(&h, s, 2);
      const float f = from == DType::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
      std::memcpy(d, &f, 4);
      return;
    }
  }
  std::memcpy(d, s, kFromSize);
}

template <size_t kFromSize>
void transpose_typed(DType from, const uint8_t* src, int64_t rows, int64_t cols, DType to, int64_t c0, int64_t c1,
                     uint8_t* dst, size_t dst_stride) {
  const size_t ts = from == to ? kFromSize : dtype_size(to);
  // Tiles of 32 source rows x 32 output rows: the source lines of a tile stay in L1 while each
  // output row gets a contiguous run of 32 elements.
  constexpr int64_t B = 32;
  const bool bf16_to_f32_fast = kFromSize == 2 && from == DType::BF16 && to == DType::F32;
  for (int64_t r0 = 0; r0 < rows; r0 += B) {
    const int64_t r1 = std::min(rows, r0 + B);
    for (int64_t cb = c0; cb < c1; cb += B) {
      const int64_t ce = std::min(c1, cb + B);
      for (int64_t c = cb; c < ce; ++c) {
        uint8_t* out = dst + size_t(c - c0) * dst_stride + size_t(r0) * ts;
        const uint8_t* in = src + (size_t(r0) * size_t(cols) + size_t(c)) * kFromSize;
        const size_t step = size_t(cols) * kFromSize;
        if (bf16_to_f32_fast) {
          for (int64_t r = r0; r < r1; ++r, in += step, out += 4) {
            uint16_t h;
            std::memcpy(&h, in, 2);
            const uint32_t bits = uint32_t(h) << 16;
            std::memcpy(out, &bits, 4);
          }
        } else {
          for (int64_t r = r0; r < r1; ++r, in += step, out += ts) element<kFromSize>(from, in, to, out);
        }
      }
    }
  }
}

}  // namespace

void convert_run(DType from, const uint8_t* src, DType to, uint8_t* dst, size_t count) {
  if (from == DType::BF16 && to == DType::F32) return bf16_run(src, dst, count);
  convert_elements(from, src, to, dst, count);
}

void transpose_block(DType from, const uint8_t* src, int64_t rows, int64_t cols, DType to, int64_t c0, int64_t c1,
                     uint8_t* dst, size_t dst_stride) {
  switch (dtype_size(from)) {
    case 1: return transpose_typed<1>(from, src, rows, cols, to, c0, c1, dst, dst_stride);
    case 2: return transpose_typed<2>(from, src, rows, cols, to, c0, c1, dst, dst_stride);
    case 4: return transpose_typed<4>(from, src, rows, cols, to, c0, c1, dst, dst_stride);
    case 8: return transpose_typed<8>(from, src, rows, cols, to, c0, c1, dst, dst_stride);
  }
}

}  // namespace hfx::ir
