#include "models/falcon_h1.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <cmath>

#include "core/error.h"
#include "ir/state.h"
#include "models/blocks.h"
#include "models/mamba2_mixer.h"
#include "models/rope.h"
#include "models/short_conv.h"
#include "models/weights.h"

namespace hfx::models {

namespace {

// FalconH1Config's muP multipliers (1 where the config has none).
struct Multipliers {
  double embedding = 1, lm_head = 1;
  double attention_in = 1, attention_out = 1, key = 1;
  double ssm_in = 1, ssm_out = 1;
  std::array<double, 5> ssm = {1, 1, 1, 1, 1};  // in_proj's z, x, B, C, dt parts (the mup_vector)
  std::array<double, 2> mlp = {1, 1};           // gate_proj's output, down_proj's output
};

struct FalconH1Config {
  int64_t vocab_size = 0, hidden_size = 0, num_layers = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int64_t intermediate_size = 0;
  double eps = 1e-5;
  bool attention_bias = false, mlp_bias = false, tie_word_embeddings = false;
  Activation act = Activation::Silu;
  RopeSpec rope;
  Mamba2MixerSpec mixer;
  Multipliers mup;
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> bos_token_id, pad_token_id;
};

std::string file_name(const io::JsonFile& f) { return f.path.filename().string(); }

// A list of N multipliers (ssm_multipliers, mlp_multipliers): all 1 when absent or null, as
// FalconH1Config fills them.
template <size_t N>
std::array<double, N> multiplier_list(const io::JsonFile& f, const nlohmann::json& j, const char* key) {
  std::array<double, N> out;
  out.fill(1.0);
  if (!j.contains(key) || j[key].is_null()) return out;
  const auto& v = j[key];
  if (!v.is_array() || v.size() != N)
    bad_input("{}: {} must be a list of {} numbers, found {}", file_name(f), key, N, v.dump());
  for (size_t i = 0; i < N; ++i) {
    if (!v[i].is_number() || !std::isfinite(v[i].get<double>()))
      bad_input("{}: {}[{}] is {}, not a finite number", file_name(f), key, i, v[i].dump());
    out[i] = v[i].get<double>();
  }
  return out;
}

// FalconH1Mixer's width: mamba_d_ssm (1024 when absent), or int(mamba_expand * hidden_size) when it is
// null; and its head_dim: mamba_d_head, "auto" (the default) meaning width / mamba_n_heads.
void parse_mixer(const io::JsonFile& f, FalconH1Config& c) {
  const auto& j = f.json;
  constexpr int64_t kMaxDim = int64_t(1) << 24;
  const bool by_expand = j.contains("mamba_d_ssm") && j["mamba_d_ssm"].is_null();
  const int64_t width = by_expand ? io::optional_int(f, j, "mamba_expand", 1, 64).value_or(2) * c.hidden_size
                                  : io::optional_int(f, j, "mamba_d_ssm", 1, kMaxDim).value_or(1024);
  const char* width_is = by_expand ? "mamba_expand * hidden_size" : "mamba_d_ssm";
  const int64_t heads = io::optional_int(f, j, "mamba_n_heads", 1, kMaxDim).value_or(128);
  if (width % heads)
    bad_input("{}: mamba_n_heads ({}) must divide the mixer's width {} ({})", file_name(f), heads, width, width_is);
  int64_t head_dim = width / heads;
  if (j.contains("mamba_d_head") && !(j["mamba_d_head"].is_string() && j["mamba_d_head"].get<std::string>() == "auto")) {
    if (j["mamba_d_head"].is_null()) bad_input("{}: mamba_d_head is null (FalconH1Config takes \"auto\" or an integer)", file_name(f));
    head_dim = io::require_int(f, j, "mamba_d_head", 1, kMaxDim);
  }
  if (heads * head_dim != width)
    bad_input("{}: mamba_n_heads * mamba_d_head ({} x {}) must equal the mixer's width {} ({})", file_name(f), heads,
              head_dim, width, width_is);
  // FalconH1Config's mamba_* names and defaults; the width is settled above (no expand key).
  c.mixer = parse_mamba2_mixer(f, c.hidden_size,
                               {.heads = "mamba_n_heads", .head_dim = "", .state_size = "mamba_d_state",
                                .groups = "mamba_n_groups", .expand = "", .conv_kernel = "mamba_d_conv",
                                .chunk = "mamba_chunk_size", .proj_bias = "mamba_proj_bias",
                                .conv_bias = "mamba_conv_bias", .eps = "rms_norm_eps"},
                               {.heads = 128, .head_dim = head_dim, .state_size = 256, .groups = 1, .eps = c.eps});
  c.mixer.out_proj_bias = io::optional_bool(f, j, "projectors_bias").value_or(false);
  if (!io::optional_bool(f, j, "mamba_rms_norm").value_or(false))
    c.mixer.gated_norm = GatedNorm::None;
  else if (io::optional_bool(f, j, "mamba_norm_before_gate").value_or(true))
    c.mixer.gated_norm = GatedNorm::BeforeGate;
  else
    c.mixer.gated_norm = GatedNorm::AfterGate;
  c.mixer.in_multiplier = c.mup.ssm_in;
  c.mixer.zxbcdt_multipliers = c.mup.ssm;
}

FalconH1Config parse_falcon_h1(const io::Checkpoint& ckpt) {
  const io::JsonFile& f = ckpt.config();
  const auto& j = f.json;
  constexpr int64_t kMaxDim = int64_t(1) << 24;
  FalconH1Config c;
  c.vocab_size = io::optional_int(f, j, "vocab_size", 1, int64_t(1) << 26).value_or(128000);
  c.hidden_size = io::optional_int(f, j, "hidden_size", 1, kMaxDim).value_or(4096);
  c.num_layers = io::optional_int(f, j, "num_hidden_layers", 1, 4096).value_or(32);
  c.intermediate_size = io::optional_int(f, j, "intermediate_size", 1, kMaxDim).value_or(14336);
  c.eps = norm_eps(f, j, "rms_norm_eps", 1e-5);
  c.act = parse_activation(f, "hidden_act", io::optional_string(f, j, "hidden_act").value_or("silu"));
  c.attention_bias = io::optional_bool(f, j, "attention_bias").value_or(false);
  c.mlp_bias = io::optional_bool(f, j, "mlp_bias").value_or(false);
  c.tie_word_embeddings = io::optional_bool(f, j, "tie_word_embeddings").value_or(false);

  // FalconH1Attention: 32 heads and 8 kv heads by default (null kv heads: the heads' count); head_dim
  // from the config, else hidden_size / heads.
  c.num_heads = io::optional_int(f, j, "num_attention_heads", 1, 4096).value_or(32);
  c.num_kv_heads = j.contains("num_key_value_heads") && j["num_key_value_heads"].is_null()
                       ? c.num_heads
                       : io::optional_int(f, j, "num_key_value_heads", 1, 4096).value_or(8);
  if (c.num_heads % c.num_kv_heads)
    bad_input("{}: num_attention_heads ({}) must be a multiple of num_key_value_heads ({})", file_name(f), c.num_heads,
              c.num_kv_heads);
  c.head_dim = io::optional_int(f, j, "head_dim", 1, 1 << 16).value_or(c.hidden_size / c.num_heads);
  if (c.head_dim % 2) bad_input("{}: head_dim {} is odd (rope rotates pairs)", file_name(f), c.head_dim);
  c.rope = parse_rope(f, c.head_dim, io::optional_int(f, j, "max_position_embeddings", 1).value_or(8192));
  // FalconH1RotaryEmbedding's default rope spans the whole head whatever partial_rotary_factor says,
  // and its other rope types would rotate fewer dims than apply_rotary_pos_emb applies to.
  if (c.rope.rotary_dim != c.head_dim)
    unsupported("{}: partial_rotary_factor (rope over {} of head_dim {}; Falcon-H1 rotates whole heads)", file_name(f),
                c.rope.rotary_dim, c.head_dim);

  auto number = [&](const char* key) { return io::optional_number(f, j, key).value_or(1.0); };
  c.mup.embedding = number("embedding_multiplier");
  c.mup.lm_head = number("lm_head_multiplier");
  c.mup.attention_in = number("attention_in_multiplier");
  c.mup.attention_out = number("attention_out_multiplier");
  c.mup.key = number("key_multiplier");
  c.mup.ssm_in = number("ssm_in_multiplier");
  c.mup.ssm_out = number("ssm_out_multiplier");
  c.mup.ssm = multiplier_list<5>(f, j, "ssm_multipliers");
  c.mup.mlp = multiplier_list<2>(f, j, "mlp_multipliers");

  parse_mixer(f, c);
  read_generation_ids(ckpt, c.vocab_size, c.eos_token_ids, c.bos_token_id, c.pad_token_id);
  return c;
}

class FalconH1 final : public CausalLm {
 public:
  FalconH1(const io::Checkpoint& ckpt, FalconH1Config cfg) : ckpt_(ckpt), c_(std::move(cfg)) {
    s_ = summary_of(c_, "falcon_h1", "FalconH1ForCausalLM");
    const Multipliers& m = c_.mup;
    s_.features = {
        {"layers", fmt::format("{}, each a Mamba-2 mixer and attention in parallel, then a SwiGLU MLP", c_.num_layers)},
        {"mixer", c_.mixer.describe()},
        {"attention", fmt::format("{} heads, {} kv heads, head_dim {}, rope theta {}{}", c_.num_heads, c_.num_kv_heads,
                                  c_.head_dim, c_.rope.theta, c_.attention_bias ? ", biases" : "")},
        {"mlp", fmt::format("gated {}, {}{}", c_.intermediate_size, activation_name(c_.act), c_.mlp_bias ? ", biases" : "")},
        {"multipliers", fmt::format("embedding {}, lm_head {}; attention in {}, out {}, key {}; ssm in {}, out {}; "
                                    "mlp gate {}, down {}",
                                    m.embedding, m.lm_head, m.attention_in, m.attention_out, m.key, m.ssm_in, m.ssm_out,
                                    m.mlp[0], m.mlp[1])},
        {"tie_word_embeddings", c_.tie_word_embeddings ? "yes" : "no"},
    };
  }

