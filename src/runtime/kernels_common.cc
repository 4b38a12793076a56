// Helpers shared by the kernel families, and the kernel tables.
#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cmath>

#include "runtime/kernels.h"

namespace hfx::runtime::detail {

const KernelTable& primitive_kernels() {
  static const KernelTable table = [] {
    KernelTable t;
    register_elementwise_kernels(t);
    register_shape_kernels(t);
    register_reduce_kernels(t);
    register_matmul_kernels(t);
    register_quant_kernels(t);
    return t;
  }();
  return table;
}

const KernelTable& composite_kernels() {
  static const KernelTable table = [] {
    KernelTable t;
    register_composite_kernels(t);
    return t;
  }();
  return table;
}

DType compute_dtype(DType declared) {
  if (declared == DType::Bool) return DType::Bool;
  return is_float(declared) ? DType::F32 : DType::I64;
}

Tensor to_compute(Tensor t) {
  const DType want = compute_dtype(t.dtype());
  if (want == t.dtype()) return t;
  return t.cast(want);
}

const Tensor& arg(const ir::Node& node, const KernelInputs& in, size_t i) {
  if (i >= in.size() || !in[i]) bad_input("{} has no input {}", node.op, i);
  return *in[i];
}

void expect_dtype(const ir::Node& node, const Tensor& t, DType want, const char* what) {
  if (t.dtype() != want)
    bad_input("{}: {} must be {}, got {}", node.op, what, dtype_name(want), dtype_name(t.dtype()));
}

std::vector<int64_t> int_values(const Tensor& t) {
  if (t.dtype() == DType::I64) return std::vector<int64_t>(t.as<int64_t>(), t.as<int64_t>() + t.numel());
  return t.to_i64_vector();
}

int64_t scalar_int(const ir::Node& node, const Tensor& t, const char* what) {
  if (t.numel() != 1) bad_input("{}: {} must have one element, got shape {}", node.op, what, shape_string(t.shape()));
  if (is_float(t.dtype())) bad_input("{}: {} must be an integer, got {}", node.op, what, dtype_name(t.dtype()));
  return int_values(t)[0];
}

double scalar_double(const ir::Node& node, const Tensor& t, const char* what) {
  if (t.numel() != 1) bad_input("{}: {} must have one element, got shape {}", node.op, what, shape_string(t.shape()));
  if (t.dtype() == DType::F32) return double(t.as<float>()[0]);
  if (t.dtype() == DType::I64) return double(t.as<int64_t>()[0]);
  double v;
  convert_elements(t.dtype(), t.data(), DType::F64, &v, 1);
  return v;
}

int64_t normalize_axis(const ir::Node& node, int64_t axis, int64_t rank) {
  const int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank) bad_input("{}: axis {} is out of range for rank {}", node.op, axis, rank);
  return a;
}

std::string shape_string(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) s[i - 1] = s[i] * shape[i];
  return s;
}

std::vector<int64_t> broadcast_shape(const ir::Node& node, const std::vector<std::vector<int64_t>>& shapes) {
  size_t rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.size());
  std::vector<int64_t> out(rank, 1);
  for (const auto& s : shapes) {
    const size_t lead = rank - s.size();
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out[lead + i];
      if (s[i] == o || s[i] == 1) continue;
      if (o == 1) {
        o = s[i];
        continue;
      }
      std::vector<std::string> all;
      for (const auto& x : shapes) all.push_back(shape_string(x));
      bad_input("{}: shapes {} do not broadcast", node.op, fmt::join(all, " and "));
    }
  }
  return out;
}

std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& in, const std::vector<int64_t>& out) {
  std::vector<int64_t> s(out.size(), 0);
  const auto cs = contiguous_strides(in);
  const size_t lead = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) s[lead + i] = in[i] == 1 ? 0 : cs[i];
  return s;
}

