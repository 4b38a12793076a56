#include "core/error.h"
#include "pipeline/export.h"

namespace hfx::pipeline {

nlohmann::ordered_json Recipe::to_json() const {
  nlohmann::ordered_json dims = nlohmann::ordered_json::object();
  for (const auto& [name, b] : task.dims) {
    nlohmann::ordered_json d = nlohmann::ordered_json::object();
    if (b.min) d["min"] = *b.min;
    if (b.max) d["max"] = *b.max;
    dims[name] = d;
  }
  return {{"formats", formats},
          {"task", "causal-lm"},
          {"split_prefill", task.split_prefill},
          {"static_cache", task.static_cache},
          {"max_cache_len", task.max_cache_len},
          {"dynamic", task.dynamic},
          {"dims", dims},
          {"tolerances", tolerances}};
}

Recipe Recipe::from_json(const nlohmann::json& in, const std::string& where) {
  const nlohmann::json& j = in.contains("recipe") ? in["recipe"] : in;
  if (!j.is_object()) bad_input("{}: recipe must be a JSON object", where);
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
  if (j.contains("task") && j["task"] != "causal-lm" && j["task"] != "feature-extraction")
    unsupported("{}: recipe task {} (supported: causal-lm, feature-extraction)", where, j["task"].dump());
  get_bool("split_prefill", r.task.split_prefill);
  get_bool("static_cache", r.task.static_cache);
  get_bool("dynamic", r.task.dynamic);
  if (j.contains("max_cache_len")) {
    if (!j["max_cache_len"].is_number_integer()) bad_input("{}: recipe field \"max_cache_len\" must be an integer", where);
    r.task.max_cache_len = j["max_cache_len"].get<int64_t>();
  }
  if (j.contains("dims")) {
    if (!j["dims"].is_object()) bad_input("{}: recipe field \"dims\" must be an object", where);
    for (const auto& [name, d] : j["dims"].items()) {
      SymbolBounds b;
      for (const char* key : {"min", "max"}) {
        if (!d.contains(key)) continue;
        if (!d[key].is_number_integer()) bad_input("{}: recipe dims.{}.{} must be an integer", where, name, key);
        (std::string(key) == "min" ? b.min : b.max) = d[key].get<int64_t>();
      }
      r.task.dims[name] = b;
    }
  }
  if (j.contains("tolerances")) {
    if (!j["tolerances"].is_object()) bad_input("{}: recipe field \"tolerances\" must be an object", where);
    for (const auto& [dtype, v] : j["tolerances"].items()) {
      if (dtype != "f32") unsupported("{}: tolerance for {} (this hfx exports f32 only)", where, dtype);
      if (!v.is_number() || v.get<double>() <= 0) bad_input("{}: tolerances.{} must be a positive number", where, dtype);
      r.tolerances[dtype] = v.get<double>();
    }
  }
  tasks::validate(r.task);
  return r;
}

}  // namespace hfx::pipeline
