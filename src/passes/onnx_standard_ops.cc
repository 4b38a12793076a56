// The ONNX backend's standard fused ops: rewrites the composites that an ONNX standard op computes
// exactly into that op, per node. At every opset hfx writes (ops.h "Target ops of earlier opsets"):
//   LayerNorm(x, w[n], b[n]?)                         -> LayerNormalization, axis -1, stash_type 1 (opset 17)
//   Gelu(x; approximate none|tanh)                     -> Gelu (opset 20)
// so ONNX Runtime runs one kernel for each where the decomposition was 9 and 5 primitives that its
// own fusions do not recognise (they expect Pow / Div where hfx's reference order has Mul / Reciprocal).
// At `--onnx-opset 23` also (ops.h "Target ops of ONNX opset 23"):
//   RMSNorm(x, w[n])                                  -> RMSNormalization, axis -1, stash_type 1 (f32)
//   RotaryEmbedding(x, RopeCosSin cos, sin)            -> RotaryEmbedding(x, cos[..., :r/2], sin[..., :r/2]),
//       no position_ids (the tables stay computed in-graph, so every rope scaling keeps working),
//       rotary_embedding_dim = r when the rotary is partial
//   (Softcap)Attention(q, k, v, causal or padding bias) -> Attention(q, k, v, bias / 2; scale, softcap,
//       q_num_heads, kv_num_heads); the cache Concat / ScatterElements stays outside, so K/V are the full
//       cache and the growing and static cache contracts are unchanged; an encoder's padding bias
//       [b, 1, 1, t] is expanded over the queries (ORT's Attention does not broadcast it)
// Why bias / 2: the bias is 0 or the lowest f32 (Transformers' eager mask). ONNX Runtime 1.31's CPU
// Attention returns 0 for a row whose every key carries the lowest f32, where eager softmax (and the
// ONNX spec) gives uniform weights; a left-padded batch has such rows. Half the lowest f32 keeps every
// masked score at one value far below any real score, so the softmax is the same as eager's.
// Anything else stays a composite and is decomposed as before; each reason is returned as a note.
#include <fmt/format.h>

#include <map>
#include <set>

#include "core/error.h"
#include "ir/ops.h"
#include "ir/rewrite.h"
#include "passes/pass.h"

