#include "quant/quantize.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <thread>

#include "core/error.h"
#include "core/simd.h"

namespace hfx::quant {

namespace {

// Block sizes ONNX Runtime's MatMulNBits CPU kernel accepts.
constexpr int64_t kBlockSizes[] = {16, 32, 64, 128, 256};

int64_t parse_block(const std::string& spec, const std::string& value) {
  int64_t v = 0;
  size_t used = 0;
  try {
    v = std::stoll(value, &used);
  } catch (...) {
    used = 0;
  }
  if (used != value.size() || value.empty())
    bad_input("--quantize {}: block=\"{}\" is not an integer (16, 32, 64, 128 or 256)", spec, value);
  if (std::find(std::begin(kBlockSizes), std::end(kBlockSizes), v) == std::end(kBlockSizes))
    bad_input("--quantize {}: block={} is not supported (16, 32, 64, 128 or 256: the block sizes ONNX Runtime's "
              "MatMulNBits runs)",
              spec, v);
  return v;
}

}  // namespace

std::string QuantSpec::str() const {
  if (!enabled()) return "";
  std::string s = fmt::format("int{}", bits);
  s += block ? fmt::format(":block={}", block) : ":channel";
  s += symmetric ? ":sym" : ":asym";
  if (accuracy_level) s += fmt::format(":accuracy={}", accuracy_level);
  return s;
}

QuantSpec QuantSpec::parse(const std::string& text) {
  QuantSpec q;
  if (text.empty() || text == "none") return q;
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t colon = text.find(':', start);
    parts.push_back(text.substr(start, colon == std::string::npos ? std::string::npos : colon - start));
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  if (parts[0] == "int4") {
    q.bits = 4;
    q.block = 32;
  } else if (parts[0] == "int8") {
    q.bits = 8;
    q.block = 128;
  } else {
    bad_input("--quantize {}: unknown scheme \"{}\" (int8 or int4, e.g. int4:block=32:asym)", text, parts[0]);
  }
  bool seen_sym = false, seen_block = false, seen_channel = false;
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& p = parts[i];
    if (p == "sym" || p == "asym") {
      if (seen_sym) bad_input("--quantize {}: sym/asym given twice", text);
      seen_sym = true;
      q.symmetric = p == "sym";
    } else if (p == "channel") {
      if (q.bits != 8) bad_input("--quantize {}: per-channel quantization is int8 only (int4 is blockwise)", text);
      if (seen_channel || seen_block) bad_input("--quantize {}: give one of channel and block=N", text);
      seen_channel = true;
      q.block = 0;
    } else if (p.starts_with("block=")) {
      if (seen_block || seen_channel) bad_input("--quantize {}: give one of channel and block=N", text);
      seen_block = true;
      q.block = parse_block(text, p.substr(6));
    } else if (p.starts_with("accuracy=")) {
      const std::string v = p.substr(9);
      if (v.size() != 1 || v[0] < '0' || v[0] > '4')
        bad_input("--quantize {}: accuracy={} is not a MatMulNBits accuracy_level (0 to 4)", text, v);
      q.accuracy_level = v[0] - '0';
    } else {
      bad_input("--quantize {}: unknown option \"{}\" (block=N, channel, sym, asym, accuracy=0..4)", text, p);
    }
  }
  if (q.accuracy_level && !q.block)
    bad_input("--quantize {}: accuracy= applies to MatMulNBits (blockwise), not to int8:channel", text);
  return q;
}

std::string PrecisionSpec::str() const {
  std::string s(dtype_name(dtype));
  if (quant.enabled())
    s = quant.str() + " over " + s + (quantize_lm_head && quantize_embeddings ? " (lm_head and embeddings too)"
                                      : quantize_lm_head                      ? " (lm_head too)"
                                      : quantize_embeddings                   ? " (embeddings too)"
                                                                              : "");
  return s;
}

DType parse_dtype(const std::string& text) {
  if (text == "f32" || text == "float32") return DType::F32;
  if (text == "f16" || text == "float16") return DType::F16;
  if (text == "bf16" || text == "bfloat16") return DType::BF16;
  bad_input("--dtype {}: unknown dtype (f32, f16 or bf16)", text);
}

