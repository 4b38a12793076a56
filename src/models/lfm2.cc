#include "models/lfm2.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "models/blocks.h"
#include "models/rope.h"
#include "models/short_conv.h"
#include "models/weights.h"

namespace hfx::models {

namespace {

struct Lfm2Config {
  int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_layers = 0, num_heads = 0, num_kv_heads = 0,
          head_dim = 0, conv_kernel = 3;
  double eps = 1e-5;
  bool tie_word_embeddings = true, conv_bias = false;
  std::vector<bool> layer_is_attention;
  RopeSpec rope;
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> bos_token_id, pad_token_id;
};

std::string file_name(const io::JsonFile& f) { return f.path.filename().string(); }

Lfm2Config parse_lfm2_config(const io::Checkpoint& ckpt) {
  const io::JsonFile& f = ckpt.config();
  const auto& j = f.json;
  constexpr int64_t kMaxDim = int64_t(1) << 24;
  Lfm2Config c;
  c.vocab_size = io::require_int(f, j, "vocab_size", 1, int64_t(1) << 26);
  c.hidden_size = io::require_int(f, j, "hidden_size", 1, kMaxDim);
  // Lfm2Config reads block_ff_dim as intermediate_size; Lfm2MLP then adjusts it (block_auto_adjust_ff_dim).
  const auto ff = j.contains("intermediate_size") ? io::require_int(f, j, "intermediate_size", 1, kMaxDim)
                                                  : io::require_int(f, j, "block_ff_dim", 1, kMaxDim);
  c.intermediate_size = ff;
  if (io::optional_bool(f, j, "block_auto_adjust_ff_dim").value_or(true)) {
    int64_t n = int64_t(2 * ff / 3);  // int(2 * intermediate_size / 3): floor of a positive quotient
    const auto multiplier = j.contains("block_ffn_dim_multiplier") && j["block_ffn_dim_multiplier"].is_null()
                                ? std::nullopt
                                : std::optional<double>(io::optional_number(f, j, "block_ffn_dim_multiplier").value_or(1.0));
    if (multiplier) {
      const int64_t multiple = io::optional_int(f, j, "block_multiple_of", 1, kMaxDim).value_or(256);
      n = int64_t(*multiplier * double(n));
      n = multiple * ((n + multiple - 1) / multiple);
    }
    c.intermediate_size = n;
  }
  if (c.intermediate_size < 1) bad_input("{}: the adjusted feed-forward size is {}", file_name(f), c.intermediate_size);
  c.num_layers = io::require_int(f, j, "num_hidden_layers", 1, 4096);
  const HeadCounts heads = parse_head_counts(f, c.hidden_size);
  c.num_heads = heads.heads;
  c.num_kv_heads = heads.kv_heads;
  c.head_dim = c.hidden_size / c.num_heads;  // Lfm2Attention: hidden_size // num_attention_heads
  c.eps = norm_eps(f, j, "norm_eps", 1e-5);
  c.tie_word_embeddings = io::optional_bool(f, j, "tie_word_embeddings")
                              .value_or(io::optional_bool(f, j, "tie_embedding").value_or(true));
  c.conv_bias = io::optional_bool(f, j, "conv_bias").value_or(false);
  c.conv_kernel = io::optional_int(f, j, "conv_L_cache", 1, 4096).value_or(3);
  if (c.conv_kernel < 2)
    unsupported("{}: conv_L_cache {} (a kernel of 1 carries no state; hfx supports 2 and more)", file_name(f),
                c.conv_kernel);
  auto types = io::optional_string_list(f, j, "layer_types");
  if (!types) {
    // Lfm2Config.__post_init__: full_attn_idxs (default: every layer) are attention, the rest conv.
    auto idxs = io::optional_int_list(f, j, "full_attn_idxs", 0, c.num_layers - 1);
    types = std::vector<std::string>();
    for (int64_t i = 0; i < c.num_layers; ++i)
      types->push_back(!idxs || std::find(idxs->begin(), idxs->end(), i) != idxs->end() ? "full_attention" : "conv");
  }
  if (int64_t(types->size()) != c.num_layers)
    bad_input("{}: layer_types has {} entries, num_hidden_layers is {}", file_name(f), types->size(), c.num_layers);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const auto& t = (*types)[size_t(i)];
    // Lfm2DecoderLayer: attention unless the type is "conv".
    if (t != "conv" && t != "full_attention")
      unsupported("{}: layer_types[{}] = \"{}\" (supported: full_attention, conv)", file_name(f), i, t);
    c.layer_is_attention.push_back(t != "conv");
  }
  const int64_t max_pos = io::optional_int(f, j, "max_position_embeddings", 1).value_or(128000);
  c.rope = parse_rope(f, c.head_dim, max_pos, {.theta = 1000000.0});  // Lfm2Config.default_theta
  read_generation_ids(ckpt, c.vocab_size, c.eos_token_ids, c.bos_token_id, c.pad_token_id);
  return c;
}

class Lfm2 final : public CausalLm {
 public:
  Lfm2(const io::Checkpoint& ckpt, Lfm2Config cfg) : ckpt_(ckpt), c_(std::move(cfg)) {
    s_ = summary_of(c_, "lfm2", "Lfm2ForCausalLM");
    const auto attention = std::count(c_.layer_is_attention.begin(), c_.layer_is_attention.end(), true);
    s_.features = {
        {"layers", fmt::format("{} short convolution, {} attention", c_.num_layers - attention, attention)},
        {"short_conv", fmt::format("depthwise kernel {} (state {} columns){}", c_.conv_kernel, c_.conv_kernel - 1,
                                   c_.conv_bias ? ", biases" : "")},
        {"attention", fmt::format("{} heads, {} kv heads (GQA x{}), head_dim {}, q/k RMSNorm", c_.num_heads,
                                  c_.num_kv_heads, c_.num_heads / c_.num_kv_heads, c_.head_dim)},
        {"rope", fmt::format("{} (theta {}, rotary_dim {})", c_.rope.type, c_.rope.theta, c_.rope.rotary_dim)},
        {"tie_word_embeddings", c_.tie_word_embeddings ? "yes" : "no"},
    };
  }

