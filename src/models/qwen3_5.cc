#include "models/qwen3_5.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "models/blocks.h"
#include "models/gated_deltanet.h"
#include "models/moe.h"
#include "models/rope.h"
#include "models/short_conv.h"
#include "models/weights.h"

namespace hfx::models {

namespace {

// The delta rule's chunk scan is built for steps this long at least (its step count grows with the
// log of the bound, and a step past the bound would scan too few chunk boundaries): max_position_embeddings,
// or 4 Mi positions when that is smaller (16 scan steps over Transformers' chunks of 64, each
// costing nothing on a step too short to reach it).
constexpr int64_t kMinScanPositions = int64_t(1) << 22;

// Which layers' MLP is a sparse mixture of experts.
enum class SparseLayers {
  None,         // Qwen3.5: every MLP dense
  QwenSteps,    // Qwen3-Next: qwen_sparse_moe_layers (decoder_sparse_step, mlp_only_layers; num_experts 0: none)
  Every,        // Qwen3.5-MoE: every layer (Qwen3_5MoeDecoderLayer has no dense MLP)
};

// What sets Qwen3-Next and Qwen3.5-MoE apart from Qwen3.5's text model; the rest is one network
// (modeling_qwen3_5.py is generated from modeling_qwen3_next.py, modeling_qwen3_5_moe.py from both:
// the same norms, attention, delta rule and decoder layer).
struct Family {
  const char* model_type;
  const char* hf_class;
  DeltaNetProjections projections;
  int64_t default_intermediate_size, default_kv_heads;  // the config class's defaults
  SparseLayers sparse_layers;
  int64_t default_experts, default_top_k;  // the config class's num_experts / num_experts_per_tok
  // norm_topk_prob read from the config (Qwen3-Next, true by default); false: the top-k weights are
  // always renormalised (Qwen3_5MoeTopKRouter reads no such key).
  bool reads_norm_topk_prob;
};
constexpr Family kQwen35Text{"qwen3_5_text", "Qwen3_5ForCausalLM", DeltaNetProjections::Split, 12288, 4,
                             SparseLayers::None, 0, 0, false};
constexpr Family kQwen3Next{"qwen3_next", "Qwen3NextForCausalLM", DeltaNetProjections::Fused, 5632, 2,
                            SparseLayers::QwenSteps, 512, 10, true};
constexpr Family kQwen35Moe{"qwen3_5_moe_text", "Qwen3_5MoeForCausalLM", DeltaNetProjections::Split, 0, 2,
                            SparseLayers::Every, 256, 8, false};

struct HybridConfig {
  int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_layers = 0, num_heads = 0, num_kv_heads = 0,
          head_dim = 0;
  double eps = 1e-6;
  bool tie_word_embeddings = false, attention_bias = false;
  Activation act = Activation::Silu;
  std::vector<bool> layer_is_attention;
  std::vector<bool> layer_is_moe;  // all false for Qwen3.5, whose every MLP is dense
  MoeSpec moe;
  RopeSpec rope;
  GatedDeltaNetSpec mixer;
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> bos_token_id, pad_token_id;
};

std::string file_name(const io::JsonFile& f) { return f.path.filename().string(); }

std::vector<bool> attention_layers(const io::JsonFile& f, const nlohmann::json& j, int64_t num_layers) {
  auto types = io::optional_string_list(f, j, "layer_types");
  if (!types) {
    // Qwen3_5TextConfig / Qwen3NextConfig.__post_init__: every full_attention_interval-th layer (1-based)
    // is full attention.
    const int64_t interval = io::optional_int(f, j, "full_attention_interval", 1, 4096).value_or(4);
    types = std::vector<std::string>();
    for (int64_t i = 0; i < num_layers; ++i)
      types->push_back((i + 1) % interval ? "linear_attention" : "full_attention");
  }
  if (int64_t(types->size()) != num_layers)
    bad_input("{}: layer_types has {} entries, num_hidden_layers is {}", file_name(f), types->size(), num_layers);
  std::vector<bool> out;
  for (int64_t i = 0; i < num_layers; ++i) {
    const auto& t = (*types)[size_t(i)];
    if (t != "linear_attention" && t != "full_attention")
      unsupported("{}: layer_types[{}] = \"{}\" (supported: linear_attention, full_attention)", file_name(f), i, t);
    out.push_back(t == "full_attention");
  }
  return out;
}

// Qwen3NextSparseMoeBlock / Qwen3_5MoeSparseMoeBlock: top num_experts_per_tok of num_experts, each a
// gated MLP of moe_intermediate_size, plus the sigmoid-gated shared expert. Qwen3-Next's num_experts 0
// makes every layer's MLP dense, as Qwen3NextDecoderLayer does; Qwen3.5-MoE has no dense MLP to fall
// back to, so it needs one expert at least. The experts are stored per expert (as Transformers saves
// them) or stacked (experts.gate_up_proj / down_proj, Transformers 5's own layout), as the first sparse
// layer has them.
void parse_sparse_moe(const io::Checkpoint& ckpt, const Family& family, HybridConfig& c) {
  const io::JsonFile& f = ckpt.config();
  const auto& j = f.json;
  constexpr int64_t kMaxDim = int64_t(1) << 24;
  const int64_t min_experts = family.sparse_layers == SparseLayers::Every ? 1 : 0;
  c.moe.num_experts = io::optional_int(f, j, "num_experts", min_experts, 1 << 16).value_or(family.default_experts);
  if (c.moe.num_experts == 0) return;
  c.moe.top_k = io::optional_int(f, j, "num_experts_per_tok", 1, c.moe.num_experts).value_or(family.default_top_k);
  c.moe.hidden = c.hidden_size;
  c.moe.intermediate = io::optional_int(f, j, "moe_intermediate_size", 1, kMaxDim).value_or(512);
  c.moe.shared_intermediate = io::optional_int(f, j, "shared_expert_intermediate_size", 1, kMaxDim).value_or(512);
  c.moe.normalize_top_k = !family.reads_norm_topk_prob || io::optional_bool(f, j, "norm_topk_prob").value_or(true);
  c.moe.act = c.act;
  c.layer_is_moe = family.sparse_layers == SparseLayers::Every ? std::vector<bool>(size_t(c.num_layers), true)
                                                                : qwen_sparse_moe_layers(f, c.num_layers);
  const auto first = std::find(c.layer_is_moe.begin(), c.layer_is_moe.end(), true) - c.layer_is_moe.begin();
  if (first < c.num_layers && ckpt.find(fmt::format("model.layers.{}.mlp.{}", first, c.moe.stacked_gate_up)))
    c.moe.layout = ExpertLayout::Stacked;
}

HybridConfig parse_config(const io::Checkpoint& ckpt, const Family& family) {
  const io::JsonFile& f = ckpt.config();
  const auto& j = f.json;
  constexpr int64_t kMaxDim = int64_t(1) << 24;
  HybridConfig c;
  c.vocab_size = io::require_int(f, j, "vocab_size", 1, int64_t(1) << 26);
  c.hidden_size = io::require_int(f, j, "hidden_size", 1, kMaxDim);
  c.intermediate_size =
      io::optional_int(f, j, "intermediate_size", 1, kMaxDim).value_or(family.default_intermediate_size);
  c.num_layers = io::require_int(f, j, "num_hidden_layers", 1, 4096);
  c.num_heads = io::optional_int(f, j, "num_attention_heads", 1, 1 << 16).value_or(16);
  c.num_kv_heads = io::optional_int(f, j, "num_key_value_heads", 1, 1 << 16).value_or(family.default_kv_heads);
  if (c.num_heads % c.num_kv_heads)
    bad_input("{}: num_attention_heads ({}) must be a multiple of num_key_value_heads ({})", file_name(f), c.num_heads,
              c.num_kv_heads);
  c.head_dim = io::optional_int(f, j, "head_dim", 1, 1 << 16).value_or(256);
  c.eps = norm_eps(f, j, "rms_norm_eps", 1e-6);
  c.tie_word_embeddings = io::optional_bool(f, j, "tie_word_embeddings").value_or(false);
  c.attention_bias = io::optional_bool(f, j, "attention_bias").value_or(false);
  c.act = parse_activation(f, "hidden_act", io::optional_string(f, j, "hidden_act").value_or("silu"));
  c.layer_is_attention = attention_layers(f, j, c.num_layers);
  const int64_t max_pos = io::optional_int(f, j, "max_position_embeddings", 1).value_or(32768);
  // rope_parameters' mrope_section / mrope_interleaved (Qwen3.5's) only move frequencies between three
  // position rows that a text step makes equal; partial_rotary_factor 0.25 is both config classes' default.
  c.rope = parse_rope(f, c.head_dim, max_pos, {.partial_rotary_factor = 0.25});
  c.mixer = parse_gated_deltanet(f, c.hidden_size, std::max(max_pos, kMinScanPositions), c.eps,
                                 family.projections);
  c.layer_is_moe.assign(size_t(c.num_layers), false);
  if (family.sparse_layers != SparseLayers::None) parse_sparse_moe(ckpt, family, c);
  read_generation_ids(ckpt, c.vocab_size, c.eos_token_ids, c.bos_token_id, c.pad_token_id);
  return c;
}

class QwenDeltaNetHybrid final : public CausalLm {
 public:
  QwenDeltaNetHybrid(const io::Checkpoint& ckpt, const Family& family, HybridConfig cfg)
      : ckpt_(ckpt), c_(std::move(cfg)) {
    s_ = summary_of(c_, family.model_type, family.hf_class);
    const auto attention = std::count(c_.layer_is_attention.begin(), c_.layer_is_attention.end(), true);
    s_.features = {
        {"layers", fmt::format("{} gated delta-net, {} gated attention", c_.num_layers - attention, attention)},
        {"linear_attention", c_.mixer.describe()},
        {"attention", fmt::format("{} heads, {} kv heads, head_dim {}, output gate, q/k RMSNorm (1 + w){}", c_.num_heads,
                                  c_.num_kv_heads, c_.head_dim, c_.attention_bias ? ", biases" : "")},
        {"rope", fmt::format("{} (theta {}, rotary_dim {})", c_.rope.type, c_.rope.theta, c_.rope.rotary_dim)},
        {"mlp", mlp_feature()},
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
  std::string_view state_names() const override { return "js-linear-attention"; }

  CausalLmOutputs build(ir::Builder& b, const CausalLmInputs& in) const override {
    auto model_scope = b.scope("model");
    ir::ValueId embed = bind_weight(b, ckpt_, "model.embed_tokens.weight", {c_.vocab_size, c_.hidden_size},
                                    fmt::format("vocab_size, hidden_size={}", c_.hidden_size));
    ir::ValueId h = b.add1("Embedding", {embed, in.input_ids});
    StepTables tables(b, in);
    std::optional<std::optional<ir::ValueId>> pad_mask;  // built on the first linear-attention layer
    CausalLmOutputs out;
    for (int64_t i = 0; i < c_.num_layers; ++i) {
      auto layer_scope = b.scope(fmt::format("layers.{}", i));
      const std::string p = fmt::format("model.layers.{}.", i);
      ir::ValueId x = rms(b, h, p + "input_layernorm", "input_layernorm", c_.hidden_size);
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
        auto s = b.scope("linear_attn");
        GatedDeltaNetOut m = gated_deltanet(b, ckpt_, x, p + "linear_attn.", c_.mixer,
                                            in.past_conv.empty() ? ir::kNone : in.past_conv[size_t(i)],
                                            in.past_ssm.empty() ? ir::kNone : in.past_ssm[size_t(i)], *pad_mask);
        out.present_conv.back() = m.conv_state;
        out.present_ssm.back() = m.recurrent_state;
        mixed = m.out;
      }
      h = b.plus(h, mixed);
      ir::ValueId x2 = rms(b, h, p + "post_attention_layernorm", "post_attention_layernorm", c_.hidden_size);
      ir::ValueId m;
      {
        auto s = b.scope("mlp");
        m = c_.layer_is_moe[size_t(i)]
                ? sparse_moe(b, ckpt_, x2, p + "mlp.", c_.moe)
                : gated_mlp(b, ckpt_, x2, p + "mlp.", {}, c_.hidden_size, c_.intermediate_size, false, c_.act,
                            fmt::format("hidden_size={}, intermediate_size={}", c_.hidden_size, c_.intermediate_size));
      }
      h = b.plus(h, m);
      b.graph().rename(h, fmt::format("/model/layers.{}/output", i));
    }
    h = rms(b, h, "model.norm", "norm", c_.hidden_size);
    out.logits = lm_head(b, ckpt_, h, embed, c_.tie_word_embeddings, c_.vocab_size, c_.hidden_size);
    return out;
  }

 private:
  std::string mlp_feature() const {
    const std::string dense = fmt::format("gated {} ({})", c_.intermediate_size, activation_name(c_.act));
    const auto sparse = std::count(c_.layer_is_moe.begin(), c_.layer_is_moe.end(), true);
    if (!sparse) return dense;
    const std::string moe = fmt::format(
        "sparse MoE on {} of {} layers: top {} of {} experts{}, expert {} ({}), shared expert {} (sigmoid gate)",
        sparse, c_.num_layers, c_.moe.top_k, c_.moe.num_experts, c_.moe.normalize_top_k ? " (renormalised)" : "",
        c_.moe.intermediate, c_.moe.layout == ExpertLayout::Stacked ? "stacked" : "per expert",
        c_.moe.shared_intermediate);
    return sparse == c_.num_layers ? moe : fmt::format("{}; dense {} elsewhere", moe, dense);
  }

  // Qwen3_5RMSNorm / Qwen3NextRMSNorm: x * rsqrt(mean(x^2) + eps) * (1 + weight).
  ir::ValueId rms(ir::Builder& b, ir::ValueId x, const std::string& prefix, const std::string& scope, int64_t n) const {
    return norm(b, ckpt_, x, prefix, n, NormKind::RmsPlusOne, c_.eps, false, scope);
  }

  // Qwen3_5Attention (Qwen3NextAttention).
  AttentionOut attention(ir::Builder& b, ir::ValueId x, const std::string& a, const CausalLmInputs& in, int64_t layer,
                         StepTables& tables) const {
    auto s = b.scope("self_attn");
    const int64_t H = c_.num_heads, KV = c_.num_kv_heads, D = c_.head_dim;
    const std::string why = fmt::format("hidden_size={}, heads={}, kv_heads={}, head_dim={}", c_.hidden_size, H, KV, D);
    ir::ValueId q, gate;
    {
      auto ps = b.scope("q_proj");
      // Per head [query | gate] (q_proj's rows viewed as [heads, 2 head_dim] and chunked).
      ir::ValueId qg = b.reshape(linear(b, ckpt_, x, a + "q_proj", c_.hidden_size, H * D * 2, c_.attention_bias, why),
                                 {0, 0, H, 2 * D});
      q = rms(b, b.slice(qg, 0, D, 3), a + "q_norm", "q_norm", D);
      q = b.transpose(q, {0, 2, 1, 3});  // [b, H, s, D]
      gate = b.reshape(b.slice(qg, D, 2 * D, 3), {0, 0, H * D});
    }
    ir::ValueId k;
    {
      auto ps = b.scope("k_proj");
      k = b.reshape(linear(b, ckpt_, x, a + "k_proj", c_.hidden_size, KV * D, c_.attention_bias, why), {0, 0, KV, D});
      k = b.transpose(rms(b, k, a + "k_norm", "k_norm", D), {0, 2, 1, 3});
    }
    ir::ValueId v;
    {
      auto ps = b.scope("v_proj");
      v = split_heads(b, linear(b, ckpt_, x, a + "v_proj", c_.hidden_size, KV * D, c_.attention_bias, why), KV, D);
    }
    const auto& cos_sin = tables.rope(c_.rope);
    q = b.add1("RotaryEmbedding", {q, cos_sin[0], cos_sin[1]});
    k = b.add1("RotaryEmbedding", {k, cos_sin[0], cos_sin[1]});
    AttentionOut r = cached_attention(b, in, layer, q, k, v, tables.mask(0), std::pow(double(D), -0.5));
    r.out = b.times(r.out, b.add1("Sigmoid", {gate}));
    auto os = b.scope("o_proj");
    r.out = linear(b, ckpt_, r.out, a + "o_proj", H * D, c_.hidden_size, c_.attention_bias, why);
    return r;
  }

  const io::Checkpoint& ckpt_;
  HybridConfig c_;
  ModelSummary s_;
};

}  // namespace

std::unique_ptr<CausalLm> make_qwen3_5_text(const io::Checkpoint& ckpt) {
  return std::make_unique<QwenDeltaNetHybrid>(ckpt, kQwen35Text, parse_config(ckpt, kQwen35Text));
}

std::unique_ptr<CausalLm> make_qwen3_next(const io::Checkpoint& ckpt) {
  return std::make_unique<QwenDeltaNetHybrid>(ckpt, kQwen3Next, parse_config(ckpt, kQwen3Next));
}

std::unique_ptr<CausalLm> make_qwen3_5_moe_text(const io::Checkpoint& ckpt) {
  return std::make_unique<QwenDeltaNetHybrid>(ckpt, kQwen35Moe, parse_config(ckpt, kQwen35Moe));
}

}  // namespace hfx::models
