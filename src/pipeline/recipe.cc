#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "pipeline/export.h"
#include "pipeline/manifest_schema.h"
#include "tasks/task.h"

namespace hfx::pipeline {

namespace {
void write_precision(nlohmann::ordered_json& j, const quant::PrecisionSpec& p);
}  // namespace

nlohmann::ordered_json Recipe::to_json() const {
  nlohmann::ordered_json dims = nlohmann::ordered_json::object();
  for (const auto& [name, b] : task.dims) {
    nlohmann::ordered_json d = nlohmann::ordered_json::object();
    if (b.min) d["min"] = *b.min;
    if (b.max) d["max"] = *b.max;
    dims[name] = d;
  }
  nlohmann::ordered_json j = {{"formats", formats},
                              {"task", task_name},
                              {"split_prefill", task.split_prefill},
                              {"static_cache", task.static_cache},
                              {"max_cache_len", task.max_cache_len},
                              {"dynamic", task.dynamic},
                              {"dims", dims},
                              {"tolerances", tolerances}};
  // Each format's options where the format says (FormatOption::recorded_when_written).
  options.record(j, formats);
  // Precision only when not the default f32 (f32 recipes stay as they were).
  write_precision(j, precision);
  // Overrides only when there are any (recipes without them stay as they were).
  if (!components.empty()) {
    nlohmann::ordered_json c = nlohmann::ordered_json::object();
    for (const auto& [role, o] : components) {
      nlohmann::ordered_json one = nlohmann::ordered_json::object();
      if (o.precision) {
        one["dtype"] = std::string(dtype_name(o.precision->dtype));
        write_precision(one, *o.precision);
      }
      for (const auto& [field, value] : o.options) one[field] = value;
      c[role] = one;
    }
    j["components"] = c;
  }
  return j;
}

const quant::PrecisionSpec& Recipe::precision_for(const std::string& role) const {
  auto it = components.find(role);
  return it != components.end() && it->second.precision ? *it->second.precision : precision;
}

const nlohmann::json& Recipe::option(const std::string& field, const std::string& role) const {
  if (auto it = components.find(role); it != components.end())
    if (auto o = it->second.options.find(field); o != it->second.options.end()) return o->second;
  return options.at(field);
}

void Recipe::check_component_roles(const std::vector<std::string>& roles, const std::string& where) const {
  for (const auto& [role, o] : components)
    if (std::find(roles.begin(), roles.end(), role) == roles.end())
      bad_input("{}: recipe components.{}: this export has no {} component (it has: {})", where, role, role,
                fmt::join(roles, ", "));
}

namespace {

void write_precision(nlohmann::ordered_json& j, const quant::PrecisionSpec& p) {
  if (p.is_default()) return;
  j["dtype"] = std::string(dtype_name(p.dtype));
  if (p.quant.enabled()) {
    j["quantize"] = p.quant.str();
    j["quantize_lm_head"] = p.quantize_lm_head;
    if (p.quantize_embeddings) j["quantize_embeddings"] = true;  // absent when false: older recipes keep their bytes
  }
}

}  // namespace

namespace {

// Default verification tolerances by dtype: the reference runs the export's own precision, so f32 and
// bf16 differ by summation order only; f16 also by where activations round (docs/verify.md, "Default
// tolerances by dtype", has the measurements).
const std::map<std::string, double> kDefaultTolerances = {{"f32", 1e-4}, {"bf16", 1e-4}, {"f16", 0.1}};

}  // namespace

double Recipe::tolerance() const { return tolerance_for(""); }

double Recipe::tolerance_for(const std::string& role) const {
  const std::string key(dtype_name(precision_for(role).dtype));
  if (auto it = tolerances.find(key); it != tolerances.end()) return it->second;
  return kDefaultTolerances.at(key);
}

Recipe Recipe::from_json(const nlohmann::json& in, const std::string& where) {
  const nlohmann::json& j = in.contains("recipe") ? in["recipe"] : in;
  if (!j.is_object()) bad_input("{}: recipe must be a JSON object", where);
  // A misspelt field ("quantise") must not silently give the default (F#12). A bare recipe may also
  // carry `source` (the model folder `hfx export --recipe` falls back to); an hfx.json's other
  // sections sit beside its "recipe" object, not in it.
  static const std::vector<std::string> known = [] {
    std::vector<std::string> k = {"formats", "task", "split_prefill", "static_cache", "max_cache_len", "dynamic", "dims",
                                  "tolerances", "dtype", "quantize", "quantize_lm_head", "quantize_embeddings", "components"};
    for (const auto& o : format_options()) k.push_back(o.field);
    return k;
  }();
  for (const auto& [key, value] : j.items())
    if (std::find(known.begin(), known.end(), key) == known.end() && !(&j == &in && key == "source"))
      bad_input("{}: unknown recipe field \"{}\" (known: {})", where, key, fmt::join(known, ", "));
  Recipe r;
  auto get_bool = [&](const char* key, bool& out) {
    if (!j.contains(key)) return;
    if (!j[key].is_boolean()) bad_input("{}: recipe field \"{}\" must be true or false", where, key);
    out = j[key].get<bool>();
  };
  if (j.contains("formats")) {
    if (!j["formats"].is_array() || j["formats"].empty()) bad_input("{}: recipe field \"formats\" must be a non-empty list", where);
    r.formats.clear();
    for (const auto& f : j["formats"]) {
      if (!f.is_string()) bad_input("{}: recipe field \"formats\" must list strings", where);
      r.formats.push_back(f.get<std::string>());
    }
  }
  if (j.contains("task")) {
    const tasks::Task* t = j["task"].is_string() ? tasks::find_task(j["task"].get<std::string>()) : nullptr;
    if (!t) unsupported("{}: recipe task {} (supported: {})", where, j["task"].dump(), tasks::task_names());
    r.task_name = t->name();
  }
  get_bool("split_prefill", r.task.split_prefill);
  get_bool("static_cache", r.task.static_cache);
  get_bool("dynamic", r.task.dynamic);
  // A format option a hand-written recipe leaves out gets the command line's default.
  r.options = FormatSettings::blank();
  for (const auto& o : format_options())
    if (j.contains(o.field)) r.options.set(o, j[o.field], where);
  r.options.complete();
  if (j.contains("max_cache_len")) {
    if (!j["max_cache_len"].is_number_integer()) bad_input("{}: recipe field \"max_cache_len\" must be an integer", where);
    r.task.max_cache_len = j["max_cache_len"].get<int64_t>();
  }
  if (j.contains("dims")) {
    if (!j["dims"].is_object()) bad_input("{}: recipe field \"dims\" must be an object", where);
    for (const auto& [name, d] : j["dims"].items()) {
      // Refused like a misspelt top-level field: a bound that is not read would leave the dim unbounded.
      if (!d.is_object()) bad_input("{}: recipe dims.{} must be an object of \"min\" and \"max\"", where, name);
      for (const auto& [key, v] : d.items())
        if (key != "min" && key != "max") bad_input("{}: unknown recipe field \"dims.{}.{}\" (known: min, max)", where, name, key);
      SymbolBounds b;
      for (const char* key : {"min", "max"}) {
        if (!d.contains(key)) continue;
        if (!d[key].is_number_integer()) bad_input("{}: recipe dims.{}.{} must be an integer", where, name, key);
        (std::string(key) == "min" ? b.min : b.max) = d[key].get<int64_t>();
      }
      r.task.dims[name] = b;
    }
  }
  auto get_string = [&](const char* key) -> std::optional<std::string> {
    if (!j.contains(key)) return std::nullopt;
    if (!j[key].is_string()) bad_input("{}: recipe field \"{}\" must be a string", where, key);
    return j[key].get<std::string>();
  };
  if (auto d = get_string("dtype")) r.precision.dtype = with_context(where, [&] { return quant::parse_dtype(*d); });
  if (auto q = get_string("quantize")) r.precision.quant = with_context(where, [&] { return quant::QuantSpec::parse(*q); });
  get_bool("quantize_lm_head", r.precision.quantize_lm_head);
  get_bool("quantize_embeddings", r.precision.quantize_embeddings);
  if ((r.precision.quantize_lm_head || r.precision.quantize_embeddings) && !r.precision.quant.enabled())
    bad_input("{}: recipe field {} needs \"quantize\"", where,
              r.precision.quantize_lm_head ? "quantize_lm_head" : "quantize_embeddings");
  if (j.contains("components")) {
    if (!j["components"].is_object()) bad_input("{}: recipe field \"components\" must be an object of roles", where);
    for (const auto& [role, o] : j["components"].items()) {
      const std::string at = fmt::format("{}: recipe components.{}", where, role);
      if (!is_known_role(role)) bad_input("{}: unknown role ({})", at, fmt::join(tasks::known_roles(), ", "));
      if (!o.is_object()) bad_input("{}: must be an object", at);
      ComponentOverride ov;
      static const std::vector<std::string> known_here = [] {
        std::vector<std::string> k = {"dtype", "quantize", "quantize_lm_head", "quantize_embeddings"};
        for (const auto& opt : format_options())
          if (opt.per_component) k.push_back(opt.field);
        return k;
      }();
      for (const auto& [key, v] : o.items()) {
        const bool flag = key == "quantize_lm_head" || key == "quantize_embeddings";
        if (std::find(known_here.begin(), known_here.end(), key) == known_here.end())
          bad_input("{}: unknown field \"{}\" ({})", at, key, fmt::join(known_here, ", "));
        if (!flag && !find_format_option(key) && !v.is_string()) bad_input("{}.{} must be a string", at, key);
        if (flag && !v.is_boolean()) bad_input("{}.{} must be true or false", at, key);
      }
      if (o.contains("dtype") || o.contains("quantize") || o.contains("quantize_lm_head") || o.contains("quantize_embeddings")) {
        // An override restates the component's whole precision: what it leaves out is f32, unquantized.
        quant::PrecisionSpec p;
        // (Values copied out first: clang before 16, the fuzz build's, cannot capture structured bindings.)
        const std::string dtype = o.value("dtype", std::string("f32")), quantize = o.value("quantize", std::string());
        p.dtype = with_context(at, [&] { return quant::parse_dtype(dtype); });
        if (!quantize.empty()) p.quant = with_context(at, [&] { return quant::QuantSpec::parse(quantize); });
        if (o.contains("quantize_lm_head")) p.quantize_lm_head = o["quantize_lm_head"].get<bool>();
        if (o.contains("quantize_embeddings")) p.quantize_embeddings = o["quantize_embeddings"].get<bool>();
        if ((p.quantize_lm_head || p.quantize_embeddings) && !p.quant.enabled())
          bad_input("{}: {} needs quantize", at, p.quantize_lm_head ? "quantize_lm_head" : "quantize_embeddings");
        ov.precision = p;
      }
      for (const auto& opt : format_options())
        if (opt.per_component && o.contains(opt.field)) {
          FormatSettings one = FormatSettings::blank();  // checks the value as the recipe-wide field's
          one.set(opt, o[opt.field], at);
          ov.options[opt.field] = one.at(opt.field);
        }
      r.components[role] = ov;
    }
  }
  if (j.contains("tolerances")) {
    if (!j["tolerances"].is_object()) bad_input("{}: recipe field \"tolerances\" must be an object", where);
    for (const auto& [dtype, v] : j["tolerances"].items()) {
      if (dtype != "f32" && dtype != "f16" && dtype != "bf16")
        unsupported("{}: tolerance for {} (dtypes: f32, f16, bf16)", where, dtype);
      if (!v.is_number() || v.get<double>() <= 0) bad_input("{}: tolerances.{} must be a positive number", where, dtype);
      r.tolerances[dtype] = v.get<double>();
    }
  }
  tasks::validate(r.task);
  return r;
}

}  // namespace hfx::pipeline
