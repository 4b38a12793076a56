// Weight-only quantization: DequantizeLinear (per tensor, per axis, blocked; opset 21),
// com.microsoft's MatMulNBits, which dequantizes B a block of columns at a time into f32 and multiplies,
// or for a decode step's few rows of a 4-bit B multiplies straight from its packed bytes (with
// accuracy_level 4, A quantized to int8 as ONNX Runtime's CPU kernel does), and
// GatherBlockQuantized. The reference executor holds integer values as I64 (see kernels.h) but keeps
// the packed weights these two read as their uint8 bytes; an I64 operand is narrowed back to bytes.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/simd.h"
#include "quant/quantize.h"
#include "runtime/kernels.h"

namespace hfx::runtime::detail {

namespace {

// A packed operand's bytes: a U8 tensor as it is (the executor keeps the packed weights of these ops
// as read: runtime/executor.cc), an I64 one narrowed after checking each value is a byte.
struct PackedBytes {
  const uint8_t* data = nullptr;
  size_t size = 0;
  std::vector<uint8_t> owned;
};

PackedBytes bytes_of(const ir::Node& node, const Tensor& t, const char* what) {
  PackedBytes b;
  if (t.dtype() == DType::U8) {
    b.data = t.data();
    b.size = t.nbytes();
    return b;
  }
  if (t.dtype() != DType::I64) bad_input("{} ({}): {} must be uint8, got {}", node.name, node.op, what, dtype_name(t.dtype()));
  const auto v = int_values(t);
  b.owned.resize(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] < 0 || v[i] > 255) bad_input("{} ({}): {} holds {}, not a byte", node.name, node.op, what, v[i]);
    b.owned[i] = uint8_t(v[i]);
  }
  b.data = b.owned.data();
  b.size = b.owned.size();
  return b;
}

// MatMulNBits' B as stored: column n of W [K, N] is row n of B, kb blocks of `blob` bytes, with its
// scales (and zero points) per block.
struct NBitsWeight {
  const uint8_t* data;
  const float* scales;
  const uint8_t* zero_points;  // null: 2^(bits-1)
  int64_t K, N, bits, block;
  // Per column: blocks, bytes of a block's values, bytes of the zero points.
  int64_t kb = quant::k_blocks(K, block), blob = quant::blob_bytes(int(bits), block),
          zero_point_bytes = quant::zero_point_bytes_per_column(int(bits), K, block);

  // Column n of W, dequantized.
  void column(int64_t n, float* w) const {
    quant::dequantize_column(data, scales, zero_points, K, n, int(bits), block, w);
  }
};

// One product C[m, N] = A[m, K] x W of a group (a run of Executor::run_many).
struct NBitsProduct {
  int64_t m;
  const float* a;
  float* c;
};

// The 4-bit few-row product reads W's packed bytes 64 at a time as 16 lanes of 4 bytes: lane j holds the
// 8 values 8j .. 8j + 7 of the run of 128, nibble t of the lane (bits 4t .. 4t + 3) value 8j + t. So the
// 16 values 8j + t of the 16 lanes come out of one shift and one mask, with no byte widening (which
// GCC 12 compiles to a byte at a time). A's rows are put in that order: each run of 128 values at a
// multiple of 128 (inside K) as 8 runs of 16, run t holding values 8j + t; the K % 128 values past the
// last such run as they are.
constexpr int64_t kNibbleRun = 128;
std::vector<float> nibble_order(const float* a, int64_t m, int64_t K) {
  std::vector<float> out(size_t(m * K));
  for (int64_t r = 0; r < m; ++r) {
    const float* src = a + r * K;
    float* dst = out.data() + r * K;
    int64_t k = 0;
    for (; k + kNibbleRun <= K; k += kNibbleRun)
      for (int t = 0; t < 8; ++t)
        for (int j = 0; j < 16; ++j) dst[k + 16 * t + j] = src[k + 8 * j + t];
    std::copy(src + k, src + K, dst + k);
  }
  return out;
}