  const ModelSummary& summary() const override { return s_; }
  CacheGeometry cache() const override {
    return {c_.num_layers, c_.num_kv_heads, c_.head_dim, std::vector<int64_t>(size_t(c_.num_layers), 0)};
  }
  // Every layer carries its mixer's conv and scan states and its attention's keys and values.
  std::vector<ir::StateSpec> states(const StateLayout& l) const override {
    std::vector<ir::StateSpec> out;
    for (int64_t i = 0; i < c_.num_layers; ++i) {
      for (const auto& s : c_.mixer.states(i)) out.push_back(s);
      for (auto& s : attention_layer_states(i, c_.num_kv_heads, c_.head_dim, l)) out.push_back(s);
    }
    return out;
  }
  std::string_view state_names() const override { return "js-hybrid"; }

  CausalLmOutputs build(ir::Builder& b, const CausalLmInputs& in) const override {
    const Multipliers& m = c_.mup;
    auto model_scope = b.scope("model");
    ir::ValueId embed = bind_weight(b, ckpt_, "model.embed_tokens.weight", {c_.vocab_size, c_.hidden_size},
                                    fmt::format("vocab_size, hidden_size={}", c_.hidden_size));
    ir::ValueId h = scaled(b, b.add1("Embedding", {embed, in.input_ids}), m.embedding);
    StepTables tables(b, in);
    const std::optional<ir::ValueId> pad_mask = padding_states_mask(b, in);
    CausalLmOutputs out;
    for (int64_t i = 0; i < c_.num_layers; ++i) {
      auto layer_scope = b.scope(fmt::format("layers.{}", i));
      const std::string p = fmt::format("model.layers.{}.", i);
      ir::ValueId x = rms(b, h, p + "input_layernorm", "input_layernorm");
      ir::ValueId mixed;
      {
        auto s = b.scope("mamba");
        Mamba2MixerOut mx = mamba2_mixer(b, ckpt_, x, p + "mamba.", c_.mixer,
                                         in.past_conv.empty() ? ir::kNone : in.past_conv[size_t(i)],
                                         in.past_ssm.empty() ? ir::kNone : in.past_ssm[size_t(i)], pad_mask, in);
        out.present_conv.push_back(mx.conv_state);
        out.present_ssm.push_back(mx.ssm_state);
        mixed = scaled(b, mx.out, m.ssm_out);
      }
      {
        auto s = b.scope("self_attn");
        AttentionOut a = projected_attention(
            b, ckpt_, scaled(b, x, m.attention_in), p + "self_attn.", in, i, tables,
            {.hidden = c_.hidden_size, .heads = c_.num_heads, .kv_heads = c_.num_kv_heads, .head_dim = c_.head_dim,
             .scale = 1.0 / std::sqrt(double(c_.head_dim)), .bias = c_.attention_bias, .rope = &c_.rope,
             .key_multiplier = m.key});
        out.present_key.push_back(a.present_key);
        out.present_value.push_back(a.present_value);
        mixed = b.plus(mixed, scaled(b, a.out, m.attention_out));
      }
      h = b.plus(h, mixed);
      h = b.plus(h, mlp(b, rms(b, h, p + "pre_ff_layernorm", "pre_ff_layernorm"), p + "feed_forward."));
      b.graph().rename(h, fmt::format("/model/layers.{}/output", i));
    }
    h = rms(b, h, "model.final_layernorm", "final_layernorm");
    out.logits = scaled(b, lm_head(b, ckpt_, h, embed, c_.tie_word_embeddings, c_.vocab_size, c_.hidden_size), m.lm_head);
    return out;
  }