  const ModelSummary& summary() const override { return s_; }
  // The attention layers' geometry (what a runtime sizes its key/value buffers by); every layer is
  // counted, as the layer index names the ports.
  CacheGeometry cache() const override {
    return {c_.num_layers, c_.num_kv_heads, c_.head_dim, std::vector<int64_t>(size_t(c_.num_layers), 0)};
  }

  std::vector<ir::StateSpec> states(const StateLayout& l) const override {
    return hybrid_states(c_.layer_is_attention, c_.num_kv_heads, c_.head_dim, l, [&](int64_t i) {
      return std::vector<ir::StateSpec>{ir::conv_state(i, c_.hidden_size, c_.conv_kernel - 1)};
    });
  }
  std::string_view state_names() const override { return "js-hybrid"; }

  CausalLmOutputs build(ir::Builder& b, const CausalLmInputs& in) const override {
    auto model_scope = b.scope("model");
    const std::string H = fmt::format("hidden_size={}", c_.hidden_size);
    ir::ValueId embed = bind_weight(b, ckpt_, "model.embed_tokens.weight", {c_.vocab_size, c_.hidden_size}, "vocab_size, " + H);
    ir::ValueId h = b.add1("Embedding", {embed, in.input_ids});
    StepTables tables(b, in);
    std::optional<std::optional<ir::ValueId>> pad_mask;  // built on the first conv layer
    CausalLmOutputs out;
    for (int64_t i = 0; i < c_.num_layers; ++i) {
      auto layer_scope = b.scope(fmt::format("layers.{}", i));
      const std::string p = fmt::format("model.layers.{}.", i);
      ir::ValueId x = rms(b, h, p + "operator_norm", "operator_norm");
      ir::ValueId mixed = ir::kNone;
      if (c_.layer_is_attention[size_t(i)]) {
        AttentionOut a = attention(b, x, p, in, i, tables);
        out.present_key.push_back(a.present_key);
        out.present_value.push_back(a.present_value);
        out.present_conv.push_back(ir::kNone);
        mixed = a.out;
      } else {
        if (!pad_mask) pad_mask = padding_states_mask(b, in);
        ConvOut cv = short_conv(b, x, p, in, i, *pad_mask);
        out.present_key.push_back(ir::kNone);
        out.present_value.push_back(ir::kNone);
        out.present_conv.push_back(cv.present);
        mixed = cv.out;
      }
      h = b.plus(h, mixed);
      ir::ValueId m;
      {
        auto s = b.scope("feed_forward");
        m = gated_mlp(b, ckpt_, rms(b, h, p + "ffn_norm", "ffn_norm"), p + "feed_forward.", {"w1", "w3", "w2"},
                      c_.hidden_size, c_.intermediate_size, false, Activation::Silu,
                      fmt::format("hidden_size={}, adjusted intermediate_size={}", c_.hidden_size, c_.intermediate_size));
      }
      h = b.plus(h, m);
      b.graph().rename(h, fmt::format("/model/layers.{}/output", i));
    }
    h = rms(b, h, "model.embedding_norm", "embedding_norm");
    out.logits = lm_head(b, ckpt_, h, embed, c_.tie_word_embeddings, c_.vocab_size, c_.hidden_size);
    return out;
  }

