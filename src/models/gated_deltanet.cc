#include "models/gated_deltanet.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"
#include "models/blocks.h"
#include "models/delta_rule.h"
#include "models/short_conv.h"
#include "models/weights.h"

namespace hfx::models {

namespace {

std::string file_name(const io::JsonFile& f) { return f.path.filename().string(); }

// F.softplus (threshold 20: x itself above it).
ir::ValueId softplus(ir::Builder& b, ir::ValueId x) {
  ir::ValueId soft = b.add1("Log", {b.plus(b.add1("Exp", {x}), b.f32(1.0f))});
  return b.add1("Where", {b.add1("Greater", {x, b.f32(20.0f)}), x, soft});
}

// Transformers' l2norm: x * rsqrt(sum(x^2) + 1e-6) over the last axis (the FLA library's eps).
ir::ValueId l2norm(ir::Builder& b, ir::ValueId x) {
  ir::ValueId ss = b.add1("ReduceSum", {b.times(x, x), b.i64s({-1})}, {{"keepdims", int64_t(1)}});
  return b.times(x, b.add1("Reciprocal", {b.add1("Sqrt", {b.plus(ss, b.f32(1e-6f))})}));
}

// [b, s, key_heads, d] -> [b, s, value_heads, d]: each key head over its value_heads / key_heads
// consecutive value heads (repeat_interleave over the head axis).
ir::ValueId per_value_head(ir::Builder& b, const GatedDeltaNetSpec& sp, ir::ValueId x) {
  const int64_t Hk = sp.key_heads, per = sp.value_heads / sp.key_heads, d = sp.key_head_dim;
  if (per == 1) return x;
  x = b.add1("Expand", {b.unsqueeze(x, {3}), b.concat({b.shape_of(x, 0, 2), b.i64s({Hk, per, d})}, 0)});
  return b.reshape(x, {0, 0, sp.value_heads, d});
}

struct Projected {
  ir::ValueId qkv, z, beta_logit, a;  // [b, s, conv_dim], [b, s, Hv, dv], [b, s, Hv], [b, s, Hv]
};

Projected project(ir::Builder& b, const io::Checkpoint& ckpt, ir::ValueId x, const std::string& p,
                  const GatedDeltaNetSpec& sp, const std::string& why) {
  const int64_t Hs = sp.hidden, Hv = sp.value_heads, dv = sp.value_head_dim, KD = sp.key_dim(), VD = sp.value_dim();
  Projected r;
  if (sp.projections == DeltaNetProjections::Split) {
    {
      auto s = b.scope("in_proj_qkv");
      r.qkv = linear(b, ckpt, x, p + "in_proj_qkv", Hs, sp.conv_dim(), false, why);
    }
    {
      auto s = b.scope("in_proj_z");
      r.z = b.reshape(linear(b, ckpt, x, p + "in_proj_z", Hs, VD, false, why), {0, 0, Hv, dv});
    }
    {
      auto s = b.scope("in_proj_b");
      r.beta_logit = linear(b, ckpt, x, p + "in_proj_b", Hs, Hv, false, why);
    }
    auto s = b.scope("in_proj_a");
    r.a = linear(b, ckpt, x, p + "in_proj_a", Hs, Hv, false, why);
    return r;
  }
  // Qwen3NextGatedDeltaNet.fix_query_key_value_ordering: per key head [q | k | v | z] and [b | a],
  // each value part the key head's value_heads / key_heads heads.
  const int64_t Hk = sp.key_heads, dk = sp.key_head_dim, per = Hv / Hk, group = 2 * dk + 2 * per * dv;
  ir::ValueId qkvz, ba;
  {
    auto s = b.scope("in_proj_qkvz");
    qkvz = b.reshape(linear(b, ckpt, x, p + "in_proj_qkvz", Hs, Hk * group, false, why), {0, 0, Hk, group});
  }
  {
    auto s = b.scope("in_proj_ba");
    ba = b.reshape(linear(b, ckpt, x, p + "in_proj_ba", Hs, 2 * Hv, false, why), {0, 0, Hk, 2 * per});
  }
  ir::ValueId q = b.reshape(b.slice(qkvz, 0, dk, 3), {0, 0, KD}), k = b.reshape(b.slice(qkvz, dk, 2 * dk, 3), {0, 0, KD});
  ir::ValueId v = b.reshape(b.slice(qkvz, 2 * dk, 2 * dk + per * dv, 3), {0, 0, VD});
  r.qkv = b.concat({q, k, v}, 2);
  r.z = b.reshape(b.slice(qkvz, 2 * dk + per * dv, group, 3), {0, 0, Hv, dv});
  r.beta_logit = b.reshape(b.slice(ba, 0, per, 3), {0, 0, Hv});
  r.a = b.reshape(b.slice(ba, per, 2 * per, 3), {0, 0, Hv});
  return r;
}

}  // namespace

std::vector<ir::StateSpec> GatedDeltaNetSpec::states(int64_t layer) const {
  return {ir::conv_state(layer, conv_dim(), conv_kernel - 1),
          ir::ssm_state(layer, value_heads, key_head_dim, value_head_dim)};
}

std::string GatedDeltaNetSpec::describe() const {
  return fmt::format("{} key heads x {}, {} value heads x {}; conv kernel {} over {} channels; chunk 64, scan over "
                     "{} positions; {} projections",
                     key_heads, key_head_dim, value_heads, value_head_dim, conv_kernel, conv_dim(), max_positions,
                     projections == DeltaNetProjections::Split ? "split" : "fused");
}

GatedDeltaNetSpec parse_gated_deltanet(const io::JsonFile& f, int64_t hidden, int64_t max_positions, double eps,
                                       DeltaNetProjections projections) {
  const auto& j = f.json;
  constexpr int64_t kMaxDim = int64_t(1) << 16;
  GatedDeltaNetSpec s;
  s.hidden = hidden;
  s.projections = projections;
  s.eps = eps;
  s.max_positions = max_positions;
  s.conv_kernel = io::optional_int(f, j, "linear_conv_kernel_dim", 1, 4096).value_or(4);
  s.key_head_dim = io::optional_int(f, j, "linear_key_head_dim", 1, kMaxDim).value_or(128);
  s.value_head_dim = io::optional_int(f, j, "linear_value_head_dim", 1, kMaxDim).value_or(128);
  s.key_heads = io::optional_int(f, j, "linear_num_key_heads", 1, kMaxDim).value_or(16);
  s.value_heads = io::optional_int(f, j, "linear_num_value_heads", 1, kMaxDim).value_or(32);
  if (s.value_heads % s.key_heads)
    bad_input("{}: linear_num_value_heads ({}) must be a multiple of linear_num_key_heads ({})", file_name(f),
              s.value_heads, s.key_heads);
  if (s.conv_kernel < 2)
    unsupported("{}: linear_conv_kernel_dim {} (a kernel of 1 carries no state; hfx supports 2 and more)", file_name(f),
                s.conv_kernel);
  if (auto act = io::optional_string(f, j, "hidden_act"); act && *act != "silu" && *act != "swish")
    unsupported("{}: hidden_act \"{}\" (the gated delta-net's conv and gate activation; hfx supports silu)",
                file_name(f), *act);
  return s;
}

GatedDeltaNetOut gated_deltanet(ir::Builder& b, const io::Checkpoint& ckpt, ir::ValueId x, const std::string& p,
                                const GatedDeltaNetSpec& sp, ir::ValueId past_conv, ir::ValueId past_recurrent,
                                const std::optional<ir::ValueId>& pad_mask) {
  const int64_t Hk = sp.key_heads, Hv = sp.value_heads, dk = sp.key_head_dim, dv = sp.value_head_dim, KD = sp.key_dim();
  const std::string why = fmt::format("hidden_size={}, linear key heads={} x {}, value heads={} x {}", sp.hidden, Hk,
                                      dk, Hv, dv);
  if (pad_mask) x = b.times(x, *pad_mask);
  Projected pr = project(b, ckpt, x, p, sp, why);

  GatedDeltaNetOut r;
  // No mask after the conv: Qwen3_5GatedDeltaNet zeroes padding once, before the projections.
  ConvOut cv = mixer_conv1d(b, ckpt, pr.qkv, p + "conv1d", {sp.conv_dim(), sp.conv_kernel, false, Activation::Silu},
                            past_conv, std::nullopt, why);
  r.conv_state = cv.present;
  ir::ValueId q = b.reshape(b.slice(cv.out, 0, KD, 2), {0, 0, Hk, dk});
  ir::ValueId k = b.reshape(b.slice(cv.out, KD, 2 * KD, 2), {0, 0, Hk, dk});
  ir::ValueId v = b.reshape(b.slice(cv.out, 2 * KD, sp.conv_dim(), 2), {0, 0, Hv, dv});
  ir::ValueId beta = b.add1("Sigmoid", {pr.beta_logit});
  ir::ValueId A = b.add1("Exp", {bind_weight(b, ckpt, p + "A_log", {Hv}, why)});
  ir::ValueId g = b.add1("Neg", {b.times(A, softplus(b, b.plus(pr.a, bind_weight(b, ckpt, p + "dt_bias", {Hv}, why))))});
  // l2-normalised, each key head over its value heads, q scaled by key_head_dim^-0.5.
  q = b.times(l2norm(b, per_value_head(b, sp, q)), b.f32(float(1.0 / std::sqrt(double(dk)))));
  k = l2norm(b, per_value_head(b, sp, k));
  DeltaRuleOut dr = gated_delta_rule(b, q, k, v, g, beta, past_recurrent, {Hv, dk, dv, 64, sp.max_positions});
  r.recurrent_state = dr.final_state;

  // Qwen3_5RMSNormGated: RMSNorm over each head's value_head_dim, times weight, times silu(z).
  ir::ValueId y;
  {
    auto s = b.scope("norm");
    y = b.add1("RMSNorm", {dr.out, bind_weight(b, ckpt, p + "norm.weight", {dv}, why)}, {{"epsilon", sp.eps}});
    y = b.reshape(b.times(y, activation(b, pr.z, Activation::Silu)), {0, 0, sp.value_dim()});
  }
  auto s = b.scope("out_proj");
  r.out = linear(b, ckpt, y, p + "out_proj", sp.value_dim(), sp.hidden, false, why);
  return r;
}

}  // namespace hfx::models
