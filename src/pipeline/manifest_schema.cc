#include "pipeline/manifest_schema.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "tasks/causal_lm.h"
#include "tasks/seq2seq.h"
#include "tasks/state_names.h"
#include "tasks/task.h"

namespace hfx::pipeline {

namespace {

using json = nlohmann::json;

// A JSON pointer (RFC 6901) to a member: "/" and "~" in keys are escaped.
std::string child(const std::string& ptr, const std::string& key) {
  std::string out = ptr + "/";
  for (char c : key) out += c == '~' ? std::string("~0") : c == '/' ? std::string("~1") : std::string(1, c);
  return out;
}
std::string child(const std::string& ptr, size_t index) { return ptr + "/" + std::to_string(index); }

// The checks share the manifest's path for their message: "<where>: <pointer>: <problem>".
class Schema {
 public:
  explicit Schema(std::string where) : where_(std::move(where)) {}

  [[noreturn]] void bad(const std::string& ptr, const std::string& problem) const {
    bad_input("{}: {}: {}", where_, ptr.empty() ? "/" : ptr, problem);
  }

  void type(const json& v, const std::string& ptr, json::value_t want, const char* name) const {
    // nlohmann keeps integers apart from floats: both are "number" to a reader of the file.
    const bool ok = want == json::value_t::number_integer ? v.is_number_integer() : v.type() == want;
    if (!ok) bad(ptr, fmt::format("expected {}, found {}", name, describe(v)));
  }

  const json& member(const json& obj, const std::string& ptr, const char* key) const {
    auto it = obj.find(key);
    if (it == obj.end()) bad(child(ptr, key), "missing (required)");
    return *it;
  }
  const json& object(const json& obj, const std::string& ptr, const char* key) const {
    const json& v = member(obj, ptr, key);
    type(v, child(ptr, key), json::value_t::object, "an object");
    return v;
  }
  const json& array(const json& obj, const std::string& ptr, const char* key) const {
    const json& v = member(obj, ptr, key);
    type(v, child(ptr, key), json::value_t::array, "a list");
    return v;
  }
  void string(const json& obj, const std::string& ptr, const char* key, bool non_empty = false) const {
    const json& v = member(obj, ptr, key);
    type(v, child(ptr, key), json::value_t::string, "a string");
    if (non_empty && v.get_ref<const std::string&>().empty()) bad(child(ptr, key), "is empty");
  }
  void optional_string(const json& obj, const std::string& ptr, const char* key) const {
    if (obj.contains(key)) string(obj, ptr, key);
  }
  int64_t integer(const json& v, const std::string& ptr, int64_t lo, int64_t hi, const char* why) const {
    type(v, ptr, json::value_t::number_integer, "an integer");
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)) bad(ptr, fmt::format("{} is above {}{}", v.dump(), hi, why));
    const int64_t x = v.get<int64_t>();
    if (x < lo) bad(ptr, fmt::format("{} is below {}{}", x, lo, why));
    if (x > hi) bad(ptr, fmt::format("{} is above {}{}", x, hi, why));
    return x;
  }
  int64_t integer(const json& obj, const std::string& ptr, const char* key, int64_t lo, int64_t hi, const char* why = "") const {
    return integer(member(obj, ptr, key), child(ptr, key), lo, hi, why);
  }
  // An integer or null (absent reads as null when `required` is false).
  void nullable_integer(const json& obj, const std::string& ptr, const char* key, int64_t lo, int64_t hi, bool required) const {
    if (!obj.contains(key)) {
      if (required) bad(child(ptr, key), "missing (required; null when there is none)");
      return;
    }
    const json& v = obj[key];
    if (v.is_null()) return;
    if (!v.is_number_integer()) bad(child(ptr, key), fmt::format("expected an integer or null, found {}", describe(v)));
    integer(v, child(ptr, key), lo, hi, "");
  }
  void string_list(const json& obj, const std::string& ptr, const char* key) const {
    if (!obj.contains(key)) return;
    const json& list = array(obj, ptr, key);
    for (size_t i = 0; i < list.size(); ++i) type(list[i], child(child(ptr, key), i), json::value_t::string, "a string");
  }
  // name -> sha256 (source files, export files).
  void digests(const json& obj, const std::string& ptr, const char* key) const {
    const json& files = object(obj, ptr, key);
    for (const auto& [name, sha] : files.items())
      type(sha, child(child(ptr, key), name), json::value_t::string, "a sha256 string");
  }
  // Symbol bounds: {name: {min: int|null, max: int|null}}, 0 <= min <= 4096, min <= max <= 2^31.
  void dims(const json& obj, const std::string& ptr, const char* key) const {
    if (!obj.contains(key)) return;
    const std::string at = child(ptr, key);
    for (const auto& [name, d] : object(obj, ptr, key).items()) {
      const std::string dp = child(at, name);
      type(d, dp, json::value_t::object, "an object {min, max}");
      nullable_integer(d, dp, "min", 0, ManifestLimits::kMaxDimMin, false);
      nullable_integer(d, dp, "max", 0, ManifestLimits::kMaxDim, false);
      if (d.contains("min") && d.contains("max") && d["min"].is_number_integer() && d["max"].is_number_integer() &&
          d["min"].get<int64_t>() > d["max"].get<int64_t>())
        bad(dp, fmt::format("min {} is above max {}", d["min"].get<int64_t>(), d["max"].get<int64_t>()));
    }
  }
  // [{name: string, dtype: string, shape: [int | string, ...]}, ...]
  void ports(const json& obj, const std::string& ptr, const char* key) const {
    const json& list = array(obj, ptr, key);
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string pp = child(child(ptr, key), i);
      type(list[i], pp, json::value_t::object, "an object {name, dtype, shape}");
      string(list[i], pp, "name", true);
      string(list[i], pp, "dtype", true);
      const json& shape = array(list[i], pp, "shape");
      for (size_t d = 0; d < shape.size(); ++d) {
        if (shape[d].is_string()) continue;
        if (!shape[d].is_number_integer())
          bad(child(child(pp, "shape"), d), fmt::format("expected an integer or a symbol name, found {}", describe(shape[d])));
        integer(shape[d], child(child(pp, "shape"), d), 0, ManifestLimits::kMaxDim, "");
      }
    }
  }

  static std::string describe(const json& v) {
    if (v.is_number_float()) return "a fractional number " + v.dump();
    if (v.is_number() || v.is_boolean()) return std::string(v.type_name()) + " " + v.dump();
    return v.type_name();
  }

 private:
  std::string where_;
};