// c[r][n] for R rows of A (in nibble_order) and column n of a 4-bit W (blocks of a power of 2 >= 16
// values), straight from its packed bytes. Each lane's 8 values of a run lie in one block, so a run
// sums a * (q - zero point) over its 8 values per lane and multiplies that by the lane's scale once:
// q - zero point is a lane of a 16-entry table picked by the nibble itself (simd::permute reads an
// index's low 4 bits, so the shifted bytes need no mask), where widening each value and scaling it
// took three more instructions per 16 values than the products (a decode step is this loop). Blocks
// under 128 values with zero points of their own (asymmetric) give each lane its own zero point and
// subtract it instead. The runs' sums in k order, then the values past the last run of 128, then the
// lanes in order: a row's numbers do not depend on the rows it runs with.
template <int R, bool kLaneZeroPoints>
HFX_INLINE void nibble_dot(const NBitsWeight& w, int64_t n, const float* a, float* c, int64_t ldc) {
  using simd::f32x16;
  using simd::i32x16;
  using simd::u32x16;
  const int64_t K = w.K;
  const float* scales = w.scales + n * w.kb;
  const uint8_t* column = w.data + n * w.kb * w.blob;  // the blocks' bytes, back to back
  const uint8_t* zero_points = w.zero_points ? w.zero_points + n * w.zero_point_bytes : nullptr;
  auto zero_point = [&](int64_t b) { return quant::block_zero_point(zero_points, b, 4); };
  // block is a power of 2 (MatMulNBits checks): lane j of the run at k is in block (k >> shift) + (j >> lane_shift)
  const int shift = __builtin_ctzll(uint64_t(w.block)), lane_shift = shift - 3;
  i32x16 lane_block, nibble;
  for (int j = 0; j < 16; ++j) {
    lane_block[j] = j >> lane_shift;
    nibble[j] = j;
  }
  // q - zero point for q = 0 .. 15: one table for the column (symmetric: 2^3), or one a run.
  f32x16 table = __builtin_convertvector(nibble - quant::block_zero_point(nullptr, 0, 4), f32x16);
  // The lanes' scales are the run's 128 / block scales, loaded as a vector and spread over the lanes by
  // a permutation: filled lane by lane through the stack, the vector load waited on 16 stores it could
  // not forward, a fifth of this kernel's time on a decode step.
  const float* scales_end = w.scales + w.N * w.kb;
  const uint8_t* zero_points_end = w.zero_points ? w.zero_points + w.N * w.zero_point_bytes : nullptr;
  f32x16 acc[R] = {};
  int64_t k = 0;
  for (; k + kNibbleRun <= K; k += kNibbleRun) {
    const int64_t b0 = k >> shift;
    f32x16 s;
    i32x16 zp = {};
    if (w.block >= kNibbleRun) {  // one block
      s = simd::splat(scales[b0]);
      if (zero_points) table = __builtin_convertvector(nibble - zero_point(b0), f32x16);
    } else {
      f32x16 run_scales;
      if (const int64_t left = scales_end - (scales + b0); left >= 16) {
        run_scales = simd::load16(scales + b0);
      } else {  // the last columns' last runs: no read past the scales
        float near_end[16] = {};
        std::copy(scales + b0, scales_end, near_end);
        run_scales = simd::load16(near_end);
      }
      s = simd::permute(run_scales, lane_block);
      if (kLaneZeroPoints) {
        // The run's 128 / block (2 to 8) zero points are nibbles 0, 1, ... of the 4 bytes from b0 / 2
        // (b0 is even: a run is 2 or more blocks), lane j's the nibble of its block: shifted out of
        // one word in registers (lane by lane through the stack, the load waited on 16 stores).
        uint32_t word = 0;
        const uint8_t* from = zero_points + b0 / 2;
        std::memcpy(&word, from, size_t(std::min<int64_t>(4, zero_points_end - from)));  // no read past the end
        zp = i32x16(((u32x16{} + word) >> u32x16(4 * lane_block)) & 0xF);
      }
    }
    u32x16 bytes;
    std::memcpy(&bytes, column + k / 2, sizeof bytes);
    f32x16 run[R] = {};
#pragma GCC unroll 8
    for (int t = 0; t < 8; ++t) {
      const u32x16 shifted = bytes >> (4 * t);
      const f32x16 v = kLaneZeroPoints ? __builtin_convertvector(i32x16(shifted & 0xF) - zp, f32x16)
                                       : simd::permute(table, i32x16(shifted));
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) run[r] += simd::load16(a + r * K + k + 16 * t) * v;
    }
    for (int r = 0; r < R; ++r) acc[r] += run[r] * s;
  }
  float tail[R] = {};
  for (; k < K; ++k) {
    const int64_t b = k / w.block, i = k - b * w.block;
    const uint8_t byte = column[b * w.blob + i / 2];
    const float v = float(int((byte >> (4 * (i % 2))) & 0xF) - zero_point(b)) * scales[b];
    for (int r = 0; r < R; ++r) tail[r] += a[r * K + k] * v;
  }
  for (int r = 0; r < R; ++r) {
    float lanes[16];
    simd::store16(lanes, acc[r]);
    float sum = tail[r];
    for (float l : lanes) sum += l;
    c[r * ldc + n] = sum;
  }
}

