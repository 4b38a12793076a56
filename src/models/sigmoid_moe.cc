#include "models/sigmoid_moe.h"

#include <fmt/format.h>

#include <limits>

#include "models/weights.h"

namespace hfx::models {

namespace {

// down(act(up(x))): NemotronHMLP, each expert and the shared one.
ir::ValueId up_down(ir::Builder& b, const io::Checkpoint& ckpt, ir::ValueId x, const std::string& p, int64_t in,
                    int64_t inner, bool bias, Activation act, const std::string& why) {
  ir::ValueId y = activation(b, linear(b, ckpt, x, p + "up_proj", in, inner, bias, why), act);
  return linear(b, ckpt, y, p + "down_proj", inner, in, bias, why);
}

ir::ValueId reduce_max(ir::Builder& b, ir::ValueId x) {
  return b.add1("ReduceMax", {x, b.i64s({-1})}, {{"keepdims", int64_t(1)}});
}

// `biased` [b, s, E] with the experts outside the topk_group best of n_group groups at -inf
// (NemotronHTopkRouter: a group's score is the sum of its two best biased scores).
ir::ValueId limit_to_best_groups(ir::Builder& b, ir::ValueId biased, const SigmoidMoeSpec& m) {
  const float inf = std::numeric_limits<float>::infinity();
  const int64_t G = m.n_group, per_group = m.num_experts / m.n_group;
  ir::ValueId grouped = b.reshape(biased, {0, 0, G, per_group});
  ir::ValueId best = reduce_max(b, grouped);  // [b, s, G, 1]
  // The second best: the best again when it occurs twice (topk(2)'s values), else the best of the rest.
  ir::ValueId is_best = b.add1("Equal", {grouped, best});
  ir::ValueId copies = b.add1("ReduceSum", {b.cast(is_best, DType::F32), b.i64s({-1})}, {{"keepdims", int64_t(1)}});
  ir::ValueId second = b.add1("Where", {b.add1("Greater", {copies, b.f32(1.0f)}), best,
                                        reduce_max(b, b.add1("Where", {is_best, b.f32(-inf), grouped}))});
  ir::ValueId group_scores = b.squeeze(b.plus(best, second), {-1});  // [b, s, G]
  // Kept groups by the same rounds of "the largest remaining" as the experts' top-k.
  ir::ValueId remaining = group_scores, kept = ir::kNone;
  for (int64_t i = 0; i < m.topk_group; ++i) {
    ir::ValueId hit = b.add1("Equal", {remaining, reduce_max(b, remaining)});
    kept = kept == ir::kNone ? hit : b.add1("Or", {kept, hit});
    remaining = b.add1("Where", {hit, b.f32(-inf), remaining});
  }
  // [b, s, G, 1] broadcast over each group's experts, back to [b, s, E]
  ir::ValueId masked = b.add1("Where", {b.unsqueeze(kept, {-1}), grouped, b.f32(-inf)});
  return b.reshape(masked, {0, 0, m.num_experts});
}

}  // namespace

ir::ValueId sigmoid_moe(ir::Builder& b, const io::Checkpoint& ckpt, ir::ValueId x, const std::string& prefix,
                        const SigmoidMoeSpec& m) {
  const int64_t E = m.num_experts, width = m.latent > 0 ? m.latent : m.hidden;
  const std::string why = fmt::format("hidden_size={}, experts={}, expert intermediate size={}, latent={}", m.hidden, E,
                                      m.intermediate, m.latent);
  ir::ValueId scores, weights;
  {
    auto s = b.scope("gate");
    {
      // NemotronHTopkRouter / DeepseekV3TopkRouter: F.linear(x.float(), weight.float()) in every dtype
      auto f32 = b.scope(ir::Builder::kKeepF32Scope);
      scores = b.add1("Sigmoid", {linear(b, ckpt, x, prefix + "gate", m.hidden, E, false, why)});  // [b, s, E]
    }
    // torch.topk over the biased scores, as k rounds of "the largest remaining" (a picked one drops to
    // -inf); the weights are the unbiased scores of the picked experts.
    ir::ValueId remaining = b.plus(scores, bind_weight(b, ckpt, prefix + "gate.e_score_correction_bias", {E}, why));
    if (m.n_group > 1) remaining = limit_to_best_groups(b, remaining, m);
    ir::ValueId picked = ir::kNone;
    for (int64_t i = 0; i < m.top_k; ++i) {
      ir::ValueId largest = reduce_max(b, remaining);
      ir::ValueId hit = b.add1("Equal", {remaining, largest});
      picked = picked == ir::kNone ? hit : b.add1("Or", {picked, hit});
      remaining = b.add1("Where", {hit, b.f32(-std::numeric_limits<float>::infinity()), remaining});
    }
    weights = b.add1("Where", {picked, scores, b.f32(0.0f)});
    if (m.normalize_top_k)  // DeepseekV3TopkRouter: / (sum + 1e-20)
      weights = b.divide(weights, b.plus(b.add1("ReduceSum", {weights, b.i64s({-1})}, {{"keepdims", int64_t(1)}}),
                                         b.f32(1e-20f)));
    if (m.routed_scaling_factor != 1.0) weights = b.times(weights, b.f32(float(m.routed_scaling_factor)));
  }
  ir::ValueId in = x;
  if (m.latent > 0) {
    auto s = b.scope("fc1_latent_proj");
    in = linear(b, ckpt, x, prefix + "fc1_latent_proj", m.hidden, m.latent, m.bias, why);
  }
  ir::ValueId out = ir::kNone;
  for (int64_t e = 0; e < E; ++e) {
    auto s = b.scope(fmt::format("experts.{}", e));
    ir::ValueId y = up_down(b, ckpt, in, fmt::format("{}experts.{}.", prefix, e), width, m.intermediate, false, m.act, why);
    y = b.times(y, b.slice(weights, e, e + 1, -1));
    out = out == ir::kNone ? y : b.plus(out, y);
  }
  if (m.latent > 0) {
    auto s = b.scope("fc2_latent_proj");
    out = linear(b, ckpt, out, prefix + "fc2_latent_proj", m.latent, m.hidden, m.bias, why);
  }
  auto s = b.scope("shared_experts");
  return b.plus(out, up_down(b, ckpt, x, prefix + "shared_experts.", m.hidden, m.shared_intermediate, m.bias, m.act, why));
}

}  // namespace hfx::models
