#include "models/mamba2.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/tensor.h"
#include "models/blocks.h"
#include "models/short_conv.h"
#include "models/ssd.h"
#include "models/weights.h"

namespace hfx::models {

namespace {

struct Mamba2Config {
  int64_t vocab_size = 0, hidden_size = 0, num_layers = 0, num_heads = 0, head_dim = 0, state_size = 0, n_groups = 0,
          intermediate_size = 0, conv_kernel = 4, chunk_size = 256;
  double eps = 1e-5;
  bool tie_word_embeddings = false, use_bias = false, use_conv_bias = true;
  double dt_min = 0.0, dt_max = std::numeric_limits<double>::infinity();  // time_step_limit
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> bos_token_id, pad_token_id;

  int64_t conv_dim() const { return intermediate_size + 2 * n_groups * state_size; }
};

std::string file_name(const io::JsonFile& f) { return f.path.filename().string(); }

// One bound of time_step_limit: a number, or Transformers' {"__float__": "Infinity"} for an
// unbounded one (config.json cannot spell infinity).
double time_step_bound(const io::JsonFile& f, const nlohmann::json& v, size_t i) {
  if (v.is_number()) return v.get<double>();
  if (v.is_object() && v.size() == 1 && v.contains("__float__") && v["__float__"].is_string()) {
    const auto s = v["__float__"].get<std::string>();
    if (s == "Infinity") return std::numeric_limits<double>::infinity();
    if (s == "-Infinity") return -std::numeric_limits<double>::infinity();
  }
  bad_input("{}: time_step_limit[{}] is {}, not a number", file_name(f), i, v.dump());
}

Mamba2Config parse_mamba2_config(const io::Checkpoint& ckpt) {
  const io::JsonFile& f = ckpt.config();
  const auto& j = f.json;
  constexpr int64_t kMaxDim = int64_t(1) << 24;
  Mamba2Config c;
  c.vocab_size = io::require_int(f, j, "vocab_size", 1, int64_t(1) << 26);
  c.hidden_size = io::require_int(f, j, "hidden_size", 1, kMaxDim);
  c.num_layers = io::require_int(f, j, "num_hidden_layers", 1, 4096);
  c.num_heads = io::optional_int(f, j, "num_heads", 1, kMaxDim).value_or(128);
  c.head_dim = io::optional_int(f, j, "head_dim", 1, kMaxDim).value_or(64);
  c.state_size = io::optional_int(f, j, "state_size", 1, 1 << 16).value_or(128);
  c.n_groups = io::optional_int(f, j, "n_groups", 1, kMaxDim).value_or(8);
  const int64_t expand = io::optional_int(f, j, "expand", 1, 64).value_or(2);
  c.intermediate_size = expand * c.hidden_size;  // int(config.expand * hidden_size)
  if (c.intermediate_size != c.num_heads * c.head_dim)
    bad_input("{}: hidden_size * expand ({}) must equal num_heads * head_dim ({} x {})", file_name(f),
              c.intermediate_size, c.num_heads, c.head_dim);
  if (c.num_heads % c.n_groups)
    bad_input("{}: num_heads ({}) must be a multiple of n_groups ({})", file_name(f), c.num_heads, c.n_groups);
  c.conv_kernel = io::optional_int(f, j, "conv_kernel", 1, 4096).value_or(4);
  if (c.conv_kernel < 2)
    unsupported("{}: conv_kernel {} (a kernel of 1 carries no state; hfx supports 2 and more)", file_name(f), c.conv_kernel);
  c.chunk_size = io::optional_int(f, j, "chunk_size", 1, 1 << 16).value_or(256);
  c.eps = norm_eps(f, j, "layer_norm_epsilon", 1e-5);
  c.tie_word_embeddings = io::optional_bool(f, j, "tie_word_embeddings").value_or(false);
  c.use_bias = io::optional_bool(f, j, "use_bias").value_or(false);
  c.use_conv_bias = io::optional_bool(f, j, "use_conv_bias").value_or(true);
  if (auto act = io::optional_string(f, j, "hidden_act"); act && *act != "silu" && *act != "swish")
    unsupported("{}: hidden_act \"{}\" (Mamba2Mixer's conv activation; hfx supports silu)", file_name(f), *act);
  if (j.contains("time_step_limit") && !j["time_step_limit"].is_null()) {
    const auto& lim = j["time_step_limit"];
    if (!lim.is_array() || lim.size() != 2) bad_input("{}: time_step_limit must be a pair [min, max]", file_name(f));
    c.dt_min = time_step_bound(f, lim[0], 0);
    c.dt_max = time_step_bound(f, lim[1], 1);
    if (std::isnan(c.dt_min) || std::isnan(c.dt_max) || c.dt_min > c.dt_max)
      bad_input("{}: time_step_limit [{}, {}] is not a range", file_name(f), c.dt_min, c.dt_max);
  }
  read_generation_ids(ckpt, c.vocab_size, c.eos_token_ids, c.bos_token_id, c.pad_token_id);
  return c;
}

class Mamba2 final : public CausalLm {
 public:
  Mamba2(const io::Checkpoint& ckpt, Mamba2Config cfg) : ckpt_(ckpt), c_(std::move(cfg)) {
    s_ = summary_of(c_, "mamba2", "Mamba2ForCausalLM");
    s_.features = {
        {"layers", fmt::format("{} Mamba-2 mixers", c_.num_layers)},
        {"ssm", fmt::format("{} heads x head_dim {}, state {}, {} groups, chunk {}", c_.num_heads, c_.head_dim,
                            c_.state_size, c_.n_groups, c_.chunk_size)},
        {"conv", fmt::format("depthwise kernel {} over {} channels (state {} columns){}", c_.conv_kernel, c_.conv_dim(),
                             c_.conv_kernel - 1, c_.use_conv_bias ? ", biases" : "")},
        {"time_step_limit", fmt::format("[{}, {}]", c_.dt_min, c_.dt_max)},
        {"tie_word_embeddings", c_.tie_word_embeddings ? "yes" : "no"},
    };
  }

