#include "models/mamba2_hybrid.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "models/mamba2_hybrid_network.h"

namespace hfx::models {

namespace {

std::string file_name(const io::JsonFile& f) { return f.path.filename().string(); }

double multiplier(const io::JsonFile& f, const nlohmann::json& j, std::string_view key) {
  return io::optional_number(f, j, key).value_or(1.0);
}

// Attention layers from layer_types (Granite; layers_block_type in older configs, legacy names
// remapped as Transformers does) or attn_layer_indices (Bamba); every other layer is a mixer.
std::vector<HybridBlock> hybrid_layers(const io::JsonFile& f, const nlohmann::json& j, int64_t num_layers) {
  std::vector<HybridBlock> out;
  if (j.contains("attn_layer_indices") && !j["attn_layer_indices"].is_null()) {
    auto idxs = io::optional_int_list(f, j, "attn_layer_indices", 0, num_layers - 1);
    for (int64_t i = 0; i < num_layers; ++i)
      out.push_back(idxs && std::find(idxs->begin(), idxs->end(), i) != idxs->end() ? HybridBlock::Attention
                                                                                     : HybridBlock::Mamba);
    return out;
  }
  const char* key = j.contains("layer_types") && !j["layer_types"].is_null() ? "layer_types" : "layers_block_type";
  auto types = io::optional_string_list(f, j, key);
  if (!types) types = std::vector<std::string>(size_t(num_layers), "linear_attention");
  if (int64_t(types->size()) != num_layers)
    bad_input("{}: {} has {} entries, num_hidden_layers is {}", file_name(f), key, types->size(), num_layers);
  for (int64_t i = 0; i < num_layers; ++i) {
    const auto& t = (*types)[size_t(i)];
    const bool attention = t == "attention" || t == "full_attention";
    if (!attention && t != "mamba" && t != "linear_attention")
      unsupported("{}: {}[{}] = \"{}\" (supported: mamba / linear_attention, attention / full_attention)",
                  file_name(f), key, i, t);
    out.push_back(attention ? HybridBlock::Attention : HybridBlock::Mamba);
  }
  return out;
}

// GraniteMoeHybridMoE (num_local_experts > 0; 0 is the dense models): the router's top
// num_experts_per_tok logits, softmax over those, each expert a gated MLP of intermediate_size stacked
// in input_linear [E, 2 I, hidden] (gate rows, then up rows) and output_linear [E, hidden, I].
std::optional<MoeSpec> granite_experts(const io::JsonFile& f, const HybridConfig& c) {
  const auto& j = f.json;
  const int64_t experts = io::optional_int(f, j, "num_local_experts", 0, 1 << 16).value_or(8);
  if (experts == 0) return std::nullopt;
  MoeSpec m;
  m.num_experts = experts;
  m.top_k = io::optional_int(f, j, "num_experts_per_tok", 1, experts).value_or(2);
  m.hidden = c.hidden_size;
  m.intermediate = io::optional_int(f, j, "intermediate_size", 1, int64_t(1) << 24).value_or(11008);
  m.scores = RouterScores::TopKThenSoftmax;
  m.act = c.act;
  m.router = "router.layer";
  m.layout = ExpertLayout::Stacked;
  m.stacked_gate_up = "input_linear.weight";
  m.stacked_down = "output_linear.weight";
  return m;
}

HybridConfig parse_config(const io::Checkpoint& ckpt, HybridTraits traits, bool granite) {
  const io::JsonFile& f = ckpt.config();
  const auto& j = f.json;
  constexpr int64_t kMaxDim = int64_t(1) << 24;
  HybridConfig c;
  c.traits = std::move(traits);
  c.vocab_size = io::require_int(f, j, "vocab_size", 1, int64_t(1) << 26);
  c.hidden_size = io::require_int(f, j, "hidden_size", 1, kMaxDim);
  c.num_layers = io::require_int(f, j, "num_hidden_layers", 1, 4096);
  const HeadCounts heads = parse_head_counts(f, c.hidden_size);
  c.num_heads = heads.heads;
  c.num_kv_heads = heads.kv_heads;
  c.head_dim = c.hidden_size / c.num_heads;  // the attention reads no head_dim from the config
  if (granite) {
    c.intermediate_size = io::optional_int(f, j, "shared_intermediate_size", 1, kMaxDim).value_or(1024);
  } else {
    c.intermediate_size = io::optional_int(f, j, "intermediate_size", 1, kMaxDim).value_or(14336);
    c.mlp_bias = io::optional_bool(f, j, "mlp_bias").value_or(false);
  }
  c.eps = norm_eps(f, j, "rms_norm_eps", granite ? 1e-6 : 1e-5);
  if (granite) {
    c.embedding_multiplier = multiplier(f, j, "embedding_multiplier");
    c.residual_multiplier = multiplier(f, j, "residual_multiplier");
    c.attention_scale = multiplier(f, j, "attention_multiplier");
    c.logits_scaling = multiplier(f, j, "logits_scaling");
    if (c.logits_scaling == 0) bad_input("{}: logits_scaling is 0 (the logits are divided by it)", file_name(f));
  } else {
    c.attention_scale = 1.0 / std::sqrt(double(c.head_dim));  // BambaAttention: head_dim ** -0.5
  }
  c.tie_word_embeddings = io::optional_bool(f, j, "tie_word_embeddings").value_or(false);
  c.attention_bias = io::optional_bool(f, j, "attention_bias").value_or(false);
  c.act = parse_activation(f, "hidden_act", io::optional_string(f, j, "hidden_act").value_or("silu"));
  if (granite) c.ffn_experts = granite_experts(f, c);
  const int64_t max_pos = io::optional_int(f, j, "max_position_embeddings", 1).value_or(granite ? 2048 : 262144);
  if (!granite) {
    c.rope = parse_rope(f, c.head_dim, max_pos, {.partial_rotary_factor = 0.5});  // BambaConfig's default
  } else if (const auto pos = io::optional_string(f, j, "position_embedding_type"); pos && *pos == "rope") {
    c.rope = parse_rope(f, c.head_dim, max_pos);
  } else if (pos && *pos != "nope") {
    unsupported("{}: position_embedding_type \"{}\" (supported: rope, nope or none)", file_name(f), *pos);
  }
  c.layers = hybrid_layers(f, j, c.num_layers);
  // GraniteMoeHybridConfig's and BambaConfig's mamba_* names and defaults.
  c.mixer = parse_mamba2_mixer(f, c.hidden_size,
                               {.heads = "mamba_n_heads", .head_dim = "mamba_d_head", .state_size = "mamba_d_state",
                                .groups = "mamba_n_groups", .expand = "mamba_expand", .conv_kernel = "mamba_d_conv",
                                .chunk = "mamba_chunk_size", .proj_bias = "mamba_proj_bias",
                                .conv_bias = "mamba_conv_bias", .eps = "rms_norm_eps"},
                               {.heads = 128, .state_size = 256, .groups = 1, .eps = c.eps, .head_dim_auto = true});
  read_generation_ids(ckpt, c.vocab_size, c.eos_token_ids, c.bos_token_id, c.pad_token_id);
  return c;
}

}  // namespace

std::unique_ptr<CausalLm> make_granitemoehybrid(const io::Checkpoint& ckpt) {
  return make_mamba2_hybrid(ckpt, parse_config(ckpt,
                                               {.model_type = "granitemoehybrid",
                                                .hf_class = "GraniteMoeHybridForCausalLM",
                                                .ffn_norm = "post_attention_layernorm",
                                                .ffn = "shared_mlp",
                                                .ffn_kind = HybridFfn::SharedMlp},
                                               true));
}

std::unique_ptr<CausalLm> make_bamba(const io::Checkpoint& ckpt) {
  return make_mamba2_hybrid(ckpt, parse_config(ckpt,
                                               {.model_type = "bamba",
                                                .hf_class = "BambaForCausalLM",
                                                .final_norm = "final_layernorm",
                                                .ffn_norm = "pre_ff_layernorm",
                                                .ffn = "feed_forward",
                                                .ffn_kind = HybridFfn::GatedMlp},
                                               false));
}

}  // namespace hfx::models
