#include "passes/pass.h"

#include "core/error.h"

namespace hfx::passes {

const std::vector<PassInfo>& all_passes() {
  static const std::vector<PassInfo> passes = {
      {"decompose-composites", Stage::BackendTranslation,
       "Replaces high-level ops (Linear, RMSNorm, Attention, ...) by their reference decompositions into "
       "standard primitives.",
       "The backend declares no fused form for these ops, so it gets the primitives every runtime has.",
       "Never for backends without fused kernels; per op, once the backend's capability record lists a "
       "fused lowering for it.",
       decompose_composites},
      {"fold-weight-transforms", Stage::BackendTranslation,
       "Folds Transpose and Cast applied to weights into the stored tensor, so a Linear becomes one MatMul "
       "against a [in, out] initializer.",
       "Transformers stores Linear weights as [out, in]; runtimes want the MatMul operand laid out [in, out] "
       "and should not transpose weights at load or run time.",
       "Never: it is a property of the checkpoint layout.",
       fold_weight_transforms},
  };
  return passes;
}

const PassInfo& find_pass(const std::string& name) {
  for (const auto& p : all_passes())
    if (p.name == name) return p;
  unsupported("unknown pass `{}`", name);
}

ir::Graph run_pipeline(const ir::Graph& graph, const std::vector<std::string>& names, std::vector<std::string>* applied) {
  ir::Graph g = graph;
  for (const auto& name : names) {
    const PassInfo& p = find_pass(name);
    g = with_context("pass " + name, [&] { return p.run(g); });
    g.validate();
    if (applied) applied->push_back(name);
  }
  return g;
}

}  // namespace hfx::passes