  const ModelSummary& summary() const override { return s_; }
  // No layer attends: no key/value cache to size.
  CacheGeometry cache() const override { return {c_.num_layers, 0, 0, std::vector<int64_t>(size_t(c_.num_layers), 0)}; }

  std::vector<ir::StateSpec> states(const StateLayout&) const override {
    std::vector<ir::StateSpec> out;
    for (int64_t i = 0; i < c_.num_layers; ++i) {
      out.push_back(ir::conv_state(i, c_.conv_dim(), c_.conv_kernel - 1));
      out.push_back(ir::ssm_state(i, c_.num_heads, c_.head_dim, c_.state_size));
    }
    return out;
  }
  std::string_view state_names() const override { return "js-hybrid"; }

  CausalLmOutputs build(ir::Builder& b, const CausalLmInputs& in) const override {
    auto model_scope = b.scope("backbone");
    ir::ValueId embed = bind_weight(b, ckpt_, "backbone.embeddings.weight", {c_.vocab_size, c_.hidden_size},
                                    fmt::format("vocab_size, hidden_size={}", c_.hidden_size));
    ir::ValueId h = b.add1("Embedding", {embed, in.input_ids});
    const std::optional<ir::ValueId> pad_mask = padding_states_mask(b, in);
    CausalLmOutputs out;
    for (int64_t i = 0; i < c_.num_layers; ++i) {
      auto layer_scope = b.scope(fmt::format("layers.{}", i));
      const std::string p = fmt::format("backbone.layers.{}.", i);
      ir::ValueId x = norm(b, ckpt_, h, p + "norm", c_.hidden_size, NormKind::Rms, c_.eps, false, "norm");
      Mixed m = mixer(b, x, p + "mixer.", in, i, pad_mask);
      out.present_key.push_back(ir::kNone);
      out.present_value.push_back(ir::kNone);
      out.present_conv.push_back(m.conv_state);
      out.present_ssm.push_back(m.ssm_state);
      h = b.plus(h, m.out);
      b.graph().rename(h, fmt::format("/backbone/layers.{}/output", i));
    }
    h = norm(b, ckpt_, h, "backbone.norm_f", c_.hidden_size, NormKind::Rms, c_.eps, false, "norm_f");
    out.logits = lm_head(b, ckpt_, h, embed, c_.tie_word_embeddings, c_.vocab_size, c_.hidden_size);
    return out;
  }

