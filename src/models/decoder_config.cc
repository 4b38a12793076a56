#include "models/decoder_config.h"

#include "core/error.h"

namespace hfx::models {

namespace {
std::string file_name(const io::JsonFile& f) { return f.path.filename().string(); }
}  // namespace

DecoderConfig parse_decoder_config(const io::Checkpoint& ckpt, const DecoderTraits& traits) {
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
  if (traits.head_dim_in_config) head_dim = io::optional_int(f, j, "head_dim", 1, 65536);
  if (!head_dim) {
    if (c.hidden_size % c.num_heads)
      bad_input("{}: hidden_size ({}) is not a multiple of num_attention_heads ({}) and no head_dim is given",
                file_name(f), c.hidden_size, c.num_heads);
    head_dim = c.hidden_size / c.num_heads;
  }
  c.head_dim = *head_dim;
  const auto act = io::optional_string(f, j, "hidden_act").value_or("silu");
  if (act != "silu" && act != "swish")
    unsupported("{}: hidden_act \"{}\" is not supported by the {} decoder (expected silu)", file_name(f), act, c.model_type);
  c.max_position_embeddings = io::optional_int(f, j, "max_position_embeddings", 1).value_or(2048);
  c.rms_norm_eps = io::optional_number(f, j, "rms_norm_eps").value_or(1e-6);
  c.tie_word_embeddings = io::optional_bool(f, j, "tie_word_embeddings").value_or(false);
  const bool attention_bias = io::optional_bool(f, j, "attention_bias").value_or(false);
  c.qkv_bias = traits.qkv_bias_always || attention_bias;
  c.o_bias = attention_bias && !traits.qkv_bias_always;
  c.mlp_bias = io::optional_bool(f, j, "mlp_bias").value_or(false);
  c.qk_norm = traits.qk_norm;

  c.sliding_window.assign(size_t(c.num_layers), 0);
  const auto window = io::optional_int(f, j, "sliding_window", 1);
  switch (traits.window) {
    case DecoderTraits::Window::None: break;
    case DecoderTraits::Window::AllLayers:
      if (window) c.sliding_window.assign(size_t(c.num_layers), *window);
      break;
    case DecoderTraits::Window::LayerTypes: {
      auto types = io::optional_string_list(f, j, "layer_types");
      if (!types) {
        // Older files: derived the way the config class does (use_sliding_window, max_window_layers).
        const bool use = io::optional_bool(f, j, "use_sliding_window").value_or(false);
        const int64_t first = io::optional_int(f, j, "max_window_layers", 0).value_or(c.num_layers);
        types = std::vector<std::string>();
        for (int64_t i = 0; i < c.num_layers; ++i)
          types->push_back(use && window && i >= first ? "sliding_attention" : "full_attention");
      }
      if (int64_t(types->size()) != c.num_layers)
        bad_input("{}: layer_types has {} entries, num_hidden_layers is {}", file_name(f), types->size(), c.num_layers);
      for (int64_t i = 0; i < c.num_layers; ++i) {
        const auto& t = (*types)[size_t(i)];
        if (t == "sliding_attention") {
          if (!window) bad_input("{}: layer {} is sliding_attention but sliding_window is not set", file_name(f), i);
          c.sliding_window[size_t(i)] = *window;
        } else if (t != "full_attention") {
          unsupported("{}: layer_types[{}] = \"{}\" (supported: full_attention, sliding_attention)", file_name(f), i, t);
        }
      }
      break;
    }
  }
  c.rope = parse_rope(f, c.head_dim, c.max_position_embeddings);

  // Generation ids: generation_config.json wins over config.json, as in Transformers' generate().
  for (const io::JsonFile* src : {&f, ckpt.generation_config() ? &*ckpt.generation_config() : nullptr}) {
    if (!src) continue;
    if (auto eos = io::optional_int_list(*src, src->json, "eos_token_id", 0)) c.eos_token_ids = *eos;
    if (auto bos = io::optional_int(*src, src->json, "bos_token_id", 0)) c.bos_token_id = bos;
    if (auto pad = io::optional_int(*src, src->json, "pad_token_id", 0)) c.pad_token_id = pad;
  }
  return c;
}

}  // namespace hfx::models
