#include "models/mamba.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/tensor.h"
#include "models/blocks.h"
#include "models/short_conv.h"
#include "models/ssd.h"
#include "models/ssm_backbone.h"
#include "models/weights.h"

namespace hfx::models {

int64_t time_step_rank(const io::JsonFile& f, const nlohmann::json& j, const char* key, int64_t hidden_size) {
  const bool rank_auto = !j.contains(key) || j[key].is_null() || (j[key].is_string() && j[key].get<std::string>() == "auto");
  return rank_auto ? (hidden_size + 15) / 16 : io::require_int(f, j, key, 1, int64_t(1) << 24);
}

namespace {

struct MambaConfig {
  int64_t vocab_size = 0, hidden_size = 0, num_layers = 0, num_heads = 0;
  double eps = 1e-5;
  bool tie_word_embeddings = true;
  MambaMixerSpec mixer;
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> bos_token_id, pad_token_id;
};

// MambaConfig and FalconMambaConfig's names and defaults: intermediate_size as config.json gives it (it
// wins over expand in Transformers 5.23), else expand * hidden_size; time_step_rank "auto" is
// ceil(hidden_size / 16).
MambaConfig parse_mamba_config(const io::Checkpoint& ckpt, bool falcon) {
  const io::JsonFile& f = ckpt.config();
  const auto& j = f.json;
  constexpr int64_t kMaxDim = int64_t(1) << 24;
  MambaConfig c;
  c.vocab_size = io::require_int(f, j, "vocab_size", 1, int64_t(1) << 26);
  c.hidden_size = io::require_int(f, j, "hidden_size", 1, kMaxDim);
  c.num_layers = io::require_int(f, j, "num_hidden_layers", 1, 4096);
  c.eps = norm_eps(f, j, "layer_norm_epsilon", 1e-5);
  c.tie_word_embeddings = io::optional_bool(f, j, "tie_word_embeddings").value_or(true);
  MambaMixerSpec& m = c.mixer;
  m.hidden = c.hidden_size;
  m.intermediate = io::optional_int(f, j, "intermediate_size", 1, kMaxDim)
                       .value_or(io::optional_int(f, j, "expand", 1, 64).value_or(2) * c.hidden_size);
  m.state_size = io::optional_int(f, j, "state_size", 1, 1 << 16).value_or(16);
  m.conv_kernel = io::optional_int(f, j, "conv_kernel", 1, 4096).value_or(4);
  if (m.conv_kernel < 2)
    unsupported("{}: conv_kernel {} (a kernel of 1 carries no state; hfx supports 2 and more)",
                f.path.filename().string(), m.conv_kernel);
  m.time_step_rank = time_step_rank(f, j, "time_step_rank", c.hidden_size);
  m.proj_bias = io::optional_bool(f, j, "use_bias").value_or(false);
  m.conv_bias = io::optional_bool(f, j, "use_conv_bias").value_or(true);
  m.act = parse_activation(f, "hidden_act", io::optional_string(f, j, "hidden_act").value_or("silu"));
  if (falcon) {
    m.dt_bc_norms = MambaMixerSpec::DtBcNorms::Weightless;
    m.dt_bc_eps = norm_eps(f, j, "mixer_rms_eps", 1e-6);
  }
  c.num_heads = m.intermediate;  // no attention heads: the summary's count is the scan's channels
  read_generation_ids(ckpt, c.vocab_size, c.eos_token_ids, c.bos_token_id, c.pad_token_id);
  return c;
}

// F.softplus (threshold 20: x itself above it).
ir::ValueId softplus(ir::Builder& b, ir::ValueId x) {
  ir::ValueId soft = b.add1("Log", {b.plus(b.add1("Exp", {x}), b.f32(1.0f))});
  return b.add1("Where", {b.add1("Greater", {x, b.f32(20.0f)}), x, soft});
}

// FalconMambaWeightlessRMSNorm: x * rsqrt(mean(x^2) + eps) over the last axis (n wide).
ir::ValueId weightless_rms(ir::Builder& b, ir::ValueId x, int64_t n, double eps, const std::string& scope) {
  auto s = b.scope(scope);
  const Tensor ones = Tensor::from_vector<float>(DType::F32, {n}, std::vector<float>(size_t(n), 1.0f));
  return b.add1("RMSNorm", {x, b.constant(ones, scope + "_ones")}, {{"epsilon", eps}});
}

class Mamba final : public CausalLm {
 public:
  Mamba(const io::Checkpoint& ckpt, MambaConfig cfg, bool falcon) : ckpt_(ckpt), c_(std::move(cfg)) {
    s_ = falcon ? summary_of(c_, "falcon_mamba", "FalconMambaForCausalLM") : summary_of(c_, "mamba", "MambaForCausalLM");
    s_.features = {
        {"layers", fmt::format("{} Mamba-1 mixers", c_.num_layers)},
        {"mixer", fmt::format("intermediate {}, state {}, time_step_rank {}; conv kernel {} ({}){}{}", c_.mixer.intermediate,
                              c_.mixer.state_size, c_.mixer.time_step_rank, c_.mixer.conv_kernel, activation_name(c_.mixer.act),
                              c_.mixer.conv_bias ? ", conv biases" : "", c_.mixer.proj_bias ? ", projection biases" : "")},
        {"tie_word_embeddings", c_.tie_word_embeddings ? "yes" : "no"},
    };
    if (falcon) s_.features.push_back({"dt, B, C norms", fmt::format("weightless RMS, eps {}", c_.mixer.dt_bc_eps)});
  }