// nibble_dot for 1 to 4 rows of A.
template <bool kLaneZeroPoints>
HFX_INLINE void nibble_dot_rows(const NBitsWeight& w, int64_t n, int64_t rows, const float* a, float* c) {
  switch (rows) {
    case 4: nibble_dot<4, kLaneZeroPoints>(w, n, a, c, w.N); break;
    case 3: nibble_dot<3, kLaneZeroPoints>(w, n, a, c, w.N); break;
    case 2: nibble_dot<2, kLaneZeroPoints>(w, n, a, c, w.N); break;
    default: nibble_dot<1, kLaneZeroPoints>(w, n, a, c, w.N); break;
  }
}

// C[:, n0, n1) = A x W for m rows of A (in nibble_order), 4 rows a pass over each column's bytes.
HFX_SIMD_CLONES void nibble_products(const NBitsWeight& w, const float* a, int64_t m, float* c, int64_t n0, int64_t n1) {
  // Columns lie back to back, but the hardware prefetchers stop at each 4 KiB page (8 columns of
  // K = 1024): the bytes of the column kAhead on are asked for while this one is multiplied.
  constexpr int64_t kAhead = 4;
  const int64_t column_bytes = w.kb * w.blob;
  // Blocks under a run with zero points of their own: each lane subtracts its block's (nibble_dot).
  const bool lane_zero_points = w.zero_points && w.block < kNibbleRun;
  for (int64_t n = n0; n < n1; ++n) {
    if (n + kAhead < n1)
      for (int64_t line = 0; line < column_bytes; line += 64)
        __builtin_prefetch(w.data + (n + kAhead) * column_bytes + line);
    for (int64_t r = 0; r < m; r += 4) {
      const float* ar = a + r * w.K;
      float* cr = c + r * w.N;
      const int64_t rows = std::min<int64_t>(m - r, 4);
      if (lane_zero_points) nibble_dot_rows<true>(w, n, rows, ar, cr);
      else nibble_dot_rows<false>(w, n, rows, ar, cr);
    }
  }
}

// Whether a product reads W's packed bytes directly (nibble_products): up to 8 rows of a 4-bit W (a
// decode step, a short prompt), a pass over a column's bytes per 4 rows (the second finds them in L1).
// More rows widen each value once per 4 rows as often: past 8, W dequantized a chunk at a time, once
// for the group, costs as little (16 rows of a [1024, 3072] W: 0.79 ms either way; 8 rows 0.35 ms
// read as nibbles, 0.54 dequantized).
constexpr int64_t kNibbleRows = 8;
bool reads_nibbles(const NBitsWeight& w, const NBitsProduct& p) {
  return w.bits == 4 && p.m <= kNibbleRows;
}

