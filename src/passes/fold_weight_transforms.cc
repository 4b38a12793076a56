#include "ir/rewrite.h"
#include "passes/pass.h"

namespace hfx::passes {

// Transpose(W) and Cast(W) of a checkpoint weight become a weight whose WeightRef carries the
// transform; the tensor is computed only when a backend writes it. A weight that loses its only
// reader this way keeps its name for the folded tensor; a weight read elsewhere too (tied
// embeddings: Gather and the lm_head MatMul) gets a second tensor named "<name>.T".
ir::Graph fold_weight_transforms(const ir::Graph& graph) {
  const auto uses = ir::use_counts(graph);
  ir::Rewriter r(graph);
  for (const auto& node : graph.nodes()) {
    const ir::WeightRef* w = node.inputs.empty() ? nullptr : graph.weight(node.inputs[0]);
    const bool foldable = w && !w->is_constant() && (node.op == "Transpose" || node.op == "Cast");
    if (!foldable) {
      r.copy(node, r.mapped(node));
      continue;
    }
    ir::WeightRef folded = node.op == "Transpose"
                               ? w->transposed(node.attr_ints("perm"))
                               : w->cast(*dtype_from_name(node.attr_str("to")));
    const std::string& base = graph.value(node.inputs[0]).name;
    const bool sole_use = uses[size_t(node.inputs[0])] == 1;
    std::string name = sole_use ? base : base + (node.op == "Transpose" ? ".T" : "." + node.attr_str("to"));
    ir::ValueId id = r.target().add_weight(name, folded);
    // Map the node's output straight to the weight: no Identity, the weight is the value.
    r.set_weight(node.outputs[0], id);
  }
  return r.finish();
}

}  // namespace hfx::passes
