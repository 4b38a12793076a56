#include "models/mamba2_hybrid_network.h"

#include <fmt/format.h>

#include <algorithm>

#include "models/short_conv.h"
#include "models/weights.h"

namespace hfx::models {

namespace {

const char* ffn_name(HybridFfn kind) {
  switch (kind) {
    case HybridFfn::SharedMlp: return "dense shared_mlp";
    case HybridFfn::GatedMlp: return "gated MLP";
    case HybridFfn::UpDown: return "up/down MLP (no gate)";
  }
  return "MLP";
}

class Mamba2Hybrid final : public CausalLm {
 public:
  Mamba2Hybrid(const io::Checkpoint& ckpt, HybridConfig cfg) : ckpt_(ckpt), c_(std::move(cfg)) {
    s_ = summary_of(c_, c_.traits.model_type, c_.traits.hf_class);
    auto count = [&](HybridBlock kind) { return std::count(c_.layers.begin(), c_.layers.end(), kind); };
    const auto mlps = count(HybridBlock::Mlp), moes = count(HybridBlock::Moe);
    s_.features = {
        {"layers", fmt::format("{} Mamba-2, {} attention{}", count(HybridBlock::Mamba), count(HybridBlock::Attention),
                               mlps ? fmt::format(", {} MLP", mlps) : "", moes ? fmt::format(", {} MoE", moes) : "")},
        {"mixer", c_.mixer.describe()},
        {"attention", fmt::format("{} heads, {} kv heads, head_dim {}, scale {}{}", c_.num_heads, c_.num_kv_heads,
                                  c_.head_dim, c_.attention_scale,
                                  c_.rope ? fmt::format(", rope theta {} over {} dims", c_.rope->theta, c_.rope->rotary_dim)
                                          : ", no rope")},
        {"multipliers", fmt::format("embedding {}, residual {}, logits / {}", c_.embedding_multiplier,
                                    c_.residual_multiplier, c_.logits_scaling)},
        {"mlp", fmt::format("{} {}, {}{}", ffn_name(c_.traits.ffn_kind), c_.intermediate_size, activation_name(c_.act),
                            c_.mlp_bias ? ", biases" : "")},
        {"tie_word_embeddings", c_.tie_word_embeddings ? "yes" : "no"},
    };
    if (const auto& m = c_.ffn_experts)
      s_.features.push_back({"moe", fmt::format("{} of {} experts of {} on every layer (softmax over the top {} "
                                                "router logits), added to the {}",
                                                m->top_k, m->num_experts, m->intermediate, m->top_k, c_.traits.ffn)});
    if (moes)
      s_.features.push_back(
          {"moe", fmt::format("{} experts of {} (top {}, sigmoid router{}, scaled by {}), latent {}, shared expert {}",
                              c_.moe.num_experts, c_.moe.intermediate, c_.moe.top_k,
                              c_.moe.normalize_top_k ? ", normalized" : "", c_.moe.routed_scaling_factor,
                              c_.moe.latent ? std::to_string(c_.moe.latent) : "none", c_.moe.shared_intermediate)});
  }

  const ModelSummary& summary() const override { return s_; }
  // The attention layers' geometry; every layer is counted, as the layer index names the ports.
  CacheGeometry cache() const override {
    return {c_.num_layers, c_.num_kv_heads, c_.head_dim, std::vector<int64_t>(size_t(c_.num_layers), 0)};
  }

  // A mamba layer carries its conv and scan states, an attention layer its keys and values, an MLP
  // or MoE layer nothing.
  std::vector<ir::StateSpec> states(const StateLayout& l) const override {
    std::vector<bool> attention;
    for (HybridBlock kind : c_.layers) attention.push_back(kind == HybridBlock::Attention);
    return hybrid_states(attention, c_.num_kv_heads, c_.head_dim, l, [&](int64_t i) {
      return c_.layers[size_t(i)] == HybridBlock::Mamba ? c_.mixer.states(i) : std::vector<ir::StateSpec>{};
    });
  }
  std::string_view state_names() const override { return "js-hybrid"; }