namespace {

// A transpose-like copy whose innermost output dim reads the source with a large stride, while
// another dim reads it contiguously: copy in 32 x 32 tiles of those two dims so both sides stay in
// cache.
template <typename T>
bool copy_tiled(const StridedPlan<2>& plan, const T* src, T* dst) {
  const size_t r = plan.dims.size();
  if (r < 2) return false;
  const int64_t inner_src = plan.strides[1][r - 1];
  if (inner_src == 1 || inner_src == 0) return false;
  size_t j = r;
  for (size_t d = r - 1; d-- > 0;)
    if (plan.strides[1][d] == 1) {
      j = d;
      break;
    }
  if (j == r) return false;
  StridedPlan<2> outer;
  outer.base = plan.base;
  for (size_t d = 0; d + 1 < r; ++d) {
    if (d == j) continue;
    outer.dims.push_back(plan.dims[d]);
    for (size_t k = 0; k < 2; ++k) outer.strides[k].push_back(plan.strides[k][d]);
  }
  const int64_t nj = plan.dims[j], ni = plan.dims[r - 1];
  const int64_t out_j = plan.strides[0][j], out_i = plan.strides[0][r - 1];
  constexpr int64_t kTile = 32;
  for_each_run(outer, [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
    for (int64_t e = 0; e < n; ++e) {
      T* d0 = dst + off[0] + e * st[0];
      const T* s0 = src + off[1] + e * st[1];
      for (int64_t jb = 0; jb < nj; jb += kTile)
        for (int64_t ib = 0; ib < ni; ib += kTile) {
          const int64_t je = std::min(nj, jb + kTile), ie = std::min(ni, ib + kTile);
          for (int64_t a = jb; a < je; ++a)
            for (int64_t i = ib; i < ie; ++i) d0[a * out_j + i * out_i] = s0[a + i * inner_src];
        }
    }
  });
  return true;
}

template <typename T>
void copy_runs(const StridedPlan<2>& plan, const T* src, T* dst) {
  if (!plan.empty && copy_tiled(plan, src, dst)) return;
  for_each_run(plan, [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
    T* d = dst + off[0];
    const T* s = src + off[1];
    if (st[1] == 1) {
      std::memcpy(d, s, size_t(n) * sizeof(T));
    } else if (st[1] == 0) {
      std::fill(d, d + n, *s);
    } else {
      const int64_t step = st[1];
      for (int64_t i = 0; i < n; ++i) d[i] = s[i * step];
    }
  });
}
}  // namespace

Tensor strided_copy(const Tensor& src, const std::vector<int64_t>& out_shape, const std::vector<int64_t>& src_strides,
                    int64_t src_base) {
  Tensor out(src.dtype(), out_shape);
  auto plan = make_plan<2>(out_shape, {contiguous_strides(out_shape), src_strides}, {0, src_base});
  switch (dtype_size(src.dtype())) {
    case 1: copy_runs(plan, src.as<uint8_t>(), out.as<uint8_t>()); break;
    case 2: copy_runs(plan, src.as<uint16_t>(), out.as<uint16_t>()); break;
    case 4: copy_runs(plan, src.as<uint32_t>(), out.as<uint32_t>()); break;
    case 8: copy_runs(plan, src.as<uint64_t>(), out.as<uint64_t>()); break;
    default: HFX_CHECK(false, "element size {}", dtype_size(src.dtype()));
  }
  return out;
}

void softmax_row(float* x, int64_t n) {
  if (n <= 0) return;
  float mx = x[0];
  for (int64_t i = 1; i < n; ++i) mx = std::max(mx, x[i]);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate)
      for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
    return;
  }
  HFX_CHECK(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX && lda <= INT_MAX && ldb <= INT_MAX && ldc <= INT_MAX,
            "gemm dims too large: {}x{}x{}", m, n, k);
  // OpenBLAS runs single-threaded and a large product is split here, by columns, over two threads:
  // OpenBLAS's own workers spin (sched_yield) between calls, and on the two cores hfx checks on they
  // took the core from the executor's other thread (split_in_two's weight readers): 40 % of a
  // model-sized check's CPU in the scheduler.
  static const bool single_threaded = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)single_threaded;
  auto columns = [&](int64_t j0, int64_t j1) {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, int(m),
                int(j1 - j0), int(k), alpha, a, int(lda), trans_b ? b + j0 * ldb : b + j0, int(ldb),
                accumulate ? 1.0f : 0.0f, c + j0, int(ldc));
  };
  constexpr double kSplitMultiplyAdds = 1 << 22;  // below it a thread costs more than it saves
  if (double(m) * double(n) * double(k) < kSplitMultiplyAdds) return columns(0, n);
  split_in_two(n, columns);
}

}  // namespace hfx::runtime::detail