 private:
  ir::ValueId rms(ir::Builder& b, ir::ValueId x, const std::string& prefix, const std::string& scope, int64_t n = 0) const {
    return norm(b, ckpt_, x, prefix, n ? n : c_.hidden_size, NormKind::Rms, c_.eps, false, scope);
  }

  AttentionOut attention(ir::Builder& b, ir::ValueId x, const std::string& p, const CausalLmInputs& in, int64_t layer,
                         StepTables& tables) const {
    auto s = b.scope("self_attn");
    const std::string a = p + "self_attn.";
    const std::string why = fmt::format("hidden_size={}, heads={}, kv_heads={}, head_dim={}", c_.hidden_size,
                                        c_.num_heads, c_.num_kv_heads, c_.head_dim);
    auto heads = [&](const std::string& proj, int64_t n_heads, const char* norm_name) {
      auto ps = b.scope(proj);
      ir::ValueId y = linear(b, ckpt_, x, a + proj, c_.hidden_size, n_heads * c_.head_dim, false, why);
      y = b.reshape(y, {0, 0, n_heads, c_.head_dim});  // [b, s, heads, head_dim]
      if (norm_name) y = rms(b, y, a + norm_name, norm_name, c_.head_dim);
      return b.transpose(y, {0, 2, 1, 3});  // [b, heads, s, head_dim]
    };
    ir::ValueId q = heads("q_proj", c_.num_heads, "q_layernorm");
    ir::ValueId k = heads("k_proj", c_.num_kv_heads, "k_layernorm");
    ir::ValueId v = heads("v_proj", c_.num_kv_heads, nullptr);
    const auto& cos_sin = tables.rope(c_.rope);
    q = b.add1("RotaryEmbedding", {q, cos_sin[0], cos_sin[1]});
    k = b.add1("RotaryEmbedding", {k, cos_sin[0], cos_sin[1]});
    AttentionOut r = cached_attention(b, in, layer, q, k, v, tables.mask(0), std::pow(double(c_.head_dim), -0.5));
    auto os = b.scope("out_proj");
    r.out = linear(b, ckpt_, r.out, a + "out_proj", c_.num_heads * c_.head_dim, c_.hidden_size, false, why);
    return r;
  }

  // Lfm2ShortConv.slow_forward, with the state carried as the contract's convolution state.
  ConvOut short_conv(ir::Builder& b, ir::ValueId x, const std::string& p, const CausalLmInputs& in, int64_t layer,
                     const std::optional<ir::ValueId>& pad_mask) const {
    auto s = b.scope("conv");
    const std::string c = p + "conv.";
    const int64_t Hs = c_.hidden_size, K = c_.conv_kernel;
    const std::string why = fmt::format("hidden_size={}, conv_L_cache={}", Hs, K);
    if (pad_mask) x = b.times(x, *pad_mask);
    ir::ValueId bcx;
    {
      auto ps = b.scope("in_proj");
      bcx = b.transpose(linear(b, ckpt_, x, c + "in_proj", Hs, 3 * Hs, c_.conv_bias, why), {0, 2, 1});  // [b, 3H, s]
    }
    ir::ValueId gate_b = b.slice(bcx, 0, Hs, 1), gate_c = b.slice(bcx, Hs, 2 * Hs, 1), xs = b.slice(bcx, 2 * Hs, 3 * Hs, 1);
    ir::ValueId bx = b.times(gate_b, xs);
    // conv.conv.weight is torch's depthwise [channels, 1, kernel]: read as [channels, kernel].
    ir::ValueId w = bind_weight(b, ckpt_, c + "conv.weight", {Hs, 1, K}, why, [&](ir::WeightRef r) { return r.reshaped({Hs, K}); });
    ir::ValueId bias = c_.conv_bias ? bind_weight(b, ckpt_, c + "conv.bias", {Hs}, why) : ir::kNone;
    const ir::ValueId past = in.past_conv.empty() ? ir::kNone : in.past_conv[size_t(layer)];
    ConvOut r = causal_depthwise_conv(b, bx, past, w, bias, Hs, K);
    ir::ValueId y = b.transpose(b.times(gate_c, r.out), {0, 2, 1});  // [b, s, H]
    auto os = b.scope("out_proj");
    r.out = linear(b, ckpt_, y, c + "out_proj", Hs, Hs, c_.conv_bias, why);
    return r;
  }

  const io::Checkpoint& ckpt_;
  Lfm2Config c_;
  ModelSummary s_;
};

}  // namespace

std::unique_ptr<CausalLm> make_lfm2(const io::Checkpoint& ckpt) {
  return std::make_unique<Lfm2>(ckpt, parse_lfm2_config(ckpt));
}

}  // namespace hfx::models
