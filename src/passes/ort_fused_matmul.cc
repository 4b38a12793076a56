// The ONNX backend's `ort` profile, last: a Linear layer's product over an f32 weight reads the weight
// as the checkpoint stores it, [N, K], through com.microsoft::FusedMatMul(transB=1) (the IR target op
// FusedMatMul: x @ W^T), instead of a MatMul over its [K, N] transpose:
//   MatMul(x, W^T folded)                 -> FusedMatMul(x, W)             (fold-weight-transforms' weights)
//   MatMul(x, Transpose(T))               -> FusedMatMul(x, T)             (a tied lm_head's table)
//   MatMul(x, Cast(W^T | Transpose(T)))   -> FusedMatMul(x, Cast(W | T))   (bf16 weights widened at use)
// Why: ONNX Runtime's MLAS kernel reads either layout at the same speed once it has packed B, but a
// session that does not pack (the export's check, docs/verify.md) runs the transposed-B GEMM about 1.6x
// faster on a decode step, and the export writes the checkpoint's own layout: no transpose of any
// weight, only the cast. Measured on the Qwen3-0.6B shape, docs/benchmarks.md. Quantized products
// (MatMulNBits) and f16 products (ORT's CPU FusedMatMul is f32 only) keep their form; so does a
// weight the checkpoint already stores [K, N] (GPT-2's Conv1D), which MatMul reads in place.
#include <map>
#include <set>

#include "core/error.h"
#include "ir/rewrite.h"
#include "passes/pass.h"

namespace hfx::passes {

namespace {

using ir::kNone;
using ir::ValueId;

// What one product becomes: FusedMatMul over `weight` (a source value: the table a tied lm_head transposes),
// or over `folded` (a folded transpose's [N, K] twin), widened to f32 at use when `widened`.
struct Rewrite {
  ValueId weight = kNone;
  std::optional<ir::WeightRef> folded;
  std::string name;
  bool widened = false;
};

class FusedMatMul {
 public:
  explicit FusedMatMul(const ir::Graph& g) : src_(g), uses_(ir::use_counts(g)), r_(g) {}

  ir::Graph run() {
    std::map<const ir::Node*, Rewrite> rewrites;
    std::set<const ir::Node*> absorbed;  // the Casts a rewritten product widens its weight with itself
    for (const auto& node : src_.nodes())
      if (auto rw = rewrite_of(node)) {
        if (rw->widened) absorbed.insert(ir::producer(src_, node.inputs[1]));
        rewrites.emplace(&node, std::move(*rw));
      }
    for (const auto& node : src_.nodes()) {
      if (absorbed.count(&node)) continue;
      auto it = rewrites.find(&node);
      if (it == rewrites.end()) {
        r_.copy(node, r_.mapped(node));
        continue;
      }
      ir::Node n = node;  // not mapped(): the [K, N] operand must not be copied into the target
      n.op = "FusedMatMul";
      n.inputs = {r_.map(node.inputs[0]), operand(node, it->second)};
      r_.copy(node, n);
    }
    return r_.finish();
  }

 private:
  bool is_f32(ValueId v) const { return src_.value(v).dtype == DType::F32; }
  bool sole_use(ValueId v) const { return uses_[size_t(v)] == 1; }

  const ir::WeightRef* matrix(ValueId v) const {
    const ir::WeightRef* w = src_.weight(v);
    return ir::is_checkpoint_matrix(w) ? w : nullptr;
  }

  // How `b`, a [K, N] operand, is read as [N, K]; nullopt when it is not a transpose.
  std::optional<Rewrite> untransposed(ValueId b) const {
    if (const ir::WeightRef* w = matrix(b)) {
      // A folded transpose read by this product alone takes the weight's name in its stored layout.
      if (!sole_use(b) || !w->is_transpose_under_casts()) return std::nullopt;
      return Rewrite{kNone, w->transposed_under_casts(), src_.value(b).name};
    }
    const ir::Node* t = ir::producer(src_, b);
    if (t && t->op == "Transpose" && t->attr_ints("perm") == std::vector<int64_t>{1, 0} && matrix(t->inputs[0]))
      return Rewrite{t->inputs[0], std::nullopt, {}};  // the table, also read by its Gather
    return std::nullopt;
  }

  std::optional<Rewrite> rewrite_of(const ir::Node& node) const {
    if (node.op != "MatMul" || !is_f32(node.inputs[0]) || !is_f32(node.outputs[0])) return std::nullopt;
    const ValueId b = node.inputs[1];
    if (auto rw = untransposed(b)) return rw;
    const ir::Node* cast = ir::producer(src_, b);
    if (!cast || cast->op != "Cast" || !sole_use(b)) return std::nullopt;
    auto rw = untransposed(cast->inputs[0]);
    if (rw) rw->widened = true;
    return rw;
  }

  // The rewritten product's [N, K] operand in the target graph.
  ValueId operand(const ir::Node& matmul, const Rewrite& rw) {
    const ValueId w = rw.folded ? r_.target().add_weight(rw.name, *rw.folded) : r_.map(rw.weight);
    if (!rw.widened) return w;
    auto scope = r_.builder().scope(matmul.name.substr(matmul.name.front() == '/' ? 1 : 0));
    return r_.builder().cast(w, DType::F32);
  }

  const ir::Graph& src_;
  std::vector<int> uses_;
  ir::Rewriter r_;
};

}  // namespace

ir::Graph ort_fused_matmul(const ir::Graph& graph) { return FusedMatMul(graph).run(); }

}  // namespace hfx::passes
