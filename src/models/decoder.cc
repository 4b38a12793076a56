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
      : ckpt_(ckpt), c_(std::move(cfg)), t_(traits) {
    s_ = summary_of(c_, c_.model_type, std::move(hf_class));
    int64_t windowed = 0;
    for (auto w : c_.sliding_window) windowed += w > 0;
    std::vector<std::string> ropes;
    for (const auto& r : c_.ropes) ropes.push_back(fmt::format("{} (theta {}, rotary_dim {})", r.type, r.theta, r.rotary_dim));
    s_.features = {
        {"attention", fmt::format("{} heads, {} kv heads (GQA x{}), head_dim {}", c_.num_heads, c_.num_kv_heads,
                                  c_.num_heads / c_.num_kv_heads, c_.head_dim)},
        {"rope", fmt::format("{}", fmt::join(ropes, "; "))},
        {"qkv_bias", c_.qkv_bias ? "yes" : "no"},
        {"qk_norm", c_.qk_norm ? "yes" : "no"},
        {"sliding_window", windowed ? fmt::format("{} on {} of {} layers", *std::max_element(c_.sliding_window.begin(), c_.sliding_window.end()), windowed, c_.num_layers) : "none"},
        {"tie_word_embeddings", c_.tie_word_embeddings ? "yes" : "no"},
    };
    if (c_.act != Activation::Silu) s_.features.emplace_back("activation", activation_name(c_.act));
    if (c_.attn_softcap > 0) s_.features.emplace_back("attn_logit_softcapping", fmt::format("{}", c_.attn_softcap));
    if (c_.final_softcap > 0) s_.features.emplace_back("final_logit_softcapping", fmt::format("{}", c_.final_softcap));
    if (c_.parallel_residual) s_.features.emplace_back("parallel_residual", "yes");
    if (c_.lm_head_bias) s_.features.emplace_back("lm_head_bias", "yes");
    if (t_.rope_interleaved) s_.features.emplace_back("rope_layout", "interleaved (GPT-J pairs)");
    if (const auto moe = std::count(c_.layer_is_moe.begin(), c_.layer_is_moe.end(), true))
      s_.features.emplace_back("mixture_of_experts", fmt::format("{} experts, top {}{} on {} of {} layers",
                                                                  c_.moe.num_experts, c_.moe.top_k,
                                                                  c_.moe.normalize_top_k ? " (renormalised)" : "", moe,
                                                                  c_.num_layers));
    if (c_.logit_scale != 1.0) s_.features.emplace_back("logit_scale", fmt::format("{}", c_.logit_scale));
    if (const auto nope = std::count(c_.layer_has_rope.begin(), c_.layer_has_rope.end(), false))
      s_.features.emplace_back("no_rope_layers", fmt::format("{} of {} layers without rope", nope, c_.num_layers));
  }

  const ModelSummary& summary() const override { return s_; }
  CacheGeometry cache() const override { return {c_.num_layers, c_.num_kv_heads, c_.head_dim, c_.sliding_window}; }

  CausalLmOutputs build(ir::Builder& b, const CausalLmInputs& in) const override {
    auto model_scope = b.scope("model");
    const std::string H = fmt::format("hidden_size={}", c_.hidden_size);
    ir::ValueId embed = bind_weight(b, ckpt_, "model.embed_tokens.weight", {c_.vocab_size, c_.hidden_size}, "vocab_size, " + H);
    ir::ValueId h = b.add1("Embedding", {embed, in.input_ids});
    // Gemma's sqrt(hidden_size) and Granite's embedding_multiplier, rounded to the f32 the graph computes in.
    if (c_.embedding_multiplier != 1.0) h = b.times(h, b.f32(float(c_.embedding_multiplier)));

    StepTables tables(b, in);
    CausalLmOutputs out;
    for (int64_t i = 0; i < c_.num_layers; ++i) {
      auto layer_scope = b.scope(fmt::format("layers.{}", i));
      const std::string p = fmt::format("model.layers.{}.", i);
      auto residual = [&](ir::ValueId branch) {
        return c_.residual_multiplier != 1.0 ? b.times(branch, b.f32(float(c_.residual_multiplier))) : branch;
      };
      // Attention half.
      ir::ValueId x = t_.layout == Layout::PostNorm ? h : norm(b, h, p + "input_layernorm", "input_layernorm");
      AttentionOut a = attention(b, x, p, in, i, tables);
      out.present_key.push_back(a.present_key);
      out.present_value.push_back(a.present_value);
      if (c_.parallel_residual) {
        // StableLM's use_parallel_residual, Phi: both branches read the same normed input.
        ir::ValueId m = mlp(b, x, p, i);
        h = b.plus(b.plus(h, a.out), m);
      } else {
        ir::ValueId attn = a.out;
        if (t_.layout != Layout::PreNorm)
          attn = norm(b, attn, p + t_.post_attn_norm_name, t_.post_attn_norm_name);
        h = b.plus(h, residual(attn));
        // MLP half.
        const char* pre = t_.layout == Layout::Sandwich ? t_.pre_ffw_norm_name
                          : t_.layout == Layout::PreNorm ? "post_attention_layernorm"
                                                         : nullptr;
        x = pre ? norm(b, h, p + pre, pre) : h;
        ir::ValueId m = mlp(b, x, p, i);
        if (t_.layout != Layout::PreNorm)
          m = norm(b, m, p + t_.post_ffw_norm_name, t_.post_ffw_norm_name);
        h = b.plus(h, residual(m));
      }
      // A stable debug name per layer: verification diffs hidden states layer by layer by it.
      b.graph().rename(h, fmt::format("/model/layers.{}/output", i));
    }
    h = norm(b, h, std::string("model.") + t_.final_norm_name, t_.final_norm_name);
    out.logits = lm_head(b, ckpt_, h, embed, c_.tie_word_embeddings, c_.vocab_size, c_.hidden_size, "lm_head.weight",
                         c_.lm_head_bias);
    if (c_.logits_scaling != 1.0) out.logits = b.divide(out.logits, b.f32(float(c_.logits_scaling)));  // Granite
    if (c_.logit_scale != 1.0) out.logits = b.times(out.logits, b.f32(float(c_.logit_scale)));  // Cohere
    if (c_.final_softcap > 0) out.logits = b.add1("Softcap", {out.logits}, {{"cap", c_.final_softcap}});  // Gemma 2/3
    return out;
  }

 private:
  ir::ValueId norm(ir::Builder& b, ir::ValueId x, const std::string& prefix, const std::string& scope) const {
    return models::norm(b, ckpt_, x, prefix, c_.hidden_size, t_.norm, c_.norm_eps,
                        (t_.norm == NormKind::Layer || t_.norm == NormKind::LayerPlusOne) && t_.layer_norm_bias, scope);
  }

  ir::ValueId linear(ir::Builder& b, ir::ValueId x, const std::string& prefix, int64_t in, int64_t out, bool bias,
                     const std::string& why) const {
    return models::linear(b, ckpt_, x, prefix, in, out, bias, why);
  }

  // q/k normalisation: per head over head_dim (x is [b, s, heads, head_dim]) or over the whole
  // projection (x is [b, s, heads * head_dim]), with the family's norm kind.
  ir::ValueId qk_norm(ir::Builder& b, ir::ValueId x, const std::string& prefix, int64_t heads) const {
    if (t_.qk_norm == QkNorm::StableLm) {
      // StableLmLayerNormPerHead: one bias-free LayerNorm per head, stacked into a [heads, head_dim] weight.
      std::vector<ir::WeightRef> parts;
      for (int64_t h = 0; h < heads; ++h)
        parts.push_back(weight_ref(ckpt_, fmt::format("{}.norms.{}.weight", prefix, h), {c_.head_dim}, "head_dim"));
      ir::ValueId w = b.weight(prefix + ".weight", ir::WeightRef::concat(parts, 0).reshaped({heads, c_.head_dim}));
      return b.add1("LayerNorm", {x, w}, {{"epsilon", c_.norm_eps}});
    }
    const int64_t n = t_.qk_norm == QkNorm::Whole ? heads * c_.head_dim : c_.head_dim;
    const NormKind kind = t_.norm == NormKind::Layer ? NormKind::Rms : t_.norm;
    return models::norm(b, ckpt_, x, prefix, n, kind, c_.norm_eps, false, prefix.substr(prefix.rfind('.') + 1));
  }

  AttentionOut attention(ir::Builder& b, ir::ValueId x, const std::string& p, const CausalLmInputs& in, int64_t layer,
                         StepTables& tables) const {
    auto s = b.scope("self_attn");
    const std::string a = p + "self_attn.";
    const std::string why = fmt::format("hidden_size={}, heads={}, kv_heads={}, head_dim={}", c_.hidden_size,
                                        c_.num_heads, c_.num_kv_heads, c_.head_dim);
    const int64_t qn = c_.q_size(), kvn = c_.kv_size();
    ir::ValueId fused = ir::kNone;
    if (t_.fused_qkv) {
      auto ps = b.scope("qkv_proj");
      fused = linear(b, x, a + "qkv_proj", c_.hidden_size, qn + 2 * kvn, c_.qkv_bias, why);
    }
    auto heads = [&](const std::string& proj, int64_t n_heads, int64_t offset) {
      auto ps = b.scope(proj);
      const int64_t n = n_heads * c_.head_dim;
      ir::ValueId y = fused != ir::kNone ? b.slice(fused, offset, offset + n, -1)
                                         : linear(b, x, a + proj, c_.hidden_size, n, c_.qkv_bias, why);
      const bool normed = c_.qk_norm && proj != "v_proj";
      const std::string norm_name = proj == "q_proj" ? (t_.qk_norm == QkNorm::StableLm ? "q_layernorm" : "q_norm")
                                                     : (t_.qk_norm == QkNorm::StableLm ? "k_layernorm" : "k_norm");
      if (normed && t_.qk_norm == QkNorm::Whole) y = qk_norm(b, y, a + norm_name, n_heads);
      y = b.reshape(y, {0, 0, n_heads, c_.head_dim});  // [b, s, heads, head_dim]
      if (normed && t_.qk_norm != QkNorm::Whole) y = qk_norm(b, y, a + norm_name, n_heads);
      return b.transpose(y, {0, 2, 1, 3});  // [b, heads, s, head_dim]
    };
    ir::ValueId q = heads("q_proj", c_.num_heads, 0);
    ir::ValueId k = heads("k_proj", c_.num_kv_heads, qn);
    ir::ValueId v = heads("v_proj", c_.num_kv_heads, qn + kvn);
    if (c_.layer_has_rope[size_t(layer)]) {  // SmolLM3's NoPE layers have none
      const size_t rope = c_.layer_rope[size_t(layer)];
      const auto& cos_sin = tables.rope(c_.ropes[rope], rope);
      const ir::Attrs rope_attrs = t_.rope_interleaved ? ir::Attrs{{"interleaved", int64_t(1)}} : ir::Attrs{};
      q = b.add1("RotaryEmbedding", {q, cos_sin[0], cos_sin[1]}, rope_attrs);
      k = b.add1("RotaryEmbedding", {k, cos_sin[0], cos_sin[1]}, rope_attrs);
    }
    AttentionOut r = cached_attention(b, in, layer, q, k, v, tables.mask(c_.sliding_window[size_t(layer)]),
                                      c_.attention_scale, c_.attn_softcap);
    auto os = b.scope(t_.o_proj_name);
    r.out = linear(b, r.out, a + t_.o_proj_name, qn, c_.hidden_size, c_.o_bias, why);
    return r;
  }

  ir::ValueId mlp(ir::Builder& b, ir::ValueId x, const std::string& p, int64_t layer) const {
    if (c_.layer_is_moe[size_t(layer)]) {
      const bool mixtral = t_.moe == DecoderTraits::Moe::Mixtral;
      auto s = b.scope(mixtral ? "block_sparse_moe" : "mlp");
      return sparse_moe(b, ckpt_, x, p + (mixtral ? "block_sparse_moe." : "mlp."), c_.moe);
    }
    auto s = b.scope("mlp");
    const std::string why = fmt::format("hidden_size={}, intermediate_size={}", c_.hidden_size, c_.intermediate_size);
    const int64_t H = c_.hidden_size, I = c_.intermediate_size;
    switch (t_.mlp) {
      case Mlp::Gated: return gated_mlp(b, ckpt_, x, p + "mlp.", {}, H, I, c_.mlp_bias, c_.act, why);
      case Mlp::GatedFused: {
        // Phi-3's gate_up_proj: one matmul, then gate = first half, up = second half.
        ir::ValueId gate_up = linear(b, x, p + "mlp.gate_up_proj", H, 2 * I, c_.mlp_bias, why);
        ir::ValueId act = gated_activation(b, b.slice(gate_up, 0, I, -1), b.slice(gate_up, I, 2 * I, -1), c_.act);
        return linear(b, act, p + "mlp.down_proj", I, H, c_.mlp_bias, why);
      }
      case Mlp::Plain: {
        ir::ValueId y = activation(b, linear(b, x, p + "mlp." + t_.plain_mlp_in, H, I, c_.mlp_bias, why), c_.act);
        return linear(b, y, p + "mlp." + t_.plain_mlp_out, I, H, c_.mlp_bias, why);
      }
    }
    HFX_CHECK(false, "unreachable");
  }

  const io::Checkpoint& ckpt_;
  DecoderConfig c_;
  DecoderTraits t_;
  ModelSummary s_;
};

}  // namespace

std::unique_ptr<CausalLm> make_decoder(const io::Checkpoint& ckpt, const DecoderTraits& traits, std::string hf_class) {
  return std::make_unique<Decoder>(ckpt, parse_decoder_config(ckpt, traits), traits, std::move(hf_class));
}

}  // namespace hfx::models
