#include "models/decoder.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "models/blocks.h"
#include "models/weights.h"

namespace hfx::models {

namespace {

using Layout = DecoderTraits::Layout;
using QkNorm = DecoderTraits::QkNorm;
using Mlp = DecoderTraits::Mlp;

class Decoder final : public CausalLm {
 public:
  Decoder(const io::Checkpoint& ckpt, DecoderConfig cfg, DecoderTraits traits, std::string hf_class)
      : ckpt_(ckpt), config_(std::move(cfg)), traits_(traits) {
    summary_ = summary_of(config_, config_.model_type, std::move(hf_class));
    int64_t windowed = 0;
    for (auto w : config_.sliding_window) windowed += w > 0;
    std::vector<std::string> ropes;
    for (const auto& r : config_.ropes) ropes.push_back(fmt::format("{} (theta {}, rotary_dim {})", r.type, r.theta, r.rotary_dim));
    summary_.features = {
        {"attention", fmt::format("{} heads, {} kv heads (GQA x{}), head_dim {}", config_.num_heads, config_.num_kv_heads,
                                  config_.num_heads / config_.num_kv_heads, config_.head_dim)},
        {"rope", fmt::format("{}", fmt::join(ropes, "; "))},
        {"qkv_bias", config_.qkv_bias ? "yes" : "no"},
        {"qk_norm", config_.qk_norm ? "yes" : "no"},
        {"sliding_window", windowed ? fmt::format("{} on {} of {} layers", *std::max_element(config_.sliding_window.begin(), config_.sliding_window.end()), windowed, config_.num_layers) : "none"},
        {"tie_word_embeddings", config_.tie_word_embeddings ? "yes" : "no"},
    };
    if (config_.act != Activation::Silu) summary_.features.emplace_back("activation", activation_name(config_.act));
    if (config_.attn_softcap > 0) summary_.features.emplace_back("attn_logit_softcapping", fmt::format("{}", config_.attn_softcap));
    if (config_.final_softcap > 0) summary_.features.emplace_back("final_logit_softcapping", fmt::format("{}", config_.final_softcap));
    if (config_.parallel_residual) summary_.features.emplace_back("parallel_residual", "yes");
    if (config_.lm_head_bias) summary_.features.emplace_back("lm_head_bias", "yes");
    if (traits_.rope_interleaved) summary_.features.emplace_back("rope_layout", "interleaved (GPT-J pairs)");
    if (const auto moe = std::count(config_.layer_is_moe.begin(), config_.layer_is_moe.end(), true))
      summary_.features.emplace_back("mixture_of_experts", fmt::format("{} experts, top {}{} on {} of {} layers",
                                                                  config_.moe.num_experts, config_.moe.top_k,
                                                                  config_.moe.normalize_top_k ? " (renormalised)" : "", moe,
                                                                  config_.num_layers));
    if (config_.logit_scale != 1.0) summary_.features.emplace_back("logit_scale", fmt::format("{}", config_.logit_scale));
    if (const auto nope = std::count(config_.layer_has_rope.begin(), config_.layer_has_rope.end(), false))
      summary_.features.emplace_back("no_rope_layers", fmt::format("{} of {} layers without rope", nope, config_.num_layers));
  }

  const ModelSummary& summary() const override { return summary_; }
  CacheGeometry cache() const override { return {config_.num_layers, config_.num_kv_heads, config_.head_dim, config_.sliding_window}; }