 private:
  struct Mixed {
    ir::ValueId out = ir::kNone, conv_state = ir::kNone, ssm_state = ir::kNone;
  };

  ir::ValueId silu(ir::Builder& b, ir::ValueId x) const { return b.times(x, b.add1("Sigmoid", {x})); }

  // F.softplus (threshold 20: x itself above it), then time_step_limit's clamp where it bounds. The
  // clamp is mamba2_chunk_scan's: Transformers' one-token step (mamba2_selective_state_update) does
  // not clamp, so neither does a step of one token here (nor a decode graph, one token by its shape).
  ir::ValueId discretize(ir::Builder& b, ir::ValueId dt, ir::ValueId input_ids) const {
    ir::ValueId soft = b.add1("Log", {b.plus(b.add1("Exp", {dt}), b.f32(1.0f))});
    dt = b.add1("Where", {b.add1("Greater", {dt, b.f32(20.0f)}), dt, soft});
    const bool bounded = c_.dt_min > 0 || std::isfinite(c_.dt_max);
    const Shape ids = b.graph().value(input_ids).shape;
    if (!bounded || (ids.size() == 2 && ids[1].is_fixed() && ids[1].value == 1)) return dt;
    ir::ValueId clamped = dt;
    if (c_.dt_min > 0)
      clamped = b.add1("Where", {b.add1("Less", {clamped, b.f32(float(c_.dt_min))}), b.f32(float(c_.dt_min)), clamped});
    if (std::isfinite(c_.dt_max))
      clamped = b.add1("Where", {b.add1("Greater", {clamped, b.f32(float(c_.dt_max))}), b.f32(float(c_.dt_max)), clamped});
    ir::ValueId one_token = b.add1("Equal", {b.shape_of(input_ids, 1, 2), b.i64s({1})});
    return b.add1("Where", {one_token, dt, clamped});
  }

  // [b, s, groups * state] -> [b, s, heads, state]: each group's row repeated over its heads
  // (repeat_interleave over the head axis).
  ir::ValueId per_head(ir::Builder& b, ir::ValueId v) const {
    const int64_t G = c_.n_groups, N = c_.state_size, per = c_.num_heads / c_.n_groups;
    v = b.reshape(v, {0, 0, G, 1, N});
    if (per > 1) v = b.add1("Expand", {v, b.concat({b.shape_of(v, 0, 2), b.i64s({G, per, N})}, 0)});
    return b.reshape(v, {0, 0, c_.num_heads, N});
  }

