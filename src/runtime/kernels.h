// Private to the reference executor: the kernel table and the helpers the kernel families share
// (strided iteration with broadcasting, axis normalisation, softmax rows, sgemm wrappers).
//
// Every value a kernel sees is in a compute dtype: F32 for floats, I64 for integers, Bool (one byte,
// 0 or 1) for booleans. Kernels produce compute dtypes only.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "ir/graph.h"
#include "ir/weight.h"
#include "runtime/second_thread.h"

namespace hfx::runtime::detail {

// Inputs are given in node order; an absent optional input is nullptr.
using KernelInputs = std::vector<const Tensor*>;
using KernelFn = std::vector<Tensor> (*)(const ir::Node& node, const KernelInputs& in);
using KernelTable = std::map<std::string, KernelFn>;

void register_elementwise_kernels(KernelTable& table);
void register_shape_kernels(KernelTable& table);
void register_reduce_kernels(KernelTable& table);
void register_matmul_kernels(KernelTable& table);
void register_quant_kernels(KernelTable& table);  // DequantizeLinear, MatMulNBits
void register_composite_kernels(KernelTable& table);

// A kernel for the runs of a group (Executor::run_many): each run's inputs, each run's outputs, as
// the node's kernel gives them run by run, the work on the node's weight shared (MatMulNBits
// dequantizes each block of B once for the group, kernels_quant.cc). nullptr: run by run.
using GroupKernelFn = std::vector<std::vector<Tensor>> (*)(const ir::Node& node, const std::vector<KernelInputs>& runs);
GroupKernelFn group_kernel(const ir::Node& node);

// Nodes that can read a weight in place (kernels_stored.cc): the input that may be such a weight
// (MatMul's and Linear's weight, Gather's table on axis 0, Embedding's table, MatMulNBits' packed B),
// and the node run with that input read from `w` (in[that input] is not read); `stream`: each block of
// the weight's pages is released once read (ExecOptions::cache_weights false).
std::optional<size_t> stored_weight_input(const ir::Node& node);
// MatMulNBits with B's packed bytes read from `b` (a U8 matrix, one row of blocks per column of W) instead
// of in[1] (kernels_quant.cc): a decode step copies none of the model's packed weights.
std::vector<std::vector<Tensor>> matmul_nbits_stored(const ir::Node& node, const std::vector<KernelInputs>& runs,
                                                     const ir::StoredMatrix& b);

// Whether the kernel of `node` reads input `i` as packed uint8 bytes (MatMulNBits' B and zero points,
// GatherBlockQuantized's table and zero points): the executor keeps such a weight as its bytes, not
// widened to I64 like other integers (8x the bytes: a quantized vocabulary-sized table would be 600 MB).
bool reads_packed_bytes(const ir::Node& node, size_t i);
// Whether the node can read that input from `w`: a product or a lookup a float matrix (a lookup reads
// the table's stored rows, so not a transposed one), MatMulNBits its B's bytes as they lie.
bool reads_in_place(const ir::Node& node, const ir::StoredMatrix& w);
// For each run of a group (Executor::run_many; one run alone is a group of one): a product reads each
// block of `w` once for the whole group, each run's numbers those it gets alone.
std::vector<std::vector<Tensor>> run_with_stored_weight(const ir::Node& node, const std::vector<KernelInputs>& runs,
                                                        const ir::StoredMatrix& w, bool stream);

// A product with at most this many rows (a decode step, a short shape case) reads each block of a
// weight once per 4 rows, the block still in cache after the first (few_rows_linear): sgemm would
// pack all of B for them, which costs more than the products themselves (a third of a model-sized
// check's CPU was OpenBLAS packing weights for cases of 8 to 16 rows).
constexpr int64_t kFewRows = 16;
// A weight that must be widened first (a checkpoint's bf16 Linear, MatMulNBits' 4- and 8-bit B) is
// multiplied by the same tiles up to this many rows, as stored or a dequantized chunk at a time in L2:
// sgemm would need the weight widened to f32 in memory first, which costs more than the tiles reading
// A's rows again for every 4 columns (from L2 up to here).
constexpr int64_t kTiledRows = 64;
// c[:, r0, r0 + rows) = a[m, k] x w^T for an f32 block w[rows, k] of a Linear's weight (output columns
// r0 onwards of c[m, n]), on two threads: each output summed as the f32 kernels' reference order
// fixes it, so a row's numbers do not depend on the rows it runs with.
void few_rows_linear(const float* w, int64_t rows, int64_t k, int64_t m, int64_t n, int64_t r0, const float* a, float* c);
// The same on this thread only: the caller splits the columns between threads.
void few_rows_linear_one_thread(const float* w, int64_t rows, int64_t k, int64_t m, int64_t n, int64_t r0, const float* a,
                                float* c);

// Linear's optional bias (in[2], [n]) added to each of the `rows` rows of c[rows, n].
void add_linear_bias(const ir::Node& node, const KernelInputs& in, float* c, int64_t rows, int64_t n);

// The dtype a Cast node converts to (its `to` attribute, a name or an ONNX code); nullopt when absent
// or unknown.
std::optional<DType> cast_target(const ir::Node& node);

// Kernels of primitive ops, and kernels of composite ops (fused forms of the decompositions).
const KernelTable& primitive_kernels();
const KernelTable& composite_kernels();

// The compute dtype a declared dtype runs in (F16 -> F32, I32 -> I64, ...).
DType compute_dtype(DType declared);
// `t` converted to its compute dtype (no copy when it already is).
Tensor to_compute(Tensor t);

// --- argument access -----------------------------------------------------------------------------

// The i-th input; throws BadInput naming the node when it is absent.
const Tensor& arg(const ir::Node& node, const KernelInputs& in, size_t i);
// Throws BadInput unless `t` has dtype `want`.
void expect_dtype(const ir::Node& node, const Tensor& t, DType want, const char* what);
// Values of an integer tensor (any compute dtype but Bool), as int64.
std::vector<int64_t> int_values(const Tensor& t);
// The single value of a scalar (or one-element) tensor, as int64 / double.
int64_t scalar_int(const ir::Node& node, const Tensor& t, const char* what);
double scalar_double(const ir::Node& node, const Tensor& t, const char* what);
// Normalises a possibly negative axis into [0, rank); BadInput when out of range.
int64_t normalize_axis(const ir::Node& node, int64_t axis, int64_t rank);
std::string shape_string(const std::vector<int64_t>& shape);

// --- strided iteration -----------------------------------------------------------------------------

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape);
// Numpy broadcast of shapes; BadInput naming the node when they do not broadcast.
std::vector<int64_t> broadcast_shape(const ir::Node& node, const std::vector<std::vector<int64_t>>& shapes);
// Element strides that read a contiguous tensor of `in` shape as `out` shape (right-aligned, 0 on
// broadcast dims).
std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& in, const std::vector<int64_t>& out);

