// Kernels that read a weight where it lies in the mapped file (ir::StoredMatrix), in its stored dtype,
// widening a block of it at a time: MatMul and Linear against a weight, and Gather (Embedding) from a
// table. The executor sends a node here instead of materialising its weight, so a run holds no f32 copy
// of the model, only a block of each weight as it is read; the numbers are those of the f32 kernels
// (a widening is exact; the sums run in another order, as any BLAS may choose).
#include <algorithm>
#include <cstring>

#include "core/mapped_file.h"
#include "core/simd.h"
#include "runtime/kernels.h"

namespace hfx::runtime::detail {

namespace {

// Stored rows read per block: about 4 MiB of them.
constexpr size_t kBlockBytes = size_t(4) << 20;
// A streamed weight's pages read so far are released every this many bytes (and by the executor after
// the node): a vocabulary-sized table is not resident whole while it is read (1.2 GB of f32 for
// Qwen3-1.7B's tied lm_head), and a release's TLB flush on every thread is paid every 64 MiB, not per
// 4 MiB block.
constexpr size_t kReleaseBytes = size_t(64) << 20;

// The kernels below are compiled for AVX-512, AVX2 and the baseline, picked at load time (core/simd.h).
using simd::f32x16;
using simd::load16;
using simd::store16;

using simd::widen;

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"  // vectors passed between inlined helpers only

// c[r][j + jj] = sum_i a[r][i] * W[j + jj][i] for M rows of a and J rows of a stored [n, k] matrix (a
// Linear's weight, or a MatMul's read transposed): M x J sums of 16 lanes in registers, each weight
// and each row of a loaded once per 16 k. Each output is summed as the f32 kernels' reference order
// fixes it for every M and J: 16 lane sums in k order, then the tail, then the lanes in order, so a
// row's numbers do not depend on which rows it was run with.
// `ahead`, when not null, is a later tile's first stored row, whose lines are prefetched as this tile's
// are read: a stored row is a page or two, too short for the hardware prefetcher to learn before it
// ends. With it, and 8 columns a tile for one or two rows, a 2-row decode step reads a 622 MB [n, k]
// weight (a tied lm_head, not in cache) at 26 GB/s in f32 and 20 in bf16, from 21 and 13.5
// (bench/stored_products_bench.cc 1024 151936).
template <int M, int J, typename T>
HFX_INLINE void dot_tile(const T* w, int64_t k, const float* a, int64_t j, float* c, int64_t ldc, const T* ahead) {
  f32x16 acc[M][J] = {};
  int64_t i = 0;
  for (; i + 16 <= k; i += 16) {
    if (ahead && (i * sizeof(T)) % 64 == 0)
#pragma GCC unroll 8
      for (int jj = 0; jj < J; ++jj) __builtin_prefetch(ahead + jj * k + i);
    f32x16 wv[J];
#pragma GCC unroll 8
    for (int jj = 0; jj < J; ++jj) wv[jj] = load16(w + (j + jj) * k + i);
#pragma GCC unroll 4
    for (int r = 0; r < M; ++r) {
      const f32x16 av = load16(a + r * k + i);
#pragma GCC unroll 8
      for (int jj = 0; jj < J; ++jj) acc[r][jj] += av * wv[jj];
    }
  }
  float lanes[M][J][16];  // out of registers once, so the sums above stay in them
#pragma GCC unroll 4
  for (int r = 0; r < M; ++r)
#pragma GCC unroll 8
    for (int jj = 0; jj < J; ++jj) store16(lanes[r][jj], acc[r][jj]);
  for (int r = 0; r < M; ++r)
    for (int jj = 0; jj < J; ++jj) {
      float sum = 0.0f;
      for (int64_t t = i; t < k; ++t) sum += a[r * k + t] * widen(w[(j + jj) * k + t]);
      for (int l = 0; l < 16; ++l) sum += lanes[r][jj][l];
      c[r * ldc + j + jj] = sum;
    }
}

// c[r][j, j + 16V) (+)= sum over the kb stored rows of a [k, n] block of a[r][kk] * W[kk][j, j + 16V) for
// M rows of a (the [k, n] layout of an ONNX MatMul's weight): M x V vectors of outputs in registers, each
// stored row's 16V columns loaded once (V = 8 for one or two rows, so 8 sums are under way at once). Each
// output is summed in k order onto what C held (accumulate: earlier blocks) or 0, as the f32 kernels do.
template <int M, int V, typename T>
HFX_INLINE void axpy_tile(const T* w, int64_t ldw, int64_t kb, int64_t j, const float* a, int64_t lda, float* c,
                          int64_t ldc, bool accumulate) {
  f32x16 acc[M][V];
  for (int r = 0; r < M; ++r)
    for (int v = 0; v < V; ++v) acc[r][v] = accumulate ? load16(c + r * ldc + j + 16 * v) : f32x16{};
  constexpr int64_t kAhead = 8;  // rows ahead to prefetch: the rows are ldw apart, past the hardware's strides
  for (int64_t kk = 0; kk < kb; ++kk) {
    const T* row = w + kk * ldw + j;
    if (kk + kAhead < kb)
      for (size_t line = 0; line < 16 * V * sizeof(T); line += 64)
        __builtin_prefetch(reinterpret_cast<const char*>(row + kAhead * ldw) + line);
    f32x16 wv[V];
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) wv[v] = load16(row + 16 * v);
#pragma GCC unroll 4
    for (int r = 0; r < M; ++r) {
      const float s = a[r * lda + kk];
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) acc[r][v] += s * wv[v];
    }
  }
  for (int r = 0; r < M; ++r)
    for (int v = 0; v < V; ++v) store16(c + r * ldc + j + 16 * v, acc[r][v]);
}

