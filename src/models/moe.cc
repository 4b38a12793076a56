#include "models/moe.h"

#include <fmt/format.h>

#include <algorithm>

#include "models/weights.h"

namespace hfx::models {

std::vector<bool> qwen_sparse_moe_layers(const io::JsonFile& f, int64_t num_layers) {
  const int64_t step = io::optional_int(f, f.json, "decoder_sparse_step", 1).value_or(1);
  const auto dense = io::optional_int_list(f, f.json, "mlp_only_layers", 0).value_or(std::vector<int64_t>{});
  std::vector<bool> sparse(size_t(num_layers), false);
  for (int64_t i = 0; i < num_layers; ++i)
    sparse[size_t(i)] = (i + 1) % step == 0 && std::find(dense.begin(), dense.end(), i) == dense.end();
  return sparse;
}

ir::ValueId sparse_moe(ir::Builder& b, const io::Checkpoint& ckpt, ir::ValueId x, const std::string& prefix,
                       const MoeSpec& m) {
  const std::string why = fmt::format("hidden_size={}, experts={}, expert intermediate size={}", m.hidden, m.num_experts,
                                      m.intermediate);
  // Router: softmax over the experts' logits (in f32), then the top_k probabilities. torch.topk is
  // found by k rounds of "the largest remaining": probabilities are >= 0, so a picked one is set to -1.
  ir::ValueId probs;
  {
    auto s = b.scope("router");
    ir::ValueId logits = linear(b, ckpt, x, prefix + m.router, m.hidden, m.num_experts, false, why);
    probs = b.add1("Softmax", {logits}, {{"axis", int64_t(-1)}});
  }
  ir::ValueId weights;
  {
    auto s = b.scope("top_k");
    ir::ValueId remaining = probs, picked = ir::kNone;
    for (int64_t i = 0; i < m.top_k; ++i) {
      ir::ValueId largest = b.add1("ReduceMax", {remaining, b.i64s({-1})}, {{"keepdims", int64_t(1)}});
      ir::ValueId hit = b.add1("Equal", {remaining, largest});
      picked = picked == ir::kNone ? hit : b.add1("Or", {picked, hit});
      remaining = b.add1("Where", {hit, b.f32(-1.0f), remaining});
    }
    weights = b.add1("Where", {picked, probs, b.f32(0.0f)});  // [b, s, E]
    if (m.normalize_top_k)
      weights = b.divide(weights, b.add1("ReduceSum", {weights, b.i64s({-1})}, {{"keepdims", int64_t(1)}}));
  }
  ir::ValueId out = ir::kNone;
  for (int64_t e = 0; e < m.num_experts; ++e) {
    auto s = b.scope(fmt::format("experts.{}", e));
    ir::ValueId y = gated_mlp(b, ckpt, x, fmt::format("{}experts.{}.", prefix, e), m.expert, m.hidden, m.intermediate,
                              false, m.act, why);
    y = b.times(y, b.slice(weights, e, e + 1, -1));
    out = out == ir::kNone ? y : b.plus(out, y);
  }
  if (m.shared_intermediate > 0) {
    auto s = b.scope("shared_expert");
    ir::ValueId y = gated_mlp(b, ckpt, x, prefix + "shared_expert.", m.expert, m.hidden, m.shared_intermediate, false,
                              m.act, why);
    ir::ValueId share = b.add1("Sigmoid", {linear(b, ckpt, x, prefix + "shared_expert_gate", m.hidden, 1, false, why)});
    out = b.plus(out, b.times(share, y));
  }
  return out;
}

}  // namespace hfx::models
