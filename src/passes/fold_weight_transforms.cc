#include "ir/rewrite.h"
#include "passes/pass.h"

namespace hfx::passes {

// Transpose(W) and Cast(W) of a checkpoint weight become a weight whose WeightRef carries the
// transform; the tensor is computed only when a backend writes it. A weight that loses its only
// reader this way keeps its name for the folded tensor. A weight also read as it is (tied embeddings:
// the Gather table and the lm_head MatMul's Transpose) keeps its Transpose in the graph: the file
// holds the table once (a 600 MB copy less for Qwen3-0.6B in f32), every runtime folds the constant
// Transpose when it loads the graph, and the checkpoint tensor is read once. A Cast read elsewhere too
// gets a second tensor named "<name>.<dtype>".
ir::Graph fold_weight_transforms(const ir::Graph& graph) {
  const auto uses = ir::use_counts(graph);
  ir::Rewriter r(graph);
  for (const auto& node : graph.nodes()) {
    const ir::WeightRef* w = node.inputs.empty() ? nullptr : graph.weight(node.inputs[0]);
    const bool shared = w && uses[size_t(node.inputs[0])] > 1;
    const bool foldable = w && !w->is_constant() && (node.op == "Cast" || (node.op == "Transpose" && !shared));
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
    r.remap(node.outputs[0], id);
  }
  return r.finish();
}

}  // namespace hfx::passes