void validate_source(const Schema& s, const json& m) {
  const json& source = s.object(m, "", "source");
  // source.path (relative to the export folder) since hfx stopped recording absolute paths; an older
  // manifest's source.folder is still read.
  s.optional_string(source, "/source", "name");
  if (source.contains("path") || !source.contains("folder")) {
    s.string(source, "/source", "path", true);
    if (std::filesystem::path(source["path"].get<std::string>()).is_absolute())
      s.bad("/source/path", "expected a path relative to the export folder, found an absolute path");
  } else {
    s.string(source, "/source", "folder", true);
  }
  s.optional_string(source, "/source", "model_type");
  s.optional_string(source, "/source", "hf_class");
  s.digests(source, "/source", "files");
  // Since the Hugging Face cache: manifests before it have no "hub", and a local folder's none.
  if (source.contains("hub")) {
    const json& hub = s.object(source, "/source", "hub");
    for (const char* key : {"id", "revision", "commit"}) s.string(hub, "/source/hub", key, true);
  }
}

void validate_recipe(const Schema& s, const json& m) {
  const json& recipe = s.object(m, "", "recipe");
  s.type(s.member(recipe, "/recipe", "static_cache"), "/recipe/static_cache", json::value_t::boolean, "true or false");
  s.integer(recipe, "/recipe", "max_cache_len", 0, ManifestLimits::kMaxCacheLen,
            " (2^24 positions: longer than any model's context window)");
  s.dims(recipe, "/recipe", "dims");
}

// A hybrid's StateSpecs (pipeline/manifest.cc, states_json): each sizes a buffer generate and verify
// allocate, so every dim is a contract symbol or a bounded number, and one layer's state is bounded
// as a key/value layer's is.
void validate_states(const Schema& s, const json& model) {
  s.string(model, "/model", "state_names", true);
  if (!tasks::find_state_names(model["state_names"].get<std::string>()))
    s.bad("/model/state_names", fmt::format("unknown name set `{}`", model["state_names"].get<std::string>()));
  const int64_t layers = model["num_layers"].get<int64_t>();
  const json& list = s.array(model, "/model", "states");
  if (list.empty()) s.bad("/model/states", "is empty (a causal LM carries state)");
  if (list.size() > size_t(4 * layers)) s.bad("/model/states", fmt::format("has {} entries for {} layers", list.size(), layers));
  std::vector<std::string> dims = tasks::causal_lm_dim_names();
  for (const auto& d : tasks::seq2seq_dim_names()) dims.push_back(d);
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string p = child("/model/states", i);
    const json& st = list[i];
    s.type(st, p, json::value_t::object, "an object");
    s.integer(st, p, "layer", 0, layers - 1, " (a layer of /model/num_layers)");
    s.string(st, p, "kind");
    if (!tasks::parse_state_kind(st["kind"].get<std::string>())) s.bad(child(p, "kind"), "is not a state kind");
    s.string(st, p, "update");
    const auto update = tasks::parse_state_update(st["update"].get<std::string>());
    if (!update) s.bad(child(p, "update"), "is not a state update");
    const json& shape = s.array(st, p, "shape");
    if (shape.size() < 2 || shape.size() > 6) s.bad(child(p, "shape"), fmt::format("has rank {} (2 to 6)", shape.size()));
    int64_t width = 1;
    for (size_t d = 0; d < shape.size(); ++d) {
      const std::string dp = child(child(p, "shape"), d);
      if (shape[d].is_string()) {
        if (std::find(dims.begin(), dims.end(), shape[d].get<std::string>()) == dims.end())
          s.bad(dp, fmt::format("`{}` is not a contract dim ({})", shape[d].get<std::string>(), fmt::join(dims, ", ")));
        continue;
      }
      width *= s.integer(shape[d], dp, 1, ManifestLimits::kMaxCacheLen, "");
      if (width > ManifestLimits::kMaxKvWidth * ManifestLimits::kMaxHeadsOrDim)
        s.bad(child(p, "shape"), "holds more elements per row than any layer's state");
    }
    if (!shape[0].is_string() || shape[0].get<std::string>() != "batch_size")
      s.bad(child(p, "shape") + "/0", "must be batch_size");
    const int64_t axis = s.integer(st, p, "axis", -1, int64_t(shape.size()) - 1);
    if ((*update == tasks::StateUpdate::Replace) != (axis == -1))
      s.bad(child(p, "axis"), "is -1 exactly for a replaced state (a cache's length axis otherwise)");
    if (axis == 0) s.bad(child(p, "axis"), "is the batch axis");
  }
}

