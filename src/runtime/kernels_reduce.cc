// Reductions and scans: ReduceMean / ReduceMax / ReduceSum, Softmax, CumSum.
// Float sums accumulate in double (as PyTorch's CPU reductions do); Softmax sums in float.
#include <algorithm>
#include <limits>

#include "runtime/kernels.h"

namespace hfx::runtime::detail {

namespace {

enum class Red { Mean, Max, Sum };

template <typename T, typename Acc, Red op>
Tensor reduce_typed(const Tensor& x, const std::vector<bool>& reduced, bool keepdims, DType dtype) {
  const auto& ish = x.shape();
  std::vector<int64_t> acc_shape;  // keepdims layout
  std::vector<int64_t> out_shape;
  int64_t count = 1;
  for (size_t d = 0; d < ish.size(); ++d) {
    acc_shape.push_back(reduced[d] ? 1 : ish[d]);
    if (reduced[d]) count *= ish[d];
    if (!reduced[d]) out_shape.push_back(ish[d]);
    else if (keepdims) out_shape.push_back(1);
  }
  const int64_t out_n = numel_of(acc_shape);
  const Acc init = op == Red::Max ? std::numeric_limits<Acc>::lowest() : Acc(0);
  std::vector<Acc> acc(size_t(out_n), init);
  const T* p = x.as<T>();
  // Reduced dims as a suffix (the usual last-axis case): one contiguous row per output.
  size_t first_reduced = ish.size();
  while (first_reduced > 0 && reduced[first_reduced - 1]) --first_reduced;
  bool suffix = true;
  for (size_t d = 0; d < first_reduced; ++d) suffix = suffix && !reduced[d];
  if (suffix) {
    for (int64_t o = 0; o < out_n; ++o) {
      const T* row = p + o * count;
      Acc a = init;
      for (int64_t i = 0; i < count; ++i) {
        if constexpr (op == Red::Max) a = std::max(a, Acc(row[i]));
        else a += Acc(row[i]);
      }
      acc[size_t(o)] = a;
    }
  } else {
    auto acc_strides = contiguous_strides(acc_shape);
    for (size_t d = 0; d < ish.size(); ++d)
      if (reduced[d]) acc_strides[d] = 0;
    auto plan = make_plan<2>(ish, {contiguous_strides(ish), acc_strides});
    for_each_run(plan, [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
      const T* src = p + off[0];
      Acc* dst = acc.data() + off[1];
      for (int64_t i = 0; i < n; ++i) {
        Acc& a = dst[i * st[1]];
        if constexpr (op == Red::Max) a = std::max(a, Acc(src[i * st[0]]));
        else a += Acc(src[i * st[0]]);
      }
    });
  }
  Tensor out(dtype, out_shape);
  T* o = out.as<T>();
  for (int64_t i = 0; i < out_n; ++i) {
    if constexpr (op == Red::Mean) o[i] = count ? T(acc[size_t(i)] / Acc(count)) : T(0);
    else o[i] = T(acc[size_t(i)]);
  }
  return out;
}

template <Red op>
std::vector<Tensor> reduce_kernel(const ir::Node& node, const KernelInputs& in) {
  const Tensor& x = arg(node, in, 0);
  std::vector<int64_t> axes;
  if (in.size() > 1 && in[1]) axes = int_values(*in[1]);
  else if (node.has_attr("axes")) axes = node.attr_ints("axes");
  const bool keepdims = node.attr_int("keepdims", 1) != 0;
  if (axes.empty() && node.attr_int("noop_with_empty_axes", 0) != 0) return {x};
  std::vector<bool> reduced(size_t(x.rank()), axes.empty());
  for (auto a : axes) reduced[size_t(normalize_axis(node, a, x.rank()))] = true;
  if (op == Red::Max)
    for (int64_t d = 0; d < x.rank(); ++d)
      if (reduced[size_t(d)] && x.shape()[size_t(d)] == 0) bad_input("{} over an empty axis {}", node.op, d);
  if (x.dtype() == DType::F32) {
    if constexpr (op == Red::Max) return {reduce_typed<float, float, op>(x, reduced, keepdims, DType::F32)};
    else return {reduce_typed<float, double, op>(x, reduced, keepdims, DType::F32)};
  }
  if (x.dtype() == DType::I64) return {reduce_typed<int64_t, int64_t, op>(x, reduced, keepdims, DType::I64)};
  unsupported("reference executor: {} of {} is not supported", node.op, dtype_name(x.dtype()));
}

std::vector<Tensor> softmax_kernel(const ir::Node& node, const KernelInputs& in) {
  const Tensor& x = arg(node, in, 0);
  expect_dtype(node, x, DType::F32, "input");
  Tensor out = x;
  if (x.numel() == 0) return {std::move(out)};
  const int64_t axis = normalize_axis(node, node.attr_int("axis", -1), x.rank());
  int64_t outer = 1, inner = 1;
  const int64_t n = x.shape()[size_t(axis)];
  for (int64_t d = 0; d < axis; ++d) outer *= x.shape()[size_t(d)];
  for (int64_t d = axis + 1; d < x.rank(); ++d) inner *= x.shape()[size_t(d)];
  float* p = out.as<float>();
  if (inner == 1) {
    for (int64_t o = 0; o < outer; ++o) softmax_row(p + o * n, n);
    return {std::move(out)};
  }
  std::vector<float> row(static_cast<size_t>(n));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      float* base = p + o * n * inner + j;
      for (int64_t i = 0; i < n; ++i) row[size_t(i)] = base[i * inner];
      softmax_row(row.data(), n);
      for (int64_t i = 0; i < n; ++i) base[i * inner] = row[size_t(i)];
    }
  return {std::move(out)};
}

template <typename T, typename Acc>
void cumsum_typed(const T* src, T* dst, int64_t outer, int64_t n, int64_t inner, bool exclusive, bool reverse) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      const T* s = src + o * n * inner + j;
      T* d = dst + o * n * inner + j;
      Acc acc = 0;
      for (int64_t k = 0; k < n; ++k) {
        const int64_t i = reverse ? n - 1 - k : k;
        if (exclusive) {
          d[i * inner] = T(acc);
          acc += Acc(s[i * inner]);
        } else {
          acc += Acc(s[i * inner]);
          d[i * inner] = T(acc);
        }
      }
    }
}