  CausalLmOutputs build(ir::Builder& b, const CausalLmInputs& in) const override {
    const HybridTraits& t = c_.traits;
    auto model_scope = b.scope("model");
    ir::ValueId embed = bind_weight(b, ckpt_, t.base + t.embed + ".weight", {c_.vocab_size, c_.hidden_size},
                                    fmt::format("vocab_size, hidden_size={}", c_.hidden_size));
    ir::ValueId h = b.add1("Embedding", {embed, in.input_ids});
    if (c_.embedding_multiplier != 1.0) h = b.times(h, b.f32(float(c_.embedding_multiplier)));
    StepTables tables(b, in);
    std::optional<std::optional<ir::ValueId>> pad_mask;  // built on the first mamba layer
    // Granite's residual_multiplier (x * 1.0 is exact: left out when it is 1, as for the others).
    auto scaled = [&](ir::ValueId v) {
      return c_.residual_multiplier == 1.0 ? v : b.times(v, b.f32(float(c_.residual_multiplier)));
    };
    CausalLmOutputs out;
    for (int64_t i = 0; i < c_.num_layers; ++i) {
      auto layer_scope = b.scope(fmt::format("layers.{}", i));
      const std::string p = fmt::format("{}layers.{}.", t.base, i);
      ir::ValueId x = rms(b, h, p + t.mixer_norm, t.mixer_norm);
      ir::ValueId mixed = ir::kNone;
      out.present_key.push_back(ir::kNone);
      out.present_value.push_back(ir::kNone);
      out.present_conv.push_back(ir::kNone);
      out.present_ssm.push_back(ir::kNone);
      switch (c_.layers[size_t(i)]) {
        case HybridBlock::Attention: {
          AttentionOut a = attention(b, x, p, in, i, tables);
          out.present_key.back() = a.present_key;
          out.present_value.back() = a.present_value;
          mixed = a.out;
          break;
        }
        case HybridBlock::Mamba: {
          if (!pad_mask) pad_mask = padding_states_mask(b, in);
          auto s = b.scope(t.mamba);
          Mamba2MixerOut m = mamba2_mixer(b, ckpt_, x, p + t.mamba + ".", c_.mixer,
                                          in.past_conv.empty() ? ir::kNone : in.past_conv[size_t(i)],
                                          in.past_ssm.empty() ? ir::kNone : in.past_ssm[size_t(i)], *pad_mask, in);
          out.present_conv.back() = m.conv_state;
          out.present_ssm.back() = m.ssm_state;
          mixed = m.out;
          break;
        }
        case HybridBlock::Mlp: mixed = ffn(b, x, p + t.mlp, t.mlp); break;
        case HybridBlock::Moe: {
          auto s = b.scope(t.moe);
          mixed = sigmoid_moe(b, ckpt_, x, p + t.moe + ".", c_.moe);
          break;
        }
      }
      h = b.plus(h, scaled(mixed));
      if (!t.ffn_norm.empty()) {
        ir::ValueId x2 = rms(b, h, p + t.ffn_norm, t.ffn_norm);
        ir::ValueId y = ffn(b, x2, p + t.ffn, t.ffn);
        if (c_.ffn_experts) {
          auto s = b.scope(t.ffn_experts);
          y = b.plus(sparse_moe(b, ckpt_, x2, p + t.ffn_experts + ".", *c_.ffn_experts), y);
        }
        h = b.plus(h, scaled(y));
      }
      b.graph().rename(h, fmt::format("/model/layers.{}/output", i));
    }
    h = rms(b, h, t.base + t.final_norm, t.final_norm);
    out.logits = lm_head(b, ckpt_, h, embed, c_.tie_word_embeddings, c_.vocab_size, c_.hidden_size);
    if (c_.logits_scaling != 1.0) out.logits = b.divide(out.logits, b.f32(float(c_.logits_scaling)));
    return out;
  }

 private:
  ir::ValueId rms(ir::Builder& b, ir::ValueId x, const std::string& prefix, const std::string& scope) const {
    return norm(b, ckpt_, x, prefix, c_.hidden_size, NormKind::Rms, c_.eps, false, scope);
  }

  // `p` the layer's prefix; the projections are under its attention module.
  AttentionOut attention(ir::Builder& b, ir::ValueId x, const std::string& p, const CausalLmInputs& in, int64_t layer,
                         StepTables& tables) const {
    auto s = b.scope(c_.traits.attention);
    return projected_attention(b, ckpt_, x, p + c_.traits.attention + ".", in, layer, tables,
                               {c_.hidden_size, c_.num_heads, c_.num_kv_heads, c_.head_dim, c_.attention_scale,
                                c_.attention_bias, c_.rope ? &*c_.rope : nullptr});
  }

  // The family's feed-forward network over `prefix` (the module, no trailing dot), in scope `scope`.
  ir::ValueId ffn(ir::Builder& b, ir::ValueId x, const std::string& prefix, const std::string& scope) const {
    auto s = b.scope(scope);
    const int64_t H = c_.hidden_size, I = c_.intermediate_size;
    const std::string why = fmt::format("hidden_size={}, intermediate_size={}", H, I);
    const std::string p = prefix + ".";
    switch (c_.traits.ffn_kind) {
      case HybridFfn::SharedMlp: {  // input_linear [2 I, hidden] chunked into (gate, up)
        ir::ValueId both = linear(b, ckpt_, x, p + "input_linear", H, 2 * I, c_.mlp_bias, why);
        ir::ValueId y = gated_activation(b, b.slice(both, 0, I, 2), b.slice(both, I, 2 * I, 2), c_.act);
        return linear(b, ckpt_, y, p + "output_linear", I, H, c_.mlp_bias, why);
      }
      case HybridFfn::GatedMlp: return gated_mlp(b, ckpt_, x, p, {}, H, I, c_.mlp_bias, c_.act, why);
      case HybridFfn::UpDown: {
        ir::ValueId y = activation(b, linear(b, ckpt_, x, p + "up_proj", H, I, c_.mlp_bias, why), c_.act);
        return linear(b, ckpt_, y, p + "down_proj", I, H, c_.mlp_bias, why);
      }
    }
    return ir::kNone;
  }

  const io::Checkpoint& ckpt_;
  HybridConfig c_;
  ModelSummary s_;
};

}  // namespace

std::unique_ptr<CausalLm> make_mamba2_hybrid(const io::Checkpoint& ckpt, HybridConfig config) {
  return std::make_unique<Mamba2Hybrid>(ckpt, std::move(config));
}

}  // namespace hfx::models