void validate_model(const Schema& s, const json& m) {
  const json& model = s.object(m, "", "model");
  s.optional_string(model, "/model", "task");
  // An encoder (feature-extraction) has no KV cache: its manifest records heads and head_dim 0; nor
  // has a state-space model, whose manifest lists its states (those sized from heads are checked there).
  const bool causal = model.value("task", std::string("causal-lm")) == "causal-lm" && !model.contains("states");
  s.integer(model, "/model", "num_layers", 1, ManifestLimits::kMaxLayers,
            " (ten times the deepest released model: the number sizes per-layer caches)");
  const int64_t heads = s.integer(model, "/model", "num_kv_heads", causal ? 1 : 0, ManifestLimits::kMaxHeadsOrDim);
  const int64_t head_dim = s.integer(model, "/model", "head_dim", causal ? 1 : 0, ManifestLimits::kMaxHeadsOrDim);
  if (heads * head_dim > ManifestLimits::kMaxKvWidth)
    s.bad("/model/num_kv_heads", fmt::format("{} heads x head_dim {} = {} is above {} (the KV width of one layer)", heads,
                                             head_dim, heads * head_dim, ManifestLimits::kMaxKvWidth));
  constexpr int64_t kMaxId = ManifestLimits::kMaxDim - 1;
  if (model.contains("vocab_size")) s.integer(model, "/model", "vocab_size", 0, kMaxId);
  if (model.contains("hidden_size")) s.integer(model, "/model", "hidden_size", 0, kMaxId);
  const json& eos = s.array(model, "/model", "eos_token_ids");
  for (size_t i = 0; i < eos.size(); ++i) s.integer(eos[i], child("/model/eos_token_ids", i), 0, kMaxId, "");
  s.nullable_integer(model, "/model", "pad_token_id", 0, kMaxId, true);
  s.nullable_integer(model, "/model", "bos_token_id", 0, kMaxId, false);
  if (model.contains("decoder_start_token_id")) {
    s.integer(model, "/model", "decoder_start_token_id", 0, kMaxId, "");
    if (!model.contains("states")) s.bad("/model/decoder_start_token_id", "belongs to an encoder-decoder, whose states are listed");
  }
  if (model.contains("speech_source")) {
    const json& src = model["speech_source"];
    s.type(src, "/model/speech_source", json::value_t::object, "an object");
    if (!model.contains("decoder_start_token_id"))
      s.bad("/model/speech_source", "belongs to an encoder-decoder, which has a decoder_start_token_id");
    for (const char* key : {"mel_bins", "frames", "encoder_length"})
      s.integer(src, "/model/speech_source", key, 1, ManifestLimits::kMaxHeadsOrDim);
  }
  if (model.contains("states")) validate_states(s, model);
}

void validate_components(const Schema& s, const json& m) {
  const json& list = s.array(m, "", "components");
  if (list.empty()) s.bad("/components", "is empty (an export has at least one component)");
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string p = child("/components", i);
    const json& c = list[i];
    s.type(c, p, json::value_t::object, "an object");
    s.string(c, p, "role");
    const auto& role = c["role"].get_ref<const std::string&>();
    if (!is_known_role(role))
      s.bad(child(p, "role"), fmt::format("unknown role `{}` ({})", role, fmt::join(tasks::known_roles(), ", ")));
    s.string(c, p, "format", true);
    s.string(c, p, "file", true);
    s.ports(c, p, "inputs");
    s.ports(c, p, "outputs");
    s.dims(c, p, "dims");
    s.string_list(c, p, "relations");
    s.string_list(c, p, "passes");
    if (c.contains("cache")) s.type(c["cache"], child(p, "cache"), json::value_t::object, "an object");
  }
}

}  // namespace

bool is_known_role(const std::string& role) {
  const auto& roles = tasks::known_roles();
  return std::find(roles.begin(), roles.end(), role) != roles.end();
}

void validate_manifest(const json& m, const std::string& where) {
  const Schema s(where);
  s.type(m, "", json::value_t::object, "an object");
  validate_source(s, m);
  validate_recipe(s, m);
  validate_model(s, m);
  validate_components(s, m);
  s.digests(m, "", "files");
}

}  // namespace hfx::pipeline