// Every product of a group against one W. A product of a few rows of a 4-bit W reads the packed bytes
// (nibble_products): a quarter of the bytes of W in f32, nothing written. The others get W dequantized
// from its packed columns, each column once for the whole group (no f32 copy of W: a vocabulary-sized
// lm_head would be 600 MB). Up to kTiledRows rows, each thread dequantizes a chunk of its own half of
// the columns (256 KiB of f32, in its L2) and runs every product on it before the next: the threads
// meet once per weight. (Both threads dequantizing a block of 256 columns, then each product split
// between them, met twice per block.) With a product of more rows, that is what runs: sgemm packs its
// A once per call, so it wants wide blocks. A product's numbers do not depend on the group it ran in.
void nbits_products(const NBitsWeight& w, const std::vector<NBitsProduct>& products) {
  std::vector<std::vector<float>> nibble_a(products.size());
  bool any_dequantized = false, any_sgemm = false;
  for (size_t i = 0; i < products.size(); ++i) {
    if (reads_nibbles(w, products[i])) nibble_a[i] = nibble_order(products[i].a, products[i].m, w.K);
    else any_dequantized = true;
    any_sgemm = any_sgemm || (nibble_a[i].empty() && products[i].m > kTiledRows);
  }
  if (!any_dequantized) {
    for (size_t i = 0; i < products.size(); ++i)
      split_in_two(w.N, [&](int64_t n0, int64_t n1) {
        nibble_products(w, nibble_a[i].data(), products[i].m, products[i].c, n0, n1);
      });
    return;
  }
  if (!any_sgemm) {
    constexpr int64_t kChunkBytes = 256 << 10;
    const int64_t chunk = std::max<int64_t>(4, kChunkBytes / int64_t(sizeof(float)) / std::max<int64_t>(w.K, 1));
    split_in_two(w.N, [&](int64_t n0, int64_t n1) {
      thread_local std::vector<float> block;
      block.resize(size_t(chunk * w.K));
      for (int64_t c0 = n0; c0 < n1; c0 += chunk) {
        const int64_t c1 = std::min(n1, c0 + chunk);
        for (int64_t n = c0; n < c1; ++n) w.column(n, block.data() + (n - c0) * w.K);
        for (size_t i = 0; i < products.size(); ++i) {
          const NBitsProduct& p = products[i];
          if (!nibble_a[i].empty()) nibble_products(w, nibble_a[i].data(), p.m, p.c, c0, c1);
          else few_rows_linear_one_thread(block.data(), c1 - c0, w.K, p.m, w.N, c0, p.a, p.c);
        }
      }
    });
    return;
  }
  constexpr int64_t kColumnsPerBlock = 256;
  std::vector<float> block(size_t(kColumnsPerBlock * w.K));
  for (int64_t n0 = 0; n0 < w.N; n0 += kColumnsPerBlock) {
    const int64_t cols = std::min(kColumnsPerBlock, w.N - n0);
    split_in_two(cols, [&](int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; ++j) w.column(n0 + j, block.data() + j * w.K);
      for (size_t i = 0; i < products.size(); ++i)
        if (!nibble_a[i].empty()) nibble_products(w, nibble_a[i].data(), products[i].m, products[i].c, n0 + j0, n0 + j1);
    });
    for (size_t i = 0; i < products.size(); ++i) {
      const NBitsProduct& p = products[i];
      if (!nibble_a[i].empty()) continue;
      if (p.m <= kTiledRows)
        few_rows_linear(block.data(), cols, w.K, p.m, w.N, n0, p.a, p.c);
      else
        gemm(false, true, p.m, cols, w.K, 1.0f, p.a, w.K, block.data(), w.K, p.c + n0, w.N);
    }
  }
}