// The columns [j, j + width) past the last full tile of 64, one at a time, in the same order.
template <typename T>
void axpy_columns(const T* w, int64_t ldw, int64_t kb, int64_t j, int64_t width, int m, const float* a, int64_t lda,
                  float* c, int64_t ldc, bool accumulate) {
  for (int r = 0; r < m; ++r)
    for (int64_t t = j; t < j + width; ++t) {
      float sum = accumulate ? c[r * ldc + t] : 0.0f;
      for (int64_t kk = 0; kk < kb; ++kk) sum += a[r * lda + kk] * widen(w[kk * ldw + t]);
      c[r * ldc + t] = sum;
    }
}

// dot_tile for every group of up to 4 rows of a against the stored rows [j, j + J) (inlined: a lambda
// would be compiled apart from few_rows_share's clones, for the baseline instruction set).
// The first group prefetches a later tile's rows (`ahead`, two tiles on; null near the share's end);
// the later groups find this tile in cache.
template <int J, typename T>
HFX_INLINE void dot_groups(const T* block, int64_t m, int64_t k, int64_t n, int64_t r0, const float* a, float* c,
                           int64_t j, const T* ahead) {
  for (int64_t r = 0; r < m; r += 4, ahead = nullptr) {
    const float* ar = a + r * k;
    float* cr = c + r * n + r0;
    switch (std::min<int64_t>(m - r, 4)) {
      case 4: dot_tile<4, J>(block, k, ar, j, cr, n, ahead); break;
      case 3: dot_tile<3, J>(block, k, ar, j, cr, n, ahead); break;
      case 2: dot_tile<2, J>(block, k, ar, j, cr, n, ahead); break;
      default: dot_tile<1, J>(block, k, ar, j, cr, n, ahead); break;
    }
  }
}