namespace {

// Runs body(n_begin, n_end) over [0, N) on up to hardware_concurrency() threads (the caller's the
// first), in chunks of whole columns (none when the matrix is small enough that threads would cost
// more than they save).
void parallel_columns(int64_t N, int64_t K, const std::function<void(int64_t, int64_t)>& body) {
  const int64_t threads = std::min<int64_t>({int64_t(std::max(1u, std::thread::hardware_concurrency())), 8,
                                             std::max<int64_t>(1, N * K / (int64_t(1) << 20))});
  if (threads <= 1) return body(0, N);
  std::vector<std::thread> pool;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(threads));
  const int64_t chunk = (N + threads - 1) / threads;
  auto share = [&](int64_t t) {
    try {
      body(std::min(N, t * chunk), std::min(N, (t + 1) * chunk));
    } catch (...) {
      errors[size_t(t)] = std::current_exception();
    }
  };
  for (int64_t t = 1; t < threads; ++t) pool.emplace_back(share, t);
  share(0);
  for (auto& th : pool) th.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace

float round_to(DType dtype, float v) {
  switch (dtype) {
    case DType::F16: return f16_to_f32(f32_to_f16(v));
    case DType::BF16: return bf16_to_f32(f32_to_bf16(v));
    default: return v;
  }
}

namespace {

using simd::f32x16;
using simd::i32x16;
using simd::u8x16;

}  // namespace

BlockScale block_scale(float mn, float mx, int bits, bool symmetric, DType scale_dtype) {
  const int qmax = (1 << bits) - 1, mid = 1 << (bits - 1);
  const float qmax_f = float(qmax);
  if (symmetric) {
    const float m = std::fabs(mx) > std::fabs(mn) ? mx : mn;
    return {round_to(scale_dtype, -m / float(mid)), mid};
  }
  mn = std::min(mn, 0.0f);
  mx = std::max(mx, 0.0f);
  const float s = (mx - mn) / qmax_f;
  float zp_f = mn;
  if (s != 0.0f) zp_f = 0.0f - mn / s;
  return {round_to(scale_dtype, s), zp_f < 0.0f ? 0 : zp_f > qmax_f ? qmax : int(std::roundf(zp_f))};
}

namespace {

// Lane l of v moved to lane l ^ D (D a power of two below 16).
template <int D>
HFX_INLINE f32x16 lanes_swapped(f32x16 v) {
  return __builtin_shufflevector(v, v, 0 ^ D, 1 ^ D, 2 ^ D, 3 ^ D, 4 ^ D, 5 ^ D, 6 ^ D, 7 ^ D, 8 ^ D, 9 ^ D, 10 ^ D,
                                 11 ^ D, 12 ^ D, 13 ^ D, 14 ^ D, 15 ^ D);
}

// The smallest and largest of v[0, count), NaNs skipped, as a scan in order finds them: 16 lanes at a
// time, then the lanes. Values that compare equal are the same float except for ±0, so only an extreme
// of zero could take another sign than the scan's first: such a block is scanned again in order.
template <typename T>
HFX_INLINE void block_range(const T* v, int64_t count, float& mn, float& mx) {
  mn = std::numeric_limits<float>::max();
  mx = -mn;
  int64_t i = 0;
  if (count % 16 == 0) {
    f32x16 lo = simd::splat(mn), hi = simd::splat(mx);
    for (; i < count; i += 16) {
      const f32x16 x = simd::load16(v + i);
      lo = simd::select(x < lo, x, lo);
      hi = simd::select(x > hi, x, hi);
    }
    // The lanes halved four times (the order does not matter: no lane holds a NaN).
    lo = simd::select(lanes_swapped<8>(lo) < lo, lanes_swapped<8>(lo), lo);
    hi = simd::select(lanes_swapped<8>(hi) > hi, lanes_swapped<8>(hi), hi);
    lo = simd::select(lanes_swapped<4>(lo) < lo, lanes_swapped<4>(lo), lo);
    hi = simd::select(lanes_swapped<4>(hi) > hi, lanes_swapped<4>(hi), hi);
    lo = simd::select(lanes_swapped<2>(lo) < lo, lanes_swapped<2>(lo), lo);
    hi = simd::select(lanes_swapped<2>(hi) > hi, lanes_swapped<2>(hi), hi);
    mn = lo[1] < lo[0] ? lo[1] : lo[0];
    mx = hi[1] > hi[0] ? hi[1] : hi[0];
    if (mn != 0.0f && mx != 0.0f) return;
    mn = std::numeric_limits<float>::max();
    mx = -mn;
    i = 0;
  }
  for (; i < count; ++i) {
    const float x = simd::widen(v[i]);
    if (x < mn) mn = x;
    if (x > mx) mx = x;
  }
}

// q = clamp(roundf(v * rs + zp), 0, qmax) for v[0, count), without a libm call per weight: inside
// (0, qmax), y + 0.5f is exact or rounds only across a power of two, so its truncation is roundf's
// half-away-from-zero; NaN gives 0. The product and the sum round apart (this file is compiled with
// -ffp-contract=off), so every clone writes the same bytes.
template <typename T>
HFX_INLINE void block_values(const T* v, int64_t count, float rs, float zp, int bits, uint8_t* dst) {
  using i32x8 = int32_t __attribute__((vector_size(32)));
  using u8x8 = uint8_t __attribute__((vector_size(8)));
  const int qmax = (1 << bits) - 1;
  const float top = float(qmax);
  int64_t i = 0;
  const f32x16 r = simd::splat(rs), z = simd::splat(zp), t = simd::splat(top), half = simd::splat(0.5f), zero{};
  for (; i + 16 <= count; i += 16) {
    f32x16 y = simd::load16(v + i) * r + z;
    y = simd::select(y > zero, y, zero);  // NaN fails the comparison too
    y = simd::select(y < t, y, t);
    const i32x16 q = __builtin_convertvector(y + half, i32x16);
    if (bits == 8) {
      const u8x16 bytes = __builtin_convertvector(q, u8x16);
      std::memcpy(dst + i, &bytes, sizeof bytes);
    } else {  // two values a byte, the even one in the low nibble
      const i32x8 even = __builtin_shufflevector(q, q, 0, 2, 4, 6, 8, 10, 12, 14);
      const i32x8 odd = __builtin_shufflevector(q, q, 1, 3, 5, 7, 9, 11, 13, 15);
      const u8x8 bytes = __builtin_convertvector(even | (odd << 4), u8x8);
      std::memcpy(dst + i / 2, &bytes, sizeof bytes);
    }
  }
  uint8_t q[16];
  const int64_t tail = count - i;
  for (int64_t k = 0; k < tail; ++k) {
    const float y = simd::widen(v[i + k]) * rs + zp;
    q[k] = !(y > 0.0f) ? 0 : y >= top ? uint8_t(qmax) : uint8_t(int(y + 0.5f));
  }
  if (bits == 8) {
    std::memcpy(dst + i, q, size_t(tail));
  } else {  // i is even: the tail starts a byte; an odd count leaves the last high nibble 0
    for (int64_t k = 0; k < tail; k += 2) dst[(i + k) / 2] = uint8_t(q[k] | (k + 1 < tail ? q[k + 1] << 4 : 0));
  }
}

// W[K, N] to quantize: f32 in either layout, or bf16 stored [N, K] (a Linear layer's checkpoint tensor,
// read as stored: each value widened in registers, exact).
template <typename T>
struct BlockwiseJob {
  const T* w;
  int64_t K, N;
  int bits;
  int64_t block;
  bool symmetric;
  DType scale_dtype;
  int64_t k_stride, n_stride;  // element (k, n) of W[K, N] is w[k * k_stride + n * n_stride]
  Quantized* out;
  // Per column: blocks, then bytes of a block's values and of the zero points (set once: the loops
  // below write through byte pointers, which the compiler must assume may change the job).
  int64_t kb = k_blocks(K, block), blob = blob_bytes(bits, block), zero_point_bytes = zero_point_bytes_per_column(bits, K, block);
};

// Block b of column n, its `count` values contiguous at v: the scale, the zero point and the values.
template <typename V, typename T>
HFX_INLINE void quantize_block(const V* v, int64_t count, const BlockwiseJob<T>& j, int64_t n, int64_t b) {
  const int64_t kb = j.kb, blob = j.blob;
  Quantized& out = *j.out;
  float mn, mx;
  block_range(v, count, mn, mx);
  const auto [scale, zp] = block_scale(mn, mx, j.bits, j.symmetric, j.scale_dtype);
  if (!j.symmetric) {
    uint8_t& z = out.zero_points[size_t(n * j.zero_point_bytes + b * j.bits / 8)];
    if (j.bits == 8)
      z = uint8_t(zp);
    else
      z = uint8_t((z & ~(0xF << (4 * (b % 2)))) | (zp << (4 * (b % 2))));
  }
  out.scales[size_t(n * kb + b)] = scale;
  block_values(v, count, scale != 0.0f ? 1.0f / scale : 0.0f, float(zp), j.bits, out.data.data() + size_t((n * kb + b) * blob));
}

// Columns [n_begin, n_end) of the job: each writes only its own blocks, scales and zero-point bytes.
template <typename T>
HFX_SIMD_CLONES void quantize_columns(const BlockwiseJob<T>& j, int64_t n_begin, int64_t n_end) {
  float gathered[256];  // a block of a [K, N] layout, whose column is strided
  const int64_t kb = j.kb;
  for (int64_t n = n_begin; n < n_end; ++n)
    for (int64_t b = 0; b < kb; ++b) {
      const int64_t k0 = b * j.block, count = std::min(j.K, k0 + j.block) - k0;
      const T* v = j.w + k0 * j.k_stride + n * j.n_stride;
      if (j.k_stride == 1) {
        quantize_block(v, count, j, n, b);
        continue;
      }
      for (int64_t k = 0; k < count; ++k) gathered[k] = simd::widen(v[k * j.k_stride]);
      quantize_block(gathered, count, j, n, b);
    }
}

template <typename T>
Quantized quantize_blockwise_of(const T* w, int64_t K, int64_t N, int bits, int64_t block, bool symmetric,
                                DType scale_dtype, bool w_is_nk) {
  HFX_CHECK(bits == 4 || bits == 8, "quantize_blockwise: {} bits", bits);
  HFX_CHECK(block >= 16 && block <= 256 && block % 8 == 0, "quantize_blockwise: block {}", block);
  const int64_t kb = k_blocks(K, block);
  Quantized out;
  out.data.assign(size_t(N * kb * blob_bytes(bits, block)), 0);
  out.scales.assign(size_t(N * kb), 0.f);
  // An odd block count leaves the last high nibble unused: it holds the default zero point 8, as in
  // ONNX Runtime's output.
  if (!symmetric) out.zero_points.assign(size_t(N * zero_point_bytes_per_column(bits, K, block)), bits == 4 ? 0x88 : 0);
  const BlockwiseJob<T> job{w, K, N, bits, block, symmetric, scale_dtype, w_is_nk ? 1 : N, w_is_nk ? K : 1, &out};
  parallel_columns(N, K, [&](int64_t n_begin, int64_t n_end) { quantize_columns(job, n_begin, n_end); });
  return out;
}

}  // namespace

Quantized quantize_blockwise(const float* w, int64_t K, int64_t N, int bits, int64_t block, bool symmetric,
                             DType scale_dtype, bool w_is_nk) {
  return quantize_blockwise_of(w, K, N, bits, block, symmetric, scale_dtype, w_is_nk);
}

Quantized quantize_blockwise_bf16_nk(const uint16_t* w_nk, int64_t K, int64_t N, int bits, int64_t block, bool symmetric,
                                     DType scale_dtype) {
  return quantize_blockwise_of(w_nk, K, N, bits, block, symmetric, scale_dtype, true);
}

// 16 values of a block at a time: 4-bit ones from 8 bytes (the even value in the low nibble), 8-bit
// ones from 16; w = float(q - zp) * scale, as the scalar tail computes it. The bytes are spread over
// the lanes as 32-bit words (a permutation), each lane shifted to its own value and masked: GCC 12
// widens a vector of bytes to 32-bit lanes a byte at a time (scalar extracts and inserts, four times
// the instructions of this kernel's arithmetic), and puts a vector narrower than 64 bytes through the
// stack to widen it (a load that waits on a store it cannot forward): the bytes are broadcast as
// 64-bit words instead.
HFX_SIMD_CLONES void dequantize_column(const uint8_t* data, const float* scales, const uint8_t* zero_points, int64_t K,
                                       int64_t n, int bits, int64_t block, float* w) {
  using simd::u32x16;
  using u64x8 = uint64_t __attribute__((vector_size(64)));
  // Lane j of 16 values: the word holding it and its shift in that word.
  constexpr u32x16 nibble_shift = {0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28};
  constexpr u32x16 byte_shift = {0, 8, 16, 24, 0, 8, 16, 24, 0, 8, 16, 24, 0, 8, 16, 24};
  const int64_t kb = k_blocks(K, block), blob = blob_bytes(bits, block), zb = zero_point_bytes_per_column(bits, K, block);
  for (int64_t b = 0; b < kb; ++b) {
    const float scale = scales[n * kb + b];
    const int zp = block_zero_point(zero_points ? zero_points + n * zb : nullptr, b, bits);
    const uint8_t* src = data + (n * kb + b) * blob;
    const int64_t k0 = b * block, count = std::min(K, k0 + block) - k0;
    float* dst = w + k0;
    int64_t i = 0;
    const f32x16 s = simd::splat(scale);
    const i32x16 z = i32x16{} + zp;
    if (bits == 8) {
      for (; i + 16 <= count; i += 16) {
        uint64_t lo, hi;
        std::memcpy(&lo, src + i, 8);
        std::memcpy(&hi, src + i + 8, 8);
        const u32x16 words01 = u32x16(u64x8{} + lo), words23 = u32x16(u64x8{} + hi);
        const u32x16 spread = __builtin_shufflevector(words01, words23, 0, 0, 0, 0, 1, 1, 1, 1, 16, 16, 16, 16, 17, 17, 17, 17);
        const i32x16 q = i32x16((spread >> byte_shift) & 0xFF);
        simd::store16(dst + i, __builtin_convertvector(q - z, f32x16) * s);
      }
      for (; i < count; ++i) dst[i] = float(int(src[i]) - zp) * scale;
    } else {  // two values a byte, the even one in the low nibble: value j is bits 4j .. 4j + 3 of its word
      for (; i + 16 <= count; i += 16) {
        uint64_t bytes;
        std::memcpy(&bytes, src + i / 2, 8);
        const u32x16 words = u32x16(u64x8{} + bytes);  // words 0 and 1 in every pair of lanes
        const u32x16 spread = __builtin_shufflevector(words, words, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
        const i32x16 q = i32x16((spread >> nibble_shift) & 0xF);
        simd::store16(dst + i, __builtin_convertvector(q - z, f32x16) * s);
      }
      for (; i + 1 < count; i += 2) {
        dst[i] = float(int(src[i / 2] & 0xF) - zp) * scale;
        dst[i + 1] = float(int(src[i / 2] >> 4) - zp) * scale;
      }
      if (i < count) dst[i] = float(int(src[i / 2] & 0xF) - zp) * scale;
    }
  }
}

std::vector<float> dequantize_blockwise(const uint8_t* data, const float* scales, const uint8_t* zero_points, int64_t K,
                                        int64_t N, int bits, int64_t block) {
  HFX_CHECK(bits == 4 || bits == 8, "dequantize_blockwise: {} bits", bits);
  std::vector<float> w(size_t(K * N));
  std::vector<float> column(static_cast<size_t>(K));
  for (int64_t n = 0; n < N; ++n) {
    dequantize_column(data, scales, zero_points, K, n, bits, block, column.data());
    for (int64_t k = 0; k < K; ++k) w[size_t(k * N + n)] = column[size_t(k)];
  }
  return w;
}

namespace {

// Element i of a row-major buffer of `bits`-bit values (4: two per byte, even i in the low nibble).
int get_value(const std::vector<uint8_t>& v, size_t i, int bits) {
  return bits == 8 ? v[i] : (v[i / 2] >> (4 * (i % 2))) & 0xF;
}
void put_value(std::vector<uint8_t>& v, size_t i, int bits, int x) {
  if (bits == 8) {
    v[i] = uint8_t(x);
  } else {
    const int shift = 4 * int(i % 2);
    v[i / 2] = uint8_t((v[i / 2] & ~(0xF << shift)) | ((x & 0xF) << shift));
  }
}

}  // namespace

Quantized relayout(Quantized q, int64_t K, int64_t N, int bits, int64_t block, bool symmetric, Layout to) {
  if (to == Layout::MatMulNBits) return q;
  Quantized out;
  const auto count = [&](int64_t n) { return size_t(bits == 4 ? (n + 1) / 2 : n); };
  if (block == 0) {  // per channel (int8, data [K, N] already signed when symmetric)
    HFX_CHECK(bits == 8, "relayout: per channel with {} bits", bits);
    if (to == Layout::BlockedKN) return q;
    out.data.resize(size_t(K * N));
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n) out.data[size_t(n * K + k)] = q.data[size_t(k * N + n)];
    out.scales = q.scales;
    out.zero_points = q.zero_points;
    return out;
  }
  const int64_t kb = k_blocks(K, block), blob = blob_bytes(bits, block), zb = zero_point_bytes_per_column(bits, K, block);
  if (to == Layout::BlockedNK && kb > 1 && K % block != 0)
    bad_input("K = {} is not a multiple of the block size {}: OpenVINO's compressed weights take whole groups "
              "(choose a block that divides K)", K, block);
  const int mid = 1 << (bits - 1);
  // Index of element (k, n) and of block (b, n) in the new layout.
  auto at = [&](int64_t k, int64_t n) { return to == Layout::BlockedKN ? k * N + n : n * K + k; };
  auto at_block = [&](int64_t b, int64_t n) { return to == Layout::BlockedKN ? b * N + n : n * kb + b; };
  out.data.assign(count(K * N), 0);
  out.scales.assign(size_t(N * kb), 0.f);
  if (!symmetric) out.zero_points.assign(count(N * kb), 0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t b = 0; b < kb; ++b) {
      out.scales[size_t(at_block(b, n))] = q.scales[size_t(n * kb + b)];
      if (!symmetric) put_value(out.zero_points, size_t(at_block(b, n)), bits, block_zero_point(q.zero_points.data() + n * zb, b, bits));
      const size_t src = size_t((n * kb + b) * blob) * (bits == 8 ? 1 : 2);  // element index in q.data
      for (int64_t k = b * block; k < std::min(K, (b + 1) * block); ++k) {
        const int v = get_value(q.data, src + size_t(k - b * block), bits);
        put_value(out.data, size_t(at(k, n)), bits, symmetric ? v - mid : v);  // signed: two's complement bits
      }
    }
  return out;
}

Quantized relayout_between(const Quantized& q, int64_t K, int64_t N, int bits, int64_t block, bool symmetric,
                           Layout from, Layout to) {
  HFX_CHECK(to != Layout::MatMulNBits, "relayout_between: MatMulNBits is computed from the checkpoint");
  if (from == Layout::MatMulNBits) return relayout(q, K, N, bits, block, symmetric, to);
  // Back to MatMulNBits' arrangement: relayout()'s loop with source and destination swapped.
  Quantized mnb;
  if (block == 0) {  // per channel: [K, N] in MatMulNBits' and BlockedKN's layouts, [N, K] in BlockedNK's
    HFX_CHECK(bits == 8, "relayout_between: per channel with {} bits", bits);
    mnb = q;
    if (from == Layout::BlockedNK)
      for (int64_t k = 0; k < K; ++k)
        for (int64_t n = 0; n < N; ++n) mnb.data[size_t(k * N + n)] = q.data[size_t(n * K + k)];
    return relayout(std::move(mnb), K, N, bits, block, symmetric, to);
  }
  const int64_t kb = k_blocks(K, block), blob = blob_bytes(bits, block), zb = zero_point_bytes_per_column(bits, K, block);
  const int mid = 1 << (bits - 1), mask = (1 << bits) - 1;
  auto at = [&](int64_t k, int64_t n) { return from == Layout::BlockedKN ? k * N + n : n * K + k; };
  auto at_block = [&](int64_t b, int64_t n) { return from == Layout::BlockedKN ? b * N + n : n * kb + b; };
  mnb.data.assign(size_t(N * kb * blob), 0);
  mnb.scales.assign(size_t(N * kb), 0.f);
  if (!symmetric) mnb.zero_points.assign(size_t(N * zb), 0);
  const size_t per_byte = bits == 8 ? 1 : 2;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t b = 0; b < kb; ++b) {
      mnb.scales[size_t(n * kb + b)] = q.scales[size_t(at_block(b, n))];
      if (!symmetric)
        put_value(mnb.zero_points, size_t(n * zb) * per_byte + size_t(b), bits, get_value(q.zero_points, size_t(at_block(b, n)), bits));
      const size_t dst = size_t((n * kb + b) * blob) * per_byte;
      for (int64_t k = b * block; k < std::min(K, (b + 1) * block); ++k) {
        const int v = get_value(q.data, size_t(at(k, n)), bits);
        put_value(mnb.data, dst + size_t(k - b * block), bits, symmetric ? (v + mid) & mask : v);
      }
    }
  return relayout(std::move(mnb), K, N, bits, block, symmetric, to);
}

