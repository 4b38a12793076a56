#include "models/zamba2.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "core/error.h"
#include "models/blocks.h"
#include "models/mamba2_mixer.h"
#include "models/rope.h"
#include "models/short_conv.h"
#include "models/weights.h"

namespace hfx::models {

namespace {

std::string file_name(const io::JsonFile& f) { return f.path.filename().string(); }

struct Zamba2Config {
  int64_t vocab_size = 0, hidden_size = 0, num_layers = 0;
  std::vector<bool> hybrid;  // per layer: a shared block before the mamba layer
  double eps = 1e-5;
  // The shared blocks' attention: 2 * hidden wide, heads of attention_head_dim = 2 * hidden / heads.
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  double attention_scale = 1.0;
  std::optional<RopeSpec> rope;  // use_mem_rope
  int64_t intermediate_size = 0;
  bool mlp_bias = false;  // add_bias_linear (the attention's projections never have biases)
  Activation act = Activation::Gelu;
  int64_t num_mem_blocks = 1, adapter_rank = 0;
  bool attention_adapters = false;  // use_shared_attention_adapter
  bool shared_blocks_tied = true;   // Transformers ties the blocks only with tie_word_embeddings
  Mamba2MixerSpec mixer;
  bool tie_word_embeddings = true;
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> bos_token_id, pad_token_id;
};

// Zamba2Config's default: a mamba layer, (5 mamba + hybrid) x 7, then 4, 1, 3, 1, 2 (54 layers).
std::vector<bool> default_layers() {
  std::vector<bool> out = {false};
  for (int r = 0; r < 7; ++r) {
    out.insert(out.end(), 5, false);
    out.push_back(true);
  }
  for (int n : {4, 3, 2}) {
    out.insert(out.end(), size_t(n), false);
    if (n != 2) out.push_back(true);
  }
  return out;
}

// layers_block_type (alias layer_types): "mamba" / "linear_attention" or "hybrid". Its length is
// the depth; Zamba2Model builds its layers from it, whatever num_hidden_layers says.
std::vector<bool> zamba2_layers(const io::JsonFile& f) {
  for (const char* key : {"layers_block_type", "layer_types"}) {
    const auto types = io::optional_string_list(f, f.json, key);
    if (!types) continue;
    if (types->empty()) bad_input("{}: {} is empty", file_name(f), key);
    std::vector<bool> out;
    for (size_t i = 0; i < types->size(); ++i) {
      const std::string& t = (*types)[i];
      if (t != "hybrid" && t != "mamba" && t != "linear_attention")
        unsupported("{}: {}[{}] = \"{}\" (supported: mamba / linear_attention, hybrid)", file_name(f), key, i, t);
      out.push_back(t == "hybrid");
    }
    return out;
  }
  return default_layers();
}

Zamba2Config parse_zamba2(const io::Checkpoint& ckpt) {
  const io::JsonFile& f = ckpt.config();
  const auto& j = f.json;
  constexpr int64_t kMaxDim = int64_t(1) << 24;
  Zamba2Config c;
  c.vocab_size = io::optional_int(f, j, "vocab_size", 1, int64_t(1) << 26).value_or(32000);
  c.hidden_size = io::optional_int(f, j, "hidden_size", 1, kMaxDim).value_or(2560);
  c.hybrid = zamba2_layers(f);
  c.num_layers = int64_t(c.hybrid.size());
  c.eps = norm_eps(f, j, "rms_norm_eps", 1e-5);
  const int64_t H = c.hidden_size;

  // Zamba2Attention: attention_hidden_size = 2 * hidden in, attention_head_dim = 2 * hidden / heads
  // (Zamba2Config recomputes both, whatever config.json says), scores scaled by (head_dim / 2)^-0.5.
  c.num_heads = io::optional_int(f, j, "num_attention_heads", 1, 4096).value_or(32);
  c.num_kv_heads = io::optional_int(f, j, "num_key_value_heads", 1, 4096).value_or(c.num_heads);
  if (c.num_heads % c.num_kv_heads)
    bad_input("{}: num_attention_heads ({}) must be a multiple of num_key_value_heads ({})", file_name(f), c.num_heads,
              c.num_kv_heads);
  if ((2 * H) % c.num_heads)
    bad_input("{}: 2 * hidden_size ({}) must be a multiple of num_attention_heads ({}): Zamba2's attention heads "
              "split the 2 * hidden_size wide input",
              file_name(f), 2 * H, c.num_heads);
  c.head_dim = 2 * H / c.num_heads;
  c.attention_scale = 1.0 / std::sqrt(double(c.head_dim) / 2.0);
  if (io::optional_bool(f, j, "use_mem_rope").value_or(false)) {
    // Zamba2RotaryEmbedding's default rope rotates the whole attention_head_dim; use_long_context
    // only raises max_position_embeddings, which the default rope does not read.
    RopeSpec rope = parse_rope(f, c.head_dim, io::optional_int(f, j, "max_position_embeddings", 1, 1 << 30).value_or(4096));
    if (rope.type != "default" || rope.rotary_dim != c.head_dim)
      unsupported("{}: rope type {} over {} of {} dims (Zamba2's shared attention: hfx supports the default rope "
                  "over the whole head)",
                  file_name(f), rope.type, rope.rotary_dim, c.head_dim);
    c.rope = rope;
  }

  // Zamba2MLP: gate_up_proj [2 I, hidden] chunked into (gate, up), biased by add_bias_linear.
  c.intermediate_size = io::optional_int(f, j, "intermediate_size", 1, kMaxDim).value_or(4 * H);
  c.mlp_bias = io::optional_bool(f, j, "add_bias_linear").value_or(false);
  c.act = parse_activation(f, "hidden_act", io::optional_string(f, j, "hidden_act").value_or("gelu"));
  c.num_mem_blocks = io::optional_int(f, j, "num_mem_blocks", 1, 4096).value_or(1);
  c.adapter_rank = io::optional_int(f, j, "adapter_rank", 1, kMaxDim).value_or(128);
  c.attention_adapters = io::optional_bool(f, j, "use_shared_attention_adapter").value_or(false);
  // The q, k and v adapters are attention_hidden_size wide: Transformers can add them to the
  // projections only when those are as wide (every head its own key and value).
  if (c.attention_adapters && c.num_kv_heads != c.num_heads)
    bad_input("{}: use_shared_attention_adapter with num_key_value_heads {} != num_attention_heads {} (Zamba2's k/v "
              "adapters are 2 * hidden_size wide, its k/v projections {} wide)",
              file_name(f), c.num_kv_heads, c.num_heads, c.num_kv_heads * c.head_dim);
  c.tie_word_embeddings = io::optional_bool(f, j, "tie_word_embeddings").value_or(true);
  c.shared_blocks_tied = c.tie_word_embeddings;

  // Zamba2MambaMixer: int(mamba_expand * hidden) wide over n_mamba_heads (mamba_headdim recomputed),
  // mamba_ngroups groups, in/out_proj biased by add_bias_linear, the conv always biased, the gated
  // norm's eps 1e-5, silu, dt clamped to (time_step_min, inf).
  const int64_t heads = io::optional_int(f, j, "n_mamba_heads", 1, kMaxDim).value_or(8);
  const int64_t intermediate = io::optional_int(f, j, "mamba_expand", 1, 64).value_or(2) * H;
  if (intermediate % heads)
    bad_input("{}: hidden_size * mamba_expand ({}) must be a multiple of n_mamba_heads ({})", file_name(f), intermediate,
              heads);
  c.mixer = parse_mamba2_mixer(
      f, H,
      {.heads = "n_mamba_heads", .head_dim = "", .state_size = "mamba_d_state", .groups = "mamba_ngroups",
       .expand = "mamba_expand", .conv_kernel = "mamba_d_conv", .chunk = "chunk_size", .proj_bias = "add_bias_linear",
       .conv_bias = "", .eps = "", .act = "", .time_step_limit = ""},
      {.heads = 8, .head_dim = 0, .state_size = 64, .groups = 1, .expand = 2, .conv_kernel = 4, .chunk = 256,
       .proj_bias = false, .conv_bias = true, .eps = 1e-5, .head_dim_auto = true});
  c.mixer.dt_min = io::optional_number(f, j, "time_step_min").value_or(0.001);
  if (!std::isfinite(c.mixer.dt_min))
    bad_input("{}: time_step_min is {}, not a finite number", file_name(f), c.mixer.dt_min);
  c.mixer.dt_max = std::numeric_limits<double>::infinity();
  read_generation_ids(ckpt, c.vocab_size, c.eos_token_ids, c.bos_token_id, c.pad_token_id);
  return c;
}

class Zamba2 final : public CausalLm {
 public:
  Zamba2(const io::Checkpoint& ckpt, Zamba2Config cfg) : ckpt_(ckpt), c_(std::move(cfg)) {
    for (int64_t i = 0; i < c_.num_layers; ++i)
      if (c_.hybrid[size_t(i)]) hybrid_layers_.push_back(i);
    s_ = summary_of(c_, "zamba2", "Zamba2ForCausalLM");
    s_.num_heads = c_.num_heads;
    s_.features = {
        {"layers", fmt::format("{} Mamba-2, {} of them after a shared transformer block ({} blocks, cycling)",
                               c_.num_layers, hybrid_layers_.size(), std::min<int64_t>(c_.num_mem_blocks, int64_t(hybrid_layers_.size())))},
        {"mixer", c_.mixer.describe()},
        {"attention", fmt::format("over [hidden, embeddings] ({} wide): {} heads, {} kv heads, head_dim {}, scale {}{}",
                                  2 * c_.hidden_size, c_.num_heads, c_.num_kv_heads, c_.head_dim, c_.attention_scale,
                                  c_.rope ? fmt::format(", rope theta {}", c_.rope->theta) : ", no rope")},
        {"mlp", fmt::format("gate_up {} x 2, {}{}", c_.intermediate_size, activation_name(c_.act),
                            c_.mlp_bias ? ", biases" : "")},
        {"adapters", fmt::format("rank {} per invocation on the MLP{}", c_.adapter_rank,
                                 c_.attention_adapters ? " and q, k, v" : "")},
        {"shared blocks", c_.shared_blocks_tied ? "tied (bound once)" : "untied (tie_word_embeddings false: each "
                                                                        "hybrid layer reads its own copy)"},
        {"tie_word_embeddings", c_.tie_word_embeddings ? "yes" : "no"},
    };
  }