// One thread's share of few_rows_product: output columns [j0, j1) for all m rows of a, a tile of
// columns at a time and every group of up to 4 rows against it while the tile's weights are in cache.
template <typename T>
HFX_SIMD_CLONES void few_rows_share(const T* block, int64_t rows, int64_t cols, bool transposed, int64_t m, int64_t k,
                                    int64_t n, int64_t r0, const float* a, float* c, int64_t j0, int64_t j1) {
  if (transposed) {  // stored rows are output columns [r0, r0 + rows)
    int64_t j = j0;
    if (m <= 2)  // a decode step: 8 columns a tile (more rows in flight), then 4 as below
      for (; j + 8 <= j1; j += 8) {
        const T* ahead = j + 16 <= j1 ? block + (j + 8) * k : nullptr;
        m == 2 ? dot_tile<2, 8>(block, k, a, j, c + r0, n, ahead) : dot_tile<1, 8>(block, k, a, j, c + r0, n, ahead);
      }
    for (; j + 4 <= j1; j += 4) dot_groups<4>(block, m, k, n, r0, a, c, j, j + 12 <= j1 ? block + (j + 8) * k : nullptr);
    for (; j < j1; ++j) dot_groups<1>(block, m, k, n, r0, a, c, j, static_cast<const T*>(nullptr));
    return;
  }
  // stored rows are k in [r0, r0 + rows): summed into C onto what earlier blocks left (r0 > 0)
  const bool accumulate = r0 > 0;
  const float* ar = a + r0;
  int64_t j = j0;
  if (m <= 2)  // a decode step: 128 columns a tile, then 64 as below
    for (; j + 128 <= j1; j += 128)
      m == 2 ? axpy_tile<2, 8>(block, cols, rows, j, ar, k, c, n, accumulate)
             : axpy_tile<1, 8>(block, cols, rows, j, ar, k, c, n, accumulate);
  for (; j + 64 <= j1; j += 64)
    for (int64_t r = 0; r < m; r += 4) {
      float* cr = c + r * n;
      switch (std::min<int64_t>(m - r, 4)) {
        case 4: axpy_tile<4, 4>(block, cols, rows, j, ar + r * k, k, cr, n, accumulate); break;
        case 3: axpy_tile<3, 4>(block, cols, rows, j, ar + r * k, k, cr, n, accumulate); break;
        case 2: axpy_tile<2, 4>(block, cols, rows, j, ar + r * k, k, cr, n, accumulate); break;
        default: axpy_tile<1, 4>(block, cols, rows, j, ar + r * k, k, cr, n, accumulate); break;
      }
    }
  if (j < j1) axpy_columns(block, cols, rows, j, j1 - j, int(m), a + r0, k, c, n, accumulate);
}
#pragma GCC diagnostic pop

// A few rows of a against a stored block, the block read once, on two threads: `rows` stored rows of
// `cols` elements; transposed (Linear's [n, k]): stored rows are output columns [r0, r0 + rows); else
// ([k, n]): stored rows are k in [r0, r0 + rows), summed into C (onto what earlier blocks left, r0 > 0).
template <typename T>
void few_rows_product(const T* block, int64_t rows, int64_t cols, bool transposed, int64_t m, int64_t k, int64_t n,
                      int64_t r0, const float* a, float* c) {
  // Halves on a tile's boundary, so both threads run whole tiles.
  const int64_t tile = transposed ? 4 : 64, width = transposed ? rows : cols;
  const int64_t tiles = (width + tile - 1) / tile;
  auto share = [&](int64_t t0, int64_t t1) {
    few_rows_share(block, rows, cols, transposed, m, k, n, r0, a, c, t0 * tile, std::min(width, t1 * tile));
  };
  constexpr int64_t kSplitElements = 1 << 16;  // a block smaller than this is not worth a second thread
  if (rows * cols < kSplitElements) return share(0, tiles);
  split_in_two(tiles, share, 2);
}

// One product C[m, n] = A[m, k] x B of a group (a run of Executor::run_many).
struct StoredProduct {
  int64_t m;
  const float* a;
  float* c;
};

// The stored rows a product reads at a time: about 4 MiB, or an f32 weight held in place whole for
// sgemm (no copy at all).
int64_t stored_block_rows(const ir::StoredMatrix& s, int64_t m, bool stream) {
  const size_t row_bytes = size_t(s.cols) * dtype_size(s.dtype);
  if (s.dtype == DType::F32 && !stream && m > kFewRows) return std::max<int64_t>(s.rows, 1);
  return std::clamp<int64_t>(int64_t(kBlockBytes / std::max<size_t>(row_bytes, 1)), 1, std::max<int64_t>(s.rows, 1));
}