  Mixed mixer(ir::Builder& b, ir::ValueId x, const std::string& p, const CausalLmInputs& in, int64_t layer,
              const std::optional<ir::ValueId>& pad_mask) const {
    auto scope = b.scope("mixer");
    const int64_t I = c_.intermediate_size, CD = c_.conv_dim(), H = c_.num_heads, GN = c_.n_groups * c_.state_size,
                  K = c_.conv_kernel;
    const std::string why = fmt::format("hidden_size={}, expand, num_heads={}, head_dim={}, n_groups={}, state_size={}",
                                        c_.hidden_size, H, c_.head_dim, c_.n_groups, c_.state_size);
    if (pad_mask) x = b.times(x, *pad_mask);
    ir::ValueId proj;
    {
      auto s = b.scope("in_proj");
      proj = linear(b, ckpt_, x, p + "in_proj", c_.hidden_size, I + CD + H, c_.use_bias, why);
    }
    ir::ValueId gate = b.slice(proj, 0, I, 2), xbc = b.slice(proj, I, I + CD, 2), dt = b.slice(proj, I + CD, I + CD + H, 2);

    Mixed r;
    {
      auto s = b.scope("conv1d");
      // conv1d.weight is torch's depthwise [channels, 1, kernel]: read as [channels, kernel].
      ir::ValueId w = bind_weight(b, ckpt_, p + "conv1d.weight", {CD, 1, K}, why,
                                  [&](ir::WeightRef ref) { return ref.reshaped({CD, K}); });
      ir::ValueId bias = c_.use_conv_bias ? bind_weight(b, ckpt_, p + "conv1d.bias", {CD}, why) : ir::kNone;
      const ir::ValueId past = in.past_conv.empty() ? ir::kNone : in.past_conv[size_t(layer)];
      ConvOut cv = causal_depthwise_conv(b, b.transpose(xbc, {0, 2, 1}), past, w, bias, CD, K);
      r.conv_state = cv.present;
      xbc = silu(b, b.transpose(cv.out, {0, 2, 1}));  // [b, s, conv_dim]
      if (pad_mask) xbc = b.times(xbc, *pad_mask);
    }
    ir::ValueId xs = b.reshape(b.slice(xbc, 0, I, 2), {0, 0, H, c_.head_dim});
    ir::ValueId Bs = per_head(b, b.slice(xbc, I, I + GN, 2)), Cs = per_head(b, b.slice(xbc, I + GN, I + 2 * GN, 2));
    dt = discretize(b, b.plus(dt, bind_weight(b, ckpt_, p + "dt_bias", {H}, why)), in.input_ids);
    ir::ValueId A = b.add1("Neg", {b.add1("Exp", {bind_weight(b, ckpt_, p + "A_log", {H}, why)})});
    ir::ValueId D = bind_weight(b, ckpt_, p + "D", {H}, why);
    const ir::ValueId past_ssm = in.past_ssm.empty() ? ir::kNone : in.past_ssm[size_t(layer)];
    SsdOut ssd = ssd_chunk_scan(b, xs, dt, A, Bs, Cs, D, past_ssm, {H, c_.head_dim, c_.state_size, c_.chunk_size});
    r.ssm_state = ssd.final_state;

    // MambaRMSNormGated: y * silu(gate), RMS-normalized per group of intermediate / n_groups, times weight.
    ir::ValueId y = b.times(b.reshape(ssd.out, {0, 0, I}), silu(b, gate));
    {
      auto s = b.scope("norm");
      const int64_t group = I / c_.n_groups;
      const Tensor ones = Tensor::from_vector<float>(DType::F32, {group}, std::vector<float>(size_t(group), 1.0f));
      y = b.add1("RMSNorm", {b.reshape(y, {0, 0, c_.n_groups, group}), b.constant(ones, "group_norm_ones")},
                 {{"epsilon", c_.eps}});
      y = b.times(b.reshape(y, {0, 0, I}), bind_weight(b, ckpt_, p + "norm.weight", {I}, why));
    }
    auto s = b.scope("out_proj");
    r.out = linear(b, ckpt_, y, p + "out_proj", I, c_.hidden_size, c_.use_bias, why);
    return r;
  }

  const io::Checkpoint& ckpt_;
  Mamba2Config c_;
  ModelSummary s_;
};

}  // namespace

std::unique_ptr<CausalLm> make_mamba2(const io::Checkpoint& ckpt) {
  return std::make_unique<Mamba2>(ckpt, parse_mamba2_config(ckpt));
}

}  // namespace hfx::models