 private:
  // v * multiplier in f32, as Transformers multiplies an f32 tensor by a Python float; v itself for 1.
  static ir::ValueId scaled(ir::Builder& b, ir::ValueId v, double multiplier) {
    return multiplier == 1.0 ? v : b.times(v, b.f32(float(multiplier)));
  }

  ir::ValueId rms(ir::Builder& b, ir::ValueId x, const std::string& prefix, const std::string& scope) const {
    return norm(b, ckpt_, x, prefix, c_.hidden_size, NormKind::Rms, c_.eps, false, scope);
  }

  // FalconH1MLP: down(up(x) * act(gate(x) * gate_multiplier)) * down_multiplier.
  ir::ValueId mlp(ir::Builder& b, ir::ValueId x, const std::string& p) const {
    auto s = b.scope("feed_forward");
    const int64_t H = c_.hidden_size, I = c_.intermediate_size;
    const std::string why = fmt::format("hidden_size={}, intermediate_size={}", H, I);
    ir::ValueId gate = scaled(b, linear(b, ckpt_, x, p + "gate_proj", H, I, c_.mlp_bias, why), c_.mup.mlp[0]);
    ir::ValueId up = linear(b, ckpt_, x, p + "up_proj", H, I, c_.mlp_bias, why);
    ir::ValueId y = linear(b, ckpt_, gated_activation(b, gate, up, c_.act), p + "down_proj", I, H, c_.mlp_bias, why);
    return scaled(b, y, c_.mup.mlp[1]);
  }

  const io::Checkpoint& ckpt_;
  FalconH1Config c_;
  ModelSummary s_;
};

}  // namespace

std::unique_ptr<CausalLm> make_falcon_h1(const io::Checkpoint& ckpt) {
  return std::make_unique<FalconH1>(ckpt, parse_falcon_h1(ckpt));
}

}  // namespace hfx::models