namespace hfx::passes {

namespace {

using ir::kNone;
using ir::ValueId;

using ir::producer;
using ir::scope_of;


// Why LayerNormalization cannot compute this LayerNorm (empty: it can).
std::string layer_norm_blocker(const ir::Graph& g, const ir::Node& n) {
  for (size_t i = 1; i < n.inputs.size(); ++i)
    if (n.inputs[i] != kNone && g.value(n.inputs[i]).shape.size() != 1) return "LayerNorm with a weight or bias of rank other than 1";
  for (auto in : n.inputs)
    if (in != kNone && g.value(in).dtype != DType::F32) return "LayerNorm on non-f32 values";
  return {};
}

// Why RMSNormalization cannot compute this RMSNorm (empty: it can).
std::string rms_norm_blocker(const ir::Graph& g, const ir::Node& n) {
  if (g.value(n.inputs[1]).shape.size() != 1) return "RMSNorm with a weight of rank other than 1";
  if (g.value(n.inputs[0]).dtype != DType::F32) return "RMSNorm on a non-f32 input";
  return {};
}

// Why the ONNX RotaryEmbedding cannot compute this rotary (empty: it can).
std::string rotary_blocker(const ir::Graph& g, const ir::Node& n) {
  const ir::Node* tables = producer(g, n.inputs[1]);
  if (!tables || tables->op != "RopeCosSin" || n.inputs[1] != tables->outputs[0] || n.inputs[2] != tables->outputs[1])
    return "rotary tables that are not a RopeCosSin's (their halves are not known to repeat)";
  const Shape& xs = g.value(n.inputs[0]).shape;
  const Dim r = g.value(n.inputs[1]).shape.back();
  if (xs.size() != 4 || !xs[3].is_fixed() || !r.is_fixed() || r.value % 2 != 0 || r.value > xs[3].value)
    return "rotary on a non-[b, h, s, d] input or with a rotary width that is not fixed and even";
  return {};
}

// Why the ONNX Attention cannot compute this attention (empty: it can).
std::string attention_blocker(const ir::Graph& g, const ir::Node& n) {
  const ir::Node* mask = producer(g, n.inputs[3]);
  if (!mask || (mask->op != "AttentionBias" && mask->op != "PaddingBias"))
    return "attention whose bias is not hfx's causal or padding mask (0 / lowest f32)";
  const Shape& qs = g.value(n.inputs[0]).shape;
  const Shape& ks = g.value(n.inputs[1]).shape;
  if (qs.size() != 4 || ks.size() != 4 || !qs[1].is_fixed() || !ks[1].is_fixed() || ks[1].value == 0 ||
      qs[1].value % ks[1].value != 0)
    return "attention whose head counts are not fixed multiples";
  return {};
}

}  // namespace

ir::Graph onnx_standard_ops(const ir::Graph& graph, int64_t opset, std::vector<std::string>* notes) {
  ir::Rewriter r(graph);
  ir::Builder& b = r.builder();
  std::map<ValueId, ValueId> half_table;   // RopeCosSin output (source) -> its first half (target)
  std::map<ValueId, ValueId> halved_mask;  // bias (source) -> bias / 2 (target)
  std::set<std::string> kept;              // the reasons composites stayed decomposed, once each
  for (const auto& node : graph.nodes()) {
    std::string why;
    if (node.op == "LayerNorm" && opset >= 17 && layer_norm_blocker(graph, node).empty()) {
      auto s = b.scope(scope_of(node.name));
      ir::Node n = r.mapped(node);
      std::vector<ValueId> inputs = {n.inputs[0], n.inputs[1]};
      if (n.input(2) != kNone) inputs.push_back(n.inputs[2]);
      r.replace(node, {b.add1("LayerNormalization", inputs,
                              {{"epsilon", node.attr_float("epsilon")}, {"axis", int64_t(-1)}, {"stash_type", int64_t(1)}})});
      continue;
    }
    if (node.op == "Gelu" && opset >= 20 && graph.value(node.inputs[0]).dtype == DType::F32) {
      auto s = b.scope(scope_of(node.name));
      r.replace(node, {b.add1("OnnxGelu", {r.map(node.inputs[0])}, {{"approximate", node.attr_str("approximate", "none")}})});
      continue;
    }
    if (opset < 23) {  // the rest are opset-23 ops
      r.copy(node, r.mapped(node));
      continue;
    }
    if (node.op == "RMSNorm" && (why = rms_norm_blocker(graph, node)).empty()) {
      auto s = b.scope(scope_of(node.name));
      ir::Node n = r.mapped(node);
      r.replace(node, {b.add1("RMSNormalization", {n.inputs[0], n.inputs[1]},
                              {{"epsilon", node.attr_float("epsilon")}, {"axis", int64_t(-1)}, {"stash_type", int64_t(1)}})});
      continue;
    }
    if (node.op == "RotaryEmbedding" && (why = rotary_blocker(graph, node)).empty()) {
      const int64_t d = graph.value(node.inputs[0]).shape[3].value, rot = graph.value(node.inputs[1]).shape.back().value;
      auto half = [&](ValueId table) {
        if (!half_table.count(table)) {
          auto s = b.scope(scope_of(graph.nodes()[size_t(graph.value(table).producer)].name));
          half_table[table] = b.slice(r.map(table), 0, rot / 2, -1);
        }
        return half_table[table];
      };
      ValueId cos = half(node.inputs[1]), sin = half(node.inputs[2]);
      auto s = b.scope(scope_of(node.name));
      ir::Attrs attrs;
      if (rot != d) attrs["rotary_embedding_dim"] = rot;
      if (node.attr_int("interleaved", 0)) attrs["interleaved"] = int64_t(1);
      r.replace(node, {b.add1("OnnxRotaryEmbedding", {r.map(node.inputs[0]), cos, sin}, attrs)});
      continue;
    }
    if ((node.op == "Attention" || node.op == "SoftcapAttention") && (why = attention_blocker(graph, node)).empty()) {
      if (!halved_mask.count(node.inputs[3])) {
        auto s = b.scope(scope_of(producer(graph, node.inputs[3])->name));
        ValueId half = b.times(r.map(node.inputs[3]), b.f32(0.5f));
        // ORT's Attention wants the mask's query axis at full length: a padding bias [b, 1, 1, t] is
        // expanded to [b, 1, s, t].
        if (producer(graph, node.inputs[3])->op == "PaddingBias")
          half = b.add1("Expand", {half, b.concat({b.i64s({1, 1}), b.shape_of(r.map(node.inputs[0]), 2, 3), b.i64s({1})}, 0)});
        halved_mask[node.inputs[3]] = half;
      }
      auto s = b.scope(scope_of(node.name));
      ir::Node n = r.mapped(node);
      ir::Attrs attrs = {{"scale", node.attr_float("scale")},
                         {"q_num_heads", graph.value(node.inputs[0]).shape[1].value},
                         {"kv_num_heads", graph.value(node.inputs[1]).shape[1].value}};
      if (node.op == "SoftcapAttention") attrs["softcap"] = node.attr_float("softcap");
      r.replace(node, {b.add1("OnnxAttention", {n.inputs[0], n.inputs[1], n.inputs[2], halved_mask[node.inputs[3]]}, attrs)});
      continue;
    }
    if (!why.empty()) kept.insert(why);
    r.copy(node, r.mapped(node));
  }
  if (notes)
    for (const auto& why : kept) notes->push_back(why);
  return r.finish();
}

}  // namespace hfx::passes
