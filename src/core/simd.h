// 16-lane vectors for hfx's hot loops, written once in GCC's vector extension and compiled, through
// HFX_SIMD_CLONES, for AVX-512, AVX2 and the baseline instruction set, picked when the program loads.
// A vector of 16 floats is one zmm, two ymm or four xmm; the compiler splits it per clone.
#pragma once

#include <cstdint>
#include <cstring>

// Clang (the fuzzing build) does not multiversion templates yet: there they take the build's baseline.
#if defined(__clang__)
#define HFX_SIMD_CLONES
#else
#define HFX_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif

// Helpers called inside a clone must be inlined into it, or they would be compiled once, for the baseline.
#define HFX_INLINE inline __attribute__((always_inline))

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"  // vectors passed between inlined helpers only

namespace hfx::simd {

using f32x16 = float __attribute__((vector_size(64)));
using i32x16 = int32_t __attribute__((vector_size(64)));
using u32x16 = uint32_t __attribute__((vector_size(64)));
using u16x16 = uint16_t __attribute__((vector_size(32)));
using u8x16 = uint8_t __attribute__((vector_size(16)));

// A stored element widened to f32 (exact): f32 as is, bf16 (its bits) as the high half of an f32.
HFX_INLINE float widen(float x) { return x; }
HFX_INLINE float widen(uint16_t bits) {
  const uint32_t wide = uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &wide, 4);
  return f;
}

HFX_INLINE f32x16 load16(const float* p) {
  f32x16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
HFX_INLINE f32x16 load16(const uint16_t* p) {  // 16 bf16 widened (exact: the high half of an f32)
  u16x16 h;
  std::memcpy(&h, p, sizeof h);
  const u32x16 w = __builtin_convertvector(h, u32x16) << 16;
  f32x16 v;
  std::memcpy(&v, &w, sizeof v);
  return v;
}
HFX_INLINE void store16(float* p, f32x16 v) { std::memcpy(p, &v, sizeof v); }

HFX_INLINE f32x16 splat(float x) { return f32x16{} + x; }

// Lane j of the result is lane index[j] % 16 of v (the index's low 4 bits, as vpermps reads them:
// one instruction in AVX-512; GCC's shuffle takes the index modulo the lane count). Clang (the fuzzing build)
// has no shuffle by a run-time index vector; it gets the lane-by-lane loop.
HFX_INLINE f32x16 permute(f32x16 v, i32x16 index) {
#if defined(__clang__)
  f32x16 out;
  for (int j = 0; j < 16; ++j) out[j] = v[index[j] & 15];
  return out;
#else
  return __builtin_shuffle(v, index);
#endif
}

// Lane by lane `mask ? a : b`, mask lanes all ones or zero (a comparison's result); written with bit
// operations because Clang's C++ takes no vector conditional.
HFX_INLINE f32x16 select(i32x16 mask, f32x16 a, f32x16 b) {
  i32x16 ai, bi;
  std::memcpy(&ai, &a, sizeof a);
  std::memcpy(&bi, &b, sizeof b);
  const i32x16 r = (ai & mask) | (bi & ~mask);
  f32x16 out;
  std::memcpy(&out, &r, sizeof r);
  return out;
}

}  // namespace hfx::simd

#pragma GCC diagnostic pop
