// Kernels that read a weight where it lies in the mapped file (ir::StoredMatrix), in its stored dtype,
// widening a block of it at a time: MatMul and Linear against a weight, and Gather (Embedding) from a
// table. The executor sends a node here instead of materialising its weight, so a run holds no f32 copy
// of the model, only a block of each weight as it is read; the numbers are those of the f32 kernels
// (a widening is exact; the sums run in another order, as any BLAS may choose).
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "runtime/kernels.h"

namespace hfx::runtime::detail {

namespace {

// Stored rows read per block: about 4 MiB of them.
constexpr size_t kBlockBytes = size_t(4) << 20;
// A product with at most this many rows (a decode step) is matrix-vector products: sgemm would pack
// all of B for them, which costs more than the products themselves.
constexpr int64_t kRowsForGemv = 4;

// C[m, n] (+)= A[m, k] x B, B [k, n] (rows of ldb floats), or B^T for B stored [n, k] when `b_rows_are_columns`.
void product_rows(int64_t m, int64_t k, int64_t n, const float* a, int64_t lda, const float* b, int64_t ldb,
                  bool b_rows_are_columns, float* c, int64_t ldc, bool accumulate) {
  if (m > kRowsForGemv) {
    gemm(false, b_rows_are_columns, m, n, k, 1.0f, a, lda, b, ldb, c, ldc, accumulate);
    return;
  }
  const int64_t rows = b_rows_are_columns ? n : k, cols = b_rows_are_columns ? k : n;
  HFX_CHECK(rows <= INT_MAX && cols <= INT_MAX && ldb <= INT_MAX, "gemv dims too large: {}x{}", rows, cols);
  for (int64_t r = 0; r < m; ++r)
    cblas_sgemv(CblasRowMajor, b_rows_are_columns ? CblasNoTrans : CblasTrans, int(rows), int(cols), 1.0f, b, int(ldb),
                a + r * lda, 1, accumulate ? 1.0f : 0.0f, c + r * ldc, 1);
}

// y[r][j] = sum_k a[r][k] * W[j][k] for the bf16 rows W[j0, j1) of a stored [n, k] matrix, reading W
// once, as stored (a decode step's products: widening W into a buffer first would write and read it
// again). 16 partial sums per product, each summed in k order, then added up.
__attribute__((target_clones("avx512f", "avx2", "default")))
void dot_bf16_rows(const uint16_t* w, int64_t j0, int64_t j1, int64_t k, int64_t m, const float* a, float* c, int64_t ldc) {
  constexpr int kLanes = 16;
  for (int64_t j = j0; j < j1; ++j) {
    const uint16_t* row = w + j * k;
    for (int64_t r = 0; r < m; ++r) {
      const float* x = a + r * k;
      float acc[kLanes] = {};
      int64_t i = 0;
      for (; i + kLanes <= k; i += kLanes)
        for (int l = 0; l < kLanes; ++l) {
          const uint32_t bits = uint32_t(row[i + l]) << 16;
          float f;
          std::memcpy(&f, &bits, 4);
          acc[l] += x[i + l] * f;
        }
      float sum = 0.0f;
      for (; i < k; ++i) sum += x[i] * bf16_to_f32(row[i]);
      for (int l = 0; l < kLanes; ++l) sum += acc[l];
      c[r * ldc + j] = sum;
    }
  }
}

// C[m, n] = A[m, k] x B, B given by the stored matrix: [k, n] as stored, or [n, k] stored and read
// transposed. It is read in blocks of stored rows (output columns, or a range of k summed into C),
// each widened when it is half precision. Streamed, each block's pages are mapped in one call
// (MappedFile::populate) rather than faulted in page by page, and the executor releases the weight's
// pages after the node: releasing block by block would cost a TLB flush on every thread per block.
void gemm_stored(int64_t m, int64_t k, int64_t n, const float* a, const ir::StoredMatrix& s, bool b_transposed, float* c,
                 bool stream) {
  const size_t es = dtype_size(s.dtype), row_bytes = size_t(s.cols) * es;
  int64_t block_rows = std::clamp<int64_t>(int64_t(kBlockBytes / std::max<size_t>(row_bytes, 1)), 1, std::max<int64_t>(s.rows, 1));
  if (s.dtype == DType::F32 && !stream) block_rows = s.rows;  // in place, whole: no copy at all
  thread_local std::vector<float> widened;
  for (int64_t r0 = 0; r0 < s.rows; r0 += block_rows) {
    const int64_t rows = std::min(block_rows, s.rows - r0);
    const uint8_t* src = s.data + size_t(r0) * row_bytes;
    if (stream && s.file) s.file->populate(size_t(src - s.file->data()), size_t(rows) * row_bytes);
    if (s.dtype == DType::BF16 && b_transposed && m <= kRowsForGemv) {
      // Output columns [r0, r0 + rows), read as stored on two threads.
      const auto* w = reinterpret_cast<const uint16_t*>(src);
      split_in_two(rows, [&](int64_t j0, int64_t j1) { dot_bf16_rows(w, j0, j1, k, m, a, c + r0, n); });
    } else {
      const float* block = reinterpret_cast<const float*>(src);
      if (s.dtype != DType::F32) {
        widened.resize(size_t(rows * s.cols));
        convert_elements(s.dtype, src, DType::F32, widened.data(), size_t(rows * s.cols));
        block = widened.data();
      }
      if (b_transposed)  // stored rows are output columns [r0, r0 + rows)
        product_rows(m, k, rows, a, k, block, k, true, c + r0, n, false);
      else  // stored rows are k in [r0, r0 + rows): summed into C
        product_rows(m, rows, n, a + r0, k, block, n, false, c, n, r0 > 0);
    }
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