namespace {

// rint (half to even) of a float, as the default rounding mode does it, without a libm call: below 2^23
// in magnitude, adding and taking back 2^23 leaves the integer nearest (ties to even); at or above it,
// or NaN, the value is already what rint gives.
HFX_INLINE f32x16 rint16(f32x16 x) {
  const f32x16 big = simd::splat(8388608.0f), zero{};
  const f32x16 magnitude = simd::select(x < zero, -x, x);
  const f32x16 rounded = simd::select(x < zero, (x - big) + big, (x + big) - big);
  return simd::select(magnitude < big, rounded, x);
}

// Row k of W[K, N] quantized per column: q = clamp(rint(w / scale) (+ zp)), as the scalar tail does.
HFX_SIMD_CLONES void per_channel_row(const float* w, const float* scales, const float* zps, int64_t N, bool symmetric,
                                     uint8_t* out) {
  using i8x16 = int8_t __attribute__((vector_size(16)));
  const f32x16 lo = simd::splat(symmetric ? -127.0f : 0.0f), hi = simd::splat(symmetric ? 127.0f : 255.0f);
  int64_t n = 0;
  for (; n + 16 <= N; n += 16) {
    f32x16 r = rint16(simd::load16(w + n) / simd::load16(scales + n));
    if (!symmetric) r += simd::load16(zps + n);
    r = simd::select(r < lo, lo, r);  // std::clamp's order: NaN stays NaN
    r = simd::select(hi < r, hi, r);
    const i32x16 q = __builtin_convertvector(r, i32x16);
    if (symmetric) {
      const i8x16 b = __builtin_convertvector(q, i8x16);
      std::memcpy(out + n, &b, sizeof b);
    } else {
      const u8x16 b = __builtin_convertvector(q, u8x16);
      std::memcpy(out + n, &b, sizeof b);
    }
  }
  for (; n < N; ++n) {
    const float r = std::nearbyint(w[n] / scales[n]);
    out[n] = symmetric ? uint8_t(int8_t(std::clamp(r, -127.0f, 127.0f))) : uint8_t(std::clamp(r + zps[n], 0.0f, 255.0f));
  }
}

}  // namespace

