// The ONNX backend's `ort` profile for a hybrid's state ops: the composites a recurrent layer is built
// from become ONNX Runtime's fused com.microsoft ops (its CPU kernels since 1.31; onnxruntime-genai's
// builder writes the same two for Qwen3.5):
//   CausalConv(x [b, C, s], past, w [C, K], bias?)       -> CausalConvWithState(x, Unsqueeze(w, 1), bias, past)
//   GatedDeltaRule(q, k [b, s, H, dk], v [b, s, H, dv], g, beta [b, s, H], initial?)
//       -> LinearAttention(q, k, v as [b, s, H d], initial, g, beta; update_rule gated_delta, H query and
//          H key/value heads (each key head already repeated over its value heads), scale 1 (q is
//          scaled), chunk_size), its output back to [b, s, H, dv]
//   SsdScan(x [b, s, H, P], dt, A, B, C [b, s, H, N], D?, initial?)  (Mamba-2's SSD; Mamba-1's scan)
//       -> LinearAttention(C, B, x dt, initial^T, dt A; update_rule gated, scale 1), + D x, state^T
// The state layouts are the contract's ([b, C, K - 1]; [b, H, dk, dv]; the SSD's [b, H, P, N], transposed
// around the op), so the ports do not change.
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
      auto s = b.scope(ir::scope_of(node.name, 0));
      ir::Node n = r.mapped(node);
      const ir::ValueId w = b.unsqueeze(n.inputs[2], {1});  // [C, 1, K]: ORT folds it at load
      r.replace(node, b.add("CausalConvWithState", {n.inputs[0], w, n.input(3), n.inputs[1]}));
      continue;
    }
    if (node.op == "GatedDeltaRule") {
      auto s = b.scope(ir::scope_of(node.name, 0));
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
    if (node.op == "SsdScan") {
      // h_t = exp(dt A) h_{t-1} + (x dt) ⊗ B_t, y_t = h_t · C_t + D x_t: LinearAttention's gated rule
      // with key B, value x dt, query C, decay dt A, scale 1; its state [N, P] is the SSD's [P, N]
      // transposed (a Mamba-1 scan is H = channels x state heads of 1 x 1).
      auto s = b.scope(ir::scope_of(node.name, 0));
      ir::Node n = r.mapped(node);
      const int64_t H = node.attr_int("heads"), P = node.attr_int("head_dim"), N = node.attr_int("state_size");
      const ir::ValueId x = n.inputs[0], dt = n.inputs[1];
      auto packed = [&](ir::ValueId v, int64_t d) { return b.reshape(v, {0, 0, H * d}); };
      const ir::ValueId past = n.input(6) == ir::kNone ? ir::kNone : b.transpose(n.inputs[6], {0, 1, 3, 2});
      ir::Attrs attrs = {{"update_rule", std::string("gated")}, {"q_num_heads", H}, {"kv_num_heads", H}, {"scale", 1.0}};
      if (node.attr_int("chunk") > 0) attrs["chunk_size"] = node.attr_int("chunk");
      auto outs = b.add("LinearAttention",
                        {packed(n.inputs[4], N), packed(n.inputs[3], N), packed(b.times(x, b.unsqueeze(dt, {3})), P), past,
                         b.times(dt, n.inputs[2]), ir::kNone},
                        attrs);
      ir::ValueId y = b.reshape(outs[0], {0, 0, H, P});
      if (n.input(5) != ir::kNone) y = b.plus(y, b.times(x, b.reshape(n.inputs[5], {H, 1})));
      r.replace(node, {y, b.transpose(outs[1], {0, 1, 3, 2})});
      continue;
    }
    r.copy(node, r.mapped(node));
  }
  return r.finish();
}

}  // namespace hfx::passes
