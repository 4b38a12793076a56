// The ONNX backend's `--onnx-recurrence scan` (portable profile): the recurrences a state-space or
// linear-attention layer is built from become RecurrenceScan (ir/ops.h), which the writer writes as an
// ONNX Scan over time whose body is one recurrent step (backends/onnx/onnx_scan.h):
//   GatedDeltaRule(q, k, v, g, beta, initial?)   -> RecurrenceScan(initial, q, k, v, g, beta; gated_delta)
//   SsdScan(x, dt, A, B, C, D?, initial?)         -> RecurrenceScan(initial, x dt, dt A, B, C; ssd) + D x
// An absent initial state (a prefill graph's) is zeros: a Scan carries a state from its first step.
// CausalConv keeps its loop-free decomposition: it reads a window of kernel - 1 positions, not a state
// carried over the whole sequence.
#include "core/error.h"
#include "ir/ops.h"
#include "ir/rewrite.h"
#include "passes/pass.h"

namespace hfx::passes {

namespace {

// The carried state, or zeros [b, dims...] (b from `like`'s first axis) when the graph has none.
ir::ValueId state_or_zeros(ir::Builder& b, ir::ValueId initial, ir::ValueId like, const std::vector<int64_t>& dims) {
  if (initial != ir::kNone) return initial;
  return b.add1("Expand", {b.f32(0.0f), b.concat({b.shape_of(like, 0, 1), b.i64s(dims)}, 0)});
}

}  // namespace

bool has_recurrences(const ir::Graph& graph) {
  for (const auto& node : graph.nodes())
    if (node.op == "GatedDeltaRule" || node.op == "SsdScan") return true;
  return false;
}

ir::Graph scan_recurrences(const ir::Graph& graph) {
  ir::Rewriter r(graph);
  ir::Builder& b = r.builder();
  for (const auto& node : graph.nodes()) {
    if (node.op == "GatedDeltaRule") {
      auto s = b.scope(ir::scope_of(node.name, 0));
      ir::Node n = r.mapped(node);
      const int64_t H = node.attr_int("heads"), K = node.attr_int("key_dim"), V = node.attr_int("value_dim");
      const ir::ValueId initial = state_or_zeros(b, n.input(5), n.inputs[0], {H, K, V});
      auto outs = b.add("RecurrenceScan", {initial, n.inputs[0], n.inputs[1], n.inputs[2], n.inputs[3], n.inputs[4]},
                        {{"rule", std::string("gated_delta")}, {"heads", H}, {"key_dim", K}, {"value_dim", V}});
      r.replace(node, {outs[1], outs[0]});
      continue;
    }
    if (node.op == "SsdScan") {
      auto s = b.scope(ir::scope_of(node.name, 0));
      ir::Node n = r.mapped(node);
      const int64_t H = node.attr_int("heads"), P = node.attr_int("head_dim"), N = node.attr_int("state_size");
      const ir::ValueId x = n.inputs[0], dt = n.inputs[1];
      const ir::ValueId initial = state_or_zeros(b, n.input(6), x, {H, P, N});
      auto outs = b.add("RecurrenceScan",
                        {initial, b.times(x, b.unsqueeze(dt, {3})), b.times(dt, n.inputs[2]), n.inputs[3], n.inputs[4]},
                        {{"rule", std::string("ssd")}, {"heads", H}, {"head_dim", P}, {"state_size", N}});
      ir::ValueId y = outs[1];
      if (n.input(5) != ir::kNone) y = b.plus(y, b.times(x, b.reshape(n.inputs[5], {H, 1})));
      r.replace(node, {y, outs[0]});
      continue;
    }
    r.copy(node, r.mapped(node));
  }
  return r.finish();
}

}  // namespace hfx::passes
