#include "models/decoder.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"
#include "models/weights.h"

namespace hfx::models {

namespace {

class Decoder final : public CausalLm {
 public:
  Decoder(const io::Checkpoint& ckpt, DecoderConfig cfg, std::string hf_class) : ckpt_(ckpt), c_(std::move(cfg)) {
    s_.model_type = c_.model_type;
    s_.hf_class = std::move(hf_class);
    s_.vocab_size = c_.vocab_size;
    s_.hidden_size = c_.hidden_size;
    s_.num_layers = c_.num_layers;
    s_.num_heads = c_.num_heads;
    s_.eos_token_ids = c_.eos_token_ids;
    s_.bos_token_id = c_.bos_token_id;
    s_.pad_token_id = c_.pad_token_id;
    int64_t windowed = 0;
    for (auto w : c_.sliding_window) windowed += w > 0;
    s_.features = {
        {"attention", fmt::format("{} heads, {} kv heads (GQA x{}), head_dim {}", c_.num_heads, c_.num_kv_heads,
                                  c_.num_heads / c_.num_kv_heads, c_.head_dim)},
        {"rope", fmt::format("{} (theta {}, rotary_dim {})", c_.rope.type, c_.rope.theta, c_.rope.rotary_dim)},
        {"qkv_bias", c_.qkv_bias ? "yes" : "no"},
        {"qk_norm", c_.qk_norm ? "yes" : "no"},
        {"sliding_window", windowed ? fmt::format("{} on {} of {} layers", *std::max_element(c_.sliding_window.begin(), c_.sliding_window.end()), windowed, c_.num_layers) : "none"},
        {"tie_word_embeddings", c_.tie_word_embeddings ? "yes" : "no"},
    };
  }

  const ModelSummary& summary() const override { return s_; }
  CacheGeometry cache() const override { return {c_.num_layers, c_.num_kv_heads, c_.head_dim, c_.sliding_window}; }

  CausalLmOutputs build(ir::Builder& b, const CausalLmInputs& in) const override {
    auto model_scope = b.scope("model");
    const std::string H = fmt::format("hidden_size={}", c_.hidden_size);
    ir::ValueId embed = bind(b, "model.embed_tokens.weight", {c_.vocab_size, c_.hidden_size}, "vocab_size, " + H);
    ir::ValueId h = b.add1("Embedding", {embed, in.input_ids});

    // Rope tables and masks are shared by all layers: computed once per step.
    auto inv_freq = b.constant(Tensor::from_vector<float>(DType::F32, {int64_t(c_.rope.inv_freq.size())}, c_.rope.inv_freq),
                               "rope_inv_freq");
    ir::Attrs rope_attrs = {{"attention_scaling", c_.rope.attention_scaling}, {"rotary_dim", c_.rope.rotary_dim}};
    if (c_.rope.dynamic) {
      rope_attrs["dynamic"] = int64_t(1);
      rope_attrs["dynamic_base"] = c_.rope.theta;
      rope_attrs["dynamic_factor"] = c_.rope.factor;
      rope_attrs["dynamic_max_position"] = c_.rope.max_position_embeddings;
    }
    auto cos_sin = [&] {
      auto s = b.scope("rotary_emb");
      return b.add("RopeCosSin", {in.position_ids, inv_freq}, rope_attrs);
    }();
    std::map<int64_t, ir::ValueId> bias_by_window;
    auto attention_bias = [&](int64_t window) {
      if (auto it = bias_by_window.find(window); it != bias_by_window.end()) return it->second;
      auto s = b.scope(window ? fmt::format("mask_sliding_{}", window) : "mask");
      std::vector<ir::ValueId> args = {in.attention_mask, in.input_ids};
      if (in.cache_position != ir::kNone) args.push_back(in.cache_position);
      ir::ValueId bias = b.add1("AttentionBias", args, {{"sliding_window", window}});
      return bias_by_window[window] = bias;
    };

    CausalLmOutputs out;
    for (int64_t i = 0; i < c_.num_layers; ++i) {
      auto layer_scope = b.scope(fmt::format("layers.{}", i));
      const std::string p = fmt::format("model.layers.{}.", i);
      ir::ValueId x = rms_norm(b, h, p + "input_layernorm.weight", c_.hidden_size, "input_layernorm");
      auto [attn, present_k, present_v] =
          attention(b, x, p, in, i, cos_sin, attention_bias(c_.sliding_window[size_t(i)]));
      out.present_key.push_back(present_k);
      out.present_value.push_back(present_v);
      h = b.plus(h, attn);
      x = rms_norm(b, h, p + "post_attention_layernorm.weight", c_.hidden_size, "post_attention_layernorm");
      h = b.plus(h, mlp(b, x, p));
      // A stable debug name per layer: verification diffs hidden states layer by layer by it.
      b.graph().rename(h, fmt::format("/model/layers.{}/output", i));
    }
    h = rms_norm(b, h, "model.norm.weight", c_.hidden_size, "norm");
    // Tied embeddings read the embedding matrix as lm_head; the checkpoint usually omits lm_head.weight.
    const bool tied = c_.tie_word_embeddings;
    ir::ValueId head = tied ? embed : bind(b, "lm_head.weight", {c_.vocab_size, c_.hidden_size}, "vocab_size, " + H);
    if (tied && ckpt_.find("lm_head.weight")) ckpt_.mark_used("lm_head.weight");  // a saved copy of the tie
    auto head_scope = b.scope("lm_head");
    out.logits = b.add1("Linear", {h, head});
    return out;
  }