Quantized quantize_per_channel_int8(const float* w, int64_t K, int64_t N, bool symmetric, DType scale_dtype) {
  Quantized out;
  out.data.assign(size_t(K * N), 0);
  out.scales.assign(size_t(N), 1.f);
  if (!symmetric) out.zero_points.assign(size_t(N), 0);
  // Each column's range, rows in order (the same sequence of min/max as a column at a time, read row by
  // row so it vectorises): it always includes 0.
  std::vector<float> mn(size_t(N), 0.0f), mx(size_t(N), 0.0f), zps(size_t(N), 0.0f);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) {
      mn[size_t(n)] = std::min(mn[size_t(n)], w[k * N + n]);
      mx[size_t(n)] = std::max(mx[size_t(n)], w[k * N + n]);
    }
  for (int64_t n = 0; n < N; ++n) {
    float scale = symmetric ? std::max(std::fabs(mn[size_t(n)]), std::fabs(mx[size_t(n)])) / 127.0f
                            : (mx[size_t(n)] - mn[size_t(n)]) / 255.0f;
    scale = round_to(scale_dtype, scale);
    if (!(scale > 0.0f) || !std::isfinite(scale)) scale = 1.0f;
    out.scales[size_t(n)] = scale;
    if (!symmetric) {
      const int zp = int(std::clamp(std::nearbyint(0.0f - mn[size_t(n)] / scale), 0.0f, 255.0f));
      zps[size_t(n)] = float(zp);
      out.zero_points[size_t(n)] = uint8_t(zp);
    }
  }
  parallel_columns(K, N, [&](int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k)
      per_channel_row(w + k * N, out.scales.data(), zps.data(), N, symmetric, out.data.data() + k * N);
  });
  return out;
}

}  // namespace hfx::quant