// C[m, n] = A[m, k] x B for each product, B given by the stored matrix: [k, n] as stored, or [n, k]
// stored and read transposed. It is read in blocks of stored rows (output columns, or a range of k
// summed into C), each widened when it is half precision, and each block serves every product of the
// group while it is in cache (products that would read it in blocks of different sizes run one by
// one: a product's numbers do not depend on its group). Streamed, the block's pages fault in as it is
// read (the kernel maps 16 at a time; mapping each block in one MADV_POPULATE_READ call cost a third
// more CPU, measured on a Qwen3-0.6B-shaped check), and the executor releases the weight's pages after
// the node: releasing block by block would cost a TLB flush on every thread per block.
void gemm_stored(const std::vector<StoredProduct>& products, int64_t k, int64_t n, const ir::StoredMatrix& s,
                 bool b_transposed, bool stream) {
  if (products.empty()) return;
  const int64_t block_rows = stored_block_rows(s, products.front().m, stream);
  for (const StoredProduct& p : products)
    if (stored_block_rows(s, p.m, stream) != block_rows) {
      for (const StoredProduct& one : products) gemm_stored({one}, k, n, s, b_transposed, stream);
      return;
    }
  const size_t row_bytes = size_t(s.cols) * dtype_size(s.dtype);
  thread_local std::vector<float> widened;
  size_t released = 0;  // bytes of the stored rows whose pages were released
  for (int64_t r0 = 0; r0 < s.rows; r0 += block_rows) {
    if (const size_t read = size_t(r0) * row_bytes; stream && s.file && read - released >= kReleaseBytes) {
      s.file->release(size_t(s.data - s.file->data()) + released, read - released);
      released = read;
    }
    const int64_t rows = std::min(block_rows, s.rows - r0);
    const uint8_t* src = s.data + size_t(r0) * row_bytes;
    const float* block = nullptr;  // the block in f32, widened once for the products that need it
    for (const StoredProduct& p : products) {
      if (p.m <= kTiledRows && s.dtype == DType::BF16) {  // read as stored
        few_rows_product(reinterpret_cast<const uint16_t*>(src), rows, s.cols, b_transposed, p.m, k, n, r0, p.a, p.c);
        continue;
      }
      if (!block && s.dtype == DType::F32) block = reinterpret_cast<const float*>(src);
      if (!block) {
        widened.resize(size_t(rows * s.cols));
        convert_elements(s.dtype, src, DType::F32, widened.data(), size_t(rows * s.cols));
        block = widened.data();
      }
      if (p.m <= kFewRows)
        few_rows_product(block, rows, s.cols, b_transposed, p.m, k, n, r0, p.a, p.c);
      else if (b_transposed)  // stored rows are output columns [r0, r0 + rows)
        gemm(false, true, p.m, rows, k, 1.0f, p.a, k, block, k, p.c + r0, n, false);
      else  // stored rows are k in [r0, r0 + rows): summed into C
        gemm(false, false, p.m, n, rows, 1.0f, p.a + r0, k, block, n, p.c, n, r0 > 0);
    }
  }
}

// MatMul(x, W) with W [k, n], and Linear(x, W, bias?) with W [n, k], for each run of a group: one
// product over all of a run's rows.
std::vector<std::vector<Tensor>> products(const ir::Node& node, const std::vector<KernelInputs>& runs,
                                          const ir::StoredMatrix& w, bool linear, bool stream) {
  // The weight as the product reads it: B [k, n], stored or stored transposed.
  const bool b_transposed = linear ? !w.transposed : w.transposed;
  const int64_t k = b_transposed ? w.cols : w.rows, n = b_transposed ? w.rows : w.cols;
  std::vector<std::vector<Tensor>> outs;
  std::vector<StoredProduct> group;
  std::vector<int64_t> rows_of;
  for (const KernelInputs& in : runs) {
    const Tensor& x = arg(node, in, 0);
    expect_dtype(node, x, DType::F32, "input 0");
    if (x.rank() < 1 || x.shape().back() != k)
      bad_input("{}: input {} does not match the weight's {} inputs", node.op, shape_string(x.shape()), k);
    std::vector<int64_t> shape = x.shape();
    const bool vector = shape.size() == 1;
    shape.back() = n;
    if (vector && !linear) shape = {n};  // MatMul of a 1-D input drops the row dim
    Tensor out(DType::F32, shape);
    const int64_t rows = x.numel() / std::max<int64_t>(k, 1);
    if (out.numel() > 0) group.push_back({rows, x.as<float>(), out.as<float>()});
    rows_of.push_back(out.numel() > 0 ? rows : -1);
    outs.emplace_back().push_back(std::move(out));
  }
  if (w.stack.empty()) {
    gemm_stored(group, k, n, w, b_transposed, stream);
  } else {  // stacked stored rows are output columns (reads_in_place): each part fills its own
    HFX_CHECK(b_transposed, "{}: a stacked weight read with its rows summed", node.name);
    int64_t first_column = 0;
    for (const ir::StoredMatrix& part : w.stack) {
      std::vector<StoredProduct> shifted = group;
      for (StoredProduct& p : shifted) p.c += first_column;
      gemm_stored(shifted, k, n, part, true, stream);
      first_column += part.rows;
    }
  }
  if (linear)
    for (size_t r = 0; r < runs.size(); ++r)
      if (rows_of[r] >= 0) add_linear_bias(node, runs[r], outs[r][0].as<float>(), rows_of[r], n);
  return outs;
}

