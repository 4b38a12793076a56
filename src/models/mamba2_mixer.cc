#include "models/mamba2_mixer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

#include "core/error.h"
#include "core/tensor.h"
#include "models/blocks.h"
#include "models/short_conv.h"
#include "models/ssd.h"
#include "models/weights.h"

namespace hfx::models {

namespace {

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

// F.softplus (threshold 20: x itself above it), then time_step_limit's clamp where it bounds. The
// clamp is mamba2_chunk_scan's, which Transformers runs for every step but one: a one-token step
// after a cached past (mamba2_selective_state_update, which does not clamp). A step is that one when
// it is one token and the mask (or, with a static cache, cache_position) says positions came before.
ir::ValueId discretize(ir::Builder& b, const Mamba2MixerSpec& sp, ir::ValueId dt, const CausalLmInputs& in) {
  ir::ValueId soft = b.add1("Log", {b.plus(b.add1("Exp", {dt}), b.f32(1.0f))});
  dt = b.add1("Where", {b.add1("Greater", {dt, b.f32(20.0f)}), dt, soft});
  if (!(sp.dt_min > 0 || std::isfinite(sp.dt_max))) return dt;
  ir::ValueId clamped = dt;
  if (sp.dt_min > 0)
    clamped = b.add1("Where", {b.add1("Less", {clamped, b.f32(float(sp.dt_min))}), b.f32(float(sp.dt_min)), clamped});
  if (std::isfinite(sp.dt_max))
    clamped = b.add1("Where", {b.add1("Greater", {clamped, b.f32(float(sp.dt_max))}), b.f32(float(sp.dt_max)), clamped});
  ir::ValueId seq = b.shape_of(in.input_ids, 1, 2);  // [1]
  ir::ValueId after_past = in.cache_position != ir::kNone
                               ? b.add1("Greater", {b.slice(in.cache_position, 0, 1, 0), b.i64s({0})})
                               : b.add1("Greater", {b.shape_of(in.attention_mask, 1, 2), seq});
  ir::ValueId recurrent_step = b.add1("And", {b.add1("Equal", {seq, b.i64s({1})}), after_past});
  return b.add1("Where", {recurrent_step, dt, clamped});
}

// [b, s, groups * state] -> [b, s, heads, state]: each group's row repeated over its heads
// (repeat_interleave over the head axis).
ir::ValueId per_head(ir::Builder& b, const Mamba2MixerSpec& sp, ir::ValueId v) {
  const int64_t G = sp.groups, N = sp.state_size, per = sp.heads / sp.groups;
  v = b.reshape(v, {0, 0, G, 1, N});
  if (per > 1) v = b.add1("Expand", {v, b.concat({b.shape_of(v, 0, 2), b.i64s({G, per, N})}, 0)});
  return b.reshape(v, {0, 0, sp.heads, N});
}

}  // namespace

std::vector<ir::StateSpec> Mamba2MixerSpec::states(int64_t layer) const {
  return {ir::conv_state(layer, conv_dim(), conv_kernel - 1), ir::ssm_state(layer, heads, head_dim, state_size)};
}

std::string Mamba2MixerSpec::describe() const {
  std::string out = fmt::format("{} heads x head_dim {}, state {}, {} groups, chunk {}; conv kernel {} over {} channels{}; "
                                "time_step_limit [{}, {}]",
                                heads, head_dim, state_size, groups, chunk, conv_kernel, conv_dim(),
                                conv_bias ? " (biases)" : "", dt_min, dt_max);
  if (gated_norm == GatedNorm::BeforeGate) out += "; group norm before the gate";
  if (gated_norm == GatedNorm::None) out += "; no norm (y * silu(gate))";
  if (in_multiplier != 1.0 || zxbcdt_multipliers != std::array<double, 5>{1.0, 1.0, 1.0, 1.0, 1.0})
    out += fmt::format("; input x {}, in_proj's z, x, B, C, dt x {}", in_multiplier, fmt::join(zxbcdt_multipliers, ", "));
  return out;
}

Mamba2MixerSpec parse_mamba2_mixer(const io::JsonFile& f, int64_t hidden, const Mamba2MixerKeys& k,
                                   const Mamba2MixerDefaults& d) {
  const auto& j = f.json;
  constexpr int64_t kMaxDim = int64_t(1) << 24;
  auto int_or = [&](const std::string& key, int64_t fallback, int64_t max) {
    return key.empty() ? fallback : io::optional_int(f, j, key, 1, max).value_or(fallback);
  };
  auto bool_or = [&](const std::string& key, bool fallback) {
    return key.empty() ? fallback : io::optional_bool(f, j, key).value_or(fallback);
  };
  Mamba2MixerSpec s;
  s.hidden = hidden;
  s.heads = int_or(k.heads, d.heads, kMaxDim);
  s.state_size = int_or(k.state_size, d.state_size, 1 << 16);
  s.groups = int_or(k.groups, d.groups, kMaxDim);
  const bool head_dim_auto = d.head_dim_auto && (!j.contains(k.head_dim) || j[k.head_dim].is_null() ||
                                                 (j[k.head_dim].is_string() && j[k.head_dim].get<std::string>() == "auto"));
  if (k.expand.empty()) {
    s.head_dim = int_or(k.head_dim, d.head_dim, kMaxDim);
  } else {
    const int64_t intermediate = int_or(k.expand, d.expand, 64) * hidden;  // int(expand * hidden_size)
    s.head_dim = head_dim_auto ? intermediate / s.heads : int_or(k.head_dim, d.head_dim, kMaxDim);
    if (intermediate != s.heads * s.head_dim)
      bad_input("{}: hidden_size * {} ({}) must equal {} * {} ({} x {})", file_name(f), k.expand, intermediate,
                k.heads, k.head_dim, s.heads, s.head_dim);
  }
  if (s.heads % s.groups)
    bad_input("{}: {} ({}) must be a multiple of {} ({})", file_name(f), k.heads, s.heads, k.groups, s.groups);
  s.conv_kernel = int_or(k.conv_kernel, d.conv_kernel, 4096);
  if (s.conv_kernel < 2)
    unsupported("{}: {} {} (a kernel of 1 carries no state; hfx supports 2 and more)", file_name(f), k.conv_kernel,
                s.conv_kernel);
  s.chunk = int_or(k.chunk, d.chunk, 1 << 16);
  s.eps = k.eps.empty() ? d.eps : norm_eps(f, j, k.eps, d.eps);
  s.proj_bias = bool_or(k.proj_bias, d.proj_bias);
  s.out_proj_bias = s.proj_bias;
  s.conv_bias = bool_or(k.conv_bias, d.conv_bias);
  if (auto act = io::optional_string(f, j, k.act); act && *act != "silu" && *act != "swish")
    unsupported("{}: {} \"{}\" (the Mamba-2 mixer's conv activation; hfx supports silu)", file_name(f), k.act, *act);
  if (!k.time_step_limit.empty() && j.contains(k.time_step_limit) && !j[k.time_step_limit].is_null()) {
    const auto& lim = j[k.time_step_limit];
    if (!lim.is_array() || lim.size() != 2) bad_input("{}: time_step_limit must be a pair [min, max]", file_name(f));
    s.dt_min = time_step_bound(f, lim[0], 0);
    s.dt_max = time_step_bound(f, lim[1], 1);
    if (std::isnan(s.dt_min) || std::isnan(s.dt_max) || s.dt_min > s.dt_max)
      bad_input("{}: time_step_limit [{}, {}] is not a range", file_name(f), s.dt_min, s.dt_max);
  }
  return s;
}

Mamba2MixerOut mamba2_mixer(ir::Builder& b, const io::Checkpoint& ckpt, ir::ValueId x, const std::string& p,
                            const Mamba2MixerSpec& sp, ir::ValueId past_conv, ir::ValueId past_ssm,
                            const std::optional<ir::ValueId>& pad_mask, const CausalLmInputs& in) {
  const int64_t I = sp.intermediate(), CD = sp.conv_dim(), H = sp.heads, GN = sp.groups * sp.state_size,
                K = sp.conv_kernel;
  const std::string why = fmt::format("hidden_size={}, heads={}, head_dim={}, groups={}, state_size={}", sp.hidden, H,
                                      sp.head_dim, sp.groups, sp.state_size);
  if (pad_mask) x = b.times(x, *pad_mask);
  if (sp.in_multiplier != 1.0) x = b.times(x, b.f32(float(sp.in_multiplier)));
  ir::ValueId proj;
  {
    auto s = b.scope("in_proj");
    proj = linear(b, ckpt, x, p + "in_proj", sp.hidden, I + CD + H, sp.proj_bias, why);
    // Falcon-H1's mup_vector: [z: I | x: I | B: GN | C: GN | dt: H], one multiplier a part, as an f32
    // vector (compute_mup_vector), times the projection's output (bias included).
    if (sp.zxbcdt_multipliers != std::array<double, 5>{1.0, 1.0, 1.0, 1.0, 1.0}) {
      std::vector<float> mup;
      const int64_t parts[5] = {I, I, GN, GN, H};
      for (size_t part = 0; part < 5; ++part)
        mup.insert(mup.end(), size_t(parts[part]), float(sp.zxbcdt_multipliers[part]));
      proj = b.times(proj, b.constant(Tensor::from_vector<float>(DType::F32, {I + CD + H}, mup), "mup_vector"));
    }
  }
  ir::ValueId gate = b.slice(proj, 0, I, 2), xbc = b.slice(proj, I, I + CD, 2), dt = b.slice(proj, I + CD, I + CD + H, 2);

  Mamba2MixerOut r;
  ConvOut cv = mixer_conv1d(b, ckpt, xbc, p + "conv1d", {CD, K, sp.conv_bias, Activation::Silu}, past_conv, pad_mask, why);
  r.conv_state = cv.present;
  xbc = cv.out;  // [b, s, conv_dim]
  ir::ValueId xs = b.reshape(b.slice(xbc, 0, I, 2), {0, 0, H, sp.head_dim});
  ir::ValueId Bs = per_head(b, sp, b.slice(xbc, I, I + GN, 2)), Cs = per_head(b, sp, b.slice(xbc, I + GN, I + 2 * GN, 2));
  dt = discretize(b, sp, b.plus(dt, bind_weight(b, ckpt, p + "dt_bias", {H}, why)), in);
  ir::ValueId A = b.add1("Neg", {b.add1("Exp", {bind_weight(b, ckpt, p + "A_log", {H}, why)})});
  ir::ValueId D = bind_weight(b, ckpt, p + "D", {H}, why);
  SsdOut ssd = ssd_chunk_scan(b, xs, dt, A, Bs, Cs, D, past_ssm, {H, sp.head_dim, sp.state_size, sp.chunk});
  r.ssm_state = ssd.final_state;

  // The gate (silu) and the group RMSNorm (per group of intermediate / groups, times weight), in the
  // order sp.gated_norm says.
  ir::ValueId y = b.reshape(ssd.out, {0, 0, I});
  auto gated = [&](ir::ValueId v) { return b.times(v, activation(b, gate, Activation::Silu)); };
  auto group_norm = [&](ir::ValueId v) {
    auto s = b.scope("norm");
    const int64_t group = I / sp.groups;
    const Tensor ones = Tensor::from_vector<float>(DType::F32, {group}, std::vector<float>(size_t(group), 1.0f));
    v = b.add1("RMSNorm", {b.reshape(v, {0, 0, sp.groups, group}), b.constant(ones, "group_norm_ones")},
               {{"epsilon", sp.eps}});
    return b.times(b.reshape(v, {0, 0, I}), bind_weight(b, ckpt, p + "norm.weight", {I}, why));
  };
  switch (sp.gated_norm) {
    case GatedNorm::AfterGate: y = group_norm(gated(y)); break;
    case GatedNorm::BeforeGate: y = gated(group_norm(y)); break;
    case GatedNorm::None: y = gated(y); break;
  }
  auto s = b.scope("out_proj");
  r.out = linear(b, ckpt, y, p + "out_proj", I, sp.hidden, sp.out_proj_bias, why);
  return r;
}

}  // namespace hfx::models
