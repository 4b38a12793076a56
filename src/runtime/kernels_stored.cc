// Kernels that read a weight where it lies in the mapped file (ir::StoredMatrix), in its stored dtype,
// widening a block of it at a time: MatMul and Linear against a weight, and Gather (Embedding) from a
// table. The executor sends a node here instead of materialising its weight, so a run holds no f32 copy
// of the model, only a block of each weight as it is read; the numbers are those of the f32 kernels
// (a widening is exact, and each output element sums over the same k in the same sgemm).
#include <cblas.h>

#include <algorithm>
#include <climits>

#include "runtime/kernels.h"

namespace hfx::runtime::detail {

namespace {

// Columns of B widened per sgemm: about 4 MiB of f32, a multiple of 16 columns.
int64_t block_columns(int64_t k, int64_t n) {
  const int64_t cols = std::max<int64_t>(16, ((int64_t(1) << 20) / std::max<int64_t>(k, 1)) / 16 * 16);
  return std::min(cols, n);
}

constexpr int64_t kRowsForGemv = 4;

// y[cols] = x[k] x B for B [k, cols] (rows of ldb floats), or for B stored as [cols, k] when
// `b_rows_are_columns`; `rows` x `row_len` is the stored matrix's extent.
void gemv(bool b_rows_are_columns, int64_t rows, int64_t row_len, const float* b, int64_t ldb, const float* x, float* y) {
  HFX_CHECK(rows <= INT_MAX && row_len <= INT_MAX && ldb <= INT_MAX, "gemv dims too large: {}x{}", rows, row_len);
  cblas_sgemv(CblasRowMajor, b_rows_are_columns ? CblasNoTrans : CblasTrans, int(rows), int(row_len), 1.0f, b, int(ldb),
              x, 1, 0.0f, y, 1);
}

// C[m, n] = A[m, k] x B[k, n], B given by the stored matrix: [k, n] as stored, or [n, k] stored and
// read transposed.
void gemm_stored(int64_t m, int64_t k, int64_t n, const float* a, const ir::StoredMatrix& s, bool b_transposed, float* c) {
  // A few rows (a decode step) are matrix-vector products: sgemm would pack all of B for them, which
  // costs more than the product itself.
  auto product = [&](int64_t cols, const float* b, int64_t ldb, float* out) {
    if (m <= kRowsForGemv) {
      for (int64_t r = 0; r < m; ++r) gemv(b_transposed, b_transposed ? cols : k, b_transposed ? k : cols, b, ldb, a + r * k, out + r * n);
    } else {
      gemm(false, b_transposed, m, cols, k, 1.0f, a, k, b, ldb, out, n);
    }
  };
  if (s.dtype == DType::F32) {  // in place: no copy at all
    product(n, reinterpret_cast<const float*>(s.data), b_transposed ? k : n, c);
    return;
  }
  const size_t es = dtype_size(s.dtype);
  const int64_t nb = block_columns(k, n);
  thread_local std::vector<float> block;
  block.resize(size_t(k * nb));
  for (int64_t n0 = 0; n0 < n; n0 += nb) {
    const int64_t cols = std::min(nb, n - n0);
    if (b_transposed) {  // rows [n0, n0 + cols) of the stored [n, k]: contiguous
      convert_elements(s.dtype, s.data + size_t(n0 * k) * es, DType::F32, block.data(), size_t(cols * k));
      product(cols, block.data(), k, c + n0);
    } else {  // columns [n0, n0 + cols) of each of the stored [k, n]'s rows
      for (int64_t r = 0; r < k; ++r)
        convert_elements(s.dtype, s.data + size_t(r * n + n0) * es, DType::F32, block.data() + r * cols, size_t(cols));
      product(cols, block.data(), cols, c + n0);
    }
  }
}

// MatMul(x, W) with W [k, n], and Linear(x, W, bias?) with W [n, k]: one product over all of x's rows.
std::vector<Tensor> product(const ir::Node& node, const KernelInputs& in, const ir::StoredMatrix& w, bool linear) {
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
  gemm_stored(rows, k, n, x.as<float>(), w, b_transposed, c);
  if (linear && in.size() > 2 && in[2]) {
    const Tensor& b = *in[2];
    expect_dtype(node, b, DType::F32, "bias");
    if (b.numel() != n) bad_input("Linear: bias {} for {} outputs", shape_string(b.shape()), n);
    const float* pb = b.as<float>();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < n; ++j) c[r * n + j] = c[r * n + j] + pb[j];
  }
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

std::vector<Tensor> run_with_stored_weight(const ir::Node& node, const KernelInputs& in, const ir::StoredMatrix& w) {
  if (node.op == "MatMul") return product(node, in, w, false);
  if (node.op == "Linear") return product(node, in, w, true);
  HFX_CHECK(!w.transposed, "{}: a table read transposed is not read in place", node.name);
  return lookup(node, in, w);
}

}  // namespace hfx::runtime::detail