  CausalLmOutputs build(ir::Builder& b, const CausalLmInputs& in) const override {
    auto model_scope = b.scope("model");
    const std::string H = fmt::format("hidden_size={}", config_.hidden_size);
    ir::ValueId embed = bind_weight(b, ckpt_, "model.embed_tokens.weight", {config_.vocab_size, config_.hidden_size}, "vocab_size, " + H);
    ir::ValueId h = b.add1("Embedding", {embed, in.input_ids});
    // Gemma's sqrt(hidden_size) and Granite's embedding_multiplier, rounded to the f32 the graph computes in.
    if (config_.embedding_multiplier != 1.0) h = b.times(h, b.f32(float(config_.embedding_multiplier)));

    StepTables tables(b, in);
    CausalLmOutputs out;
    for (int64_t i = 0; i < config_.num_layers; ++i) {
      auto layer_scope = b.scope(fmt::format("layers.{}", i));
      const std::string p = fmt::format("model.layers.{}.", i);
      auto residual = [&](ir::ValueId branch) {
        return config_.residual_multiplier != 1.0 ? b.times(branch, b.f32(float(config_.residual_multiplier))) : branch;
      };
      // Attention half.
      ir::ValueId x = traits_.layout == Layout::PostNorm ? h : norm(b, h, p + "input_layernorm", "input_layernorm");
      AttentionOut a = attention(b, x, p, in, i, tables);
      out.present_key.push_back(a.present_key);
      out.present_value.push_back(a.present_value);
      if (config_.parallel_residual) {
        // StableLM's use_parallel_residual, Phi: both branches read the same normed input.
        ir::ValueId m = mlp(b, x, p, i);
        h = b.plus(b.plus(h, a.out), m);
      } else {
        ir::ValueId attn = a.out;
        if (traits_.layout != Layout::PreNorm)
          attn = norm(b, attn, p + traits_.post_attn_norm_name, traits_.post_attn_norm_name);
        h = b.plus(h, residual(attn));
        // MLP half.
        const char* pre = traits_.layout == Layout::Sandwich ? traits_.pre_ffw_norm_name
                          : traits_.layout == Layout::PreNorm ? "post_attention_layernorm"
                                                         : nullptr;
        x = pre ? norm(b, h, p + pre, pre) : h;
        ir::ValueId m = mlp(b, x, p, i);
        if (traits_.layout != Layout::PreNorm)
          m = norm(b, m, p + traits_.post_ffw_norm_name, traits_.post_ffw_norm_name);
        h = b.plus(h, residual(m));
      }
      // A stable debug name per layer: verification diffs hidden states layer by layer by it.
      b.graph().rename(h, fmt::format("/model/layers.{}/output", i));
    }
    h = norm(b, h, std::string("model.") + traits_.final_norm_name, traits_.final_norm_name);
    out.logits = lm_head(b, ckpt_, h, embed, config_.tie_word_embeddings, config_.vocab_size, config_.hidden_size, "lm_head.weight",
                         config_.lm_head_bias);
    if (config_.logits_scaling != 1.0) out.logits = b.divide(out.logits, b.f32(float(config_.logits_scaling)));  // Granite
    if (config_.logit_scale != 1.0) out.logits = b.times(out.logits, b.f32(float(config_.logit_scale)));  // Cohere
    if (config_.final_softcap > 0) out.logits = b.add1("Softcap", {out.logits}, {{"cap", config_.final_softcap}});  // Gemma 2/3
    return out;
  }

 private:
  ir::ValueId norm(ir::Builder& b, ir::ValueId x, const std::string& prefix, const std::string& scope) const {
    return models::norm(b, ckpt_, x, prefix, config_.hidden_size, traits_.norm, config_.norm_eps,
                        (traits_.norm == NormKind::Layer || traits_.norm == NormKind::LayerPlusOne) && traits_.layer_norm_bias, scope);
  }

  ir::ValueId linear(ir::Builder& b, ir::ValueId x, const std::string& prefix, int64_t in, int64_t out, bool bias,
                     const std::string& why) const {
    return models::linear(b, ckpt_, x, prefix, in, out, bias, why);
  }

  // q/k normalisation: per head over head_dim (x is [b, s, heads, head_dim]) or over the whole
  // projection (x is [b, s, heads * head_dim]), with the family's norm kind.
  ir::ValueId qk_norm(ir::Builder& b, ir::ValueId x, const std::string& prefix, int64_t heads) const {
    if (traits_.qk_norm == QkNorm::StableLm) {
      // StableLmLayerNormPerHead: one bias-free LayerNorm per head, stacked into a [heads, head_dim] weight.
      std::vector<ir::WeightRef> parts;
      for (int64_t h = 0; h < heads; ++h)
        parts.push_back(weight_ref(ckpt_, fmt::format("{}.norms.{}.weight", prefix, h), {config_.head_dim}, "head_dim"));
      ir::ValueId w = b.weight(prefix + ".weight", ir::WeightRef::concat(parts, 0).reshaped({heads, config_.head_dim}));
      return b.add1("LayerNorm", {x, w}, {{"epsilon", config_.norm_eps}});
    }
    const int64_t n = traits_.qk_norm == QkNorm::Whole ? heads * config_.head_dim : config_.head_dim;
    const NormKind kind = traits_.norm == NormKind::Layer ? NormKind::Rms : traits_.norm;
    return models::norm(b, ckpt_, x, prefix, n, kind, config_.norm_eps, false, prefix.substr(prefix.rfind('.') + 1));
  }

