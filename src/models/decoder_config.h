// The shared decoder-only LLM (Transformers' LlamaForCausalLM and the families that differ from it
// only in table entries): hyper-parameters parsed once into a typed struct.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "models/blocks.h"
#include "models/moe.h"
#include "models/rope.h"

namespace hfx::models {

// How a model_type maps onto the shared decoder. A new family member is a row of these.
struct DecoderTraits {
  bool qkv_bias_always = false;  // Qwen2: q/k/v projections always carry a bias
  // q/k normalisation before rope: RMSNorm over head_dim per head (Qwen3, Gemma 3), RMSNorm over the
  // whole projection before the head split (OLMo 2), or StableLM's per-head LayerNorms when the config
  // sets qk_layernorm.
  enum class QkNorm { None, PerHead, Whole, StableLm } qk_norm = QkNorm::None;
  // Where the sliding window comes from: nowhere, `sliding_window` on every layer (Mistral), or
  // `layer_types` (Qwen2/Qwen3: "sliding_attention" layers only).
  enum class Window { None, AllLayers, LayerTypes } window = Window::None;
  // Without layer_types: 0 derives them from use_sliding_window/max_window_layers (Qwen2); n > 0
  // makes every n-th layer full attention and the others sliding (Gemma 2: 2; Gemma 3: the config's
  // sliding_window_pattern, else n).
  int64_t sliding_pattern = 0;
  // Without layer_types (and no sliding_pattern), the config class's rule: Qwen2's use_sliding_window /
  // max_window_layers; every layer when sliding_window is set (Ministral); the layers without rope
  // when use_sliding_window and sliding_window are set (SmolLM3).
  enum class WindowDefault { Qwen2, AllLayers, NoRopeLayers } window_default = WindowDefault::Qwen2;
  bool head_dim_in_config = true;  // honour an explicit `head_dim`
  int64_t default_head_dim = 0;    // without one: this (Gemma: 256), or hidden_size / heads when 0
  int64_t default_sliding_window = 0;  // the config class's default when `sliding_window` is absent

  // Norms: RMSNorm (Llama), RMSNorm scaled by (1 + w) (Gemma), or LayerNorm (StableLM, Starcoder2).
  NormKind norm = NormKind::Rms;
  const char* eps_key = "rms_norm_eps";
  double default_eps = 1e-6;
  // Residual wiring of a layer:
  //   PreNorm   h += attn(norm(h)); h += mlp(norm(h))                                    (Llama)
  //   Sandwich  h += post_attn_norm(attn(norm(h))); h += post_ffw_norm(mlp(pre_ffw_norm(h))) (Gemma 2/3)
  //   PostNorm  h += post_attn_norm(attn(h)); h += post_ffw_norm(mlp(h))                   (OLMo 2)
  // and a config's use_parallel_residual (StableLM) makes PreNorm h += attn(norm(h)) + mlp(norm(h)).
  enum class Layout { PreNorm, Sandwich, PostNorm } layout = Layout::PreNorm;
  bool fused_qkv = false;  // one qkv_proj (Phi-3), split after the matmul
  // MLP: gate/up/down projections (Llama), one gate_up_proj (Phi-3), or a plain in -> act -> out
  // (Starcoder2; the names are plain_mlp_in / plain_mlp_out below).
  enum class Mlp { Gated, GatedFused, Plain } mlp = Mlp::Gated;
  const char* act_key = "hidden_act";
  const char* default_act = "silu";
  bool gelu_means_tanh = false;  // GemmaConfig rewrites hidden_act "gelu" to gelu_pytorch_tanh

