#include "ir/ops.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <set>

#include "core/error.h"

namespace hfx::ir {

namespace {

constexpr int64_t kMaxRank = 64;  // shapes computed at run time (Reshape, Expand to a shape input)

const Value& in(const Graph& g, const Node& n, size_t i) {
  HFX_CHECK(i < n.inputs.size() && n.inputs[i] != kNone, "{} ({}) has no input {}", n.name, n.op, i);
  return g.value(n.inputs[i]);
}

int64_t norm_axis(int64_t axis, size_t rank, const Node& n) {
  if (axis < 0) axis += int64_t(rank);
  if (axis < 0 || axis >= int64_t(rank))
    fail(ErrorKind::Internal, "{} ({}): axis out of range for rank {}", n.name, n.op, rank);
  return axis;
}

// The values of a constant int input (axes, shapes, slice bounds), if it is a constant.
std::optional<std::vector<int64_t>> const_ints(const Graph& g, const Node& n, size_t i) {
  if (i >= n.inputs.size() || n.inputs[i] == kNone) return std::nullopt;
  auto t = g.constant(n.inputs[i]);
  if (!t) return std::nullopt;
  return t->to_i64_vector();
}

std::vector<Value> same_as_input0(const Graph& g, const Node& n) { return {{"", in(g, n, 0).dtype, in(g, n, 0).shape}}; }

std::vector<Value> binary(const Graph& g, const Node& n, std::optional<DType> out) {
  const auto& a = in(g, n, 0);
  const auto& b = in(g, n, 1);
  if (!out && a.dtype != b.dtype)
    bad_input("{} ({}): input dtypes differ: {} vs {}", n.name, n.op, dtype_name(a.dtype), dtype_name(b.dtype));
  return {{"", out.value_or(a.dtype), broadcast_shapes(a.shape, b.shape)}};
}

Dim sum_dims(const Graph& g, const Dim& a, const Dim& b) {
  int64_t sum = 0;
  if (a.is_fixed() && b.is_fixed()) {
    HFX_CHECK(!__builtin_add_overflow(a.value, b.value, &sum), "dims {} + {} overflow", a.value, b.value);
    return Dim::fixed(sum);
  }
  if (a.is_fixed() && a.value == 0) return b;
  if (b.is_fixed() && b.value == 0) return a;
  if (a.is_symbol() && b.is_symbol()) return Dim::sym(g.symbols().sum_of(a.symbol, b.symbol));
  return Dim::unknown();
}

// MatMulNBits (com.microsoft): A[..., K] x the quantized B[K, N] -> [..., N] in A's dtype.
std::vector<Value> infer_matmul_nbits(const Graph& g, const Node& n) {
  const auto& a = in(g, n, 0);
  auto positive = [&](const char* key) {  // graphs read from files may lack them: a user error
    auto it = n.attrs.find(key);
    if (it == n.attrs.end() || !std::holds_alternative<int64_t>(it->second) || std::get<int64_t>(it->second) < 1)
      bad_input("{}: MatMulNBits needs a positive integer attribute `{}`", n.name, key);
    return std::get<int64_t>(it->second);
  };
  const int64_t K = positive("K"), N = positive("N");
  positive("bits");
  positive("block_size");
  if (a.shape.empty()) bad_input("{}: MatMulNBits needs an input of rank >= 1", n.name);
  if (a.shape.back().is_fixed() && a.shape.back().value != K)
    bad_input("{}: MatMulNBits input has {} columns, K = {}", n.name, a.shape.back().value, K);
  Shape out = a.shape;
  out.back() = Dim::fixed(N);
  return {{"", a.dtype, out}};
}

// GatherBlockQuantized (com.microsoft), as hfx writes it: rows of a blockwise-quantized table, uint8
// data [V, D * bits / 8] (gather_axis 0, quantize_axis 1) -> indices' shape + [D] in the scales' dtype.
std::vector<Value> infer_gather_block_quantized(const Graph& g, const Node& n) {
  const auto& data = in(g, n, 0);
  const auto& idx = in(g, n, 1);
  const int64_t bits = n.attr_int("bits", 4);
  if (data.shape.size() != 2 || n.attr_int("gather_axis", 0) != 0 || n.attr_int("quantize_axis", 1) != 1 ||
      (bits != 4 && bits != 8))
    unsupported("{}: GatherBlockQuantized other than a [V, D] table, gather_axis 0, quantize_axis 1, bits 4 or 8", n.name);
  Shape out = idx.shape;
  const Dim& packed = data.shape[1];
  out.push_back(packed.is_fixed() ? Dim::fixed(packed.value * (8 / bits)) : Dim::unknown());
  return {{"", in(g, n, 2).dtype, out}};
}

// DequantizeLinear (opset 21): x's shape, the scale's dtype. Blocked (block_size > 0): the scale has x's
// rank, ceil(D / block_size) along `axis` (quantized weights: [K/block, N] over [K, N], or OpenVINO's
// [N, K/block, 1] over [N, K/block, block]).
std::vector<Value> infer_dequantize_linear(const Graph& g, const Node& n) {
  const auto& x = in(g, n, 0);
  const auto& s = in(g, n, 1);
  const int64_t block = n.attr_int("block_size", 0);
  if (block < 0) bad_input("{}: DequantizeLinear block_size {} is negative", n.name, block);
  if (block > 0) {
    const int64_t rank = int64_t(x.shape.size());
    int64_t axis = n.attr_int("axis", 1);
    if (axis < 0) axis += rank;
    if (int64_t(s.shape.size()) != rank || axis < 0 || axis >= rank)
      bad_input("{}: blocked DequantizeLinear needs a scale of x's rank {} and an axis in range, got scale {} and axis {}",
                n.name, rank, shape_str(s.shape), n.attr_int("axis", 1));
    const Dim& d = x.shape[size_t(axis)];
    const Dim& sd = s.shape[size_t(axis)];
    if (d.is_fixed() && sd.is_fixed() && sd.value != (d.value + block - 1) / block)
      bad_input("{}: blocked DequantizeLinear: scale {} has {} blocks along axis {}, x {} needs {}", n.name,
                shape_str(s.shape), sd.value, axis, shape_str(x.shape), (d.value + block - 1) / block);
  }
  return {{"", s.dtype, x.shape}};
}

std::vector<Value> infer_matmul(const Graph& g, const Node& n) {
  const auto& a = in(g, n, 0);
  const auto& b = in(g, n, 1);
  HFX_CHECK(a.shape.size() >= 2 && b.shape.size() >= 2, "{}: MatMul needs rank >= 2", n.name);
  Shape ab(a.shape.begin(), a.shape.end() - 2), bb(b.shape.begin(), b.shape.end() - 2);
  const Dim& ka = a.shape[a.shape.size() - 1];
  const Dim& kb = b.shape[b.shape.size() - 2];
  if (ka.is_fixed() && kb.is_fixed() && ka.value != kb.value)
    bad_input("{}: MatMul inner dims differ: {} vs {}", n.name, ka.value, kb.value);
  Shape out = broadcast_shapes(ab, bb);
  out.push_back(a.shape[a.shape.size() - 2]);
  out.push_back(b.shape.back());
  return {{"", a.dtype, out}};
}

std::vector<Value> infer_gather(const Graph& g, const Node& n) {
  const auto& data = in(g, n, 0);
  const auto& idx = in(g, n, 1);
  const int64_t axis = norm_axis(n.attr_int("axis", 0), data.shape.size(), n);
  Shape out(data.shape.begin(), data.shape.begin() + axis);
  out.insert(out.end(), idx.shape.begin(), idx.shape.end());
  out.insert(out.end(), data.shape.begin() + axis + 1, data.shape.end());
  return {{"", data.dtype, out}};
}

std::vector<Value> infer_reduce(const Graph& g, const Node& n) {
  const auto& x = in(g, n, 0);
  auto axes = const_ints(g, n, 1);
  const bool keep = n.attr_int("keepdims", 1) != 0;
  std::vector<bool> reduced(x.shape.size(), !axes || axes->empty());
  if (axes)
    for (auto a : *axes) reduced[size_t(norm_axis(a, x.shape.size(), n))] = true;
  Shape out;
  for (size_t i = 0; i < x.shape.size(); ++i) {
    if (!reduced[i]) out.push_back(x.shape[i]);
    else if (keep) out.push_back(Dim::fixed(1));
  }
  return {{"", x.dtype, out}};
}

std::vector<Value> infer_transpose(const Graph& g, const Node& n) {
  const auto& x = in(g, n, 0);
  std::vector<int64_t> perm = n.has_attr("perm") ? n.attr_ints("perm") : std::vector<int64_t>{};
  if (perm.empty())
    for (size_t i = x.shape.size(); i-- > 0;) perm.push_back(int64_t(i));
  HFX_CHECK(perm.size() == x.shape.size(), "{}: perm rank {} vs input rank {}", n.name, perm.size(), x.shape.size());
  std::vector<bool> seen(perm.size(), false);
  Shape out;
  for (auto p : perm) {
    HFX_CHECK(p >= 0 && p < int64_t(perm.size()) && !seen[size_t(p)], "{}: perm is not a permutation", n.name);
    seen[size_t(p)] = true;
    out.push_back(x.shape[size_t(p)]);
  }
  return {{"", x.dtype, out}};
}

std::vector<Value> infer_reshape(const Graph& g, const Node& n) {
  const auto& x = in(g, n, 0);
  auto target = const_ints(g, n, 1);
  if (!target) {
    const auto& s = in(g, n, 1);
    HFX_CHECK(s.shape.size() == 1, "{}: Reshape shape input must be rank 1", n.name);
    const int64_t rank = s.shape[0].is_fixed() ? s.shape[0].value : 0;
    HFX_CHECK(rank >= 0 && rank <= kMaxRank, "{}: Reshape to rank {}", n.name, rank);
    Shape out(size_t(rank), Dim::unknown());
    return {{"", x.dtype, out}};
  }
  Shape out;
  int64_t infer_at = -1;
  for (size_t i = 0; i < target->size(); ++i) {
    int64_t t = (*target)[i];
    HFX_CHECK(t >= -1 && (t != -1 || infer_at < 0), "{}: Reshape target {} is not a shape", n.name, t);
    if (t == 0) out.push_back(i < x.shape.size() ? x.shape[i] : Dim::unknown());
    else if (t == -1) { infer_at = int64_t(i); out.push_back(Dim::unknown()); }
    else out.push_back(Dim::fixed(t));
  }
  if (infer_at >= 0) {
    // Resolve -1 when the remaining dims make it exact: all-fixed, or the same symbols cancel.
    auto in_numel = fixed_numel(x.shape);
    Shape rest = out;
    rest.erase(rest.begin() + infer_at);
    auto rest_numel = fixed_numel(rest);
    if (in_numel && rest_numel && *rest_numel > 0) {
      out[size_t(infer_at)] = Dim::fixed(*in_numel / *rest_numel);
    } else {
      std::multiset<std::string> syms_in, syms_rest;
      int64_t fixed_in = 1, fixed_rest = 1;
      bool ok = true;
      auto times = [&](int64_t& acc, int64_t v) { ok = ok && !__builtin_mul_overflow(acc, v, &acc); };
      for (const auto& d : x.shape) d.is_fixed() ? times(fixed_in, d.value) : d.is_symbol() ? void(syms_in.insert(d.symbol)) : void(ok = false);
      for (const auto& d : rest) d.is_fixed() ? times(fixed_rest, d.value) : d.is_symbol() ? void(syms_rest.insert(d.symbol)) : void(ok = false);
      if (ok && fixed_rest > 0 && fixed_in % fixed_rest == 0 && std::includes(syms_in.begin(), syms_in.end(), syms_rest.begin(), syms_rest.end())) {
        std::multiset<std::string> left;
        std::set_difference(syms_in.begin(), syms_in.end(), syms_rest.begin(), syms_rest.end(), std::inserter(left, left.begin()));
        if (left.empty()) out[size_t(infer_at)] = Dim::fixed(fixed_in / fixed_rest);
        else if (left.size() == 1 && fixed_in == fixed_rest) out[size_t(infer_at)] = Dim::sym(*left.begin());
      }
    }
  }
  return {{"", x.dtype, out}};
}

std::vector<Value> infer_unsqueeze(const Graph& g, const Node& n) {
  const auto& x = in(g, n, 0);
  auto axes = const_ints(g, n, 1);
  HFX_CHECK(axes, "{}: Unsqueeze axes must be a constant", n.name);
  const size_t rank = x.shape.size() + axes->size();
  std::vector<bool> inserted(rank, false);
  for (auto a : *axes) {
    const auto at = size_t(norm_axis(a, rank, n));
    HFX_CHECK(!inserted[at], "{}: Unsqueeze axis {} repeated", n.name, a);
    inserted[at] = true;
  }
  Shape out;
  size_t j = 0;
  for (size_t i = 0; i < rank; ++i) out.push_back(inserted[i] ? Dim::fixed(1) : x.shape[j++]);
  return {{"", x.dtype, out}};
}

std::vector<Value> infer_squeeze(const Graph& g, const Node& n) {
  const auto& x = in(g, n, 0);
  auto axes = const_ints(g, n, 1);
  std::vector<bool> removed(x.shape.size(), false);
  if (axes) {
    for (auto a : *axes) removed[size_t(norm_axis(a, x.shape.size(), n))] = true;
  } else {
    for (size_t i = 0; i < x.shape.size(); ++i) removed[i] = x.shape[i].is_fixed() && x.shape[i].value == 1;
  }
  Shape out;
  for (size_t i = 0; i < x.shape.size(); ++i)
    if (!removed[i]) out.push_back(x.shape[i]);
  return {{"", x.dtype, out}};
}

std::vector<Value> infer_concat(const Graph& g, const Node& n) {
  const auto& first = in(g, n, 0);
  const int64_t axis = norm_axis(n.attr_int("axis"), first.shape.size(), n);
  Shape out = first.shape;
  for (size_t i = 1; i < n.inputs.size(); ++i) {
    const auto& v = in(g, n, i);
    if (v.dtype != first.dtype) bad_input("{}: Concat of {} and {}", n.name, dtype_name(first.dtype), dtype_name(v.dtype));
    HFX_CHECK(v.shape.size() == out.size(), "{}: Concat of ranks {} and {}", n.name, out.size(), v.shape.size());
    for (size_t d = 0; d < out.size(); ++d) {
      if (int64_t(d) == axis) out[d] = sum_dims(g, out[d], v.shape[d]);
      else if (!(out[d] == v.shape[d]) && !out[d].is_fixed() && v.shape[d].is_fixed()) out[d] = v.shape[d];
    }
  }
  return {{"", first.dtype, out}};
}

std::vector<Value> infer_slice(const Graph& g, const Node& n) {
  const auto& x = in(g, n, 0);
  auto starts = const_ints(g, n, 1), ends = const_ints(g, n, 2), axes = const_ints(g, n, 3), steps = const_ints(g, n, 4);
  Shape out = x.shape;
  if (!starts || !ends) {
    for (auto& d : out) d = Dim::unknown();
    return {{"", x.dtype, out}};
  }
  HFX_CHECK(ends->size() == starts->size() && (!axes || axes->size() == starts->size()) &&
                (!steps || steps->size() == starts->size()),
            "{}: Slice starts, ends, axes and steps differ in length", n.name);
  for (size_t i = 0; i < starts->size(); ++i) {
    const int64_t axis = norm_axis(axes ? (*axes)[i] : int64_t(i), x.shape.size(), n);
    const int64_t step = steps ? (*steps)[i] : 1;
    HFX_CHECK(step != 0, "{}: Slice step 0", n.name);
    const Dim& d = x.shape[size_t(axis)];
    int64_t s = (*starts)[i], e = (*ends)[i];
    if (d.is_fixed() && step > 0) {
      const int64_t len = d.value;
      if (s < 0) s += len;
      if (e < 0) e += len;
      s = std::clamp<int64_t>(s, 0, len);
      e = std::clamp<int64_t>(e, 0, len);
      out[size_t(axis)] = Dim::fixed(e > s ? (e - s - 1) / step + 1 : 0);
    } else if (step == 1 && s >= 0 && e >= 0 && e != INT64_MAX) {
      out[size_t(axis)] = Dim::unknown();  // min(e, len) - s: depends on a symbol
    } else if (step == 1 && s == 0 && e == INT64_MAX) {
      // whole axis
    } else {
      out[size_t(axis)] = Dim::unknown();
    }
  }
  return {{"", x.dtype, out}};
}

std::vector<Value> infer_expand(const Graph& g, const Node& n) {
  const auto& x = in(g, n, 0);
  auto shape = const_ints(g, n, 1);
  if (!shape) {
    const auto& s = in(g, n, 1);
    HFX_CHECK(s.shape.size() == 1, "{}: Expand shape input must be rank 1", n.name);
    const int64_t rank = s.shape[0].is_fixed() ? s.shape[0].value : 0;
    HFX_CHECK(rank >= 0 && rank <= kMaxRank, "{}: Expand to rank {}", n.name, rank);
    return {{"", x.dtype, Shape(size_t(rank), Dim::unknown())}};
  }
  Shape target;
  for (auto v : *shape) {
    HFX_CHECK(v >= 0, "{}: Expand to a negative dim {}", n.name, v);
    target.push_back(Dim::fixed(v));
  }
  return {{"", x.dtype, broadcast_shapes(x.shape, target)}};
}

std::vector<Value> infer_where(const Graph& g, const Node& n) {
  const auto& x = in(g, n, 1);
  const auto& y = in(g, n, 2);
  if (x.dtype != y.dtype) bad_input("{}: Where of {} and {}", n.name, dtype_name(x.dtype), dtype_name(y.dtype));
  return {{"", x.dtype, broadcast_shapes(in(g, n, 0).shape, broadcast_shapes(x.shape, y.shape))}};
}

std::vector<Value> infer_cast(const Graph& g, const Node& n) {
  auto to = dtype_from_name(n.attr_str("to"));
  HFX_CHECK(to, "{}: Cast to unknown dtype {}", n.name, n.attr_str("to"));
  return {{"", *to, in(g, n, 0).shape}};
}

std::vector<Value> infer_shape(const Graph& g, const Node& n) {
  const auto rank = int64_t(in(g, n, 0).shape.size());
  int64_t start = n.attr_int("start", 0), end = n.attr_int("end", rank);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, 0, rank);
  return {{"", DType::I64, {Dim::fixed(std::max<int64_t>(0, end - start))}}};
}

// --- composite ops ---

std::vector<Value> infer_embedding(const Graph& g, const Node& n) {
  const auto& w = in(g, n, 0);
  HFX_CHECK(w.shape.size() == 2, "{}: Embedding weight rank {}", n.name, w.shape.size());
  Shape out = in(g, n, 1).shape;
  out.push_back(w.shape[1]);
  return {{"", w.dtype, out}};
}

std::vector<Value> infer_linear(const Graph& g, const Node& n) {
  const auto& x = in(g, n, 0);
  const auto& w = in(g, n, 1);
  // bad_input: a file's FusedMatMul reaches here whatever its operands' ranks.
  if (w.shape.size() != 2 || x.shape.empty())
    bad_input("{}: {} over an input of rank {} and a weight of rank {} (expected >= 1 and 2)", n.name, n.op,
              x.shape.size(), w.shape.size());
  if (x.shape.back().is_fixed() && w.shape[1].is_fixed() && x.shape.back().value != w.shape[1].value)
    bad_input("{}: Linear input has {} features, weight expects {}", n.name, x.shape.back().value, w.shape[1].value);
  Shape out = x.shape;
  out.back() = w.shape[0];
  return {{"", x.dtype, out}};
}

std::vector<Value> infer_rope_cos_sin(const Graph& g, const Node& n) {
  Shape out = in(g, n, 0).shape;
  HFX_CHECK(in(g, n, 1).shape.size() == 1, "{}: RopeCosSin inv_freq must be rank 1", n.name);
  const Dim half = in(g, n, 1).shape[0];
  out.push_back(half.is_fixed() && half.value <= INT64_MAX / 2 ? Dim::fixed(2 * half.value) : Dim::unknown());
  return {{"", DType::F32, out}, {"", DType::F32, out}};
}

std::vector<Value> infer_attention_bias(const Graph& g, const Node& n) {
  const auto& mask = in(g, n, 0);
  const auto& ids = in(g, n, 1);
  HFX_CHECK(mask.shape.size() == 2 && ids.shape.size() == 2, "{}: AttentionBias expects rank-2 mask and ids", n.name);
  return {{"", DType::F32, {mask.shape[0], Dim::fixed(1), ids.shape[1], mask.shape[1]}}};
}

std::vector<Value> infer_padding_bias(const Graph& g, const Node& n) {
  const auto& mask = in(g, n, 0);
  HFX_CHECK(mask.shape.size() == 2, "{}: PaddingBias expects a rank-2 attention_mask", n.name);
  return {{"", DType::F32, {mask.shape[0], Dim::fixed(1), Dim::fixed(1), mask.shape[1]}}};
}

std::vector<Value> infer_attention(const Graph& g, const Node& n) {
  const auto& q = in(g, n, 0);
  const auto& k = in(g, n, 1);
  HFX_CHECK(q.shape.size() == 4 && k.shape.size() == 4, "{}: Attention expects rank-4 q and k", n.name);
  return {{"", q.dtype, q.shape}};
}

// GroupQueryAttention: output [b, s, hq * d], present_* [b, hkv, p + s, d] (d from the past or the
// packed query width).
std::vector<Value> infer_group_query_attention(const Graph& g, const Node& n) {
  const auto& q = in(g, n, 0);
  HFX_CHECK(q.shape.size() == 3, "{}: GroupQueryAttention query must be rank 3", n.name);
  const int64_t hq = n.attr_int("num_heads"), hkv = n.attr_int("kv_num_heads");
  HFX_CHECK(hq > 0 && hkv > 0 && q.shape[2].is_fixed(), "{}: GroupQueryAttention needs head counts and a fixed width",
            n.name);
  const bool packed = n.input(1) == kNone;
  const int64_t d = q.shape[2].value / (packed ? hq + 2 * hkv : hq);
  Shape out = {q.shape[0], q.shape[1], Dim::fixed(hq * d)};
  Dim total = q.shape[1];
  if (n.input(3) != kNone) total = sum_dims(g, in(g, n, 3).shape.at(2), q.shape[1]);
  Shape present = {q.shape[0], Dim::fixed(hkv), total, Dim::fixed(d)};
  return {{"", q.dtype, out}, {"", q.dtype, present}, {"", q.dtype, present}};
}

// CausalConv (x [b, C, s], past [b, C, K - 1], weight [C, K], bias) and ONNX Runtime's
// CausalConvWithState (input [b, C, s], weight [C, 1, K], bias, past_state): out like x, the state
// [b, C, K - 1] (the kernel from the weight's last axis).
std::vector<Value> infer_causal_conv(const Graph& g, const Node& n) {
  const auto& x = in(g, n, 0);
  const bool ours = n.op == "CausalConv";
  const auto& w = in(g, n, ours ? 2 : 1);
  HFX_CHECK(x.shape.size() == 3 && !w.shape.empty() && w.shape.back().is_fixed(), "{}: {} needs x [b, C, s] and a fixed kernel",
            n.name, n.op);
  const Dim width = Dim::fixed(w.shape.back().value - 1);
  return {{"", x.dtype, x.shape}, {"", x.dtype, {x.shape[0], x.shape[1], width}}};
}

// GatedDeltaRule: q, k [b, s, H, K], v [b, s, H, V] -> out [b, s, H, V], state [b, H, K, V].
std::vector<Value> infer_gated_delta_rule(const Graph& g, const Node& n) {
  const auto& q = in(g, n, 0);
  const auto& v = in(g, n, 2);
  HFX_CHECK(q.shape.size() == 4 && v.shape.size() == 4, "{}: GatedDeltaRule needs rank-4 q and v", n.name);
  return {{"", v.dtype, v.shape},
          {"", v.dtype, {q.shape[0], Dim::fixed(n.attr_int("heads")), Dim::fixed(n.attr_int("key_dim")),
                         Dim::fixed(n.attr_int("value_dim"))}}};
}

// SsdScan: x [b, s, H, P], dt, A, B, C [b, s, H, N], D?, initial? -> y like x, state [b, H, P, N].
std::vector<Value> infer_ssd_scan(const Graph& g, const Node& n) {
  const auto& x = in(g, n, 0);
  HFX_CHECK(x.shape.size() == 4, "{}: SsdScan needs x [b, s, heads, head_dim]", n.name);
  return {{"", x.dtype, x.shape},
          {"", x.dtype, {x.shape[0], Dim::fixed(n.attr_int("heads")), Dim::fixed(n.attr_int("head_dim")),
                         Dim::fixed(n.attr_int("state_size"))}}};
}

// ONNX Runtime's LinearAttention: query [B, T, Hq dk], key [B, T, Hkv dk], value [B, T, Hkv dv] ->
// output [B, T, Hq dv], present_state [B, Hkv, dk, dv].
std::vector<Value> infer_linear_attention(const Graph& g, const Node& n) {
  const auto& q = in(g, n, 0);
  const auto& k = in(g, n, 1);
  const auto& v = in(g, n, 2);
  const int64_t hq = n.attr_int("q_num_heads"), hkv = n.attr_int("kv_num_heads");
  HFX_CHECK(q.shape.size() == 3 && k.shape.size() == 3 && v.shape.size() == 3 && k.shape[2].is_fixed() &&
                v.shape[2].is_fixed() && hq > 0 && hkv > 0,
            "{}: LinearAttention needs 3-D packed q/k/v with fixed widths and head counts", n.name);
  const int64_t dk = k.shape[2].value / hkv, dv = v.shape[2].value / hkv;
  return {{"", v.dtype, {q.shape[0], q.shape[1], Dim::fixed(hq * dv)}},
          {"", v.dtype, {q.shape[0], Dim::fixed(hkv), Dim::fixed(dk), Dim::fixed(dv)}}};
}

// RecurrenceScan (the ONNX backend's Scan over time): the state as it came in, and the output of the
// rule's value-like input (gated_delta: v, input 3; ssd: xdt, input 1).
std::vector<Value> infer_recurrence_scan(const Graph& g, const Node& n) {
  const std::string rule = n.attr_str("rule", "");
  HFX_CHECK((rule == "gated_delta" && n.inputs.size() == 6) || (rule == "ssd" && n.inputs.size() == 5),
            "{}: RecurrenceScan rule `{}` with {} inputs", n.name, rule, n.inputs.size());
  const auto& state = in(g, n, 0);
  const auto& value = in(g, n, rule == "ssd" ? 1 : 3);
  HFX_CHECK(state.shape.size() == 4 && value.shape.size() == 4, "{}: RecurrenceScan needs a rank-4 state and input", n.name);
  return {{"", state.dtype, state.shape}, {"", value.dtype, value.shape}};
}

using Infer = std::function<std::vector<Value>(const Graph&, const Node&)>;

OpSchema make(std::string name, size_t min_in, size_t max_in, size_t outs, Infer infer, bool composite = false) {
  OpSchema s;
  s.name = std::move(name);
  s.min_inputs = min_in;
  s.max_inputs = max_in;
  s.num_outputs = outs;
  s.infer = std::move(infer);
  s.composite = composite;
  return s;
}

std::map<std::string, OpSchema> build_table() {
  std::vector<OpSchema> t;
  auto same = [](const Graph& g, const Node& n) { return same_as_input0(g, n); };
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow", "Mod"})
    t.push_back(make(op, 2, 2, 1, [](const Graph& g, const Node& n) { return binary(g, n, std::nullopt); }));
  for (const char* op : {"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or"})
    t.push_back(make(op, 2, 2, 1, [](const Graph& g, const Node& n) { return binary(g, n, DType::Bool); }));
  for (const char* op : {"Neg", "Sqrt", "Reciprocal", "Exp", "Log", "Sin", "Cos", "Tanh", "Erf", "Sigmoid", "Not",
                         "Identity", "Softmax", "CumSum"})
    t.push_back(make(op, 1, std::string(op) == "CumSum" ? 2 : 1, 1, same));
  t.push_back(make("MatMul", 2, 2, 1, infer_matmul));
  t.push_back(make("MatMulNBits", 3, 4, 1, infer_matmul_nbits));
  t.push_back(make("DequantizeLinear", 2, 3, 1, infer_dequantize_linear));
  t.push_back(make("GatherBlockQuantized", 3, 4, 1, infer_gather_block_quantized));
  t.push_back(make("Gather", 2, 2, 1, infer_gather));
  t.push_back(make("GatherElements", 2, 2, 1, [](const Graph& g, const Node& n) {
    return std::vector<Value>{{"", in(g, n, 0).dtype, in(g, n, 1).shape}};
  }));
  for (const char* op : {"ReduceMean", "ReduceMax", "ReduceSum"}) t.push_back(make(op, 1, 2, 1, infer_reduce));
  t.push_back(make("Transpose", 1, 1, 1, infer_transpose));
  t.push_back(make("Reshape", 2, 2, 1, infer_reshape));
  t.push_back(make("Unsqueeze", 2, 2, 1, infer_unsqueeze));
  t.push_back(make("Squeeze", 1, 2, 1, infer_squeeze));
  t.push_back(make("Concat", 1, 64, 1, infer_concat));
  t.push_back(make("Slice", 3, 5, 1, infer_slice));
  t.push_back(make("Expand", 2, 2, 1, infer_expand));
  t.push_back(make("Where", 3, 3, 1, infer_where));
  t.push_back(make("Cast", 1, 1, 1, infer_cast));
  t.push_back(make("Range", 3, 3, 1, [](const Graph& g, const Node& n) {
    return std::vector<Value>{{"", in(g, n, 0).dtype, {Dim::unknown()}}};
  }));
  t.push_back(make("Shape", 1, 1, 1, infer_shape));
  t.push_back(make("ScatterElements", 3, 3, 1, same));

  t.push_back(make("Embedding", 2, 2, 1, infer_embedding, true));
  t.push_back(make("Linear", 2, 3, 1, infer_linear, true));
  t.push_back(make("RMSNorm", 2, 2, 1, same, true));
  t.push_back(make("SwiGLU", 2, 2, 1, same, true));
  t.push_back(make("Gelu", 1, 1, 1, same, true));
  t.push_back(make("LayerNorm", 2, 3, 1, same, true));
  t.push_back(make("Softcap", 1, 1, 1, same, true));
  t.push_back(make("RopeCosSin", 2, 2, 2, infer_rope_cos_sin, true));
  t.push_back(make("RotaryEmbedding", 3, 3, 1, same, true));
  t.push_back(make("AttentionBias", 2, 3, 1, infer_attention_bias, true));
  t.push_back(make("PaddingBias", 1, 1, 1, infer_padding_bias, true));
  t.push_back(make("Attention", 4, 4, 1, infer_attention, true));
  t.push_back(make("SoftcapAttention", 4, 4, 1, infer_attention, true));
  t.push_back(make("CacheUpdate", 3, 3, 1, same, true));
  t.push_back(make("CausalConv", 3, 4, 2, infer_causal_conv, true));
  t.push_back(make("GatedDeltaRule", 5, 6, 2, infer_gated_delta_rule, true));
  t.push_back(make("SsdScan", 5, 7, 2, infer_ssd_scan, true));
  // Target ops (ONNX Runtime's fused ops), see ops.h.
  t.push_back(make("SimplifiedLayerNormalization", 2, 2, 1, same, true));
  t.push_back(make("SkipSimplifiedLayerNormalization", 3, 3, 2, [](const Graph& g, const Node& n) {
    return std::vector<Value>{{"", in(g, n, 0).dtype, in(g, n, 0).shape}, {"", in(g, n, 0).dtype, in(g, n, 0).shape}};
  }, true));
  t.push_back(make("GroupQueryAttention", 7, 9, 3, infer_group_query_attention, true));
  t.push_back(make("CausalConvWithState", 2, 4, 2, infer_causal_conv, true));
  t.push_back(make("LinearAttention", 3, 6, 2, infer_linear_attention, true));
  t.push_back(make("RecurrenceScan", 5, 6, 2, infer_recurrence_scan, true));
  t.push_back(make("FusedMatMul", 2, 2, 1, infer_linear, true));
  // Target ops: ONNX opset-23 standard fused ops (passes/onnx_standard_ops.cc). Named apart from the
  // composites they replace where ONNX reuses a composite's name with other inputs.
  t.push_back(make("RMSNormalization", 2, 2, 1, same, true));
  t.push_back(make("OnnxRotaryEmbedding", 3, 3, 1, same, true));
  t.push_back(make("OnnxAttention", 4, 4, 1, infer_attention, true));
  // Target ops: ONNX standard fused ops older than opset 21, written at every opset hfx targets.
  t.push_back(make("LayerNormalization", 2, 3, 1, same, true));
  t.push_back(make("OnnxGelu", 1, 1, 1, same, true));
  for (auto& s : t)
    if (s.name == "SimplifiedLayerNormalization" || s.name == "SkipSimplifiedLayerNormalization" ||
        s.name == "GroupQueryAttention" || s.name == "CausalConvWithState" || s.name == "LinearAttention" || s.name == "RecurrenceScan" ||
        s.name == "RMSNormalization" || s.name == "OnnxRotaryEmbedding" ||
        s.name == "OnnxAttention" || s.name == "LayerNormalization" || s.name == "OnnxGelu" || s.name == "FusedMatMul")
      s.target_op = true;
  register_decompositions(t);

  std::map<std::string, OpSchema> table;
  for (auto& s : t) {
    HFX_CHECK(!s.composite || s.decompose, "composite op {} has no decomposition", s.name);
    table.emplace(s.name, std::move(s));
  }
  return table;
}

const std::map<std::string, OpSchema>& table() {
  static const std::map<std::string, OpSchema> t = build_table();
  return t;
}

}  // namespace

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const Dim* da = i < rank - a.size() ? nullptr : &a[i - (rank - a.size())];
    const Dim* db = i < rank - b.size() ? nullptr : &b[i - (rank - b.size())];
    if (!da) { out[i] = *db; continue; }
    if (!db) { out[i] = *da; continue; }
    if (*da == *db) out[i] = *da;
    else if (da->is_fixed() && da->value == 1) out[i] = *db;
    else if (db->is_fixed() && db->value == 1) out[i] = *da;
    else if (da->is_fixed() && db->is_fixed()) bad_input("cannot broadcast {} with {}", shape_str(a), shape_str(b));
    else if (da->is_fixed()) out[i] = *da;  // a symbol that must equal the fixed dim at run time
    else if (db->is_fixed()) out[i] = *db;
    else out[i] = da->is_symbol() ? *da : *db;
  }
  return out;
}

const OpSchema& op_schema(const std::string& op) {
  auto it = table().find(op);
  if (it == table().end()) unsupported("unknown op `{}`", op);
  return it->second;
}

bool is_known_op(const std::string& op) { return table().count(op) > 0; }

std::vector<std::string> all_op_names() {
  std::vector<std::string> names;
  for (const auto& [name, _] : table()) names.push_back(name);
  return names;
}

std::vector<Value> infer_outputs(const Graph& graph, const Node& node) {
  const OpSchema& s = op_schema(node.op);
  if (node.inputs.size() < s.min_inputs || node.inputs.size() > s.max_inputs)
    fail(ErrorKind::Internal, "{} ({}): {} inputs, expected {}..{}", node.name, node.op, node.inputs.size(), s.min_inputs,
         s.max_inputs);
  return s.infer(graph, node);
}

}  // namespace hfx::ir
