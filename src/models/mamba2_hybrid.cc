#include "models/mamba2_hybrid.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "models/blocks.h"
#include "models/mamba2_mixer.h"
#include "models/rope.h"
#include "models/short_conv.h"
#include "models/weights.h"

namespace hfx::models {

namespace {

// What tells the families apart (the rest of the network is one).
struct HybridTraits {
  std::string model_type, hf_class;
  std::string ffn_norm;    // post_attention_layernorm (Granite) | pre_ff_layernorm (Bamba)
  std::string final_norm;  // under model.: norm | final_layernorm
  bool granite = false;    // multipliers, shared_mlp, attention_multiplier, optional rope, layer_types
};

struct HybridConfig {
  HybridTraits traits;
  bool mlp_bias = false;  // Bamba's feed_forward
  int64_t intermediate_size = 0;  // Bamba's feed_forward
  int64_t vocab_size = 0, hidden_size = 0, num_layers = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0,
          shared_intermediate_size = 0;
  double eps = 1e-6, embedding_multiplier = 1.0, residual_multiplier = 1.0, attention_multiplier = 1.0,
         logits_scaling = 1.0;
  bool tie_word_embeddings = false, attention_bias = false;
  std::optional<RopeSpec> rope;  // position_embedding_type "rope"; none otherwise
  std::vector<bool> layer_is_attention;
  Activation act = Activation::Silu;
  Mamba2MixerSpec mixer;
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> bos_token_id, pad_token_id;
};

std::string file_name(const io::JsonFile& f) { return f.path.filename().string(); }

double multiplier(const io::JsonFile& f, const nlohmann::json& j, std::string_view key) {
  return io::optional_number(f, j, key).value_or(1.0);
}

// Attention layers from layer_types (Granite; layers_block_type in older configs, legacy names
// remapped as Transformers does) or attn_layer_indices (Bamba); every other layer is a mixer.
std::vector<bool> attention_layers(const io::JsonFile& f, const nlohmann::json& j, int64_t num_layers) {
  std::vector<bool> out;
  if (j.contains("attn_layer_indices") && !j["attn_layer_indices"].is_null()) {
    auto idxs = io::optional_int_list(f, j, "attn_layer_indices", 0, num_layers - 1);
    for (int64_t i = 0; i < num_layers; ++i)
      out.push_back(idxs && std::find(idxs->begin(), idxs->end(), i) != idxs->end());
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
    out.push_back(attention);
  }
  return out;
}

HybridConfig parse_config(const io::Checkpoint& ckpt, HybridTraits traits) {
  const io::JsonFile& f = ckpt.config();
  const auto& j = f.json;
  constexpr int64_t kMaxDim = int64_t(1) << 24;
  HybridConfig c;
  c.traits = std::move(traits);
  const bool granite = c.traits.granite;
  c.vocab_size = io::require_int(f, j, "vocab_size", 1, int64_t(1) << 26);
  c.hidden_size = io::require_int(f, j, "hidden_size", 1, kMaxDim);
  c.num_layers = io::require_int(f, j, "num_hidden_layers", 1, 4096);
  const HeadCounts heads = parse_head_counts(f, c.hidden_size);
  c.num_heads = heads.heads;
  c.num_kv_heads = heads.kv_heads;
  c.head_dim = c.hidden_size / c.num_heads;  // the attention reads no head_dim from the config
  if (granite) {
    if (const auto experts = io::optional_int(f, j, "num_local_experts", 0, 1 << 16).value_or(8); experts > 0)
      unsupported("{}: num_local_experts {} (a sparse mixture of experts; hfx supports the dense Granite 4.0-H "
                  "models, num_local_experts 0)",
                  file_name(f), experts);
    c.shared_intermediate_size = io::optional_int(f, j, "shared_intermediate_size", 1, kMaxDim).value_or(1024);
  } else {
    c.intermediate_size = io::optional_int(f, j, "intermediate_size", 1, kMaxDim).value_or(14336);
    c.mlp_bias = io::optional_bool(f, j, "mlp_bias").value_or(false);
  }
  c.eps = norm_eps(f, j, "rms_norm_eps", granite ? 1e-6 : 1e-5);
  if (granite) {
    c.embedding_multiplier = multiplier(f, j, "embedding_multiplier");
    c.residual_multiplier = multiplier(f, j, "residual_multiplier");
    c.attention_multiplier = multiplier(f, j, "attention_multiplier");
    c.logits_scaling = multiplier(f, j, "logits_scaling");
    if (c.logits_scaling == 0) bad_input("{}: logits_scaling is 0 (the logits are divided by it)", file_name(f));
  } else {
    c.attention_multiplier = 1.0 / std::sqrt(double(c.head_dim));  // BambaAttention: head_dim ** -0.5
  }
  c.tie_word_embeddings = io::optional_bool(f, j, "tie_word_embeddings").value_or(false);
  c.attention_bias = io::optional_bool(f, j, "attention_bias").value_or(false);
  c.act = parse_activation(f, "hidden_act", io::optional_string(f, j, "hidden_act").value_or("silu"));
  const int64_t max_pos = io::optional_int(f, j, "max_position_embeddings", 1).value_or(granite ? 2048 : 262144);
  if (!granite) {
    c.rope = parse_rope(f, c.head_dim, max_pos, {.partial_rotary_factor = 0.5});  // BambaConfig's default
  } else if (const auto pos = io::optional_string(f, j, "position_embedding_type"); pos && *pos == "rope") {
    c.rope = parse_rope(f, c.head_dim, max_pos);
  } else if (pos && *pos != "nope") {
    unsupported("{}: position_embedding_type \"{}\" (supported: rope, nope or none)", file_name(f), *pos);
  }
  c.layer_is_attention = attention_layers(f, j, c.num_layers);
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

class Mamba2Hybrid final : public CausalLm {
 public:
  Mamba2Hybrid(const io::Checkpoint& ckpt, HybridConfig cfg) : ckpt_(ckpt), c_(std::move(cfg)) {
    s_ = summary_of(c_, c_.traits.model_type, c_.traits.hf_class);
    const auto attention = std::count(c_.layer_is_attention.begin(), c_.layer_is_attention.end(), true);
    s_.features = {
        {"layers", fmt::format("{} Mamba-2, {} attention", c_.num_layers - attention, attention)},
        {"mixer", c_.mixer.describe()},
        {"attention", fmt::format("{} heads, {} kv heads, head_dim {}, scale {}{}", c_.num_heads, c_.num_kv_heads,
                                  c_.head_dim, c_.attention_multiplier,
                                  c_.rope ? fmt::format(", rope theta {} over {} dims", c_.rope->theta, c_.rope->rotary_dim)
                                          : ", no rope")},
        {"multipliers", fmt::format("embedding {}, residual {}, logits / {}", c_.embedding_multiplier,
                                    c_.residual_multiplier, c_.logits_scaling)},
        {"mlp", c_.traits.granite ? fmt::format("dense shared_mlp {}", c_.shared_intermediate_size)
                                  : fmt::format("feed_forward {}{}", c_.intermediate_size, c_.mlp_bias ? ", biases" : "")},
        {"tie_word_embeddings", c_.tie_word_embeddings ? "yes" : "no"},
    };
  }

  const ModelSummary& summary() const override { return s_; }
  // The attention layers' geometry; every layer is counted, as the layer index names the ports.
  CacheGeometry cache() const override {
    return {c_.num_layers, c_.num_kv_heads, c_.head_dim, std::vector<int64_t>(size_t(c_.num_layers), 0)};
  }

  std::vector<ir::StateSpec> states(const StateLayout& l) const override {
    return hybrid_states(c_.layer_is_attention, c_.num_kv_heads, c_.head_dim, l,
                         [&](int64_t i) { return c_.mixer.states(i); });
  }
  std::string_view state_names() const override { return "js-hybrid"; }

  CausalLmOutputs build(ir::Builder& b, const CausalLmInputs& in) const override {
    auto model_scope = b.scope("model");
    ir::ValueId embed = bind_weight(b, ckpt_, "model.embed_tokens.weight", {c_.vocab_size, c_.hidden_size},
                                    fmt::format("vocab_size, hidden_size={}", c_.hidden_size));
    ir::ValueId h = b.add1("Embedding", {embed, in.input_ids});
    if (c_.embedding_multiplier != 1.0) h = b.times(h, b.f32(float(c_.embedding_multiplier)));
    StepTables tables(b, in);
    std::optional<std::optional<ir::ValueId>> pad_mask;  // built on the first mamba layer
    // Granite's residual_multiplier (x * 1.0 is exact: left out when it is 1, as for Bamba).
    auto scaled = [&](ir::ValueId v) {
      return c_.residual_multiplier == 1.0 ? v : b.times(v, b.f32(float(c_.residual_multiplier)));
    };
    CausalLmOutputs out;
    for (int64_t i = 0; i < c_.num_layers; ++i) {
      auto layer_scope = b.scope(fmt::format("layers.{}", i));
      const std::string p = fmt::format("model.layers.{}.", i);
      ir::ValueId x = rms(b, h, p + "input_layernorm", "input_layernorm");
      ir::ValueId mixed = ir::kNone;
      out.present_key.push_back(ir::kNone);
      out.present_value.push_back(ir::kNone);
      out.present_conv.push_back(ir::kNone);
      out.present_ssm.push_back(ir::kNone);
      if (c_.layer_is_attention[size_t(i)]) {
        AttentionOut a = attention(b, x, p + "self_attn.", in, i, tables);
        out.present_key.back() = a.present_key;
        out.present_value.back() = a.present_value;
        mixed = a.out;
      } else {
        if (!pad_mask) pad_mask = padding_states_mask(b, in);
        auto s = b.scope("mamba");
        Mamba2MixerOut m = mamba2_mixer(b, ckpt_, x, p + "mamba.", c_.mixer,
                                        in.past_conv.empty() ? ir::kNone : in.past_conv[size_t(i)],
                                        in.past_ssm.empty() ? ir::kNone : in.past_ssm[size_t(i)], *pad_mask, in);
        out.present_conv.back() = m.conv_state;
        out.present_ssm.back() = m.ssm_state;
        mixed = m.out;
      }
      h = b.plus(h, scaled(mixed));
      ir::ValueId x2 = rms(b, h, p + c_.traits.ffn_norm, c_.traits.ffn_norm);
      h = b.plus(h, scaled(c_.traits.granite ? shared_mlp(b, x2, p) : feed_forward(b, x2, p)));
      b.graph().rename(h, fmt::format("/model/layers.{}/output", i));
    }
    h = rms(b, h, "model." + c_.traits.final_norm, c_.traits.final_norm);
    out.logits = lm_head(b, ckpt_, h, embed, c_.tie_word_embeddings, c_.vocab_size, c_.hidden_size);
    if (c_.logits_scaling != 1.0) out.logits = b.divide(out.logits, b.f32(float(c_.logits_scaling)));
    return out;
  }

 private:
  ir::ValueId rms(ir::Builder& b, ir::ValueId x, const std::string& prefix, const std::string& scope) const {
    return norm(b, ckpt_, x, prefix, c_.hidden_size, NormKind::Rms, c_.eps, false, scope);
  }

  AttentionOut attention(ir::Builder& b, ir::ValueId x, const std::string& a, const CausalLmInputs& in, int64_t layer,
                         StepTables& tables) const {
    auto s = b.scope("self_attn");
    const std::string why = fmt::format("hidden_size={}, heads={}, kv_heads={}, head_dim={}", c_.hidden_size,
                                        c_.num_heads, c_.num_kv_heads, c_.head_dim);
    auto heads = [&](const std::string& proj, int64_t n_heads) {
      auto ps = b.scope(proj);
      return split_heads(b, linear(b, ckpt_, x, a + proj, c_.hidden_size, n_heads * c_.head_dim, c_.attention_bias, why),
                         n_heads, c_.head_dim);
    };
    ir::ValueId q = heads("q_proj", c_.num_heads), k = heads("k_proj", c_.num_kv_heads), v = heads("v_proj", c_.num_kv_heads);
    if (c_.rope) {
      const auto& cos_sin = tables.rope(*c_.rope);
      q = b.add1("RotaryEmbedding", {q, cos_sin[0], cos_sin[1]});
      k = b.add1("RotaryEmbedding", {k, cos_sin[0], cos_sin[1]});
    }
    AttentionOut r = cached_attention(b, in, layer, q, k, v, tables.mask(0), c_.attention_multiplier);
    auto os = b.scope("o_proj");
    r.out = linear(b, ckpt_, r.out, a + "o_proj", c_.num_heads * c_.head_dim, c_.hidden_size, c_.attention_bias, why);
    return r;
  }

  // GraniteMoeHybridMLP: input_linear [2 S, hidden] chunked into (gate, up), act(gate) * up, output_linear.
  ir::ValueId shared_mlp(ir::Builder& b, ir::ValueId x, const std::string& p) const {
    auto s = b.scope("shared_mlp");
    const int64_t S = c_.shared_intermediate_size;
    const std::string why = fmt::format("hidden_size={}, shared_intermediate_size={}", c_.hidden_size, S);
    ir::ValueId both = linear(b, ckpt_, x, p + "shared_mlp.input_linear", c_.hidden_size, 2 * S, false, why);
    ir::ValueId y = gated_activation(b, b.slice(both, 0, S, 2), b.slice(both, S, 2 * S, 2), c_.act);
    return linear(b, ckpt_, y, p + "shared_mlp.output_linear", S, c_.hidden_size, false, why);
  }

  // BambaMLP: down(act(gate(x)) * up(x)).
  ir::ValueId feed_forward(ir::Builder& b, ir::ValueId x, const std::string& p) const {
    auto s = b.scope("feed_forward");
    return gated_mlp(b, ckpt_, x, p + "feed_forward.", {}, c_.hidden_size, c_.intermediate_size, c_.mlp_bias, c_.act,
                     fmt::format("hidden_size={}, intermediate_size={}", c_.hidden_size, c_.intermediate_size));
  }

  const io::Checkpoint& ckpt_;
  HybridConfig c_;
  ModelSummary s_;
};

}  // namespace

std::unique_ptr<CausalLm> make_granitemoehybrid(const io::Checkpoint& ckpt) {
  return std::make_unique<Mamba2Hybrid>(
      ckpt, parse_config(ckpt, {"granitemoehybrid", "GraniteMoeHybridForCausalLM", "post_attention_layernorm", "norm", true}));
}

std::unique_ptr<CausalLm> make_bamba(const io::Checkpoint& ckpt) {
  return std::make_unique<Mamba2Hybrid>(
      ckpt, parse_config(ckpt, {"bamba", "BambaForCausalLM", "pre_ff_layernorm", "final_layernorm", false}));
}

}  // namespace hfx::models