  const ModelSummary& summary() const override { return s_; }
  CacheGeometry cache() const override { return ssm_cache_geometry(c_.num_layers); }

  std::vector<ir::StateSpec> states(const StateLayout& l) const override {
    return hybrid_states(std::vector<bool>(size_t(c_.num_layers), false), 0, 0, l, [&](int64_t i) {
      return std::vector<ir::StateSpec>{ir::conv_state(i, c_.mixer.intermediate, c_.mixer.conv_kernel - 1),
                                        ir::selective_scan_state(i, c_.mixer.intermediate, c_.mixer.state_size)};
    });
  }
  std::string_view state_names() const override { return "js-hybrid"; }

  CausalLmOutputs build(ir::Builder& b, const CausalLmInputs& in) const override {
    return build_ssm_backbone(b, ckpt_, in, {c_.vocab_size, c_.hidden_size, c_.num_layers, c_.eps, c_.tie_word_embeddings},
                              [&](ir::Builder& b, const std::string& prefix, ir::ValueId x, ir::ValueId past_conv,
                                  ir::ValueId past_ssm, const std::optional<ir::ValueId>& pad_mask) {
                                return mamba1_mixer(b, ckpt_, c_.mixer, prefix, x, past_conv, past_ssm, pad_mask);
                              });
  }

 private:
  const io::Checkpoint& ckpt_;
  MambaConfig c_;
  ModelSummary s_;
};

}  // namespace

//   x ─ (padding zeroed) ─ in_proj ─┬─ x ─ causal depthwise conv ─ act ─ (zeroed) ─┬─ x_proj ─ dt, B, C ─┐
//                                   │                                              └────────────────────┴─ scan ─┐
//                                   └─ z ───────────────────────────────────────────────────── silu ─────────── * ─ out_proj
SsmMixerOut mamba1_mixer(ir::Builder& b, const io::Checkpoint& ckpt, const MambaMixerSpec& c, const std::string& p,
                         ir::ValueId x, ir::ValueId past_conv, ir::ValueId past_ssm, const std::optional<ir::ValueId>& pad_mask) {
  const int64_t I = c.intermediate, N = c.state_size, R = c.time_step_rank, K = c.conv_kernel;
  const std::string why = fmt::format("hidden_size={}, intermediate={}, state_size={}, time_step_rank={}", c.hidden,
                                      I, N, R);
  if (pad_mask) x = b.times(x, *pad_mask);
  ir::ValueId proj;
  {
    auto s = b.scope("in_proj");
    proj = linear(b, ckpt, x, p + "in_proj", c.hidden, 2 * I, c.proj_bias, why);
  }
  ir::ValueId xs = b.slice(proj, 0, I, 2), gate = b.slice(proj, I, 2 * I, 2);
  SsmMixerOut r;
  ConvOut cv = mixer_conv1d(b, ckpt, xs, p + "conv1d", {I, K, c.conv_bias, c.act}, past_conv, pad_mask, why);
  r.conv_state = cv.present;
  xs = cv.out;  // [b, s, intermediate]
  ir::ValueId ssm;
  {
    auto s = b.scope("x_proj");
    ssm = linear(b, ckpt, xs, p + "x_proj", I, R + 2 * N, false, why);
  }
  ir::ValueId dt = b.slice(ssm, 0, R, 2), Bm = b.slice(ssm, R, R + N, 2), Cm = b.slice(ssm, R + N, R + 2 * N, 2);
  using Norms = MambaMixerSpec::DtBcNorms;
  if (c.dt_bc_norms == Norms::Weightless) {
    dt = weightless_rms(b, dt, R, c.dt_bc_eps, "dt_layernorm");
    Bm = weightless_rms(b, Bm, N, c.dt_bc_eps, "b_layernorm");
    Cm = weightless_rms(b, Cm, N, c.dt_bc_eps, "c_layernorm");
  } else if (c.dt_bc_norms == Norms::Weighted) {  // JambaRMSNorm
    dt = norm(b, ckpt, dt, p + "dt_layernorm", R, NormKind::Rms, c.dt_bc_eps, false, "dt_layernorm");
    Bm = norm(b, ckpt, Bm, p + "b_layernorm", N, NormKind::Rms, c.dt_bc_eps, false, "b_layernorm");
    Cm = norm(b, ckpt, Cm, p + "c_layernorm", N, NormKind::Rms, c.dt_bc_eps, false, "c_layernorm");
  }
  {
    auto s = b.scope("dt_proj");
    dt = softplus(b, linear(b, ckpt, dt, p + "dt_proj", R, I, true, why));
  }
  ir::ValueId A = b.add1("Neg", {b.add1("Exp", {bind_weight(b, ckpt, p + "A_log", {I, N}, why)})});
  ir::ValueId D = bind_weight(b, ckpt, p + "D", {I}, why);
  SsdOut scan = selective_scan(b, xs, dt, A, Bm, Cm, D, past_ssm, I, N);
  r.ssm_state = scan.final_state;
  ir::ValueId y = b.times(scan.out, activation(b, gate, Activation::Silu));
  auto s = b.scope("out_proj");
  r.out = linear(b, ckpt, y, p + "out_proj", I, c.hidden, c.proj_bias, why);
  return r;
}

std::unique_ptr<CausalLm> make_mamba(const io::Checkpoint& ckpt) {
  return std::make_unique<Mamba>(ckpt, parse_mamba_config(ckpt, false), false);
}

std::unique_ptr<CausalLm> make_falcon_mamba(const io::Checkpoint& ckpt) {
  return std::make_unique<Mamba>(ckpt, parse_mamba_config(ckpt, true), true);
}

}  // namespace hfx::models
