#include "passes/precision.h"

#include <fmt/format.h>

#include "core/error.h"
#include "ir/rewrite.h"

namespace hfx::passes {

namespace {

bool is_checkpoint_matrix(const ir::WeightRef* w) {
  return w && !w->is_constant() && w->shape().size() == 2 && is_float(w->dtype());
}

class Precision {
 public:
  Precision(const ir::Graph& g, const quant::PrecisionSpec& spec) : src_(g), spec_(spec), r_(g) {}

  ir::Graph run() {
    for (const auto& node : src_.nodes()) {
      ir::Node n = r_.mapped(node);
      std::optional<ir::ValueId> y;
      with_context("apply-precision: " + node.name, [&] {
        if (node.op == "Linear" && node.inputs.size() >= 2) {
          if (const auto* w = src_.weight(node.inputs[1]); is_checkpoint_matrix(w)) {
            y = linear(node, n.inputs[0], w->transposed({1, 0}), src_.value(node.inputs[1]).name + ".T");
            if (y && n.input(2) != ir::kNone) y = r_.builder().plus(*y, n.inputs[2]);
          }
        } else if (node.op == "MatMul") {
          if (const auto* w = src_.weight(node.inputs[1]); is_checkpoint_matrix(w))
            y = linear(node, n.inputs[0], *w, src_.value(node.inputs[1]).name);
        } else if ((node.op == "Embedding" || (node.op == "Gather" && node.attr_int("axis", 0) == 0)) &&
                   spec_.dtype != DType::F32) {
          if (const auto* w = src_.weight(node.inputs[0]); is_checkpoint_matrix(w)) {
            auto& b = r_.builder();
            auto scope = b.scope(node.name.substr(node.name.front() == '/' ? 1 : 0));
            ir::ValueId table = b.weight(unique(src_.value(node.inputs[0]).name + "." + std::string(dtype_name(spec_.dtype))),
                                         w->cast(spec_.dtype));
            y = b.cast(b.add1("Gather", {table, n.inputs[1]}, {{"axis", int64_t(0)}}), DType::F32);
          }
        }
      });
      if (y)
        r_.replace(node, {*y});
      else
        r_.copy(node, n);
    }
    return r_.finish();
  }

 private:
  // x[..., K] @ w[K, N] in the spec's precision; nullopt when nothing changes (f32, not quantized).
  std::optional<ir::ValueId> linear(const ir::Node& node, ir::ValueId x, const ir::WeightRef& w, const std::string& base) {
    const bool lm_head = node.name.find("/lm_head/") != std::string::npos;
    const bool quantize = spec_.quant.enabled() && (!lm_head || spec_.quantize_lm_head);
    const DType dt = spec_.dtype;
    if (!quantize && dt == DType::F32) return std::nullopt;
    auto& b = r_.builder();
    auto scope = b.scope(node.name.substr(node.name.front() == '/' ? 1 : 0));
    const int64_t K = w.shape()[0], N = w.shape()[1];
    // Linear layers compute in f16 when the dtype is f16; bf16 and f32 compute in f32.
    const DType compute = dt == DType::F16 ? DType::F16 : DType::F32;
    const ir::WeightRef stored = w.cast(dt);
    ir::ValueId xin = compute == DType::F32 ? x : b.cast(x, compute);
    ir::ValueId y;
    if (quantize) {
      const auto& q = spec_.quant;
      // A block never spans more than K rounded up to a block size MatMulNBits runs (16 .. 256): int8's
      // blocks of 128 over K = 64 would be half padding.
      int64_t block = q.block;
      while (block > 16 && block / 2 >= K) block /= 2;
      auto parts = stored.quantized({q.bits, block, q.symmetric, compute});
      const std::string tag = fmt::format("{}.q{}", base, q.bits);
      std::vector<ir::ValueId> ins = {xin, b.weight(unique(tag), parts[0]), b.weight(unique(tag + ".scales"), parts[1])};
      if (parts.size() > 2) ins.push_back(b.weight(unique(tag + ".zero_points"), parts[2]));
      if (q.block == 0) {
        ir::ValueId deq = b.add1("DequantizeLinear", std::vector<ir::ValueId>(ins.begin() + 1, ins.end()), {{"axis", int64_t(1)}});
        y = b.matmul(xin, deq);
      } else {
        ir::Attrs attrs{{"K", K}, {"N", N}, {"bits", int64_t(q.bits)}, {"block_size", block}};
        if (q.accuracy_level) attrs["accuracy_level"] = int64_t(q.accuracy_level);
        y = b.add1("MatMulNBits", ins, attrs);
      }
    } else if (dt == DType::F16) {
      y = b.matmul(xin, b.weight(unique(base + ".f16"), stored));
    } else {  // bf16: stored in bf16, cast to f32 at use
      y = b.matmul(xin, b.cast(b.weight(unique(base + ".bf16"), stored), DType::F32));
    }
    return compute == DType::F32 ? y : b.cast(y, DType::F32);
  }

  // A weight name used by neither graph.
  std::string unique(const std::string& want) {
    std::string name = want;
    for (int i = 2; src_.find(name) || r_.target().find(name); ++i) name = fmt::format("{}.{}", want, i);
    return name;
  }

  const ir::Graph& src_;
  const quant::PrecisionSpec& spec_;
  ir::Rewriter r_;
};

}  // namespace

ir::Graph apply_precision(const ir::Graph& graph, const quant::PrecisionSpec& spec) {
  if (spec.is_default()) return graph;
  return Precision(graph, spec).run();
}

}  // namespace hfx::passes