std::vector<Tensor> cumsum_kernel(const ir::Node& node, const KernelInputs& in) {
  const Tensor& x = arg(node, in, 0);
  const int64_t axis = normalize_axis(node, scalar_int(node, arg(node, in, 1), "axis"), x.rank());
  const bool exclusive = node.attr_int("exclusive", 0) != 0, reverse = node.attr_int("reverse", 0) != 0;
  int64_t outer = 1, inner = 1;
  const int64_t n = x.shape()[size_t(axis)];
  for (int64_t d = 0; d < axis; ++d) outer *= x.shape()[size_t(d)];
  for (int64_t d = axis + 1; d < x.rank(); ++d) inner *= x.shape()[size_t(d)];
  Tensor out(x.dtype(), x.shape());
  if (x.dtype() == DType::F32)
    cumsum_typed<float, double>(x.as<float>(), out.as<float>(), outer, n, inner, exclusive, reverse);
  else if (x.dtype() == DType::I64)
    cumsum_typed<int64_t, int64_t>(x.as<int64_t>(), out.as<int64_t>(), outer, n, inner, exclusive, reverse);
  else
    unsupported("reference executor: CumSum of {} is not supported", dtype_name(x.dtype()));
  return {std::move(out)};
}

}  // namespace

void register_reduce_kernels(KernelTable& t) {
  t["ReduceMean"] = reduce_kernel<Red::Mean>;
  t["ReduceMax"] = reduce_kernel<Red::Max>;
  t["ReduceSum"] = reduce_kernel<Red::Sum>;
  t["Softmax"] = softmax_kernel;
  t["CumSum"] = cumsum_kernel;
}

}  // namespace hfx::runtime::detail