 private:
  ir::ValueId bind(ir::Builder& b, const std::string& name, std::vector<int64_t> shape, const std::string& why) const {
    return bind_weight(b, ckpt_, name, shape, why);
  }

  ir::ValueId linear(ir::Builder& b, ir::ValueId x, const std::string& prefix, int64_t in, int64_t out, bool bias,
                     const std::string& why) const {
    ir::ValueId w = bind(b, prefix + ".weight", {out, in}, why);
    std::vector<ir::ValueId> inputs = {x, w};
    if (bias) inputs.push_back(bind(b, prefix + ".bias", {out}, why));
    return b.add1("Linear", inputs);
  }

  ir::ValueId rms_norm(ir::Builder& b, ir::ValueId x, const std::string& weight, int64_t n, const std::string& scope) const {
    auto s = b.scope(scope);
    return b.add1("RMSNorm", {x, bind(b, weight, {n}, fmt::format("normalised size {}", n))}, {{"epsilon", c_.rms_norm_eps}});
  }

  std::tuple<ir::ValueId, ir::ValueId, ir::ValueId> attention(ir::Builder& b, ir::ValueId x, const std::string& p,
                                                              const CausalLmInputs& in, int64_t layer,
                                                              const std::vector<ir::ValueId>& cos_sin,
                                                              ir::ValueId bias) const {
    auto s = b.scope("self_attn");
    const std::string a = p + "self_attn.";
    const std::string why = fmt::format("hidden_size={}, heads={}, kv_heads={}, head_dim={}", c_.hidden_size,
                                        c_.num_heads, c_.num_kv_heads, c_.head_dim);
    auto heads = [&](const std::string& proj, int64_t n_heads, bool is_q) {
      auto ps = b.scope(proj);
      ir::ValueId y = linear(b, x, a + proj, c_.hidden_size, n_heads * c_.head_dim, c_.qkv_bias, why);
      y = b.reshape(y, {0, 0, n_heads, c_.head_dim});  // [b, s, heads, head_dim]
      if (c_.qk_norm && proj != "v_proj") {
        const std::string norm = is_q ? "q_norm" : "k_norm";
        y = b.add1("RMSNorm", {y, bind(b, a + norm + ".weight", {c_.head_dim}, "head_dim")}, {{"epsilon", c_.rms_norm_eps}});
      }
      return b.transpose(y, {0, 2, 1, 3});  // [b, heads, s, head_dim]
    };
    ir::ValueId q = heads("q_proj", c_.num_heads, true);
    ir::ValueId k = heads("k_proj", c_.num_kv_heads, false);
    ir::ValueId v = heads("v_proj", c_.num_kv_heads, false);
    q = b.add1("RotaryEmbedding", {q, cos_sin[0], cos_sin[1]});
    k = b.add1("RotaryEmbedding", {k, cos_sin[0], cos_sin[1]});
    // The cache: appended to (growing) or written in place (static); absent for a prefill graph.
    auto update = [&](const std::vector<ir::ValueId>& past, ir::ValueId cur) {
      if (past.empty()) return cur;
      ir::ValueId p = past[size_t(layer)];
      if (in.cache_position != ir::kNone) return b.add1("CacheUpdate", {p, cur, in.cache_position});
      return b.concat({p, cur}, 2);
    };
    ir::ValueId present_k = update(in.past_key, k);
    ir::ValueId present_v = update(in.past_value, v);
    ir::ValueId attn = b.add1("Attention", {q, present_k, present_v, bias}, {{"scale", 1.0 / std::sqrt(double(c_.head_dim))}});
    ir::ValueId o = b.transpose(attn, {0, 2, 1, 3});  // [b, s, heads, head_dim]
    o = b.reshape(o, {0, 0, c_.q_size()});
    auto os = b.scope("o_proj");
    o = linear(b, o, a + "o_proj", c_.q_size(), c_.hidden_size, c_.o_bias, why);
    return {o, present_k, present_v};
  }

  ir::ValueId mlp(ir::Builder& b, ir::ValueId x, const std::string& p) const {
    auto s = b.scope("mlp");
    const std::string why = fmt::format("hidden_size={}, intermediate_size={}", c_.hidden_size, c_.intermediate_size);
    ir::ValueId gate = linear(b, x, p + "mlp.gate_proj", c_.hidden_size, c_.intermediate_size, c_.mlp_bias, why);
    ir::ValueId up = linear(b, x, p + "mlp.up_proj", c_.hidden_size, c_.intermediate_size, c_.mlp_bias, why);
    ir::ValueId act = b.add1("SwiGLU", {gate, up});
    return linear(b, act, p + "mlp.down_proj", c_.intermediate_size, c_.hidden_size, c_.mlp_bias, why);
  }

  const io::Checkpoint& ckpt_;
  DecoderConfig c_;
  ModelSummary s_;
};

}  // namespace

std::unique_ptr<CausalLm> make_decoder(const io::Checkpoint& ckpt, const DecoderTraits& traits, std::string hf_class) {
  return std::make_unique<Decoder>(ckpt, parse_decoder_config(ckpt, traits), std::move(hf_class));
}

}  // namespace hfx::models
