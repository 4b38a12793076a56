#include "models/nemotron_h.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "core/error.h"
#include "models/mamba2_hybrid_network.h"

namespace hfx::models {

namespace {

std::string file_name(const io::JsonFile& f) { return f.path.filename().string(); }

// NemotronHConfig reads some mamba settings under older names first (mamba_n_groups over n_groups,
// ...): the key that names the value, the legacy one when config.json has it.
std::string key_of(const nlohmann::json& j, const char* legacy, const char* current) {
  return j.contains(legacy) && !j[legacy].is_null() ? legacy : current;
}

HybridBlock block_of(const io::JsonFile& f, const std::string& key, size_t i, const std::string& type) {
  // "mamba" and "attention" are the legacy names Transformers remaps (remap_legacy_layer_types).
  if (type == "linear_attention" || type == "mamba") return HybridBlock::Mamba;
  if (type == "full_attention" || type == "attention") return HybridBlock::Attention;
  if (type == "mlp") return HybridBlock::Mlp;
  if (type == "moe") return HybridBlock::Moe;
  unsupported("{}: {}[{}] = \"{}\" (supported: linear_attention / mamba, full_attention / attention, mlp, moe)",
              file_name(f), key, i, type);
}

// layers_block_type (or its alias layer_types); else the legacy hybrid_override_pattern, one
// character a layer; else NemotronHConfig's default (mamba, moe, attention, mlp). The list's length is the
// depth: num_hidden_layers is ignored, as Transformers ignores it.
std::vector<HybridBlock> nemotron_layers(const io::JsonFile& f) {
  const auto& j = f.json;
  std::vector<HybridBlock> out;
  for (const char* key : {"layers_block_type", "layer_types"}) {
    if (auto types = io::optional_string_list(f, j, key)) {
      for (size_t i = 0; i < types->size(); ++i) out.push_back(block_of(f, key, i, (*types)[i]));
      if (out.empty()) bad_input("{}: {} is empty", file_name(f), key);
      return out;
    }
  }
  const auto pattern = io::optional_string(f, j, "hybrid_override_pattern")
                           .value_or("ME*-");  // NemotronHConfig's default: mamba, moe, attention, mlp
  static const std::map<char, std::string> kNames = {
      {'M', "linear_attention"}, {'E', "moe"}, {'*', "full_attention"}, {'-', "mlp"}};
  for (size_t i = 0; i < pattern.size(); ++i) {
    const auto name = kNames.find(pattern[i]);
    if (name == kNames.end())
      unsupported("{}: hybrid_override_pattern[{}] = '{}' (supported: M mamba, * attention, - mlp, E moe)",
                  file_name(f), i, pattern[i]);
    out.push_back(block_of(f, "hybrid_override_pattern", i, name->second));
  }
  if (out.empty()) bad_input("{}: hybrid_override_pattern is empty", file_name(f));
  return out;
}

// NemotronHMoE: n_routed_experts un-gated experts of moe_intermediate_size behind
// DeepseekV3TopkRouter, a shared NemotronHMLP of moe_shared_expert_intermediate_size, the optional
// latent projections of moe_latent_size; the experts' activation is mlp_hidden_act.
SigmoidMoeSpec parse_moe(const io::JsonFile& f, const HybridConfig& c) {
  const auto& j = f.json;
  constexpr int64_t kMaxDim = int64_t(1) << 24;
  SigmoidMoeSpec m;
  m.hidden = c.hidden_size;
  m.num_experts = io::optional_int(f, j, key_of(j, "num_local_experts", "n_routed_experts"), 1, 1 << 16).value_or(8);
  m.top_k = io::optional_int(f, j, "num_experts_per_tok", 1, 1 << 16).value_or(2);
  if (m.top_k > m.num_experts)
    bad_input("{}: num_experts_per_tok ({}) is more than n_routed_experts ({})", file_name(f), m.top_k, m.num_experts);
  m.intermediate = io::optional_int(f, j, "moe_intermediate_size", 1, kMaxDim).value_or(7688);
  m.shared_intermediate = io::optional_int(f, j, "moe_shared_expert_intermediate_size", 1, kMaxDim).value_or(7688);
  m.latent = io::optional_int(f, j, "moe_latent_size", 1, kMaxDim).value_or(0);
  m.normalize_top_k = io::optional_bool(f, j, "norm_topk_prob").value_or(true);
  m.routed_scaling_factor = io::optional_number(f, j, "routed_scaling_factor").value_or(1.0);
  if (!std::isfinite(m.routed_scaling_factor))
    bad_input("{}: routed_scaling_factor is {}, not a finite number", file_name(f), m.routed_scaling_factor);
  m.bias = c.mlp_bias;
  m.act = c.act;
  // Group-limited routing: the experts in n_group equal groups, top_k chosen within the topk_group
  // groups whose two best biased scores sum highest (NemotronHConfig's defaults: 1 and 1).
  m.n_group = io::optional_int(f, j, "n_group", 1, 1 << 16).value_or(1);
  m.topk_group = io::optional_int(f, j, "topk_group", 1, 1 << 16).value_or(1);
  if (m.n_group > 1) {
    if (m.num_experts % m.n_group != 0)
      bad_input("{}: n_routed_experts ({}) is not a multiple of n_group ({})", file_name(f), m.num_experts, m.n_group);
    const int64_t per_group = m.num_experts / m.n_group;
    // A group's score is the sum of its two best experts' (torch.topk(2) fails on a group of one).
    if (per_group < 2)
      bad_input("{}: n_group {} leaves {} expert per group (a group is scored by its two best)", file_name(f), m.n_group,
                per_group);
    if (m.topk_group > m.n_group)
      bad_input("{}: topk_group ({}) is more than n_group ({})", file_name(f), m.topk_group, m.n_group);
    // Fewer experts than top_k in the kept groups: Transformers' top-k would pick masked (-inf) ones.
    if (m.top_k > m.topk_group * per_group)
      unsupported("{}: num_experts_per_tok {} is more than the {} experts of topk_group {} groups (the choice would "
                  "include experts of groups the router dropped)",
                  file_name(f), m.top_k, m.topk_group * per_group, m.topk_group);
  }
  return m;
}

HybridConfig parse_nemotron_h(const io::Checkpoint& ckpt) {
  const io::JsonFile& f = ckpt.config();
  const auto& j = f.json;
  constexpr int64_t kMaxDim = int64_t(1) << 24;
  HybridConfig c;
  // Checkpoints saved by Transformers (and NVIDIA's) name the base model backbone.*, which
  // Transformers renames to model.* on load (conversion_mapping.py); either is read.
  const bool backbone = ckpt.find("backbone.embeddings.weight") != nullptr;
  c.traits = {.model_type = "nemotron_h",
              .hf_class = "NemotronHForCausalLM",
              .base = backbone ? "backbone." : "model.",
              .embed = "embeddings",
              .final_norm = "norm_f",
              .mixer_norm = "norm",
              .mamba = "mixer",
              .attention = "mixer",
              .mlp = "mixer",
              .moe = "mixer",
              .ffn_kind = HybridFfn::UpDown};
  c.vocab_size = io::require_int(f, j, "vocab_size", 1, int64_t(1) << 26);
  c.hidden_size = io::require_int(f, j, "hidden_size", 1, kMaxDim);
  c.layers = nemotron_layers(f);
  c.num_layers = int64_t(c.layers.size());
  c.eps = norm_eps(f, j, "layer_norm_epsilon", 1e-5);

  // NemotronHAttention: head_dim from the config (not hidden_size / heads), no rope, no biases
  // whatever attention_bias says (its projections are built with bias=False).
  c.num_heads = io::optional_int(f, j, "num_attention_heads", 1, 4096).value_or(32);
  // NemotronHConfig: 8 kv heads when the key is absent (not the heads' count); null it refuses.
  if (j.contains("num_key_value_heads") && j["num_key_value_heads"].is_null())
    bad_input("{}: num_key_value_heads is null (NemotronHConfig takes an integer)", file_name(f));
  c.num_kv_heads = io::optional_int(f, j, "num_key_value_heads", 1, 4096).value_or(8);
  if (c.num_heads % c.num_kv_heads)
    bad_input("{}: num_attention_heads ({}) must be a multiple of num_key_value_heads ({})", file_name(f), c.num_heads,
              c.num_kv_heads);
  c.head_dim = io::optional_int(f, j, "head_dim", 1, 1 << 16).value_or(128);
  // NVIDIA's remote-code configs spell it attention_head_dim, which NemotronHConfig does not read: one
  // that disagrees with the head_dim in force would not load into Transformers either.
  if (const auto spelled = io::optional_int(f, j, "attention_head_dim", 1, 1 << 16); spelled && *spelled != c.head_dim)
    bad_input("{}: attention_head_dim is {} but the attention's head_dim is {} (NemotronHConfig reads head_dim, 128 "
              "when absent, and ignores attention_head_dim)",
              file_name(f), *spelled, c.head_dim);
  c.attention_scale = 1.0 / std::sqrt(double(c.head_dim));

  // NemotronHMLP: down_proj(act(up_proj(x))), relu2 by default.
  c.intermediate_size = io::optional_int(f, j, "intermediate_size", 1, kMaxDim).value_or(21504);
  c.mlp_bias = io::optional_bool(f, j, "mlp_bias").value_or(false);
  c.act = parse_activation(f, "mlp_hidden_act", io::optional_string(f, j, "mlp_hidden_act").value_or("relu2"));

  // NemotronHMamba2Mixer: intermediate mamba_num_heads * mamba_head_dim (expand is not read), in_proj
  // and out_proj biased by use_bias, the gated norm over n_groups groups with layer_norm_epsilon.
  c.mixer = parse_mamba2_mixer(
      f, c.hidden_size,
      {.heads = "mamba_num_heads", .head_dim = "mamba_head_dim", .state_size = "ssm_state_size",
       .groups = key_of(j, "mamba_n_groups", "n_groups"), .expand = "",
       .conv_kernel = key_of(j, "mamba_d_conv", "conv_kernel"), .chunk = key_of(j, "mamba_chunk_size", "chunk_size"),
       .proj_bias = "use_bias", .conv_bias = key_of(j, "mamba_conv_bias", "use_conv_bias"), .eps = "layer_norm_epsilon",
       .act = "mamba_hidden_act", .time_step_limit = ""},
      {.heads = 128, .head_dim = 64, .state_size = 128, .groups = 8, .conv_kernel = 4, .chunk = 128, .eps = c.eps});
  // The mixer clamps dt to (time_step_min, inf), not to time_step_limit (which it does not read).
  const std::string dt_min_key = key_of(j, "mamba_dt_min", "time_step_min");
  c.mixer.dt_min = io::optional_number(f, j, dt_min_key).value_or(0.001);
  if (!std::isfinite(c.mixer.dt_min))
    bad_input("{}: {} is {}, not a finite number", file_name(f), dt_min_key, c.mixer.dt_min);
  c.mixer.dt_max = std::numeric_limits<double>::infinity();

  if (std::find(c.layers.begin(), c.layers.end(), HybridBlock::Moe) != c.layers.end()) c.moe = parse_moe(f, c);

  // NemotronHForCausalLM declares no tied weights (_tied_weights_keys = {}): its lm_head is always
  // its own weight, whatever tie_word_embeddings says.
  c.tie_word_embeddings = false;
  // residual_in_fp32 changes nothing in Transformers 5.23 (the block adds in the hidden states'
  // dtype), rescale_prenorm_residual is initialisation only, and the multi-token-prediction layers
  // (num_nextn_predict_layers) are not part of NemotronHForCausalLM.
  read_generation_ids(ckpt, c.vocab_size, c.eos_token_ids, c.bos_token_id, c.pad_token_id);
  return c;
}

}  // namespace

std::unique_ptr<CausalLm> make_nemotron_h(const io::Checkpoint& ckpt) {
  return make_mamba2_hybrid(ckpt, parse_nemotron_h(ckpt));
}

}  // namespace hfx::models