// accuracy_level 4 lets ONNX Runtime's CPU kernel (MLAS, "CompInt8") compute in int8: it quantizes each
// row of A per block of block_size along K, symmetrically, scale = max|a| / 127 and q = a * (127 /
// max|a|) rounded half to even, then sums the integer products per block times both scales. The same
// rounding applied here (a replaced by q * scale, in place) makes the reference compute what ONNX
// Runtime computes, up to the order of summation (and the near-ties that order decides: see
// docs/verify.md, "Tolerances"); verify on the reference runtime drops the attribute on both sides.
// A row shorter than a block ends in a short block, as in MLAS.
void quantize_activations_int8(float* a, int64_t rows, int64_t K, int64_t block) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k0 = 0; k0 < K; k0 += block) {
      float* x = a + r * K + k0;
      const int64_t n = std::min(block, K - k0);
      float amax = 0.f;
      for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
      const float scale = amax / 127.f;
      const float inverse = amax != 0.f ? 127.f / amax : 0.f;
      for (int64_t i = 0; i < n; ++i) x[i] = std::clamp(std::nearbyint(x[i] * inverse), -128.f, 127.f) * scale;
    }
}

// MatMulNBits for the runs of a group: B (its bytes, scales and zero points) read from the first run's
// inputs, or B's bytes where they lie in the mapped file (`stored_b`: the executor's in-place read), and
// dequantized once for all (a graph whose B differs between runs, computed from its inputs, runs one by
// one).
std::vector<std::vector<Tensor>> matmul_nbits_runs(const ir::Node& node, const std::vector<KernelInputs>& runs,
                                                   const ir::StoredMatrix* stored_b) {
  const KernelInputs& in = runs.front();
  for (const KernelInputs& other : runs)
    for (size_t j = stored_b ? 2 : 1; j < std::max(in.size(), other.size()); ++j)
      if ((j < in.size() ? in[j] : nullptr) != (j < other.size() ? other[j] : nullptr)) {
        std::vector<std::vector<Tensor>> outs;
        for (const KernelInputs& one : runs) outs.push_back(std::move(matmul_nbits_runs(node, {one}, stored_b).front()));
        return outs;
      }
  const int64_t K = node.attr_int("K"), N = node.attr_int("N"), bits = node.attr_int("bits", 4),
                block = node.attr_int("block_size");
  if (bits != 4 && bits != 8) unsupported("{}: MatMulNBits with bits = {} (the reference executor runs 4 and 8)", node.name, bits);
  if (block < 16 || (block & (block - 1)) != 0) bad_input("{}: MatMulNBits block_size {} is not a power of 2 >= 16", node.name, block);
  const int64_t kb = quant::k_blocks(K, block), blob = quant::blob_bytes(int(bits), block);
  PackedBytes b;
  if (stored_b) {
    b.data = stored_b->data;
    b.size = size_t(stored_b->rows * stored_b->cols);
  } else {
    b = bytes_of(node, arg(node, in, 1), "B");
  }
  const Tensor& s = arg(node, in, 2);
  expect_dtype(node, s, DType::F32, "scales");
  if (int64_t(b.size) != N * kb * blob || s.numel() != N * kb)
    bad_input("{}: MatMulNBits B has {} bytes and {} scales; K {}, N {}, block {} need {} and {}", node.name, b.size,
              s.numel(), K, N, block, N * kb * blob, N * kb);
  PackedBytes zp;
  const int64_t zp_bytes = quant::zero_point_bytes_per_column(int(bits), K, block);
  if (in.size() > 3 && in[3]) {
    zp = bytes_of(node, *in[3], "zero_points");
    if (int64_t(zp.size) != N * zp_bytes) bad_input("{}: MatMulNBits zero points have {} bytes", node.name, zp.size);
  }
  const NBitsWeight w{b.data, s.as<float>(), zp.data, K, N, bits, block};
  const bool int8_activations = node.attr_int("accuracy_level", 0) == 4;
  std::vector<std::vector<Tensor>> outs;
  std::vector<std::vector<float>> int8_a(runs.size());
  std::vector<NBitsProduct> products;
  for (size_t r = 0; r < runs.size(); ++r) {
    const Tensor& a = arg(node, runs[r], 0);
    expect_dtype(node, a, DType::F32, "input A");
    if (a.rank() < 1 || a.shape().back() != K)
      bad_input("{}: MatMulNBits input {} does not end in K = {}", node.name, shape_string(a.shape()), K);
    std::vector<int64_t> out_shape = a.shape();
    out_shape.back() = N;
    Tensor out(DType::F32, out_shape);
    const int64_t rows = K ? a.numel() / K : 0;
    const float* lhs = a.as<float>();
    if (int8_activations) {
      int8_a[r].assign(lhs, lhs + a.numel());
      quantize_activations_int8(int8_a[r].data(), rows, K, block);
      lhs = int8_a[r].data();
    }
    if (K == 0)
      std::fill(out.as<float>(), out.as<float>() + out.numel(), 0.0f);
    else if (out.numel() > 0)
      products.push_back({rows, lhs, out.as<float>()});
    outs.emplace_back().push_back(std::move(out));
  }
  if (!products.empty()) nbits_products(w, products);
  return outs;
}

