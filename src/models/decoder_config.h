// The shared decoder-only LLM (Transformers' LlamaForCausalLM and the families that differ from it
// only in table entries): hyper-parameters parsed once into a typed struct.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "models/rope.h"

namespace hfx::models {

// How a model_type maps onto the shared decoder. A new family member is a row of these.
struct DecoderTraits {
  bool qkv_bias_always = false;  // Qwen2: q/k/v projections always carry a bias
  bool qk_norm = false;          // Qwen3: RMSNorm over head_dim on q and k before rope
  // Where the sliding window comes from: nowhere, `sliding_window` on every layer (Mistral), or
  // `layer_types` (Qwen2/Qwen3: "sliding_attention" layers only).
  enum class Window { None, AllLayers, LayerTypes } window = Window::None;
  bool head_dim_in_config = true;  // honour an explicit `head_dim`
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
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;
  bool o_bias = false;
  bool mlp_bias = false;
  bool qk_norm = false;
  std::vector<int64_t> sliding_window;  // per layer; 0 = full attention
  RopeSpec rope;
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> bos_token_id, pad_token_id;

  int64_t q_size() const { return num_heads * head_dim; }
  int64_t kv_size() const { return num_kv_heads * head_dim; }
};

DecoderConfig parse_decoder_config(const io::Checkpoint& ckpt, const DecoderTraits& traits);

}  // namespace hfx::models