  const ModelSummary& summary() const override { return s_; }
  CacheGeometry cache() const override {
    return {c_.num_layers, c_.num_kv_heads, c_.head_dim, std::vector<int64_t>(size_t(c_.num_layers), 0)};
  }

  // Every layer carries its mixer's conv and scan states; a hybrid layer also its block's keys and
  // values (one cache per invocation, though the weights are shared).
  std::vector<ir::StateSpec> states(const StateLayout& l) const override {
    std::vector<ir::StateSpec> out;
    for (int64_t i = 0; i < c_.num_layers; ++i) {
      for (auto& s : c_.mixer.states(i)) out.push_back(s);
      if (!c_.hybrid[size_t(i)]) continue;
      for (auto& s : attention_layer_states(i, c_.num_kv_heads, c_.head_dim, l)) out.push_back(s);
    }
    return out;
  }
  std::string_view state_names() const override { return "js-hybrid"; }

  CausalLmOutputs build(ir::Builder& b, const CausalLmInputs& in) const override {
    const int64_t H = c_.hidden_size;
    auto model_scope = b.scope("model");
    ir::ValueId embed = bind_weight(b, ckpt_, "model.embed_tokens.weight", {c_.vocab_size, H},
                                    fmt::format("vocab_size, hidden_size={}", H));
    const ir::ValueId embeddings = b.add1("Embedding", {embed, in.input_ids});
    ir::ValueId h = embeddings;
    StepTables tables(b, in);
    const std::optional<ir::ValueId> pad_mask = padding_states_mask(b, in);
    CausalLmOutputs out;
    size_t invocation = 0;  // hybrid layers so far
    for (int64_t i = 0; i < c_.num_layers; ++i) {
      auto layer_scope = b.scope(fmt::format("layers.{}", i));
      const std::string p = fmt::format("model.layers.{}.", i);
      out.present_key.push_back(ir::kNone);
      out.present_value.push_back(ir::kNone);
      ir::ValueId mixer_in = h;
      std::string mamba = p;  // Zamba2MambaDecoderLayer's prefix
      if (c_.hybrid[size_t(i)]) {
        AttentionOut block = shared_block(b, h, embeddings, i, invocation++, in, tables);
        out.present_key.back() = block.present_key;
        out.present_value.back() = block.present_value;
        ir::ValueId t;
        {
          auto s = b.scope("linear");
          t = linear(b, ckpt_, block.out, p + "linear", H, H, false, fmt::format("hidden_size={}", H));
        }
        mixer_in = b.plus(h, t);
        mamba = p + "mamba_decoder.";
      }
      ir::ValueId x = norm(b, ckpt_, mixer_in, mamba + "input_layernorm", H, NormKind::Rms, c_.eps, false,
                           "input_layernorm");
      Mamba2MixerOut m;
      {
        auto s = b.scope("mamba");
        m = mamba2_mixer(b, ckpt_, x, mamba + "mamba.", c_.mixer, in.past_conv.empty() ? ir::kNone : in.past_conv[size_t(i)],
                         in.past_ssm.empty() ? ir::kNone : in.past_ssm[size_t(i)], pad_mask, in);
      }
      out.present_conv.push_back(m.conv_state);
      out.present_ssm.push_back(m.ssm_state);
      h = b.plus(h, m.out);
      b.graph().rename(h, fmt::format("/model/layers.{}/output", i));
    }
    h = norm(b, ckpt_, h, "model.final_layernorm", H, NormKind::Rms, c_.eps, false, "final_layernorm");
    out.logits = lm_head(b, ckpt_, h, embed, c_.tie_word_embeddings, c_.vocab_size, H);
    return out;
  }

