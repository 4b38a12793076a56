#include "backends/openvino/ov_lowering.h"

#include <openvino/op/ops.hpp>

#include <limits>

#include "core/error.h"

namespace hfx::openvino_backend {

namespace {

using ov::Output;
using ov::OutputVector;
namespace op = ov::op;

std::shared_ptr<op::v0::Constant> i64_const(const std::vector<int64_t>& v) {
  return op::v0::Constant::create(ov::element::i64, ov::Shape{v.size()}, v);
}
std::shared_ptr<op::v0::Constant> i64_scalar(int64_t v) {
  return op::v0::Constant::create(ov::element::i64, ov::Shape{}, {v});
}

// ONNX-style binary and unary ops: one OpenVINO op with numpy broadcasting.
template <class Op>
OvLowering binary() {
  return [](const LowerContext& c) -> OutputVector { return {std::make_shared<Op>(c.input(0), c.input(1))}; };
}
template <class Op>
OvLowering unary() {
  return [](const LowerContext& c) -> OutputVector { return {std::make_shared<Op>(c.input(0))}; };
}

// ONNX integer Div truncates toward zero; OpenVINO's default (python division) floors.
OutputVector lower_div(const LowerContext& c) {
  return {std::make_shared<op::v1::Divide>(c.input(0), c.input(1), /*pythondivision=*/false)};
}

OutputVector lower_reciprocal(const LowerContext& c) {
  const auto et = c.input(0).get_element_type();
  return {std::make_shared<op::v1::Divide>(op::v0::Constant::create(et, ov::Shape{}, {1}), c.input(0))};
}

// MatMul(a, Transpose(b[N, K], [1, 0])) becomes MatMul(a, b, transpose_b): OpenVINO's form for weights
// stored [N, K] (the precision pass's compressed and f16 weights), which the CPU plugin turns into a
// FullyConnected that decompresses the weights itself.
OutputVector lower_matmul(const LowerContext& c) {
  if (auto t = ov::as_type_ptr<op::v1::Transpose>(c.input(1).get_node_shared_ptr())) {
    auto perm = ov::as_type_ptr<op::v0::Constant>(t->get_input_node_shared_ptr(1));
    if (perm && t->get_input_partial_shape(0).rank() == 2 && perm->cast_vector<int64_t>() == std::vector<int64_t>{1, 0})
      return {std::make_shared<op::v0::MatMul>(c.input(0), t->input_value(0), false, true)};
  }
  return {std::make_shared<op::v0::MatMul>(c.input(0), c.input(1), false, false)};
}

// DequantizeLinear as OpenVINO's compressed-weight pattern (what NNCF writes): Convert(x) [-> Subtract(
// Convert(zero point))] -> Multiply(scale), in the scale's type. Scales broadcast numpy-style, so a blocked
// scale must have one block along `axis` (the precision pass's [N, K/block, block] groups and [N, K]
// rows); a 1-D per-axis scale is unsqueezed to broadcast.
OutputVector lower_dequantize_linear(const LowerContext& c) {
  const auto& x = c.graph.value(c.node.inputs.at(0));
  const auto& s = c.graph.value(c.node.inputs.at(1));
  const int64_t rank = int64_t(x.shape.size());
  int64_t axis = c.node.attr_int("axis", 1);
  if (axis < 0) axis += rank;
  const int64_t block = c.node.attr_int("block_size", 0);
  const auto et = ov_element_type(s.dtype);
  Output<ov::Node> scale = c.input(1), zp = c.has_input(2) ? c.input(2) : Output<ov::Node>();
  const bool per_tensor = s.shape.empty() || (s.shape.size() == 1 && s.shape[0].is_fixed() && s.shape[0].value == 1);
  if (block > 0) {
    if (int64_t(s.shape.size()) != rank || axis < 0 || axis >= rank || !s.shape[size_t(axis)].is_fixed() ||
        s.shape[size_t(axis)].value != 1)
      unsupported("blocked DequantizeLinear with several blocks along axis {} (scale {}): the OpenVINO lowering "
                  "takes one block per axis (groups as [.., blocks, block])", axis, shape_str(s.shape));
  } else if (!per_tensor && rank > 1) {  // per axis: [D] -> [D, 1, ...] broadcasting from `axis`
    std::vector<int64_t> axes;
    for (int64_t i = axis + 1; i < rank; ++i) axes.push_back(i - axis);
    if (!axes.empty()) {
      scale = std::make_shared<op::v0::Unsqueeze>(scale, i64_const(axes));
      if (zp.get_node()) zp = std::make_shared<op::v0::Unsqueeze>(zp, i64_const(axes));
    }
  }
  Output<ov::Node> y = std::make_shared<op::v0::Convert>(c.input(0), et);
  if (zp.get_node()) y = std::make_shared<op::v1::Subtract>(y, std::make_shared<op::v0::Convert>(zp, et));
  return {std::make_shared<op::v1::Multiply>(y, scale)};
}

OutputVector lower_gather(const LowerContext& c) {
  return {std::make_shared<op::v8::Gather>(c.input(0), c.input(1), i64_scalar(c.node.attr_int("axis", 0)))};
}

OutputVector lower_gather_elements(const LowerContext& c) {
  return {std::make_shared<op::v6::GatherElements>(c.input(0), c.input(1), c.node.attr_int("axis", 0))};
}

// ONNX Mod: fmod=0 takes the divisor's sign (OpenVINO's FloorMod), fmod=1 the dividend's (its Mod).
OutputVector lower_mod(const LowerContext& c) {
  if (c.node.attr_int("fmod", 0) != 0) return {std::make_shared<op::v1::Mod>(c.input(0), c.input(1))};
  return {std::make_shared<op::v1::FloorMod>(c.input(0), c.input(1))};
}

OutputVector lower_softmax(const LowerContext& c) {
  return {std::make_shared<op::v8::Softmax>(c.input(0), c.node.attr_int("axis", -1))};
}

// ONNX reductions: without an axes input they reduce over every axis (noop_with_empty_axes = 0).
template <class Op>
OvLowering reduce() {
  return [](const LowerContext& c) -> OutputVector {
    if (c.node.attr_int("noop_with_empty_axes", 0) != 0) unsupported("noop_with_empty_axes = 1 has no lowering");
    Output<ov::Node> axes;
    if (c.has_input(1)) {
      axes = c.input(1);
    } else if (const auto rank = c.input(0).get_partial_shape().rank(); rank.is_static()) {
      std::vector<int64_t> all(size_t(rank.get_length()));
      for (size_t i = 0; i < all.size(); ++i) all[i] = int64_t(i);
      axes = i64_const(all);
    } else {
      auto r = std::make_shared<op::v0::Squeeze>(std::make_shared<op::v3::ShapeOf>(
          std::make_shared<op::v3::ShapeOf>(c.input(0), ov::element::i64), ov::element::i64));
      axes = std::make_shared<op::v4::Range>(i64_scalar(0), r, i64_scalar(1), ov::element::i64);
    }
    return {std::make_shared<Op>(c.input(0), axes, c.node.attr_int("keepdims", 1) != 0)};
  };
}

OutputVector lower_transpose(const LowerContext& c) {
  std::vector<int64_t> perm;
  if (c.node.has_attr("perm")) {
    perm = c.node.attr_ints("perm");
  } else {  // ONNX default: reverse the axes
    const auto rank = c.input(0).get_partial_shape().rank();
    HFX_CHECK(rank.is_static(), "Transpose {} without perm on an input of unknown rank", c.node.name);
    for (int64_t i = rank.get_length() - 1; i >= 0; --i) perm.push_back(i);
  }
  return {std::make_shared<op::v1::Transpose>(c.input(0), i64_const(perm))};
}

// ONNX Reshape: 0 copies the input dim unless allowzero = 1 (OpenVINO's special_zero).
OutputVector lower_reshape(const LowerContext& c) {
  return {std::make_shared<op::v1::Reshape>(c.input(0), c.input(1), c.node.attr_int("allowzero", 0) == 0)};
}

OutputVector lower_unsqueeze(const LowerContext& c) {
  return {std::make_shared<op::v0::Unsqueeze>(c.input(0), c.input(1))};
}

OutputVector lower_squeeze(const LowerContext& c) {
  if (c.has_input(1)) return {std::make_shared<op::v0::Squeeze>(c.input(0), c.input(1))};
  return {std::make_shared<op::v0::Squeeze>(c.input(0))};
}

OutputVector lower_concat(const LowerContext& c) {
  OutputVector parts;
  for (size_t i = 0; i < c.inputs.size(); ++i) parts.push_back(c.input(i));
  return {std::make_shared<op::v0::Concat>(parts, c.node.attr_int("axis"))};
}

// ONNX Slice(data, starts, ends, axes?, steps?) = opset-8 Slice(data, start, stop, step, axes?): the
// same clamping of out-of-range bounds. Default steps are ones shaped like starts.
OutputVector lower_slice(const LowerContext& c) {
  Output<ov::Node> steps;
  if (c.has_input(4)) {
    steps = c.input(4);
  } else {
    const auto& ps = c.input(1).get_partial_shape();
    if (ps.is_static()) {
      steps = i64_const(std::vector<int64_t>(size_t(ps[0].get_length()), 1));
    } else {
      steps = std::make_shared<op::v3::Broadcast>(op::v0::Constant::create(c.input(1).get_element_type(), ov::Shape{}, {1}),
                                                  std::make_shared<op::v3::ShapeOf>(c.input(1), ov::element::i64));
    }
  }
  if (c.has_input(3)) return {std::make_shared<op::v8::Slice>(c.input(0), c.input(1), c.input(2), steps, c.input(3))};
  return {std::make_shared<op::v8::Slice>(c.input(0), c.input(1), c.input(2), steps)};
}

// ONNX Expand broadcasts both ways (the output is the broadcast of the input and the shape).
OutputVector lower_expand(const LowerContext& c) {
  return {std::make_shared<op::v3::Broadcast>(c.input(0), c.input(1), op::BroadcastType::BIDIRECTIONAL)};
}

OutputVector lower_where(const LowerContext& c) {
  return {std::make_shared<op::v1::Select>(c.input(0), c.input(1), c.input(2))};
}

OutputVector lower_cast(const LowerContext& c) {
  auto to = dtype_from_name(c.node.attr_str("to"));
  HFX_CHECK(to, "Cast node {}: `to` = {} is not an hfx dtype", c.node.name, c.node.attr_str("to"));
  return {std::make_shared<op::v0::Convert>(c.input(0), ov_element_type(*to))};
}

OutputVector lower_range(const LowerContext& c) {
  const DType out = c.graph.value(c.node.outputs.at(0)).dtype;
  return {std::make_shared<op::v4::Range>(c.input(0), c.input(1), c.input(2), ov_element_type(out))};
}

// ONNX Shape(x; start, end): ShapeOf, sliced when start/end are given (same clamping as Slice).
OutputVector lower_shape(const LowerContext& c) {
  Output<ov::Node> shape = std::make_shared<op::v3::ShapeOf>(c.input(0), ov::element::i64);
  if (!c.node.has_attr("start") && !c.node.has_attr("end")) return {shape};
  const int64_t start = c.node.attr_int("start", 0);
  const int64_t end = c.node.attr_int("end", std::numeric_limits<int64_t>::max());
  return {std::make_shared<op::v8::Slice>(shape, i64_const({start}), i64_const({end}), i64_const({1}))};
}

OutputVector lower_cumsum(const LowerContext& c) {
  return {std::make_shared<op::v0::CumSum>(c.input(0), c.input(1), c.node.attr_int("exclusive", 0) != 0,
                                           c.node.attr_int("reverse", 0) != 0)};
}

OutputVector lower_scatter_elements(const LowerContext& c) {
  const std::string reduction = c.node.attr_str("reduction", "none");
  if (reduction != "none")
    unsupported("reduction `{}` has no lowering", reduction);
  return {std::make_shared<op::v12::ScatterElementsUpdate>(c.input(0), c.input(1), c.input(2),
                                                           i64_scalar(c.node.attr_int("axis", 0)))};
}

OutputVector lower_identity(const LowerContext& c) { return {std::make_shared<op::v16::Identity>(c.input(0))}; }

// Attention(q[b,hq,s,d], k[b,hkv,t,d], v[b,hkv,t,d], bias[b,1,s,t]; scale) as opset-13
// ScaledDotProductAttention with the additive bias as its float mask. Grouped kv heads are repeated
// first (Unsqueeze -> Broadcast -> Reshape, the pattern OpenVINO's SDPA and paged-attention
// transformations recognise), since SDPA only broadcasts size-1 head axes.
OutputVector lower_attention(const LowerContext& c) {
  const auto& q = c.graph.value(c.node.inputs.at(0));
  const auto& k = c.graph.value(c.node.inputs.at(1));
  HFX_CHECK(q.shape.size() == 4 && k.shape.size() == 4 && q.shape[1].is_fixed() && k.shape[1].is_fixed() &&
                q.shape[3].is_fixed() && q.shape[1].value % k.shape[1].value == 0,
            "Attention {}: head counts and head size must be fixed, q heads a multiple of kv heads", c.node.name);
  const int64_t hq = q.shape[1].value, hkv = k.shape[1].value, hd = q.shape[3].value;
  auto repeat = [&](const Output<ov::Node>& x) -> Output<ov::Node> {
    if (hq == hkv) return x;
    auto u = std::make_shared<op::v0::Unsqueeze>(x, i64_const({2}));  // [b, hkv, 1, t, d]
    auto target = std::make_shared<op::v0::Concat>(
        OutputVector{std::make_shared<op::v8::Slice>(std::make_shared<op::v3::ShapeOf>(x, ov::element::i64), i64_const({0}),
                                                     i64_const({1}), i64_const({1})),
                     i64_const({hkv, hq / hkv}),
                     std::make_shared<op::v8::Slice>(std::make_shared<op::v3::ShapeOf>(x, ov::element::i64), i64_const({2}),
                                                     i64_const({4}), i64_const({1}))},
        0);
    auto e = std::make_shared<op::v3::Broadcast>(u, target);  // [b, hkv, rep, t, d]
    return std::make_shared<op::v1::Reshape>(e, i64_const({0, hq, -1, hd}), true);
  };
  const auto scale = op::v0::Constant::create(c.input(0).get_element_type(), ov::Shape{},
                                              {float(c.node.attr_float("scale"))});
  return {std::make_shared<op::v13::ScaledDotProductAttention>(c.input(0), repeat(c.input(1)), repeat(c.input(2)),
                                                               c.input(3), scale, false)};
}

}  // namespace

const Output<ov::Node>& LowerContext::input(size_t i) const {
  HFX_CHECK(has_input(i), "node {} ({}): input {} is absent", node.name, node.op, i);
  return inputs[i];
}

ov::element::Type ov_element_type(DType t) {
  switch (t) {
    case DType::F32: return ov::element::f32;
    case DType::F16: return ov::element::f16;
    case DType::BF16: return ov::element::bf16;
    case DType::F64: return ov::element::f64;
    case DType::I64: return ov::element::i64;
    case DType::I32: return ov::element::i32;
    case DType::I16: return ov::element::i16;
    case DType::I8: return ov::element::i8;
    case DType::U8: return ov::element::u8;
    case DType::Bool: return ov::element::boolean;
    case DType::I4: return ov::element::i4;  // packed as hfx's: element 2i in the low nibble
    case DType::U4: return ov::element::u4;
  }
  HFX_CHECK(false, "no OpenVINO type for dtype {}", int(t));
  return ov::element::dynamic;
}

const std::map<std::string, OvLowering>& ov_lowering_table() {
  static const std::map<std::string, OvLowering> table = {
      // Elementwise, numpy broadcasting.
      {"Add", binary<op::v1::Add>()},
      {"Sub", binary<op::v1::Subtract>()},
      {"Mul", binary<op::v1::Multiply>()},
      {"Div", lower_div},
      {"Pow", binary<op::v1::Power>()},
      {"Mod", lower_mod},
      {"Equal", binary<op::v1::Equal>()},
      {"Less", binary<op::v1::Less>()},
      {"LessOrEqual", binary<op::v1::LessEqual>()},
      {"Greater", binary<op::v1::Greater>()},
      {"GreaterOrEqual", binary<op::v1::GreaterEqual>()},
      {"And", binary<op::v1::LogicalAnd>()},
      {"Or", binary<op::v1::LogicalOr>()},
      {"Neg", unary<op::v0::Negative>()},
      {"Sqrt", unary<op::v0::Sqrt>()},
      {"Reciprocal", lower_reciprocal},
      {"Exp", unary<op::v0::Exp>()},
      {"Log", unary<op::v0::Log>()},
      {"Sin", unary<op::v0::Sin>()},
      {"Cos", unary<op::v0::Cos>()},
      {"Tanh", unary<op::v0::Tanh>()},
      {"Erf", unary<op::v0::Erf>()},
      {"Sigmoid", unary<op::v0::Sigmoid>()},
      {"Not", unary<op::v1::LogicalNot>()},
      {"Identity", lower_identity},
      // Linear algebra, indexing, reductions.
      {"MatMul", lower_matmul},
      {"DequantizeLinear", lower_dequantize_linear},
      {"Gather", lower_gather},
      {"GatherElements", lower_gather_elements},
      {"Softmax", lower_softmax},
      {"ReduceMean", reduce<op::v1::ReduceMean>()},
      {"ReduceMax", reduce<op::v1::ReduceMax>()},
      {"ReduceSum", reduce<op::v1::ReduceSum>()},
      // Shapes and data movement.
      {"Transpose", lower_transpose},
      {"Reshape", lower_reshape},
      {"Unsqueeze", lower_unsqueeze},
      {"Squeeze", lower_squeeze},
      {"Concat", lower_concat},
      {"Slice", lower_slice},
      {"Expand", lower_expand},
      {"Where", lower_where},
      {"Cast", lower_cast},
      {"Range", lower_range},
      {"Shape", lower_shape},
      {"CumSum", lower_cumsum},
      {"ScatterElements", lower_scatter_elements},
      // Composites kept by the openvino pipeline.
      {"Attention", lower_attention},
  };
  return table;
}

const OvLowering* find_ov_lowering(const std::string& ir_op) {
  const auto& table = ov_lowering_table();
  auto it = table.find(ir_op);
  return it == table.end() ? nullptr : &it->second;
}

}  // namespace hfx::openvino_backend
