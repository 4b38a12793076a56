// The ONNX backend's `ort` profile for a hybrid's state ops: the composites a recurrent layer is built
// from become ONNX Runtime's fused com.microsoft ops (its CPU kernels since 1.31; onnxruntime-genai's
// builder writes the same two for Qwen3.5):
//   CausalConv(x [b, C, s], past, w [C, K], bias?)       -> CausalConvWithState(x, Unsqueeze(w, 1), bias, past)
//   GatedDeltaRule(q, k [b, s, H, dk], v [b, s, H, dv], g, beta [b, s, H], initial?)
//       -> LinearAttention(q, k, v as [b, s, H d], initial, g, beta; update_rule gated_delta, H query and
//          H key/value heads (each key head already repeated over its value heads), scale 1 (q is
//          scaled), chunk_size), its output back to [b, s, H, dv]
// The state layouts are the contract's ([b, C, K - 1]; [b, H, dk, dv]), so the ports do not change.
// Attention stays as the portable profile writes it (GroupQueryAttention's left-padding roll would
// reorder the positions these states read; onnx_format.cc).
#include "core/error.h"
#include "ir/ops.h"
#include "ir/rewrite.h"
#include "passes/pass.h"

namespace hfx::passes {

ir::Graph ort_state_ops(const ir::Graph& graph) {
  ir::Rewriter r(graph);
  ir::Builder& b = r.builder();
  for (const auto& node : graph.nodes()) {
    if (node.op == "CausalConv") {
      auto s = b.scope(ir::scope_of(node.name));
      ir::Node n = r.mapped(node);
      const ir::ValueId w = b.unsqueeze(n.inputs[2], {1});  // [C, 1, K]: ORT folds it at load
      r.replace(node, b.add("CausalConvWithState", {n.inputs[0], w, n.input(3), n.inputs[1]}));
      continue;
    }
    if (node.op == "GatedDeltaRule") {
      auto s = b.scope(ir::scope_of(node.name));
      ir::Node n = r.mapped(node);
      const int64_t H = node.attr_int("heads"), dk = node.attr_int("key_dim"), dv = node.attr_int("value_dim");
      auto packed = [&](ir::ValueId x, int64_t d) { return b.reshape(x, {0, 0, H * d}); };
      auto outs = b.add("LinearAttention",
                        {packed(n.inputs[0], dk), packed(n.inputs[1], dk), packed(n.inputs[2], dv), n.input(5), n.inputs[3],
                         n.inputs[4]},
                        {{"update_rule", std::string("gated_delta")}, {"q_num_heads", H}, {"kv_num_heads", H},
                         {"scale", 1.0}, {"chunk_size", node.attr_int("chunk")}});
      r.replace(node, {b.reshape(outs[0], {0, 0, H, dv}), outs[1]});
      continue;
    }
    r.copy(node, r.mapped(node));
  }
  return r.finish();
}

}  // namespace hfx::passes