// Iteration over a shape with K operands, each with its own element strides and base offset. Dims of
// extent 1 are dropped and dims that are contiguous for every operand are merged, so most loops end
// up as a few long runs.
template <size_t K>
struct StridedPlan {
  std::vector<int64_t> dims;                    // outermost first; empty = one element
  std::array<std::vector<int64_t>, K> strides;  // per operand, per dim
  std::array<int64_t, K> base{};
  bool empty = false;
};

template <size_t K>
StridedPlan<K> make_plan(const std::vector<int64_t>& dims, const std::array<std::vector<int64_t>, K>& strides,
                         std::array<int64_t, K> base = {}) {
  StridedPlan<K> p;
  p.base = base;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] == 0) p.empty = true;
    if (dims[d] == 1) continue;
    if (!p.dims.empty()) {
      bool mergeable = true;
      for (size_t k = 0; k < K; ++k)
        if (p.strides[k].back() != strides[k][d] * dims[d]) mergeable = false;
      if (mergeable) {
        p.dims.back() *= dims[d];
        for (size_t k = 0; k < K; ++k) p.strides[k].back() = strides[k][d];
        continue;
      }
    }
    p.dims.push_back(dims[d]);
    for (size_t k = 0; k < K; ++k) p.strides[k].push_back(strides[k][d]);
  }
  return p;
}

// Calls f(offsets, n, inner_strides) for each run along the innermost dim: operand k's elements are
// at offsets[k] + i * inner_strides[k] for i in [0, n).
template <size_t K, typename F>
void for_each_run(const StridedPlan<K>& p, F&& f) {
  if (p.empty) return;
  std::array<int64_t, K> off = p.base;
  const size_t r = p.dims.size();
  if (r == 0) {
    std::array<int64_t, K> zero{};
    f(off, int64_t(1), zero);
    return;
  }
  std::array<int64_t, K> inner;
  for (size_t k = 0; k < K; ++k) inner[k] = p.strides[k][r - 1];
  const int64_t n = p.dims[r - 1];
  std::vector<int64_t> idx(r, 0);
  while (true) {
    f(off, n, inner);
    size_t d = r - 1;
    while (true) {
      if (d == 0) return;
      --d;
      for (size_t k = 0; k < K; ++k) off[k] += p.strides[k][d];
      if (++idx[d] < p.dims[d]) break;
      for (size_t k = 0; k < K; ++k) off[k] -= p.strides[k][d] * p.dims[d];
      idx[d] = 0;
    }
  }
}

// Copies `src` (read with `src_strides` from `src_base`, in elements) into a new contiguous tensor
// of `out_shape`. Used by Transpose, Slice, Expand.
Tensor strided_copy(const Tensor& src, const std::vector<int64_t>& out_shape, const std::vector<int64_t>& src_strides,
                    int64_t src_base = 0);

// --- numerics shared by primitive and composite kernels ------------------------------------------------

// Pow as the Pow kernel computes it (x * x for an exponent of 2, else powf), shared so fused kernels
// reproduce their decompositions bit for bit.
inline float pow_f32(float x, float y) { return y == 2.0f ? x * x : std::pow(x, y); }

// Numerically stable softmax over `n` contiguous floats, in place: subtract the max, exponentiate,
// sum in float, multiply by the reciprocal of the sum.
void softmax_row(float* x, int64_t n);

// Row-major C[m, n] = alpha * op(A) * op(B) (+ C when accumulate), op = transpose when trans_*.
// lda/ldb/ldc are row strides as in cblas. Handles m, n or k of 0.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate = false);

// f(begin, end) over [0, n) split between this thread and one more (the machines hfx checks on have a
// few cores; the weight-reading products are memory-bound, and two readers saturate them).
// Work of fewer than `min_split` items stays on this thread.
template <typename F>
void split_in_two(int64_t n, F&& f, int64_t min_split = 64) {
  if (n < std::max<int64_t>(min_split, 2)) return f(int64_t(0), n);
  const int64_t half = n / 2;
  auto second = [&] { f(half, n); };
  auto first = [&] { f(int64_t(0), half); };
  run_beside(second, first);
}

}  // namespace hfx::runtime::detail