 private:
  // Zamba2AttentionDecoderLayer for hybrid layer `layer`, the `k`-th invocation: block k % num_mem_blocks,
  // read under the first layer that runs it when tied (its later copies, if saved, are the same tensors),
  // else under `layer` itself; adapter slot k. out is the MLP's output [b, s, hidden]; the keys and
  // values are `layer`'s cache.
  AttentionOut shared_block(ir::Builder& b, ir::ValueId h, ir::ValueId embeddings, int64_t layer, size_t k,
                            const CausalLmInputs& in, StepTables& tables) const {
    const int64_t H = c_.hidden_size, I = c_.intermediate_size;
    const int64_t owner = c_.shared_blocks_tied ? hybrid_layers_[k % size_t(c_.num_mem_blocks)] : layer;
    const std::string p = fmt::format("model.layers.{}.shared_transformer.", owner);
    if (owner != layer) mark_saved_copy_used(fmt::format("model.layers.{}.shared_transformer.", layer));
    if (!c_.shared_blocks_tied) mark_other_slots_unused(p, k);
    auto s = b.scope("shared_transformer");
    ir::ValueId x = b.concat({h, embeddings}, 2);  // [b, s, 2 hidden]
    x = norm(b, ckpt_, x, p + "input_layernorm", 2 * H, NormKind::Rms, c_.eps, false, "input_layernorm");
    ProjectedAttention spec{H, c_.num_heads, c_.num_kv_heads, c_.head_dim, c_.attention_scale, false,
                            c_.rope ? &*c_.rope : nullptr};
    spec.input = 2 * H;
    if (c_.attention_adapters) {
      for (size_t n = 0; n < 3; ++n)
        spec.adapters[n] = fmt::format("{}self_attn.linear_{}_adapter_list.{}", p, "qkv"[n], k);
      spec.adapter_rank = c_.adapter_rank;
    }
    AttentionOut r;
    {
      auto a = b.scope("self_attn");
      r = projected_attention(b, ckpt_, x, p + "self_attn.", in, layer, tables, spec);
    }
    ir::ValueId y = norm(b, ckpt_, r.out, p + "pre_ff_layernorm", H, NormKind::Rms, c_.eps, false, "pre_ff_layernorm");
    auto f = b.scope("feed_forward");
    const std::string why = fmt::format("hidden_size={}, intermediate_size={}, adapter_rank={}", H, I, c_.adapter_rank);
    const std::string mlp = p + "feed_forward.";
    ir::ValueId both = b.plus(linear(b, ckpt_, y, mlp + "gate_up_proj", H, 2 * I, c_.mlp_bias, why),
                              low_rank_adapter(b, ckpt_, y, fmt::format("{}gate_up_proj_adapter_list.{}", mlp, k), H,
                                               c_.adapter_rank, 2 * I, why));
    ir::ValueId act = gated_activation(b, b.slice(both, 0, I, 2), b.slice(both, I, 2 * I, 2), c_.act);
    r.out = linear(b, ckpt_, act, mlp + "down_proj", I, H, c_.mlp_bias, why);
    return r;
  }