std::vector<std::vector<Tensor>> matmul_nbits_group(const ir::Node& node, const std::vector<KernelInputs>& runs) {
  return matmul_nbits_runs(node, runs, nullptr);
}

std::vector<Tensor> matmul_nbits_kernel(const ir::Node& node, const KernelInputs& in) {
  return std::move(matmul_nbits_runs(node, {in}, nullptr).front());
}

// y = (x - zero_point) * scale, the scale (and zero point) per tensor, per `axis` index, or per block of
// `block_size` along `axis`.
std::vector<Tensor> dequantize_linear_kernel(const ir::Node& node, const KernelInputs& in) {
  const Tensor& x = arg(node, in, 0);
  const Tensor& s = arg(node, in, 1);
  expect_dtype(node, s, DType::F32, "x_scale");
  const Tensor* z = in.size() > 2 ? in[2] : nullptr;
  if (x.dtype() != DType::I64) unsupported("{}: DequantizeLinear of {} values", node.name, dtype_name(x.dtype()));
  const auto xv = int_values(x);
  const std::vector<int64_t> zv = z ? int_values(*z) : std::vector<int64_t>{};
  if (z && z->numel() != s.numel()) bad_input("{}: zero point and scale have different sizes", node.name);
  const int64_t block = node.attr_int("block_size", 0);
  Tensor out(DType::F32, x.shape());
  float* y = out.as<float>();
  const float* sc = s.as<float>();
  if (s.numel() == 1 && block == 0) {  // per tensor
    for (size_t i = 0; i < xv.size(); ++i) y[i] = float(xv[i] - (z ? zv[0] : 0)) * sc[0];
    return {std::move(out)};
  }
  const int64_t axis = normalize_axis(node, node.attr_int("axis", 1), x.rank());
  const int64_t D = x.shape()[size_t(axis)];
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= x.shape()[size_t(i)];
  for (int64_t i = axis + 1; i < x.rank(); ++i) inner *= x.shape()[size_t(i)];
  if (block == 0) {
    if (s.numel() != D) bad_input("{}: {} scales for axis {} of {}", node.name, s.numel(), axis, shape_string(x.shape()));
  } else {
    if (block < 1) bad_input("{}: block_size {}", node.name, block);
    if (s.rank() != x.rank() || s.numel() != outer * ((D + block - 1) / block) * inner)
      bad_input("{}: scale {} does not block {} by {} along axis {}", node.name, shape_string(s.shape()),
                shape_string(x.shape()), block, axis);
  }
  const int64_t db = block ? (D + block - 1) / block : D;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t d = 0; d < D; ++d) {
      const int64_t si_row = block ? (o * db + d / block) * inner : d;
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t si = block ? si_row + i : si_row;
        const int64_t xi = (o * D + d) * inner + i;
        y[xi] = float(xv[size_t(xi)] - (z ? zv[size_t(si)] : 0)) * sc[si];
      }
    }
  return {std::move(out)};
}

