#include "models/jamba.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "models/blocks.h"
#include "models/mamba.h"
#include "models/moe.h"
#include "models/short_conv.h"
#include "models/weights.h"

namespace hfx::models {

namespace {

struct JambaConfig {
  int64_t vocab_size = 0, hidden_size = 0, num_layers = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int64_t intermediate_size = 0;
  double eps = 1e-6;
  bool tie_word_embeddings = false;
  Activation act = Activation::Silu;
  std::vector<bool> layer_is_attention, layer_has_experts;
  MoeSpec moe;
  MambaMixerSpec mixer;
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> bos_token_id, pad_token_id;
};

// JambaConfig's names and defaults (configuration_jamba.py).
JambaConfig parse_jamba_config(const io::Checkpoint& ckpt) {
  const io::JsonFile& f = ckpt.config();
  const auto& j = f.json;
  const std::string file = f.path.filename().string();
  constexpr int64_t kMaxDim = int64_t(1) << 24;
  JambaConfig c;
  c.vocab_size = io::optional_int(f, j, "vocab_size", 1, int64_t(1) << 26).value_or(65536);
  c.hidden_size = io::optional_int(f, j, "hidden_size", 1, kMaxDim).value_or(4096);
  c.num_layers = io::optional_int(f, j, "num_hidden_layers", 1, 4096).value_or(32);
  const HeadCounts heads = parse_head_counts(f, c.hidden_size);
  c.num_heads = heads.heads;
  c.num_kv_heads = heads.kv_heads;
  c.head_dim = c.hidden_size / c.num_heads;  // JambaAttention: head_dim when given, else hidden / heads
  if (auto hd = io::optional_int(f, j, "head_dim", 1, kMaxDim)) c.head_dim = *hd;
  c.intermediate_size = io::optional_int(f, j, "intermediate_size", 1, kMaxDim).value_or(14336);
  c.eps = norm_eps(f, j, "rms_norm_eps", 1e-6);
  c.tie_word_embeddings = io::optional_bool(f, j, "tie_word_embeddings").value_or(false);
  c.act = parse_activation(f, "hidden_act", io::optional_string(f, j, "hidden_act").value_or("silu"));

  auto period = [&](const char* period_key, int64_t period_default, const char* offset_key, int64_t offset_default) {
    const int64_t p = io::optional_int(f, j, period_key, 1, 4096).value_or(period_default);
    const int64_t o = io::optional_int(f, j, offset_key, 0, 4096).value_or(offset_default);
    if (o >= p) bad_input("{}: {} {} must be smaller than {} {}", file, offset_key, o, period_key, p);
    std::vector<bool> on;
    for (int64_t i = 0; i < c.num_layers; ++i) on.push_back(i % p == o);
    return on;
  };
  c.layer_is_attention = period("attn_layer_period", 8, "attn_layer_offset", 4);
  c.layer_has_experts = period("expert_layer_period", 2, "expert_layer_offset", 1);
  const int64_t experts = io::optional_int(f, j, "num_experts", 1, 1 << 16).value_or(16);
  if (experts == 1) std::fill(c.layer_has_experts.begin(), c.layer_has_experts.end(), false);
  // JambaSparseMoeBlock: softmax over every expert's logit, the top-k kept as they are.
  c.moe.num_experts = experts;
  c.moe.top_k = io::optional_int(f, j, "num_experts_per_tok", 1, experts).value_or(std::min<int64_t>(2, experts));
  c.moe.hidden = c.hidden_size;
  c.moe.intermediate = c.intermediate_size;
  c.moe.normalize_top_k = false;
  c.moe.act = c.act;
  c.moe.router = "router";

  MambaMixerSpec& m = c.mixer;
  m.hidden = c.hidden_size;
  m.intermediate = io::optional_int(f, j, "mamba_expand", 1, 64).value_or(2) * c.hidden_size;
  m.state_size = io::optional_int(f, j, "mamba_d_state", 1, 1 << 16).value_or(16);
  m.conv_kernel = io::optional_int(f, j, "mamba_d_conv", 2, 4096).value_or(4);
  m.time_step_rank = time_step_rank(f, j, "mamba_dt_rank", c.hidden_size);
  m.conv_bias = io::optional_bool(f, j, "mamba_conv_bias").value_or(true);
  m.proj_bias = io::optional_bool(f, j, "mamba_proj_bias").value_or(false);
  m.act = c.act;  // JambaMambaMixer's conv activation is hidden_act
  m.dt_bc_norms = MambaMixerSpec::DtBcNorms::Weighted;
  m.dt_bc_eps = c.eps;
  read_generation_ids(ckpt, c.vocab_size, c.eos_token_ids, c.bos_token_id, c.pad_token_id);
  return c;
}

class Jamba final : public CausalLm {
 public:
  Jamba(const io::Checkpoint& ckpt, JambaConfig cfg) : ckpt_(ckpt), c_(std::move(cfg)) {
    s_ = summary_of(c_, "jamba", "JambaForCausalLM");
    const auto attention = std::count(c_.layer_is_attention.begin(), c_.layer_is_attention.end(), true);
    const auto moe = std::count(c_.layer_has_experts.begin(), c_.layer_has_experts.end(), true);
    s_.features = {
        {"layers", fmt::format("{} Mamba-1, {} attention", c_.num_layers - attention, attention)},
        {"mixer", fmt::format("intermediate {}, state {}, time_step_rank {}, conv kernel {}; RMS norms on dt, B, C",
                              c_.mixer.intermediate, c_.mixer.state_size, c_.mixer.time_step_rank, c_.mixer.conv_kernel)},
        {"attention", fmt::format("{} heads, {} kv heads, head_dim {}, no position embedding", c_.num_heads,
                                  c_.num_kv_heads, c_.head_dim)},
        {"feed-forward", fmt::format("{} sparse MoE ({} experts, top {}, weights not renormalised), {} MLP; intermediate {}",
                                     moe, c_.moe.num_experts, c_.moe.top_k, c_.num_layers - moe, c_.intermediate_size)},
        {"tie_word_embeddings", c_.tie_word_embeddings ? "yes" : "no"},
    };
  }