  AttentionOut attention(ir::Builder& b, ir::ValueId x, const std::string& p, const CausalLmInputs& in, int64_t layer,
                         StepTables& tables) const {
    auto s = b.scope("self_attn");
    const std::string a = p + "self_attn.";
    const std::string why = fmt::format("hidden_size={}, heads={}, kv_heads={}, head_dim={}", config_.hidden_size,
                                        config_.num_heads, config_.num_kv_heads, config_.head_dim);
    const int64_t qn = config_.q_size(), kvn = config_.kv_size();
    ir::ValueId fused = ir::kNone;
    if (traits_.fused_qkv) {
      auto ps = b.scope("qkv_proj");
      fused = linear(b, x, a + "qkv_proj", config_.hidden_size, qn + 2 * kvn, config_.qkv_bias, why);
    }
    auto heads = [&](const std::string& proj, int64_t n_heads, int64_t offset) {
      auto ps = b.scope(proj);
      const int64_t n = n_heads * config_.head_dim;
      ir::ValueId y = fused != ir::kNone ? b.slice(fused, offset, offset + n, -1)
                                         : linear(b, x, a + proj, config_.hidden_size, n, config_.qkv_bias, why);
      const bool normed = config_.qk_norm && proj != "v_proj";
      const std::string norm_name = proj == "q_proj" ? (traits_.qk_norm == QkNorm::StableLm ? "q_layernorm" : "q_norm")
                                                     : (traits_.qk_norm == QkNorm::StableLm ? "k_layernorm" : "k_norm");
      if (normed && traits_.qk_norm == QkNorm::Whole) y = qk_norm(b, y, a + norm_name, n_heads);
      y = b.reshape(y, {0, 0, n_heads, config_.head_dim});  // [b, s, heads, head_dim]
      if (normed && traits_.qk_norm != QkNorm::Whole) y = qk_norm(b, y, a + norm_name, n_heads);
      return b.transpose(y, {0, 2, 1, 3});  // [b, heads, s, head_dim]
    };
    ir::ValueId q = heads("q_proj", config_.num_heads, 0);
    ir::ValueId k = heads("k_proj", config_.num_kv_heads, qn);
    ir::ValueId v = heads("v_proj", config_.num_kv_heads, qn + kvn);
    if (config_.layer_has_rope[size_t(layer)]) {  // SmolLM3's NoPE layers have none
      const size_t rope = config_.layer_rope[size_t(layer)];
      const auto& cos_sin = tables.rope(config_.ropes[rope], rope);
      const ir::Attrs rope_attrs = traits_.rope_interleaved ? ir::Attrs{{"interleaved", int64_t(1)}} : ir::Attrs{};
      q = b.add1("RotaryEmbedding", {q, cos_sin[0], cos_sin[1]}, rope_attrs);
      k = b.add1("RotaryEmbedding", {k, cos_sin[0], cos_sin[1]}, rope_attrs);
    }
    AttentionOut r = cached_attention(b, in, layer, q, k, v, tables.mask(config_.sliding_window[size_t(layer)]),
                                      config_.attention_scale, config_.attn_softcap);
    auto os = b.scope(traits_.o_proj_name);
    r.out = linear(b, r.out, a + traits_.o_proj_name, qn, config_.hidden_size, config_.o_bias, why);
    return r;
  }

  ir::ValueId mlp(ir::Builder& b, ir::ValueId x, const std::string& p, int64_t layer) const {
    if (config_.layer_is_moe[size_t(layer)]) {
      const bool mixtral = traits_.moe == DecoderTraits::Moe::Mixtral;
      auto s = b.scope(mixtral ? "block_sparse_moe" : "mlp");
      return sparse_moe(b, ckpt_, x, p + (mixtral ? "block_sparse_moe." : "mlp."), config_.moe);
    }
    auto s = b.scope("mlp");
    const std::string why = fmt::format("hidden_size={}, intermediate_size={}", config_.hidden_size, config_.intermediate_size);
    const int64_t H = config_.hidden_size, I = config_.intermediate_size;
    switch (traits_.mlp) {
      case Mlp::Gated: return gated_mlp(b, ckpt_, x, p + "mlp.", {}, H, I, config_.mlp_bias, config_.act, why);
      case Mlp::GatedFused: {
        // Phi-3's gate_up_proj: one matmul, then gate = first half, up = second half.
        ir::ValueId gate_up = linear(b, x, p + "mlp.gate_up_proj", H, 2 * I, config_.mlp_bias, why);
        ir::ValueId act = gated_activation(b, b.slice(gate_up, 0, I, -1), b.slice(gate_up, I, 2 * I, -1), config_.act);
        return linear(b, act, p + "mlp.down_proj", I, H, config_.mlp_bias, why);
      }
      case Mlp::Plain: {
        ir::ValueId y = activation(b, linear(b, x, p + "mlp." + traits_.plain_mlp_in, H, I, config_.mlp_bias, why), config_.act);
        return linear(b, y, p + "mlp." + traits_.plain_mlp_out, I, H, config_.mlp_bias, why);
      }
    }
    HFX_CHECK(false, "unreachable");
  }

  const io::Checkpoint& ckpt_;
  DecoderConfig config_;
  DecoderTraits traits_;
  ModelSummary summary_;
};

}  // namespace

std::unique_ptr<CausalLm> make_decoder(const io::Checkpoint& ckpt, const DecoderTraits& traits, std::string hf_class) {
  return std::make_unique<Decoder>(ckpt, parse_decoder_config(ckpt, traits), traits, std::move(hf_class));
}

}  // namespace hfx::models
