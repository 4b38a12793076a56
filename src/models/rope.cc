#include "models/rope.h"

#include <cmath>
#include <numbers>

#include "core/error.h"

namespace hfx::models {

namespace {

// base ** (arange(0, dim, 2) / dim), inverted: Transformers computes this in f32 from an f32 exponent.
std::vector<double> default_inv_freq(double base, int64_t dim) {
  std::vector<double> inv;
  for (int64_t i = 0; i < dim; i += 2) {
    // Same f32 arithmetic as torch: 1.0 / (base ** (arange(0, dim, 2).float() / dim)).
    const float exponent = float(i) / float(dim);
    inv.push_back(double(1.0f / powf(float(base), exponent)));
  }
  return inv;
}

std::vector<double> yarn_inv_freq(const io::JsonFile& f, const nlohmann::json& p, double base, int64_t dim,
                                  double factor, double& attention_factor) {
  const double original = double(io::require_int(f, p, "original_max_position_embeddings"));
  auto get_mscale = [](double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; };
  auto explicit_factor = io::optional_number(f, p, "attention_factor");
  auto mscale = io::optional_number(f, p, "mscale");
  auto mscale_all_dim = io::optional_number(f, p, "mscale_all_dim");
  if (explicit_factor) attention_factor = *explicit_factor;
  else if (mscale && mscale_all_dim && *mscale != 0 && *mscale_all_dim != 0)
    attention_factor = get_mscale(factor, *mscale) / get_mscale(factor, *mscale_all_dim);
  else attention_factor = get_mscale(factor, 1.0);
  double beta_fast = io::optional_number(f, p, "beta_fast").value_or(32);
  double beta_slow = io::optional_number(f, p, "beta_slow").value_or(1);
  if (beta_fast == 0) beta_fast = 32;
  if (beta_slow == 0) beta_slow = 1;
  const bool truncate = io::optional_bool(f, p, "truncate").value_or(true);
  auto correction_dim = [&](double rotations) {
    return (double(dim) * std::log(original / (rotations * 2 * std::numbers::pi))) / (2 * std::log(base));
  };
  double low = correction_dim(beta_fast), high = correction_dim(beta_slow);
  if (truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, double(dim - 1));
  if (low == high) high += 0.001;
  std::vector<double> inv;
  for (int64_t i = 0; i < dim / 2; ++i) {
    const double pos_freq = double(std::pow(float(base), float(2 * i) / float(dim)));
    const double extrapolation = 1.0 / pos_freq, interpolation = 1.0 / (factor * pos_freq);
    const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
    const double extrapolation_factor = 1.0 - ramp;
    inv.push_back(interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor);
  }
  return inv;
}

std::vector<double> llama3_inv_freq(const io::JsonFile& f, const nlohmann::json& p, double base, int64_t dim,
                                    double factor) {
  const double low_freq_factor = io::require_number(f, p, "low_freq_factor");
  const double high_freq_factor = io::require_number(f, p, "high_freq_factor");
  const double old_context = double(io::require_int(f, p, "original_max_position_embeddings"));
  const double low_wavelen = old_context / low_freq_factor, high_wavelen = old_context / high_freq_factor;
  std::vector<double> inv = default_inv_freq(base, dim);
  for (auto& freq : inv) {
    const double wavelen = 2 * std::numbers::pi / freq;
    double scaled = wavelen > low_wavelen ? freq / factor : freq;
    const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    if (medium) {
      const double smooth = (old_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
      scaled = (1 - smooth) * scaled / factor + smooth * scaled;
    }
    freq = scaled;
  }
  return inv;
}

}  // namespace

RopeSpec parse_rope(const io::JsonFile& f, int64_t head_dim, int64_t max_position_embeddings) {
  const nlohmann::json& cfg = f.json;
  // v5 configs nest everything in rope_parameters; v4 configs split rope_theta and rope_scaling.
  nlohmann::json params = nlohmann::json::object();
  if (const auto* p = io::optional_object(f, cfg, "rope_parameters")) params = *p;
  else if (const auto* s = io::optional_object(f, cfg, "rope_scaling")) params = *s;
  io::JsonFile pf{f.path, params};
  RopeSpec r;
  r.theta = io::optional_number(pf, params, "rope_theta").value_or(io::optional_number(f, cfg, "rope_theta").value_or(10000.0));
  r.type = io::optional_string(pf, params, "rope_type").value_or(io::optional_string(pf, params, "type").value_or("default"));
  const double partial = io::optional_number(pf, params, "partial_rotary_factor")
                             .value_or(io::optional_number(f, cfg, "partial_rotary_factor").value_or(1.0));
  r.rotary_dim = int64_t(double(head_dim) * partial);
  if (r.rotary_dim <= 0 || r.rotary_dim % 2 || r.rotary_dim > head_dim)
    bad_input("{}: rotary dimension {} (head_dim {} x partial_rotary_factor {}) must be even and in (0, head_dim]",
              f.path.filename().string(), r.rotary_dim, head_dim, partial);
  r.max_position_embeddings = max_position_embeddings;
  std::vector<double> inv;
  if (r.type == "default") {
    inv = default_inv_freq(r.theta, r.rotary_dim);
  } else if (r.type == "linear") {
    r.factor = io::require_number(pf, params, "factor");
    inv = default_inv_freq(r.theta, r.rotary_dim);
    for (auto& v : inv) v = double(float(v) / float(r.factor));
  } else if (r.type == "dynamic") {
    r.factor = io::require_number(pf, params, "factor");
    r.dynamic = true;
    inv = default_inv_freq(r.theta, r.rotary_dim);
  } else if (r.type == "yarn") {
    r.factor = io::require_number(pf, params, "factor");
    inv = yarn_inv_freq(pf, params, r.theta, r.rotary_dim, r.factor, r.attention_scaling);
  } else if (r.type == "llama3") {
    r.factor = io::require_number(pf, params, "factor");
    inv = llama3_inv_freq(pf, params, r.theta, r.rotary_dim, r.factor);
  } else {
    unsupported("{}: rope type `{}` is not supported (supported: default, linear, dynamic, yarn, llama3)",
                f.path.filename().string(), r.type);
  }
  for (double v : inv) r.inv_freq.push_back(float(v));
  return r;
}

}  // namespace hfx::models
