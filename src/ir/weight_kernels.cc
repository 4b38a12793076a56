#include "ir/weight_kernels.h"

#include <algorithm>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#include <xmmintrin.h>
#endif

namespace hfx::ir {

namespace {

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

// One tile of the bf16 -> f32 transpose: rows [r0, r1) x output rows [cb, ce). In 4 x 4 blocks with
// SSE2 (every x86-64 has it): four 8-byte loads, a widening unpack (bf16 is an f32's top half) and a
// 4 x 4 shuffle, instead of sixteen strided scalar loads; the ragged edges element by element.
void transpose_bf16_tile(const uint8_t* src, int64_t cols, int64_t r0, int64_t r1, int64_t cb, int64_t ce, int64_t c0,
                         uint8_t* dst, size_t dst_stride) {
  auto scalar = [&](int64_t r, int64_t c) {
    uint16_t h;
    std::memcpy(&h, src + (size_t(r) * size_t(cols) + size_t(c)) * 2, 2);
    const uint32_t bits = uint32_t(h) << 16;
    std::memcpy(dst + size_t(c - c0) * dst_stride + size_t(r) * 4, &bits, 4);
  };
  int64_t r4 = r0, c4 = cb;
#if defined(__SSE2__)
  r4 = r0 + (r1 - r0) / 4 * 4;
  c4 = cb + (ce - cb) / 4 * 4;
  const __m128i zero = _mm_setzero_si128();
  for (int64_t r = r0; r < r4; r += 4)
    for (int64_t c = cb; c < c4; c += 4) {
      const uint8_t* in = src + (size_t(r) * size_t(cols) + size_t(c)) * 2;
      const size_t step = size_t(cols) * 2;
      __m128 a = _mm_castsi128_ps(_mm_unpacklo_epi16(zero, _mm_loadl_epi64(reinterpret_cast<const __m128i*>(in))));
      __m128 b = _mm_castsi128_ps(_mm_unpacklo_epi16(zero, _mm_loadl_epi64(reinterpret_cast<const __m128i*>(in + step))));
      __m128 d = _mm_castsi128_ps(_mm_unpacklo_epi16(zero, _mm_loadl_epi64(reinterpret_cast<const __m128i*>(in + 2 * step))));
      __m128 e = _mm_castsi128_ps(_mm_unpacklo_epi16(zero, _mm_loadl_epi64(reinterpret_cast<const __m128i*>(in + 3 * step))));
      _MM_TRANSPOSE4_PS(a, b, d, e);
      uint8_t* out = dst + size_t(c - c0) * dst_stride + size_t(r) * 4;
      _mm_storeu_ps(reinterpret_cast<float*>(out), a);
      _mm_storeu_ps(reinterpret_cast<float*>(out + dst_stride), b);
      _mm_storeu_ps(reinterpret_cast<float*>(out + 2 * dst_stride), d);
      _mm_storeu_ps(reinterpret_cast<float*>(out + 3 * dst_stride), e);
    }
#endif
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = (r < r4 ? c4 : cb); c < ce; ++c) scalar(r, c);
}

// One tile of a 16-bit transpose with no conversion (a bf16 or f16 export's Linear weights): in
// 8 x 8 blocks with SSE2, eight 16-byte loads and three rounds of unpacks, instead of 64 strided
// 2-byte copies; the ragged edges element by element.
void transpose_u16_tile(const uint8_t* src, int64_t cols, int64_t r0, int64_t r1, int64_t cb, int64_t ce, int64_t c0,
                        uint8_t* dst, size_t dst_stride) {
  auto scalar = [&](int64_t r, int64_t c) {
    std::memcpy(dst + size_t(c - c0) * dst_stride + size_t(r) * 2, src + (size_t(r) * size_t(cols) + size_t(c)) * 2, 2);
  };
  int64_t r8 = r0, c8 = cb;
#if defined(__SSE2__)
  r8 = r0 + (r1 - r0) / 8 * 8;
  c8 = cb + (ce - cb) / 8 * 8;
  for (int64_t r = r0; r < r8; r += 8)
    for (int64_t c = cb; c < c8; c += 8) {
      const uint8_t* in = src + (size_t(r) * size_t(cols) + size_t(c)) * 2;
      const size_t step = size_t(cols) * 2;
      __m128i a[8];
      for (int i = 0; i < 8; ++i) a[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + size_t(i) * step));
      __m128i b[8], d[8];
      for (int i = 0; i < 4; ++i) {  // pairs of rows interleaved
        b[2 * i] = _mm_unpacklo_epi16(a[2 * i], a[2 * i + 1]);
        b[2 * i + 1] = _mm_unpackhi_epi16(a[2 * i], a[2 * i + 1]);
      }
      // then quads of rows: d[4h + 2q + j] holds columns 4h + 2j and 4h + 2j + 1 of rows 4q..4q + 3
      for (int h = 0; h < 2; ++h)
        for (int q = 0; q < 2; ++q) {
          d[4 * h + 2 * q] = _mm_unpacklo_epi32(b[4 * q + h], b[4 * q + h + 2]);
          d[4 * h + 2 * q + 1] = _mm_unpackhi_epi32(b[4 * q + h], b[4 * q + h + 2]);
        }
      uint8_t* out = dst + size_t(c - c0) * dst_stride + size_t(r) * 2;
      for (int k = 0; k < 4; ++k) {  // columns 2k and 2k + 1: rows 0-3 from d[lo], rows 4-7 from d[lo + 2]
        const int lo = (k / 2) * 4 + (k % 2), hi = lo + 2;
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + size_t(2 * k) * dst_stride), _mm_unpacklo_epi64(d[lo], d[hi]));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + size_t(2 * k + 1) * dst_stride), _mm_unpackhi_epi64(d[lo], d[hi]));
      }
    }
#endif
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = (r < r8 ? c8 : cb); c < ce; ++c) scalar(r, c);
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
      if (bf16_to_f32_fast) {
        transpose_bf16_tile(src, cols, r0, r1, cb, ce, c0, dst, dst_stride);
        continue;
      }
      if (kFromSize == 2 && from == to) {
        transpose_u16_tile(src, cols, r0, r1, cb, ce, c0, dst, dst_stride);
        continue;
      }
      for (int64_t c = cb; c < ce; ++c) {
        uint8_t* out = dst + size_t(c - c0) * dst_stride + size_t(r0) * ts;
        const uint8_t* in = src + (size_t(r0) * size_t(cols) + size_t(c)) * kFromSize;
        const size_t step = size_t(cols) * kFromSize;
        for (int64_t r = r0; r < r1; ++r, in += step, out += ts) element<kFromSize>(from, in, to, out);
      }
    }
  }
}

}  // namespace

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