  // A tied block's copy saved under a later hybrid layer: Transformers loads the block once; the copy
  // is accounted for, not bound.
  void mark_saved_copy_used(const std::string& prefix) const {
    for (const auto& [name, t] : ckpt_.tensors())
      if (name.rfind(prefix, 0) == 0) ckpt_.mark_used(name);
  }

  // An untied block (tie_word_embeddings false) still holds the adapter slots of every invocation of
  // its block id, as Transformers builds it; only invocation k's runs. The others are loaded and never
  // read by Transformers either: accounted for, not bound.
  void mark_other_slots_unused(const std::string& p, size_t k) const {
    const size_t blocks = size_t(c_.num_mem_blocks);
    for (size_t other = k % blocks; other < hybrid_layers_.size(); other += blocks) {
      if (other == k) continue;
      for (const std::string list : {"self_attn.linear_q_adapter_list", "self_attn.linear_k_adapter_list",
                                     "self_attn.linear_v_adapter_list", "feed_forward.gate_up_proj_adapter_list"})
        for (const char* w : {".0.weight", ".1.weight"})
          if (const std::string name = fmt::format("{}{}.{}{}", p, list, other, w); ckpt_.find(name)) ckpt_.mark_used(name);
    }
  }

  const io::Checkpoint& ckpt_;
  Zamba2Config c_;
  std::vector<int64_t> hybrid_layers_;
  ModelSummary s_;
};

}  // namespace

std::unique_ptr<CausalLm> make_zamba2(const io::Checkpoint& ckpt) {
  return std::make_unique<Zamba2>(ckpt, parse_zamba2(ckpt));
}

}  // namespace hfx::models
