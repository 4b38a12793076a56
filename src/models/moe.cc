#include "models/moe.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

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

namespace {

// Expert e's gated MLP, down(act(gate(x)) * up(x)), from either layout.
ir::ValueId expert_mlp(ir::Builder& b, const io::Checkpoint& ckpt, ir::ValueId x, const std::string& prefix,
                       const MoeSpec& m, int64_t e, const std::string& why) {
  if (m.layout == ExpertLayout::PerExpert)
    return gated_mlp(b, ckpt, x, fmt::format("{}experts.{}.", prefix, e), m.expert, m.hidden, m.intermediate, false,
                     m.act, why);
  const int64_t E = m.num_experts, H = m.hidden, I = m.intermediate;
  const std::string gate_up = prefix + m.stacked_gate_up, down = prefix + m.stacked_down;
  // The fused projection's output chunked in two: the gate is its first I rows, up the next I.
  ir::ValueId gate = b.add1("Linear", {x, bind_expert_rows(b, ckpt, gate_up, {E, 2 * I, H}, e, 0, I, why)});
  ir::ValueId up = b.add1("Linear", {x, bind_expert_rows(b, ckpt, gate_up, {E, 2 * I, H}, e, I, 2 * I, why)});
  return b.add1("Linear", {gated_activation(b, gate, up, m.act), bind_expert_rows(b, ckpt, down, {E, H, I}, e, 0, H, why)});
}

// Top-k by k rounds of "the largest remaining" (torch.topk's picks): a picked entry becomes `below`, a
// value no entry has. Returns the picked mask.
ir::ValueId top_k_mask(ir::Builder& b, ir::ValueId scores, int64_t k, float below) {
  ir::ValueId remaining = scores, picked = ir::kNone;
  for (int64_t i = 0; i < k; ++i) {
    ir::ValueId largest = b.add1("ReduceMax", {remaining, b.i64s({-1})}, {{"keepdims", int64_t(1)}});
    ir::ValueId hit = b.add1("Equal", {remaining, largest});
    picked = picked == ir::kNone ? hit : b.add1("Or", {picked, hit});
    remaining = b.add1("Where", {hit, b.f32(below), remaining});
  }
  return picked;
}

}  // namespace

ir::ValueId sparse_moe(ir::Builder& b, const io::Checkpoint& ckpt, ir::ValueId x, const std::string& prefix,
                       const MoeSpec& m) {
  const std::string why = fmt::format("hidden_size={}, experts={}, expert intermediate size={}", m.hidden, m.num_experts,
                                      m.intermediate);
  // Router: its logits [b, s, E] and (Mixtral, Qwen) their softmax, in f32.
  ir::ValueId logits, probs = ir::kNone;
  {
    auto s = b.scope("router");
    logits = linear(b, ckpt, x, prefix + m.router, m.hidden, m.num_experts, false, why);
    if (m.scores == RouterScores::SoftmaxThenTopK) probs = b.add1("Softmax", {logits}, {{"axis", int64_t(-1)}});
  }
  // Each expert's routing weight, 0 where the router did not pick it.
  ir::ValueId weights;
  {
    auto s = b.scope("top_k");
    if (m.scores == RouterScores::SoftmaxThenTopK) {
      // Probabilities are >= 0, so a picked one is set to -1.
      weights = b.add1("Where", {top_k_mask(b, probs, m.top_k, -1.0f), probs, b.f32(0.0f)});  // [b, s, E]
      if (m.normalize_top_k)
        weights = b.divide(weights, b.add1("ReduceSum", {weights, b.i64s({-1})}, {{"keepdims", int64_t(1)}}));
    } else {
      // Softmax over the picked logits alone: the others become the lowest float, whose exp is 0.
      constexpr float kLowest = std::numeric_limits<float>::lowest();
      ir::ValueId picked = top_k_mask(b, logits, m.top_k, kLowest);
      weights = b.add1("Softmax", {b.add1("Where", {picked, logits, b.f32(kLowest)})}, {{"axis", int64_t(-1)}});
    }
  }
  ir::ValueId out = ir::kNone;
  for (int64_t e = 0; e < m.num_experts; ++e) {
    auto s = b.scope(fmt::format("experts.{}", e));
    ir::ValueId y = expert_mlp(b, ckpt, x, prefix, m, e, why);
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
