#include "core/error.h"
#include "ir/ops.h"
#include "ir/rewrite.h"
#include "passes/pass.h"

namespace hfx::passes {

ir::Graph decompose_composites(const ir::Graph& graph) { return decompose_composites_except(graph, {}); }

ir::Graph decompose_composites_except(const ir::Graph& graph, const std::set<std::string>& keep) {
  ir::Rewriter r(graph);
  for (const auto& node : graph.nodes()) {
    ir::Node n = r.mapped(node);
    const ir::OpSchema& schema = ir::op_schema(n.op);
    if (!schema.composite || schema.target_op || keep.count(n.op)) {  // target ops are the backend's own (ops.h)
      r.copy(node, n);
      continue;
    }
    // Primitives are named under the composite's own name: "/model/layers.0/attn/Attention/MatMul".
    auto scope = r.builder().scope(n.name.substr(n.name.front() == '/' ? 1 : 0));
    auto outs = with_context("decomposing " + n.name, [&] { return schema.decompose(r.builder(), n); });
    r.replace(node, outs);
  }
  return r.finish();
}

}  // namespace hfx::passes
