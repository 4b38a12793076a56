#include "models/decoder_config.h"

#include <cmath>

#include "core/error.h"
#include "models/blocks.h"

namespace hfx::models {

namespace {

std::string file_name(const io::JsonFile& f) { return f.path.filename().string(); }

// A soft-capping field: absent -> the family default, null -> none, else a positive number.
double softcap_field(const io::JsonFile& f, const char* key, double default_value) {
  if (default_value < 0) return 0;  // the family does not apply it (Gemma 3's eager attention ignores it)
  if (!f.json.contains(key)) return default_value;
  const double v = io::optional_number(f, f.json, key).value_or(0.0);
  if (v < 0) bad_input("{}: {} must be positive, found {}", file_name(f), key, v);
  return v;
}

// Per-layer window sizes from the traits' window source (`has_rope`: per layer, for SmolLM3's rule).
std::vector<int64_t> parse_windows(const io::JsonFile& f, const DecoderTraits& t, int64_t layers,
                                   const std::vector<bool>& has_rope) {
  const auto& j = f.json;
  std::vector<int64_t> windows(size_t(layers), 0);
  // 0: no window (null, absent without a family default, or Qwen2-MoE's explicit 0).
  int64_t window = io::optional_int(f, j, "sliding_window", 0).value_or(0);
  if (!j.contains("sliding_window")) window = t.default_sliding_window;
  switch (t.window) {
    case DecoderTraits::Window::None: break;
    case DecoderTraits::Window::AllLayers:
      if (window) windows.assign(size_t(layers), window);
      break;
    case DecoderTraits::Window::LayerTypes: {
      auto types = io::optional_string_list(f, j, "layer_types");
      if (!types) {
        types = std::vector<std::string>();
        if (t.sliding_pattern > 0) {
          // Gemma 2/3, OLMo 3, EXAONE 4, Cohere 2 config classes: every n-th layer is full attention.
          const int64_t n = io::optional_int(f, j, "sliding_window_pattern", 1).value_or(t.sliding_pattern);
          for (int64_t i = 0; i < layers; ++i) types->push_back((i + 1) % n ? "sliding_attention" : "full_attention");
        } else if (t.window_default == DecoderTraits::WindowDefault::AllLayers) {
          types->assign(size_t(layers), window ? "sliding_attention" : "full_attention");
        } else if (t.window_default == DecoderTraits::WindowDefault::NoRopeLayers) {
          const bool use = io::optional_bool(f, j, "use_sliding_window").value_or(false);
          for (int64_t i = 0; i < layers; ++i)
            types->push_back(use && window && !has_rope[size_t(i)] ? "sliding_attention" : "full_attention");
        } else {
          // Older Qwen2 files: derived the way the config class does (use_sliding_window, max_window_layers).
          const bool use = io::optional_bool(f, j, "use_sliding_window").value_or(false);
          const int64_t first = io::optional_int(f, j, "max_window_layers", 0).value_or(layers);
          for (int64_t i = 0; i < layers; ++i)
            types->push_back(use && window && i >= first ? "sliding_attention" : "full_attention");
        }
      }
      if (int64_t(types->size()) != layers)
        bad_input("{}: layer_types has {} entries, num_hidden_layers is {}", file_name(f), types->size(), layers);
      for (int64_t i = 0; i < layers; ++i) {
        const auto& type = (*types)[size_t(i)];
        if (type == "sliding_attention") {
          if (!window) bad_input("{}: layer {} is sliding_attention but sliding_window is not set", file_name(f), i);
          windows[size_t(i)] = window;
        } else if (type != "full_attention") {
          unsupported("{}: layer_types[{}] = \"{}\" (supported: full_attention, sliding_attention)", file_name(f), i,
                      type);
        }
      }
      break;
    }
  }
  return windows;
}

// Gemma 3: one rope for full-attention layers (rope_theta, default 1e6, and any scaling) and one for
// sliding layers (rope_local_base_freq, default 1e4), nested per layer type in v5 files.
void parse_layer_type_ropes(const io::JsonFile& f, DecoderConfig& c) {
  const auto& j = f.json;
  const nlohmann::json empty = nlohmann::json::object();
  const nlohmann::json* full = &empty;
  const nlohmann::json* sliding = &empty;
  if (const auto* p = io::optional_object(f, j, "rope_parameters")) {
    io::JsonFile pf{f.path, *p};
    if (const auto* x = io::optional_object(pf, *p, "full_attention")) full = x;
    if (const auto* x = io::optional_object(pf, *p, "sliding_attention")) sliding = x;
  } else if (const auto* s = io::optional_object(f, j, "rope_scaling")) {
    full = s;  // v4: rope_scaling applies to the global layers only
  }
  const double global_theta = io::optional_number(f, j, "rope_theta").value_or(1e6);
  const double local_theta = io::optional_number(f, j, "rope_local_base_freq").value_or(1e4);
  c.ropes = {parse_rope_params(f, *full, global_theta, c.head_dim, c.max_position_embeddings),
             parse_rope_params(f, *sliding, local_theta, c.head_dim, c.max_position_embeddings)};
  for (int64_t i = 0; i < c.num_layers; ++i) c.layer_rope[size_t(i)] = c.sliding_window[size_t(i)] ? 1 : 0;
}

}  // namespace

DecoderConfig parse_decoder_config(const io::Checkpoint& ckpt, const DecoderTraits& t) {
  const io::JsonFile& f = ckpt.config();
  const auto& j = f.json;
  DecoderConfig c;
  c.model_type = ckpt.model_type();
  // Bounds reject absurd values before anything is allocated from them.
  constexpr int64_t kMaxDim = int64_t(1) << 24;
  c.vocab_size = io::require_int(f, j, "vocab_size", 1, int64_t(1) << 26);
  c.hidden_size = io::require_int(f, j, "hidden_size", 1, kMaxDim);
  c.intermediate_size = io::require_int(f, j, "intermediate_size", 1, kMaxDim);
  c.num_layers = io::require_int(f, j, "num_hidden_layers", 1, 4096);
  c.num_heads = io::require_int(f, j, "num_attention_heads", 1, 4096);
  c.num_kv_heads = io::optional_int(f, j, "num_key_value_heads", 1, 4096).value_or(c.num_heads);
  if (c.num_heads % c.num_kv_heads)
    bad_input("{}: num_attention_heads ({}) must be a multiple of num_key_value_heads ({})", file_name(f), c.num_heads,
              c.num_kv_heads);
  std::optional<int64_t> head_dim;
  if (t.head_dim_in_config) head_dim = io::optional_int(f, j, "head_dim", 1, 65536);
  if (!head_dim && t.default_head_dim) head_dim = t.default_head_dim;
  if (!head_dim) {
    if (c.hidden_size % c.num_heads)
      bad_input("{}: hidden_size ({}) is not a multiple of num_attention_heads ({}) and no head_dim is given",
                file_name(f), c.hidden_size, c.num_heads);
    head_dim = c.hidden_size / c.num_heads;
  }
  c.head_dim = *head_dim;
  if (io::optional_bool(f, j, "use_bidirectional_attention").value_or(false))
    unsupported("{}: use_bidirectional_attention is not supported (hfx exports causal decoders)", file_name(f));

  auto act = io::optional_string(f, j, t.act_key).value_or(t.default_act);
  if (t.gelu_means_tanh && act == "gelu") act = "gelu_pytorch_tanh";
  c.act = parse_activation(f, t.act_key, act);
  c.max_position_embeddings = io::optional_int(f, j, "max_position_embeddings", 1).value_or(2048);
  c.norm_eps = norm_eps(f, j, t.eps_key, t.default_eps);
  c.tie_word_embeddings = io::optional_bool(f, j, "tie_word_embeddings").value_or(t.default_tie_word_embeddings);
  const bool attention_bias = io::optional_bool(f, j, t.attention_bias_key).value_or(t.default_attention_bias);
  c.qkv_bias = t.qkv_bias_always || attention_bias;
  c.o_bias = attention_bias && t.attention_bias_on_o && !t.qkv_bias_always;
  if (t.o_bias_key) c.o_bias = io::optional_bool(f, j, t.o_bias_key).value_or(false);
  c.mlp_bias = io::optional_bool(f, j, "mlp_bias").value_or(false) || (t.bias_on_mlp && attention_bias);
  if (t.all_biases) c.qkv_bias = c.o_bias = c.mlp_bias = c.lm_head_bias = true;
  switch (t.qk_norm) {
    case DecoderTraits::QkNorm::None: break;
    case DecoderTraits::QkNorm::PerHead:
    case DecoderTraits::QkNorm::Whole: c.qk_norm = true; break;
    case DecoderTraits::QkNorm::StableLm: c.qk_norm = io::optional_bool(f, j, "qk_layernorm").value_or(false); break;
  }
  if (t.parallel_residual_in_config)
    c.parallel_residual = io::optional_bool(f, j, "use_parallel_residual").value_or(false);
  c.parallel_residual = c.parallel_residual || t.parallel_residual_always;

  // Scales. Python computes them in double and torch rounds them to f32 when they meet a tensor.
  c.attention_scale = std::pow(double(c.head_dim), -0.5);
  if (t.query_pre_attn_scalar)
    c.attention_scale = std::pow(io::optional_number(f, j, "query_pre_attn_scalar").value_or(256.0), -0.5);
  if (t.embed_scale_sqrt_hidden) c.embedding_multiplier = std::sqrt(double(c.hidden_size));
  if (t.granite_multipliers) {
    c.embedding_multiplier = io::optional_number(f, j, "embedding_multiplier").value_or(1.0);
    c.residual_multiplier = io::optional_number(f, j, "residual_multiplier").value_or(1.0);
    c.attention_scale = io::optional_number(f, j, "attention_multiplier").value_or(1.0);
    c.logits_scaling = io::optional_number(f, j, "logits_scaling").value_or(1.0);
    if (c.logits_scaling == 0) bad_input("{}: logits_scaling must not be 0", file_name(f));
  }
  if (t.logit_scale) c.logit_scale = io::optional_number(f, j, "logit_scale").value_or(0.0625);  // CohereConfig's default
  if (t.refused_flag && io::optional_bool(f, j, t.refused_flag).value_or(false))
    unsupported("{}: {} is not supported for model_type {}", file_name(f), t.refused_flag, c.model_type);
  c.attn_softcap = softcap_field(f, "attn_logit_softcapping", t.attn_softcap_default);
  c.final_softcap = softcap_field(f, "final_logit_softcapping", t.final_softcap_default);

  c.layer_has_rope.assign(size_t(c.num_layers), true);
  if (t.no_rope == DecoderTraits::NoRope::FromList) {
    auto flags = io::optional_int_list(f, j, "no_rope_layers", 0, 1);
    if (!flags) {
      const int64_t every = io::optional_int(f, j, "no_rope_layer_interval", 1).value_or(4);
      flags = std::vector<int64_t>();
      for (int64_t i = 0; i < c.num_layers; ++i) flags->push_back((i + 1) % every != 0);
    }
    if (int64_t(flags->size()) != c.num_layers)
      bad_input("{}: no_rope_layers has {} entries, num_hidden_layers is {}", file_name(f), flags->size(), c.num_layers);
    for (int64_t i = 0; i < c.num_layers; ++i) c.layer_has_rope[size_t(i)] = (*flags)[size_t(i)] != 0;
  }
  c.sliding_window = parse_windows(f, t, c.num_layers, c.layer_has_rope);
  if (t.no_rope == DecoderTraits::NoRope::FullLayersWhenWindowed || t.no_rope == DecoderTraits::NoRope::FullLayers) {
    // Exaone4Attention: rope when config.sliding_window is None or the layer slides (absent: the
    // config class's 4096, not None). Cohere2Attention: only where the layer slides.
    const bool windowed = t.no_rope == DecoderTraits::NoRope::FullLayers ||
                          !(j.contains("sliding_window") && j["sliding_window"].is_null());
    for (int64_t i = 0; i < c.num_layers; ++i) c.layer_has_rope[size_t(i)] = !windowed || c.sliding_window[size_t(i)] > 0;
  }
  c.layer_rope.assign(size_t(c.num_layers), 0);
  if (t.rope_per_layer_type) parse_layer_type_ropes(f, c);
  else c.ropes = {parse_rope(f, c.head_dim, c.max_position_embeddings, t.rope)};

  c.layer_is_moe.assign(size_t(c.num_layers), false);
  if (t.moe != DecoderTraits::Moe::None) {
    const bool mixtral = t.moe == DecoderTraits::Moe::Mixtral;
    // Qwen's config class names it num_experts, and v5 files save it under Mixtral's name.
    const auto local = io::optional_int(f, j, "num_local_experts", 1, 4096);
    c.moe.num_experts = local ? *local : io::require_int(f, j, "num_experts", 1, 4096);
    c.moe.top_k = io::require_int(f, j, "num_experts_per_tok", 1, c.moe.num_experts);
    c.moe.hidden = c.hidden_size;
    c.moe.intermediate = mixtral ? c.intermediate_size : io::require_int(f, j, "moe_intermediate_size", 1, kMaxDim);
    c.moe.normalize_top_k = mixtral || io::optional_bool(f, j, "norm_topk_prob").value_or(false);
    c.moe.act = c.act;
    if (t.moe_shared_expert)
      c.moe.shared_intermediate = io::require_int(f, j, "shared_expert_intermediate_size", 1, kMaxDim);
    if (mixtral) c.moe.expert = {"w1", "w3", "w2"};
    c.layer_is_moe = mixtral ? std::vector<bool>(size_t(c.num_layers), true) : qwen_sparse_moe_layers(f, c.num_layers);
  }
  read_generation_ids(ckpt, c.vocab_size, c.eos_token_ids, c.bos_token_id, c.pad_token_id);
  return c;
}

}  // namespace hfx::models
