// GPT-NeoX: Transformers' GPTNeoXForCausalLM (modeling_gpt_neox.py; Pythia and friends). Differs
// from the Llama decoder in structure, so it has its own definition built from the shared blocks:
//   - LayerNorm with bias; plain MLP dense_h_to_4h -> gelu -> dense_4h_to_h, biases everywhere
//   - one query_key_value projection laid out per head as [q | k | v] (view [b, s, heads, 3 * d],
//     then chunk), split after the matmul; multi-head attention (no GQA)
//   - partial rotary (rotary_pct / partial_rotary_factor, default 0.25) on the first dims of each head
//   - use_parallel_residual: h = mlp(ln2(h)) + attn(ln1(h)) + h; otherwise sequential
// Checkpoint names: gpt_neox.layers.{i}...; the head is embed_out.weight in older files and
// lm_head.weight in newer ones. Old attention.bias / masked_bias / rotary_emb.inv_freq buffers are
// not weights.
#include "models/gpt_neox.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"
#include "models/blocks.h"
#include "models/weights.h"

namespace hfx::models {

namespace {

struct NeoxConfig {
  int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_layers = 0, num_heads = 0, head_dim = 0;
  double eps = 1e-5;
  Activation act = Activation::Gelu;
  bool parallel_residual = true, bias = true, tie_word_embeddings = false;
  RopeSpec rope;
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> bos_token_id, pad_token_id;
};

NeoxConfig parse_neox_config(const io::Checkpoint& ckpt) {
  const io::JsonFile& f = ckpt.config();
  const auto& j = f.json;
  constexpr int64_t kMaxDim = int64_t(1) << 24;
  NeoxConfig c;
  c.vocab_size = io::require_int(f, j, "vocab_size", 1, int64_t(1) << 26);
  c.hidden_size = io::require_int(f, j, "hidden_size", 1, kMaxDim);
  c.intermediate_size = io::require_int(f, j, "intermediate_size", 1, kMaxDim);
  c.num_layers = io::require_int(f, j, "num_hidden_layers", 1, 4096);
  c.num_heads = io::require_int(f, j, "num_attention_heads", 1, 4096);
  if (c.hidden_size % c.num_heads)
    bad_input("{}: hidden_size ({}) is not a multiple of num_attention_heads ({})", f.path.filename().string(),
              c.hidden_size, c.num_heads);
  c.head_dim = c.hidden_size / c.num_heads;
  c.eps = norm_eps(f, j, "layer_norm_eps", 1e-5);
  c.act = parse_activation(f, "hidden_act", io::optional_string(f, j, "hidden_act").value_or("gelu"));
  c.parallel_residual = io::optional_bool(f, j, "use_parallel_residual").value_or(true);
  c.bias = io::optional_bool(f, j, "attention_bias").value_or(true);
  c.tie_word_embeddings = io::optional_bool(f, j, "tie_word_embeddings").value_or(false);
  const int64_t max_pos = io::optional_int(f, j, "max_position_embeddings", 1).value_or(2048);
  // GPTNeoXConfig: rope_theta from rope_parameters or rotary_emb_base (a top-level rope_theta is not
  // read), partial_rotary_factor from rope_parameters or rotary_pct.
  nlohmann::json params = nlohmann::json::object();
  if (const auto* p = io::optional_object(f, j, "rope_parameters")) params = *p;
  else if (const auto* s = io::optional_object(f, j, "rope_scaling")) params = *s;
  RopeDefaults defaults;
  defaults.partial_rotary_factor = io::optional_number(f, j, "rotary_pct").value_or(0.25);
  c.rope = parse_rope_params(f, params, io::optional_number(f, j, "rotary_emb_base").value_or(10000.0), c.head_dim,
                             max_pos, defaults);
  read_generation_ids(ckpt, c.vocab_size, c.eos_token_ids, c.bos_token_id, c.pad_token_id);
  return c;
}

class GptNeox final : public CausalLm {
 public:
  GptNeox(const io::Checkpoint& ckpt, NeoxConfig cfg) : ckpt_(ckpt), c_(std::move(cfg)) {
    s_ = summary_of(c_, ckpt.model_type(), "GPTNeoXForCausalLM");
    s_.features = {
        {"attention", fmt::format("{} heads, head_dim {}", c_.num_heads, c_.head_dim)},
        {"rope", fmt::format("{} (theta {}, rotary_dim {})", c_.rope.type, c_.rope.theta, c_.rope.rotary_dim)},
        {"parallel_residual", c_.parallel_residual ? "yes" : "no"},
        {"activation", activation_name(c_.act)},
        {"tie_word_embeddings", c_.tie_word_embeddings ? "yes" : "no"},
    };
  }

