// Shape and data-movement kernels: Reshape, Transpose, Unsqueeze, Squeeze, Concat, Slice, Gather,
// Expand, Shape, Range, ScatterElements.
#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/kernels.h"

namespace hfx::runtime::detail {

namespace {

std::vector<Tensor> reshape_kernel(const ir::Node& node, const KernelInputs& in) {
  const Tensor& x = arg(node, in, 0);
  std::vector<int64_t> target = int_values(arg(node, in, 1));
  const bool allow_zero = node.attr_int("allowzero", 0) != 0;
  int64_t infer_at = -1, known = 1;
  for (size_t i = 0; i < target.size(); ++i) {
    int64_t& t = target[i];
    if (t == 0 && !allow_zero) {
      if (i >= x.shape().size())
        bad_input("Reshape: 0 at position {} copies a dim that input shape {} does not have", i, shape_string(x.shape()));
      t = x.shape()[i];
    } else if (t == -1) {
      if (infer_at >= 0) bad_input("Reshape: more than one -1 in {}", shape_string(int_values(arg(node, in, 1))));
      infer_at = int64_t(i);
      continue;
    } else if (t < 0) {
      bad_input("Reshape: invalid dim {} in target shape", t);
    }
    known *= t;
  }
  if (infer_at >= 0) {
    if (known == 0 || x.numel() % known != 0)
      bad_input("Reshape: cannot reshape {} into {}", shape_string(x.shape()), shape_string(int_values(arg(node, in, 1))));
    target[size_t(infer_at)] = x.numel() / known;
  }
  if (numel_of(target) != x.numel())
    bad_input("Reshape: cannot reshape {} ({} elements) into {}", shape_string(x.shape()), x.numel(),
              shape_string(target));
  return {x.reshaped(std::move(target))};
}

std::vector<Tensor> transpose_kernel(const ir::Node& node, const KernelInputs& in) {
  const Tensor& x = arg(node, in, 0);
  const int64_t rank = x.rank();
  std::vector<int64_t> perm = node.has_attr("perm") ? node.attr_ints("perm") : std::vector<int64_t>{};
  if (perm.empty())
    for (int64_t i = rank; i-- > 0;) perm.push_back(i);
  if (int64_t(perm.size()) != rank) bad_input("Transpose: perm has {} entries for rank {}", perm.size(), rank);
  std::vector<bool> seen(size_t(rank), false);
  const auto st = contiguous_strides(x.shape());
  std::vector<int64_t> out_shape, strides;
  for (int64_t p : perm) {
    const int64_t a = normalize_axis(node, p, rank);
    if (seen[size_t(a)]) bad_input("Transpose: perm repeats axis {}", a);
    seen[size_t(a)] = true;
    out_shape.push_back(x.shape()[size_t(a)]);
    strides.push_back(st[size_t(a)]);
  }
  return {strided_copy(x, out_shape, strides)};
}

std::vector<int64_t> axes_input(const ir::Node& node, const KernelInputs& in, size_t i) {
  if (i < in.size() && in[i]) return int_values(*in[i]);
  if (node.has_attr("axes")) return node.attr_ints("axes");
  return {};
}

std::vector<Tensor> unsqueeze_kernel(const ir::Node& node, const KernelInputs& in) {
  const Tensor& x = arg(node, in, 0);
  const auto axes = axes_input(node, in, 1);
  const int64_t rank = x.rank() + int64_t(axes.size());
  std::vector<bool> inserted(size_t(rank), false);
  for (auto a : axes) {
    const int64_t n = normalize_axis(node, a, rank);
    if (inserted[size_t(n)]) bad_input("Unsqueeze: axis {} given twice", a);
    inserted[size_t(n)] = true;
  }
  std::vector<int64_t> shape;
  size_t j = 0;
  for (int64_t i = 0; i < rank; ++i) shape.push_back(inserted[size_t(i)] ? 1 : x.shape()[j++]);
  return {x.reshaped(std::move(shape))};
}

std::vector<Tensor> squeeze_kernel(const ir::Node& node, const KernelInputs& in) {
  const Tensor& x = arg(node, in, 0);
  const auto axes = axes_input(node, in, 1);
  std::vector<bool> removed(size_t(x.rank()), false);
  if (axes.empty()) {
    for (int64_t i = 0; i < x.rank(); ++i) removed[size_t(i)] = x.shape()[size_t(i)] == 1;
  } else {
    for (auto a : axes) {
      const int64_t n = normalize_axis(node, a, x.rank());
      if (x.shape()[size_t(n)] != 1)
        bad_input("Squeeze: axis {} of shape {} is not 1", a, shape_string(x.shape()));
      removed[size_t(n)] = true;
    }
  }
  std::vector<int64_t> shape;
  for (int64_t i = 0; i < x.rank(); ++i)
    if (!removed[size_t(i)]) shape.push_back(x.shape()[size_t(i)]);
  return {x.reshaped(std::move(shape))};
}

std::vector<Tensor> concat_kernel(const ir::Node& node, const KernelInputs& in) {
  const Tensor& first = arg(node, in, 0);
  const int64_t rank = first.rank();
  const int64_t axis = normalize_axis(node, node.attr_int("axis"), rank);
  std::vector<int64_t> shape = first.shape();
  shape[size_t(axis)] = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const Tensor& t = arg(node, in, i);
    if (t.dtype() != first.dtype())
      bad_input("Concat: input {} is {}, input 0 is {}", i, dtype_name(t.dtype()), dtype_name(first.dtype()));
    bool ok = t.rank() == rank;
    for (int64_t d = 0; ok && d < rank; ++d) ok = d == axis || t.shape()[size_t(d)] == first.shape()[size_t(d)];
    if (!ok)
      bad_input("Concat on axis {}: input {} has shape {}, input 0 has {}", axis, i, shape_string(t.shape()),
                shape_string(first.shape()));
    shape[size_t(axis)] += t.shape()[size_t(axis)];
  }
  Tensor out(first.dtype(), shape);
  const size_t es = dtype_size(first.dtype());
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= shape[size_t(d)];
  if (outer == 0 || out.numel() == 0) return {std::move(out)};
  const size_t out_row = size_t(out.numel() / outer) * es;
  size_t offset = 0;
  for (const Tensor* t : in) {
    const size_t row = size_t(t->numel() / outer) * es;
    if (row == 0) continue;
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(out.data() + size_t(o) * out_row + offset, t->data() + size_t(o) * row, row);
    offset += row;
  }
  return {std::move(out)};
}

// ONNX Slice: negative starts/ends count from the end; starts and ends are clamped to [0, dim] for a
// positive step and to [0, dim - 1] / [-1, dim - 1] for a negative step, so INT64_MAX / INT64_MIN mean
// "to the end".
std::vector<Tensor> slice_kernel(const ir::Node& node, const KernelInputs& in) {
  const Tensor& x = arg(node, in, 0);
  const auto starts = int_values(arg(node, in, 1));
  const auto ends = int_values(arg(node, in, 2));
  std::vector<int64_t> axes, steps;
  if (in.size() > 3 && in[3]) axes = int_values(*in[3]);
  if (in.size() > 4 && in[4]) steps = int_values(*in[4]);
  if (ends.size() != starts.size() || (!axes.empty() && axes.size() != starts.size()) ||
      (!steps.empty() && steps.size() != starts.size()))
    bad_input("Slice: starts, ends, axes and steps have different lengths ({}, {}, {}, {})", starts.size(), ends.size(),
              axes.size(), steps.size());
  const int64_t rank = x.rank();
  std::vector<int64_t> begin(size_t(rank), 0), step(size_t(rank), 1), shape = x.shape();
  std::vector<bool> seen(size_t(rank), false);
  for (size_t i = 0; i < starts.size(); ++i) {
    const int64_t a = normalize_axis(node, axes.empty() ? int64_t(i) : axes[i], rank);
    if (seen[size_t(a)]) bad_input("Slice: axis {} given twice", a);
    seen[size_t(a)] = true;
    const int64_t dim = x.shape()[size_t(a)];
    const int64_t st = steps.empty() ? 1 : steps[i];
    if (st == 0) bad_input("Slice: step 0 on axis {}", a);
    int64_t s = starts[i], e = ends[i];
    if (s < 0) s += dim;
    if (e < 0) e += dim;
    int64_t len;
    if (dim == 0) {
      s = 0;
      len = 0;
    } else if (st > 0) {
      s = std::clamp<int64_t>(s, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      len = e > s ? (e - s + st - 1) / st : 0;
    } else {
      s = std::clamp<int64_t>(s, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      len = s > e ? (s - e + (-st) - 1) / (-st) : 0;
    }
    begin[size_t(a)] = s;
    step[size_t(a)] = st;
    shape[size_t(a)] = len;
  }
  const auto cs = contiguous_strides(x.shape());
  std::vector<int64_t> strides(static_cast<size_t>(rank));
  int64_t base = 0;
  bool empty = false;
  for (int64_t d = 0; d < rank; ++d) {
    strides[size_t(d)] = cs[size_t(d)] * step[size_t(d)];
    if (shape[size_t(d)] == 0) empty = true;
    base += begin[size_t(d)] * cs[size_t(d)];
  }
  if (empty) return {Tensor(x.dtype(), shape)};
  return {strided_copy(x, shape, strides, base)};
}

std::vector<Tensor> gather_kernel(const ir::Node& node, const KernelInputs& in) {
  const Tensor& data = arg(node, in, 0);
  const Tensor& indices = arg(node, in, 1);
  if (is_float(indices.dtype()) || indices.dtype() == DType::Bool)
    bad_input("Gather: indices must be integers, got {}", dtype_name(indices.dtype()));
  const int64_t axis = normalize_axis(node, node.attr_int("axis", 0), data.rank());
  const int64_t dim = data.shape()[size_t(axis)];
  std::vector<int64_t> shape(data.shape().begin(), data.shape().begin() + axis);
  shape.insert(shape.end(), indices.shape().begin(), indices.shape().end());
  shape.insert(shape.end(), data.shape().begin() + axis + 1, data.shape().end());
  Tensor out(data.dtype(), shape);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= data.shape()[size_t(d)];
  for (int64_t d = axis + 1; d < data.rank(); ++d) inner *= data.shape()[size_t(d)];
  const auto idx = int_values(indices);
  const size_t es = dtype_size(data.dtype());
  const size_t block = size_t(inner) * es;
  const int64_t n = int64_t(idx.size());
  std::vector<int64_t> fixed(idx.size());
  for (int64_t i = 0; i < n; ++i) {
    int64_t v = idx[size_t(i)];
    if (v < -dim || v >= dim) bad_input("Gather: index {} is out of range for axis {} of size {}", v, axis, dim);
    fixed[size_t(i)] = v < 0 ? v + dim : v;
  }
  if (block == 0) return {std::move(out)};
  for (int64_t o = 0; o < outer; ++o) {
    const uint8_t* src = data.data() + size_t(o * dim) * block;
    uint8_t* dst = out.data() + size_t(o * n) * block;
    for (int64_t i = 0; i < n; ++i) std::memcpy(dst + size_t(i) * block, src + size_t(fixed[size_t(i)]) * block, block);
  }
  return {std::move(out)};
}

// What GatherElements and ScatterElements require of their indices before any is read: integers, of
// data's rank, no larger than data on every axis but `axis` (the node's attribute). Returns that axis,
// normalized. The values themselves are range-checked as they are walked (for_each_element_index).
int64_t check_element_indices(const char* op, const ir::Node& node, const Tensor& data, const Tensor& indices) {
  if (is_float(indices.dtype()) || indices.dtype() == DType::Bool)
    bad_input("{}: indices must be integers, got {}", op, dtype_name(indices.dtype()));
  if (indices.rank() != data.rank())
    bad_input("{}: indices {} must have data's rank ({})", op, shape_string(indices.shape()),
              shape_string(data.shape()));
  const int64_t axis = normalize_axis(node, node.attr_int("axis", 0), data.rank());
  for (int64_t d = 0; d < data.rank(); ++d)
    if (d != axis && indices.shape()[size_t(d)] > data.shape()[size_t(d)])
      bad_input("{}: indices {} exceed data {} on axis {}", op, shape_string(indices.shape()),
                shape_string(data.shape()), d);
  return axis;
}

// The index walk GatherElements and ScatterElements share: the e-th index (row-major over indices) names
// data[i_0, .., indices[i_0, .., i_r], .., i_r], and fn(e, o) gets its flat offset o in data. Negative
// indices count from the end of the axis; one outside it is bad input.
template <typename Fn>
void for_each_element_index(const char* op, const std::vector<int64_t>& data_shape, const Tensor& indices,
                            int64_t axis, Fn&& fn) {
  const auto idx = int_values(indices);
  const auto strides = contiguous_strides(data_shape);
  const int64_t dim = data_shape[size_t(axis)], rank = int64_t(data_shape.size());
  std::vector<int64_t> pos(size_t(rank), 0);
  for (size_t e = 0; e < idx.size(); ++e) {
    int64_t v = idx[e];
    if (v < -dim || v >= dim) bad_input("{}: index {} is out of range for axis {} of size {}", op, v, axis, dim);
    if (v < 0) v += dim;
    int64_t o = 0;
    for (int64_t d = 0; d < rank; ++d) o += (d == axis ? v : pos[size_t(d)]) * strides[size_t(d)];
    fn(e, o);
    for (int64_t d = rank; d-- > 0;) {
      if (++pos[size_t(d)] < indices.shape()[size_t(d)]) break;
      pos[size_t(d)] = 0;
    }
  }
}

// GatherElements(data, indices; axis): out[i_0, .., i_r] = data[i_0, .., indices[i_0, .., i_r], .., i_r],
// out shaped as indices.
std::vector<Tensor> gather_elements_kernel(const ir::Node& node, const KernelInputs& in) {
  const Tensor& data = arg(node, in, 0);
  const Tensor& indices = arg(node, in, 1);
  const int64_t axis = check_element_indices("GatherElements", node, data, indices);
  Tensor out(data.dtype(), indices.shape());
  const size_t es = dtype_size(data.dtype());
  for_each_element_index("GatherElements", data.shape(), indices, axis, [&](size_t e, int64_t o) {
    std::memcpy(out.data() + e * es, data.data() + size_t(o) * es, es);
  });
  return {std::move(out)};
}

std::vector<Tensor> expand_kernel(const ir::Node& node, const KernelInputs& in) {
  const Tensor& x = arg(node, in, 0);
  const auto target = int_values(arg(node, in, 1));
  const auto shape = broadcast_shape(node, {x.shape(), target});
  return {strided_copy(x, shape, broadcast_strides(x.shape(), shape))};
}

std::vector<Tensor> shape_kernel(const ir::Node& node, const KernelInputs& in) {
  const Tensor& x = arg(node, in, 0);
  const int64_t rank = x.rank();
  int64_t start = node.attr_int("start", 0), end = node.attr_int("end", rank);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, 0, rank);
  std::vector<int64_t> dims;
  for (int64_t i = start; i < end; ++i) dims.push_back(x.shape()[size_t(i)]);
  return {Tensor::vector_i64(dims)};
}

// Range: n = max(ceil((limit - start) / delta), 0) elements start + i * delta (computed in double for
// f32, as numpy and PyTorch's arange do, rather than by repeated addition).
std::vector<Tensor> range_kernel(const ir::Node& node, const KernelInputs& in) {
  const Tensor& s = arg(node, in, 0);
  const Tensor& l = arg(node, in, 1);
  const Tensor& d = arg(node, in, 2);
  if (s.dtype() != l.dtype() || s.dtype() != d.dtype())
    bad_input("Range: start, limit and delta have different dtypes ({}, {}, {})", dtype_name(s.dtype()),
              dtype_name(l.dtype()), dtype_name(d.dtype()));
  if (s.dtype() == DType::I64) {
    const int64_t start = scalar_int(node, s, "start"), limit = scalar_int(node, l, "limit"),
                  delta = scalar_int(node, d, "delta");
    if (delta == 0) bad_input("Range: delta is 0");
    const int64_t span = limit - start;
    int64_t n = 0;
    if ((delta > 0 && span > 0) || (delta < 0 && span < 0)) {
      const int64_t ad = delta > 0 ? delta : -delta, as = span > 0 ? span : -span;
      n = (as + ad - 1) / ad;
    }
    Tensor out(DType::I64, {n});
    for (int64_t i = 0; i < n; ++i) out.as<int64_t>()[i] = start + i * delta;
    return {std::move(out)};
  }
  if (s.dtype() == DType::F32) {
    const double start = scalar_double(node, s, "start"), limit = scalar_double(node, l, "limit"),
                 delta = scalar_double(node, d, "delta");
    if (delta == 0) bad_input("Range: delta is 0");
    const double count = std::ceil((limit - start) / delta);
    if (!(count < 1e12)) bad_input("Range: {} elements", count);
    const int64_t n = count > 0 ? int64_t(count) : 0;
    Tensor out(DType::F32, {n});
    for (int64_t i = 0; i < n; ++i) out.as<float>()[i] = float(start + double(i) * delta);
    return {std::move(out)};
  }
  unsupported("reference executor: Range of {} is not supported", dtype_name(s.dtype()));
}

enum class ScatterReduction { None, Add, Mul, Max, Min };

ScatterReduction scatter_reduction(const ir::Node& node) {
  const std::string r = node.attr_str("reduction", "none");
  if (r == "none") return ScatterReduction::None;
  if (r == "add") return ScatterReduction::Add;
  if (r == "mul") return ScatterReduction::Mul;
  if (r == "max") return ScatterReduction::Max;
  if (r == "min") return ScatterReduction::Min;
  bad_input("ScatterElements: unknown reduction `{}`", r);
}

// ScatterElements(data, indices, updates; axis, reduction): a copy of data with
// out[i_0, .., indices[i], .., i_r] = updates[i] (or combined with it by reduction add / mul / max /
// min). Negative indices count from the end of the axis.
template <typename T>
void scatter_typed(Tensor& out, const Tensor& indices, const Tensor& upd, int64_t axis, ScatterReduction reduction) {
  T* po = out.as<T>();
  const T* pu = upd.as<T>();
  for_each_element_index("ScatterElements", out.shape(), indices, axis, [&](size_t e, int64_t o) {
    const T u = pu[e];
    switch (reduction) {
      case ScatterReduction::None: po[o] = u; break;
      case ScatterReduction::Add: po[o] = T(po[o] + u); break;
      case ScatterReduction::Mul: po[o] = T(po[o] * u); break;
      case ScatterReduction::Max: po[o] = std::max(po[o], u); break;
      case ScatterReduction::Min: po[o] = std::min(po[o], u); break;
    }
  });
}

std::vector<Tensor> scatter_elements_kernel(const ir::Node& node, const KernelInputs& in) {
  const Tensor& data = arg(node, in, 0);
  const Tensor& indices = arg(node, in, 1);
  const Tensor& updates = arg(node, in, 2);
  if (updates.dtype() != data.dtype())
    bad_input("ScatterElements: updates are {}, data is {}", dtype_name(updates.dtype()), dtype_name(data.dtype()));
  if (indices.shape() != updates.shape())
    bad_input("ScatterElements: indices {} and updates {} must have one shape", shape_string(indices.shape()),
              shape_string(updates.shape()));
  const int64_t axis = check_element_indices("ScatterElements", node, data, indices);
  const ScatterReduction reduction = scatter_reduction(node);
  Tensor out = data;
  switch (data.dtype()) {
    case DType::F32: scatter_typed<float>(out, indices, updates, axis, reduction); break;
    case DType::I64: scatter_typed<int64_t>(out, indices, updates, axis, reduction); break;
    case DType::Bool: scatter_typed<uint8_t>(out, indices, updates, axis, reduction); break;
    default: unsupported("reference executor: ScatterElements of {} is not supported", dtype_name(data.dtype()));
  }
  return {std::move(out)};
}

}  // namespace

void register_shape_kernels(KernelTable& t) {
  t["Reshape"] = reshape_kernel;
  t["Transpose"] = transpose_kernel;
  t["Unsqueeze"] = unsqueeze_kernel;
  t["Squeeze"] = squeeze_kernel;
  t["Concat"] = concat_kernel;
  t["Slice"] = slice_kernel;
  t["Gather"] = gather_kernel;
  t["GatherElements"] = gather_elements_kernel;
  t["Expand"] = expand_kernel;
  t["Shape"] = shape_kernel;
  t["Range"] = range_kernel;
  t["ScatterElements"] = scatter_elements_kernel;
}

}  // namespace hfx::runtime::detail
