// Kernels that read a weight where it lies in the mapped file (ir::StoredMatrix), in its stored dtype,
// widening a block of it at a time: MatMul and Linear against a weight, and Gather (Embedding) from a
// table. The executor sends a node here instead of materialising its weight, so a run holds no f32 copy
// of the model, only a block of each weight as it is read; the numbers are those of the f32 kernels
// (a widening is exact; the sums run in another order, as any BLAS may choose).
#include <algorithm>
#include <cstring>

#include "runtime/kernels.h"

namespace hfx::runtime::detail {

namespace {

// Stored rows read per block: about 4 MiB of them.
constexpr size_t kBlockBytes = size_t(4) << 20;
// A product with at most this many rows (a decode step, a short shape case) reads each block of the
// weight once per 4 rows, the block still in cache after the first (few_rows_product): sgemm would
// pack all of B for them, which costs more than the products themselves (a third of a model-sized
// check's CPU was OpenBLAS packing weights for cases of 8 to 16 rows).
constexpr int64_t kFewRows = 16;

// The kernels below are compiled for AVX-512, AVX2 and the baseline, picked at load time. Clang (the
// fuzzing build) does not multiversion templates yet: there they take the build's baseline.
#if defined(__clang__)
#define HFX_SIMD_CLONES
#else
#define HFX_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif

// A stored element widened to f32 (exact): f32 as is, bf16 as the high half of an f32.
inline float widen(float x) { return x; }
inline float widen(uint16_t bits) {
  const uint32_t wide = uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &wide, 4);
  return f;
}

// y[r][j] = sum_k a[r][k] * W[j][k] for the rows W[j0, j1) of a stored [n, k] matrix (a Linear's
// weight, or a MatMul's read transposed) and M rows of a, reading W once, as stored (a decode step's
// products: widening W into a buffer first would write and read it again, and one BLAS gemv per row
// of a would read it M times). 16 partial sums per product, each summed in k order, then added up.
template <int M, typename T>
HFX_SIMD_CLONES
void dot_rows(const T* w, int64_t j0, int64_t j1, int64_t k, const float* a, float* c, int64_t ldc) {
  constexpr int kLanes = 16;
  for (int64_t j = j0; j < j1; ++j) {
    const T* row = w + j * k;
    float acc[M][kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= k; i += kLanes)
      for (int l = 0; l < kLanes; ++l) {
        const float wi = widen(row[i + l]);
        for (int r = 0; r < M; ++r) acc[r][l] += a[r * k + i + l] * wi;
      }
    for (int r = 0; r < M; ++r) {
      float sum = 0.0f;
      for (int64_t t = i; t < k; ++t) sum += a[r * k + t] * widen(row[t]);
      for (int l = 0; l < kLanes; ++l) sum += acc[r][l];
      c[r * ldc + j] = sum;
    }
  }
}

// C[r][j0, j1) (+)= sum over the k rows of a stored [k, n] block of a[r][kk] * W[kk][j] for all M rows of
// a, reading the block once, as stored (the [k, n] layout of an ONNX MatMul's weight, a decode step's
// products). A tile of kTile columns of the M output rows stays in L1 while each stored row's slice of
// it streams past, contiguous; each output is summed in k order.
template <int M, typename T>
HFX_SIMD_CLONES
void axpy_rows(const T* w, int64_t ldw, int64_t k, int64_t j0, int64_t j1, const float* a, int64_t lda, float* c,
               int64_t ldc, bool accumulate) {
  constexpr int64_t kTile = 512;
  float acc[M][kTile];
  for (int64_t j = j0; j < j1; j += kTile) {
    const int64_t width = std::min(kTile, j1 - j);
    for (int r = 0; r < M; ++r)
      for (int64_t t = 0; t < width; ++t) acc[r][t] = accumulate ? c[r * ldc + j + t] : 0.0f;
    for (int64_t kk = 0; kk < k; ++kk) {
      const T* row = w + kk * ldw + j;
      for (int r = 0; r < M; ++r) {
        const float s = a[r * lda + kk];
        float* out = acc[r];
        for (int64_t t = 0; t < width; ++t) out[t] += s * widen(row[t]);
      }
    }
    for (int r = 0; r < M; ++r)
      for (int64_t t = 0; t < width; ++t) c[r * ldc + j + t] = acc[r][t];
  }
}

// A few rows of a against a stored block, the block read once, on two threads: `rows` stored rows of
// `cols` elements; transposed (Linear's [n, k]): stored rows are output columns [r0, r0 + rows); else
// ([k, n]): stored rows are k in [r0, r0 + rows), summed into C (onto what earlier blocks left, r0 > 0).
// Rows of a go in groups of up to 4: a group's partial sums fit in registers or L1, and the block is
// still in cache when the next group reads it.
template <typename T>
void few_rows_product(const T* block, int64_t rows, int64_t cols, bool transposed, int64_t m, int64_t k, int64_t n,
                      int64_t r0, const float* a, float* c) {
  const bool accumulate = r0 > 0;
  split_in_two(transposed ? rows : cols, [&](int64_t j0, int64_t j1) {
    for (int64_t r = 0; r < m;) {  // in groups of up to 4 rows of a
      const int64_t group = std::min<int64_t>(m - r, 4);
      if (transposed) {
        const float* ar = a + r * k;
        float* cr = c + r * n + r0;
        switch (group) {
          case 4: dot_rows<4>(block, j0, j1, k, ar, cr, n); break;
          case 3: dot_rows<3>(block, j0, j1, k, ar, cr, n); break;
          case 2: dot_rows<2>(block, j0, j1, k, ar, cr, n); break;
          default: dot_rows<1>(block, j0, j1, k, ar, cr, n); break;
        }
      } else {
        const float* ar = a + r * k + r0;
        float* cr = c + r * n;
        switch (group) {
          case 4: axpy_rows<4>(block, cols, rows, j0, j1, ar, k, cr, n, accumulate); break;
          case 3: axpy_rows<3>(block, cols, rows, j0, j1, ar, k, cr, n, accumulate); break;
          case 2: axpy_rows<2>(block, cols, rows, j0, j1, ar, k, cr, n, accumulate); break;
          default: axpy_rows<1>(block, cols, rows, j0, j1, ar, k, cr, n, accumulate); break;
        }
      }
      r += group;
    }
  });
}

// C[m, n] = A[m, k] x B, B given by the stored matrix: [k, n] as stored, or [n, k] stored and read
// transposed. It is read in blocks of stored rows (output columns, or a range of k summed into C),
// each widened when it is half precision. Streamed, the block's pages fault in as it is read (the
// kernel maps 16 at a time; mapping each block in one MADV_POPULATE_READ call cost a third more CPU,
// measured on a Qwen3-0.6B-shaped check), and the executor releases the weight's pages after the
// node: releasing block by block would cost a TLB flush on every thread per block.
void gemm_stored(int64_t m, int64_t k, int64_t n, const float* a, const ir::StoredMatrix& s, bool b_transposed, float* c,
                 bool stream) {
  const size_t es = dtype_size(s.dtype), row_bytes = size_t(s.cols) * es;
  int64_t block_rows = std::clamp<int64_t>(int64_t(kBlockBytes / std::max<size_t>(row_bytes, 1)), 1, std::max<int64_t>(s.rows, 1));
  if (s.dtype == DType::F32 && !stream && m > kFewRows) block_rows = s.rows;  // in place, whole: no copy at all
  thread_local std::vector<float> widened;
  for (int64_t r0 = 0; r0 < s.rows; r0 += block_rows) {
    const int64_t rows = std::min(block_rows, s.rows - r0);
    const uint8_t* src = s.data + size_t(r0) * row_bytes;
    if (m <= kFewRows && s.dtype == DType::BF16) {  // read as stored
      few_rows_product(reinterpret_cast<const uint16_t*>(src), rows, s.cols, b_transposed, m, k, n, r0, a, c);
      continue;
    }
    const float* block = reinterpret_cast<const float*>(src);
    if (s.dtype != DType::F32) {
      widened.resize(size_t(rows * s.cols));
      convert_elements(s.dtype, src, DType::F32, widened.data(), size_t(rows * s.cols));
      block = widened.data();
    }
    if (m <= kFewRows)
      few_rows_product(block, rows, s.cols, b_transposed, m, k, n, r0, a, c);
    else if (b_transposed)  // stored rows are output columns [r0, r0 + rows)
      gemm(false, true, m, rows, k, 1.0f, a, k, block, k, c + r0, n, false);
    else  // stored rows are k in [r0, r0 + rows): summed into C
      gemm(false, false, m, n, rows, 1.0f, a + r0, k, block, n, c, n, r0 > 0);
  }
}

// MatMul(x, W) with W [k, n], and Linear(x, W, bias?) with W [n, k]: one product over all of x's rows.
std::vector<Tensor> product(const ir::Node& node, const KernelInputs& in, const ir::StoredMatrix& w, bool linear,
                            bool stream) {
  const Tensor& x = arg(node, in, 0);
  expect_dtype(node, x, DType::F32, "input 0");
  // The weight as the product reads it: B [k, n], stored or stored transposed.
  const bool b_transposed = linear ? !w.transposed : w.transposed;
  const int64_t k = b_transposed ? w.cols : w.rows, n = b_transposed ? w.rows : w.cols;
  if (x.rank() < 1 || x.shape().back() != k)
    bad_input("{}: input {} does not match the weight's {} inputs", node.op, shape_string(x.shape()), k);
  std::vector<int64_t> shape = x.shape();
  const bool vector = shape.size() == 1;
  shape.back() = n;
  if (vector && !linear) shape = {n};  // MatMul of a 1-D input drops the row dim
  Tensor out(DType::F32, shape);
  const int64_t rows = x.numel() / std::max<int64_t>(k, 1);
  if (out.numel() == 0) return {std::move(out)};
  float* c = out.as<float>();
  gemm_stored(rows, k, n, x.as<float>(), w, b_transposed, c, stream);
  if (linear) add_linear_bias(node, in, c, rows, n);
  return {std::move(out)};
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

std::optional<size_t> stored_weight_input(const ir::Node& node) {
  if (node.op == "MatMul" || node.op == "Linear") return 1;
  if (node.op == "Embedding") return 0;
  if (node.op == "Gather" && node.attr_int("axis", 0) == 0) return 0;
  return std::nullopt;
}

bool reads_in_place(const ir::Node& node, const ir::StoredMatrix& w) {
  return node.op == "MatMul" || node.op == "Linear" || !w.transposed;  // a lookup reads stored rows
}

std::vector<Tensor> run_with_stored_weight(const ir::Node& node, const KernelInputs& in, const ir::StoredMatrix& w,
                                           bool stream) {
  if (node.op == "MatMul") return product(node, in, w, false, stream);
  if (node.op == "Linear") return product(node, in, w, true, stream);
  HFX_CHECK(reads_in_place(node, w), "{}: a table read transposed is not read in place", node.name);
  return lookup(node, in, w);
}

}  // namespace hfx::runtime::detail