  const ModelSummary& summary() const override { return s_; }
  CacheGeometry cache() const override {
    return {c_.num_layers, c_.num_heads, c_.head_dim, std::vector<int64_t>(size_t(c_.num_layers), 0)};
  }

  CausalLmOutputs build(ir::Builder& b, const CausalLmInputs& in) const override {
    auto model_scope = b.scope("model");
    const int64_t H = c_.hidden_size, I = c_.intermediate_size;
    ir::ValueId embed = bind_weight(b, ckpt_, "gpt_neox.embed_in.weight", {c_.vocab_size, H},
                                    fmt::format("vocab_size, hidden_size={}", H));
    ir::ValueId h = b.add1("Embedding", {embed, in.input_ids});
    StepTables tables(b, in);
    CausalLmOutputs out;
    for (int64_t i = 0; i < c_.num_layers; ++i) {
      auto layer_scope = b.scope(fmt::format("layers.{}", i));
      const std::string p = fmt::format("gpt_neox.layers.{}.", i);
      for (const char* buffer : {"attention.bias", "attention.masked_bias", "attention.rotary_emb.inv_freq"})
        if (ckpt_.find(p + buffer)) ckpt_.mark_used(p + buffer);
      ir::ValueId x = norm(b, ckpt_, h, p + "input_layernorm", H, NormKind::Layer, c_.eps, true, "input_layernorm");
      AttentionOut a = attention(b, x, p, in, i, tables);
      out.present_key.push_back(a.present_key);
      out.present_value.push_back(a.present_value);
      const std::string why = fmt::format("hidden_size={}, intermediate_size={}", H, I);
      auto mlp = [&](ir::ValueId y) {
        auto s = b.scope("mlp");
        y = activation(b, linear(b, ckpt_, y, p + "mlp.dense_h_to_4h", H, I, true, why), c_.act);
        return linear(b, ckpt_, y, p + "mlp.dense_4h_to_h", I, H, true, why);
      };
      auto ln2 = [&](ir::ValueId y) {
        return norm(b, ckpt_, y, p + "post_attention_layernorm", H, NormKind::Layer, c_.eps, true,
                    "post_attention_layernorm");
      };
      if (c_.parallel_residual) {
        h = b.plus(b.plus(mlp(ln2(h)), a.out), h);  // mlp_output + attn_output + hidden_states
      } else {
        ir::ValueId attn = b.plus(a.out, h);
        h = b.plus(mlp(ln2(attn)), attn);
      }
      b.graph().rename(h, fmt::format("/model/layers.{}/output", i));
    }
    h = norm(b, ckpt_, h, "gpt_neox.final_layer_norm", H, NormKind::Layer, c_.eps, true, "final_layer_norm");
    const std::string head = ckpt_.find("embed_out.weight") ? "embed_out.weight" : "lm_head.weight";
    out.logits = lm_head(b, ckpt_, h, embed, c_.tie_word_embeddings, c_.vocab_size, H, head);
    return out;
  }

 private:
  AttentionOut attention(ir::Builder& b, ir::ValueId x, const std::string& p, const CausalLmInputs& in, int64_t layer,
                         StepTables& tables) const {
    auto s = b.scope("attention");
    const int64_t H = c_.hidden_size, d = c_.head_dim;
    const std::string why = fmt::format("hidden_size={}, heads={}", H, c_.num_heads);
    ir::ValueId qkv = linear(b, ckpt_, x, p + "attention.query_key_value", H, 3 * H, c_.bias, why);
    auto [q, k, v] = split_qkv_per_head(b, qkv, c_.num_heads, d);
    const auto& cos_sin = tables.rope(c_.rope);
    q = b.add1("RotaryEmbedding", {q, cos_sin[0], cos_sin[1]});
    k = b.add1("RotaryEmbedding", {k, cos_sin[0], cos_sin[1]});
    AttentionOut a = cached_attention(b, in, layer, q, k, v, tables.mask(0), std::pow(double(d), -0.5));
    a.out = linear(b, ckpt_, a.out, p + "attention.dense", H, H, c_.bias, why);
    return a;
  }

  const io::Checkpoint& ckpt_;
  NeoxConfig c_;
  ModelSummary s_;
};

}  // namespace

std::unique_ptr<CausalLm> make_gpt_neox(const io::Checkpoint& ckpt) {
  return std::make_unique<GptNeox>(ckpt, parse_neox_config(ckpt));
}

}  // namespace hfx::models