// Rows of a blockwise-quantized [V, D] table (GatherBlockQuantized as hfx writes it: uint8 data
// [V, D * bits / 8], scales [V, D / block], zero points packed like MatMulNBits', 2^(bits-1) without).
// Only the gathered rows are dequantized: a vocabulary-sized table is never expanded.
std::vector<Tensor> gather_block_quantized_kernel(const ir::Node& node, const KernelInputs& in) {
  const Tensor& data = arg(node, in, 0);
  const Tensor& idx = arg(node, in, 1);
  const Tensor& s = arg(node, in, 2);
  expect_dtype(node, s, DType::F32, "scales");
  const int64_t bits = node.attr_int("bits", 4), block = node.attr_int("block_size", 128);
  if ((data.dtype() != DType::I64 && data.dtype() != DType::U8) || data.rank() != 2)
    bad_input("{}: GatherBlockQuantized data must be a uint8 [V, D] table", node.name);
  if (bits != 4 && bits != 8) unsupported("{}: GatherBlockQuantized with bits = {}", node.name, bits);
  if (block < 16 || (block & (block - 1)) != 0) bad_input("{}: GatherBlockQuantized block_size {} is not a power of 2 >= 16", node.name, block);
  const int64_t V = data.shape()[0], row_bytes = data.shape()[1], D = row_bytes * (8 / bits);
  if (D % block != 0) bad_input("{}: GatherBlockQuantized row of {} values is not whole blocks of {}", node.name, D, block);
  const int64_t kb = D / block, zp_bytes = quant::zero_point_bytes_per_column(int(bits), D, block);
  if (s.numel() != V * kb) bad_input("{}: GatherBlockQuantized has {} scales, [{}, {}] needs {}", node.name, s.numel(), V, D, V * kb);
  const Tensor* z = in.size() > 3 ? in[3] : nullptr;
  if (z && ((z->dtype() != DType::I64 && z->dtype() != DType::U8) || z->numel() != V * zp_bytes))
    bad_input("{}: GatherBlockQuantized zero points must be {} uint8 values", node.name, V * zp_bytes);
  const PackedBytes table = bytes_of(node, data, "data");
  const PackedBytes zeros = z ? bytes_of(node, *z, "zero points") : PackedBytes{};
  const auto ids = int_values(idx);
  std::vector<int64_t> out_shape = idx.shape();
  out_shape.push_back(D);
  Tensor out(DType::F32, out_shape);
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t r = ids[i] < 0 ? ids[i] + V : ids[i];
    if (r < 0 || r >= V) bad_input("{}: index {} is out of range for a table of {} rows", node.name, ids[i], V);
    // One table row is one MatMulNBits column: W[D, 1].
    const auto w = quant::dequantize_blockwise(table.data + r * row_bytes, s.as<float>() + r * kb,
                                               z ? zeros.data + r * zp_bytes : nullptr, D, 1, int(bits), block);
    std::copy(w.begin(), w.end(), out.as<float>() + int64_t(i) * D);
  }
  return {std::move(out)};
}

}  // namespace

bool reads_packed_bytes(const ir::Node& node, size_t i) {
  return (node.op == "MatMulNBits" && (i == 1 || i == 3)) || (node.op == "GatherBlockQuantized" && (i == 0 || i == 3));
}

GroupKernelFn group_kernel(const ir::Node& node) { return node.op == "MatMulNBits" ? matmul_nbits_group : nullptr; }

std::vector<std::vector<Tensor>> matmul_nbits_stored(const ir::Node& node, const std::vector<KernelInputs>& runs,
                                                     const ir::StoredMatrix& b) {
  HFX_CHECK(b.dtype == DType::U8 && !b.transposed, "{}: MatMulNBits reads B in place as its bytes", node.name);
  return matmul_nbits_runs(node, runs, &b);
}

void register_quant_kernels(KernelTable& t) {
  t["MatMulNBits"] = matmul_nbits_kernel;
  t["DequantizeLinear"] = dequantize_linear_kernel;
  t["GatherBlockQuantized"] = gather_block_quantized_kernel;
}

}  // namespace hfx::runtime::detail