// Gather(table, indices) on axis 0 (Embedding(table, indices)): each looked-up row widened.
std::vector<Tensor> lookup(const ir::Node& node, const KernelInputs& in, const ir::StoredMatrix& w) {
  const Tensor& indices = arg(node, in, 1);
  if (is_float(indices.dtype()) || indices.dtype() == DType::Bool)
    bad_input("{}: indices must be integers, got {}", node.op, dtype_name(indices.dtype()));
  std::vector<int64_t> shape = indices.shape();
  shape.push_back(w.cols);
  Tensor out(DType::F32, shape);
  const size_t row_bytes = size_t(w.cols) * dtype_size(w.dtype);
  float* o = out.as<float>();
  for (int64_t v : int_values(indices)) {
    if (v < -w.rows || v >= w.rows) bad_input("{}: index {} is out of range for axis 0 of size {}", node.op, v, w.rows);
    if (v < 0) v += w.rows;
    convert_elements(w.dtype, w.data + size_t(v) * row_bytes, DType::F32, o, size_t(w.cols));
    o += w.cols;
  }
  return {std::move(out)};
}

}  // namespace

void few_rows_linear(const float* w, int64_t rows, int64_t k, int64_t m, int64_t n, int64_t r0, const float* a, float* c) {
  few_rows_product(w, rows, k, /*transposed=*/true, m, k, n, r0, a, c);
}

void few_rows_linear_one_thread(const float* w, int64_t rows, int64_t k, int64_t m, int64_t n, int64_t r0, const float* a,
                                float* c) {
  few_rows_share(w, rows, k, /*transposed=*/true, m, k, n, r0, a, c, 0, rows);
}

std::optional<size_t> stored_weight_input(const ir::Node& node) {
  if (node.op == "MatMul" || node.op == "Linear" || node.op == "FusedMatMul" || node.op == "MatMulNBits") return 1;
  if (node.op == "Embedding") return 0;
  if (node.op == "Gather" && node.attr_int("axis", 0) == 0) return 0;
  return std::nullopt;
}

bool reads_in_place(const ir::Node& node, const ir::StoredMatrix& w) {
  if (node.op == "MatMulNBits") return w.dtype == DType::U8 && !w.transposed && w.stack.empty();
  if (!is_float(w.dtype)) return false;
  if (!w.stack.empty())  // a stack is read where its rows are the product's output columns
    return ((node.op == "Linear" || node.op == "FusedMatMul") && !w.transposed) || (node.op == "MatMul" && w.transposed);
  return node.op == "MatMul" || node.op == "Linear" || node.op == "FusedMatMul" || !w.transposed;  // a lookup reads stored rows
}

std::vector<std::vector<Tensor>> run_with_stored_weight(const ir::Node& node, const std::vector<KernelInputs>& runs,
                                                        const ir::StoredMatrix& w, bool stream) {
  if (node.op == "MatMul") return products(node, runs, w, false, stream);
  if (node.op == "Linear" || node.op == "FusedMatMul") return products(node, runs, w, true, stream);
  if (node.op == "MatMulNBits") return matmul_nbits_stored(node, runs, w);
  HFX_CHECK(reads_in_place(node, w), "{}: a table read transposed is not read in place", node.name);
  std::vector<std::vector<Tensor>> outs;
  for (const KernelInputs& in : runs) outs.push_back(lookup(node, in, w));
  return outs;
}

}  // namespace hfx::runtime::detail