  const ModelSummary& summary() const override { return s_; }
  // The attention layers' geometry; every layer is counted, as the layer index names the ports.
  CacheGeometry cache() const override {
    return {c_.num_layers, c_.num_kv_heads, c_.head_dim, std::vector<int64_t>(size_t(c_.num_layers), 0)};
  }
  std::vector<ir::StateSpec> states(const StateLayout& l) const override {
    return hybrid_states(c_.layer_is_attention, c_.num_kv_heads, c_.head_dim, l, [&](int64_t i) {
      return std::vector<ir::StateSpec>{ir::conv_state(i, c_.mixer.intermediate, c_.mixer.conv_kernel - 1),
                                        ir::selective_scan_state(i, c_.mixer.intermediate, c_.mixer.state_size)};
    });
  }
  std::string_view state_names() const override { return "js-hybrid"; }

  CausalLmOutputs build(ir::Builder& b, const CausalLmInputs& in) const override {
    auto model_scope = b.scope("model");
    ir::ValueId embed = bind_weight(b, ckpt_, "model.embed_tokens.weight", {c_.vocab_size, c_.hidden_size},
                                    fmt::format("vocab_size, hidden_size={}", c_.hidden_size));
    ir::ValueId h = b.add1("Embedding", {embed, in.input_ids});
    StepTables tables(b, in);
    std::optional<std::optional<ir::ValueId>> pad_mask;  // built on the first mamba layer
    CausalLmOutputs out;
    for (int64_t i = 0; i < c_.num_layers; ++i) {
      auto layer_scope = b.scope(fmt::format("layers.{}", i));
      const std::string p = fmt::format("model.layers.{}.", i);
      ir::ValueId x = rms(b, h, p + "input_layernorm", "input_layernorm");
      out.present_key.push_back(ir::kNone);
      out.present_value.push_back(ir::kNone);
      out.present_conv.push_back(ir::kNone);
      out.present_ssm.push_back(ir::kNone);
      ir::ValueId mixed = ir::kNone;
      if (c_.layer_is_attention[size_t(i)]) {
        AttentionOut a = attention(b, x, p + "self_attn.", in, i, tables);
        out.present_key.back() = a.present_key;
        out.present_value.back() = a.present_value;
        mixed = a.out;
      } else {
        if (!pad_mask) pad_mask = padding_states_mask(b, in);
        auto s = b.scope("mamba");
        SsmMixerOut m = mamba1_mixer(b, ckpt_, c_.mixer, p + "mamba.", x,
                                     in.past_conv.empty() ? ir::kNone : in.past_conv[size_t(i)],
                                     in.past_ssm.empty() ? ir::kNone : in.past_ssm[size_t(i)], *pad_mask);
        out.present_conv.back() = m.conv_state;
        out.present_ssm.back() = m.ssm_state;
        mixed = m.out;
      }
      h = b.plus(h, mixed);
      ir::ValueId x2 = rms(b, h, p + "pre_ff_layernorm", "pre_ff_layernorm");
      auto s = b.scope("feed_forward");
      h = b.plus(h, c_.layer_has_experts[size_t(i)]
                        ? sparse_moe(b, ckpt_, x2, p + "feed_forward.", c_.moe)
                        : gated_mlp(b, ckpt_, x2, p + "feed_forward.", {}, c_.hidden_size, c_.intermediate_size, false,
                                    c_.act, fmt::format("hidden_size={}, intermediate_size={}", c_.hidden_size,
                                                        c_.intermediate_size)));
      b.graph().rename(h, fmt::format("/model/layers.{}/output", i));
    }
    h = rms(b, h, "model.final_layernorm", "final_layernorm");
    out.logits = lm_head(b, ckpt_, h, embed, c_.tie_word_embeddings, c_.vocab_size, c_.hidden_size);
    return out;
  }

 private:
  ir::ValueId rms(ir::Builder& b, ir::ValueId x, const std::string& prefix, const std::string& scope) const {
    return norm(b, ckpt_, x, prefix, c_.hidden_size, NormKind::Rms, c_.eps, false, scope);
  }

  AttentionOut attention(ir::Builder& b, ir::ValueId x, const std::string& a, const CausalLmInputs& in, int64_t layer,
                         StepTables& tables) const {
    auto s = b.scope("self_attn");
    return projected_attention(b, ckpt_, x, a, in, layer, tables,
                               {c_.hidden_size, c_.num_heads, c_.num_kv_heads, c_.head_dim,
                                1.0 / std::sqrt(double(c_.head_dim)), false, nullptr});
  }

  const io::Checkpoint& ckpt_;
  JambaConfig c_;
  ModelSummary s_;
};

}  // namespace

std::unique_ptr<CausalLm> make_jamba(const io::Checkpoint& ckpt) {
  return std::make_unique<Jamba>(ckpt, parse_jamba_config(ckpt));
}

}  // namespace hfx::models
