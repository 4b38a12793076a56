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
                                  double factor, double original, double& attention_factor) {
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
                                    double factor, double old_context) {
  const double low_freq_factor = io::require_number(f, p, "low_freq_factor");
  const double high_freq_factor = io::require_number(f, p, "high_freq_factor");
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

// A list of numbers (longrope's short_factor / long_factor) of the given length.
std::vector<double> number_list(const io::JsonFile& f, const nlohmann::json& p, const char* key, size_t length) {
  auto it = p.find(key);
  if (it == p.end() || it->is_null())
    bad_input("{}: rope parameter \"{}\" is required for longrope", f.path.filename().string(), key);
  if (!it->is_array() || it->size() != length)
    bad_input("{}: rope parameter \"{}\" must be a list of {} numbers (rotary_dim / 2)", f.path.filename().string(), key,
              length);
  std::vector<double> out;
  for (const auto& v : *it) {
    if (!v.is_number()) bad_input("{}: rope parameter \"{}\" holds a non-number", f.path.filename().string(), key);
    out.push_back(v.get<double>());
  }
  return out;
}

// LongRoPE: 1 / (ext_factor * base ** (2i / dim)) in f32, as _compute_longrope_parameters does.
std::vector<double> longrope_inv_freq(const std::vector<double>& ext, double base, int64_t dim) {
  std::vector<double> inv;
  for (int64_t i = 0; i < dim; i += 2)
    inv.push_back(double(1.0f / (float(ext[size_t(i / 2)]) * powf(float(base), float(i) / float(dim)))));
  return inv;
}

}  // namespace

RopeSpec parse_rope(const io::JsonFile& f, int64_t head_dim, int64_t max_position_embeddings,
                    const RopeDefaults& defaults) {
  const nlohmann::json& cfg = f.json;
  // v5 configs nest everything in rope_parameters; v4 configs split rope_theta and rope_scaling.
  nlohmann::json params = nlohmann::json::object();
  if (const auto* p = io::optional_object(f, cfg, "rope_parameters")) params = *p;
  else if (const auto* s = io::optional_object(f, cfg, "rope_scaling")) params = *s;
  const double theta = io::optional_number(f, cfg, "rope_theta").value_or(defaults.theta);
  return parse_rope_params(f, params, theta, head_dim, max_position_embeddings, defaults);
}

RopeSpec parse_rope_params(const io::JsonFile& f, const nlohmann::json& params, double theta, int64_t head_dim,
                           int64_t max_position_embeddings, const RopeDefaults& defaults) {
  const nlohmann::json& cfg = f.json;
  io::JsonFile pf{f.path, params};
  RopeSpec r;
  r.theta = io::optional_number(pf, params, "rope_theta").value_or(theta);
  r.type = io::optional_string(pf, params, "rope_type").value_or(io::optional_string(pf, params, "type").value_or("default"));
  if (r.type == "su" || (defaults.yarn_is_longrope && r.type == "yarn")) r.type = "longrope";
  const double partial =
      io::optional_number(pf, params, "partial_rotary_factor")
          .value_or(io::optional_number(f, cfg, "partial_rotary_factor").value_or(defaults.partial_rotary_factor));
  r.rotary_dim = int64_t(double(head_dim) * partial);
  if (r.rotary_dim <= 0 || r.rotary_dim % 2 || r.rotary_dim > head_dim)
    bad_input("{}: rotary dimension {} (head_dim {} x partial_rotary_factor {}) must be even and in (0, head_dim]",
              f.path.filename().string(), r.rotary_dim, head_dim, partial);
  r.max_position_embeddings = max_position_embeddings;
  // llama3, yarn and longrope read the pre-scaling context length; a top-level value wins, as in
  // Transformers' standardize_rope_params, and max_position_embeddings is the last resort.
  auto original_context = [&] {
    if (auto top = io::optional_int(f, cfg, "original_max_position_embeddings")) return *top;
    return io::optional_int(pf, params, "original_max_position_embeddings").value_or(max_position_embeddings);
  };
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
    inv = yarn_inv_freq(pf, params, r.theta, r.rotary_dim, r.factor, double(original_context()), r.attention_scaling);
  } else if (r.type == "llama3") {
    r.factor = io::require_number(pf, params, "factor");
    inv = llama3_inv_freq(pf, params, r.theta, r.rotary_dim, r.factor, double(original_context()));
  } else if (r.type == "longrope") {
    const int64_t original = original_context();
    r.original_max_position_embeddings = original;
    r.factor = io::optional_number(pf, params, "factor").value_or(double(max_position_embeddings) / double(original));
    const auto attention_factor = io::optional_number(pf, params, "attention_factor");
    r.attention_scaling = attention_factor ? *attention_factor
                          : r.factor <= 1.0 ? 1.0
                                            : std::sqrt(1 + std::log(r.factor) / std::log(double(original)));
    const size_t n = size_t(r.rotary_dim / 2);
    inv = longrope_inv_freq(number_list(pf, params, "short_factor", n), r.theta, r.rotary_dim);
    for (double v : longrope_inv_freq(number_list(pf, params, "long_factor", n), r.theta, r.rotary_dim))
      r.long_inv_freq.push_back(float(v));
  } else {
    unsupported("{}: rope type `{}` is not supported (supported: default, linear, dynamic, yarn, llama3, longrope)",
                f.path.filename().string(), r.type);
  }
  for (double v : inv) r.inv_freq.push_back(float(v));
  return r;
}

}  // namespace hfx::models