  bool embed_scale_sqrt_hidden = false;  // Gemma: embeddings times sqrt(hidden_size) (in the model dtype)
  bool query_pre_attn_scalar = false;    // Gemma 2/3: scale = query_pre_attn_scalar ** -0.5
  // Soft-capping (tanh(x / c) * c) of the attention scores (Gemma 2) and of the logits (Gemma 2/3):
  // < 0 ignores the config field; otherwise the field is honoured and this is its default when absent
  // (0 = none; a field set to null also means none).
  double attn_softcap_default = -1;
  double final_softcap_default = -1;
  bool granite_multipliers = false;      // Granite: embedding/residual/attention multipliers, logits_scaling
  bool rope_per_layer_type = false;      // Gemma 3: rope_parameters per layer type (local and global bases)
  // Config field names that differ by family.
  const char* attention_bias_key = "attention_bias";  // StableLM: use_qkv_bias (q/k/v only); Starcoder2: use_bias
  bool default_attention_bias = false;                // Starcoder2's use_bias defaults to true
  bool attention_bias_on_o = true;                    // the flag also biases o_proj
  const char* o_bias_key = nullptr;                   // Seed-OSS: o_proj's bias has a flag of its own
  bool bias_on_mlp = false;                           // ... and every MLP projection (Starcoder2's use_bias)
  bool parallel_residual_in_config = false;           // StableLM: use_parallel_residual
  RopeDefaults rope;
  // Phi: every projection and lm_head carry a bias, the layer is always parallel (attention and MLP
  // on one norm), and checkpoint names differ.
  bool all_biases = false;
  bool parallel_residual_always = false;
  const char* o_proj_name = "o_proj";      // Phi: self_attn.dense
  const char* plain_mlp_in = "c_fc";       // Mlp::Plain's projections; Phi: fc1, fc2
  const char* plain_mlp_out = "c_proj";
  const char* final_norm_name = "norm";    // model.<this>; Phi: final_layernorm
  // Sandwich-layout norm names (Gemma 2's); GLM-4: post_self_attn_layernorm, post_attention_layernorm
  // (before the MLP), post_mlp_layernorm.
  const char* post_attn_norm_name = "post_attention_layernorm";
  const char* pre_ffw_norm_name = "pre_feedforward_layernorm";
  const char* post_ffw_norm_name = "post_feedforward_layernorm";
  // Layers without rope (NoPE): SmolLM3's no_rope_layers[i] == 0 (absent: every
  // no_rope_layer_interval-th layer, default 4); EXAONE 4's full-attention layers whenever the config
  // has a sliding_window.
  // Cohere 2's full-attention layers, always.
  enum class NoRope { None, FromList, FullLayersWhenWindowed, FullLayers } no_rope = NoRope::None;
  bool default_tie_word_embeddings = false;  // the config class's default when the field is absent
  bool rope_interleaved = false;             // Helium, Cohere: GPT-J style pairwise rotary
  bool layer_norm_bias = true;               // NormKind::Layer with a bias (Cohere's have none)
  bool logit_scale = false;                  // Cohere: logits times the config's logit_scale
  // A boolean config flag whose feature hfx does not build, refused in one line when true (Phi:
  // qk_layernorm, one LayerNorm over head_dim shared by the heads; Cohere: use_qk_norm).
  const char* refused_flag = nullptr;
  // Sparse mixture-of-experts MLPs: Mixtral's block_sparse_moe (w1 / w3 / w2, every layer, top-k
  // always renormalised) or Qwen's mlp (gate_proj / up_proj / down_proj, norm_topk_prob,
  // moe_intermediate_size, decoder_sparse_step and mlp_only_layers choosing the MoE layers).
  enum class Moe { None, Mixtral, Qwen } moe = Moe::None;
  bool moe_shared_expert = false;  // Qwen2-MoE: a gated shared expert beside the routed ones
};

struct DecoderConfig {
  std::string model_type;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 0;
  double norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;
  bool o_bias = false;
  bool mlp_bias = false;
  bool qk_norm = false;  // the trait's q/k norm is present in this checkpoint
  bool parallel_residual = false;
  bool lm_head_bias = false;
  Activation act = Activation::Silu;
  double attention_scale = 0;        // multiplies q @ k^T
  double attn_softcap = 0;           // 0 = none
  double final_softcap = 0;          // 0 = none
  double embedding_multiplier = 1;   // embeddings times this (1 = none)
  double residual_multiplier = 1;    // branch outputs times this before the residual add (1 = none)
  double logits_scaling = 1;         // logits divided by this (1 = none)
  double logit_scale = 1;            // logits multiplied by this (Cohere; 1 = none)
  std::vector<int64_t> sliding_window;  // per layer; 0 = full attention
  std::vector<RopeSpec> ropes;          // one per rope variant
  std::vector<size_t> layer_rope;       // per layer: index into ropes
  std::vector<bool> layer_has_rope;     // per layer: false for a NoPE layer (SmolLM3)
  std::vector<bool> layer_is_moe;       // per layer: the MLP is `moe` (DecoderTraits::moe)
  MoeSpec moe;
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> bos_token_id, pad_token_id;

  int64_t q_size() const { return num_heads * head_dim; }
  int64_t kv_size() const { return num_kv_heads * head_dim; }
};

DecoderConfig parse_decoder_config(const io::Checkpoint& ckpt, const DecoderTraits& traits);

}  // namespace hfx::models
