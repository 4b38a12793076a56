#include "pipeline/artifact.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "core/error.h"
#include "core/safe_path.h"
#include "pipeline/backend.h"
#include "pipeline/manifest.h"

namespace fs = std::filesystem;

namespace hfx::pipeline {

const ArtifactComponent& Artifact::component(const std::string& role) const {
  std::vector<std::string> roles;
  for (const auto& c : components) {
    if (role.empty() || c.role == role) return c;
    roles.push_back(c.role);
  }
  bad_input("{}: no component with role `{}` (has: {})", dir.string(), role, fmt::join(roles, ", "));
}

const ArtifactComponent* Artifact::find(const std::string& role) const {
  for (const auto& c : components)
    if (c.role == role) return &c;
  return nullptr;
}

Artifact::DecoderSteps Artifact::decoder_steps() const {
  if (const auto* next = find("decoder_with_past")) return {find("decoder"), next};
  if (const auto* merged = find("decoder_merged")) return {merged, merged};
  return {nullptr, &component("decoder_with_past")};  // says which roles it has
}

namespace {

// The manifest's cache geometry sizes the buffers generate and verify allocate; each state input the
// graph declares must be one the contract derives from it and agree with it where the graph fixes a
// dim, so a manifest cannot claim a cache far larger (or of other layers) than the graph it ships takes.
void check_cache_inputs(const ArtifactComponent& c, const runtime::CacheSpec& cache, int64_t num_layers,
                        const std::string& where) {
  const tasks::StateNameSet& names = *cache.names;
  for (auto id : c.graph.inputs()) {
    const auto& v = c.graph.value(id);
    const tasks::StatePort* port = tasks::find_past(cache.states, v.name);
    if (!port) {
      if (tasks::looks_like_state_name(names, v.name))
        bad_input("{}: component {}: graph input {} is not a layer of /model/num_layers = {}", where, c.role, v.name,
                  num_layers);
      continue;
    }
    const Shape& want = port->spec.shape;
    if (v.shape.size() != want.size())
      bad_input("{}: component {}: graph input {} has shape {}, expected {}", where, c.role, v.name, shape_str(v.shape),
                shape_str(want));
    // Dims the contract fixes from the manifest: kv heads and head_dim (and a static cache's length).
    const bool kv = port->spec.update != tasks::StateUpdate::Replace;
    auto field = [&](size_t d) {
      return !kv ? "/model/states" : d == size_t(port->spec.axis) ? "/recipe/max_cache_len" : d == 1 ? "/model/num_kv_heads" : "/model/head_dim";
    };
    auto what = [&](size_t d) {
      return !kv ? fmt::format("dim {}", d) : d == size_t(port->spec.axis) ? "cache length" : d == 1 ? "kv heads" : "head_dim";
    };
    for (size_t d = 1; d < want.size(); ++d)
      if (want[d].is_fixed() && v.shape[d].is_fixed() && v.shape[d].value != want[d].value)
        bad_input("{}: component {}: graph input {} has {} {} where {} says {}", where, c.role, v.name, what(d),
                  v.shape[d].value, field(d), want[d].value);
  }
}

// A hybrid's state as its manifest lists it (validated by read_manifest: known kinds, bounded dims).
std::vector<tasks::StatePort> read_states(const nlohmann::json& model) {
  std::vector<tasks::StateSpec> specs;
  for (const auto& st : model["states"]) {
    tasks::StateSpec spec;
    spec.layer = st["layer"].get<int64_t>();
    spec.kind = *tasks::parse_state_kind(st["kind"].get<std::string>());
    spec.update = *tasks::parse_state_update(st["update"].get<std::string>());
    spec.axis = st["axis"].get<int64_t>();
    for (const auto& d : st["shape"]) spec.shape.push_back(d.is_string() ? Dim::sym(d.get<std::string>()) : Dim::fixed(d.get<int64_t>()));
    specs.push_back(std::move(spec));
  }
  return tasks::name_states(specs, *tasks::find_state_names(model["state_names"].get<std::string>()));
}

}  // namespace

Artifact open_artifact(const fs::path& dir, const std::string& format) {
  Artifact a;
  a.dir = dir;
  a.manifest = read_manifest(dir);
  const auto where = (dir / kManifestName).string();
  // read_manifest validated every member read here (pipeline/manifest_schema.h): types, presence and
  // ranges, so these reads cannot throw and the geometry cannot size an absurd allocation.
  const auto& model = a.manifest["model"];
  a.num_layers = model["num_layers"].get<int64_t>();
  a.eos_token_ids = model["eos_token_ids"].get<std::vector<int64_t>>();
  const auto& pad = model["pad_token_id"];
  a.pad_token_id = pad.is_number_integer() ? pad.get<int64_t>() : a.eos_token_ids.empty() ? 0 : a.eos_token_ids[0];
  if (model.contains("decoder_start_token_id")) a.decoder_start_token_id = model["decoder_start_token_id"].get<int64_t>();
  if (model.contains("speech_source")) {
    const auto& src = model["speech_source"];
    a.speech = runtime::SpeechSource{src["mel_bins"].get<int64_t>(), src["frames"].get<int64_t>(),
                                     src["encoder_length"].get<int64_t>()};
  }
  const auto& recipe = a.manifest["recipe"];
  a.cache.static_cache = recipe["static_cache"].get<bool>();
  a.cache.max_cache_len = recipe["max_cache_len"].get<int64_t>();
  // An encoder (feature-extraction) carries no state; a hybrid's or an encoder-decoder's manifest
  // lists its StateSpecs.
  if (model.contains("states"))
    a.cache.states = read_states(model);
  else if (model.value("task", std::string("causal-lm")) == "causal-lm")
    a.cache.states = tasks::name_states(
        tasks::kv_cache_states({a.num_layers, model["num_kv_heads"].get<int64_t>(), model["head_dim"].get<int64_t>(),
                                a.cache.static_cache, a.cache.max_cache_len}),
        tasks::state_names(tasks::StateNames::Decoder));
  a.cache.names = &tasks::state_names(tasks::StateNames::Decoder);
  if (model.contains("state_names")) a.cache.names = tasks::find_state_names(model["state_names"].get<std::string>());
  // The format's reader of its graphs (read_graph): ONNX's are read back into IR for the reference
  // executor; other formats are run by their own runtime from `file`.
  const Backend* reader = nullptr;
  for (const Backend* b : all_backends())
    if (b->info().name == format) reader = b;
  for (const auto& c : a.manifest["components"]) {
    // A hand-edited manifest may hold anything: report it, never throw a JSON or filesystem error.
    if (!c.is_object()) bad_input("{}: inconsistent manifest: a component is {}, not an object", where, c.type_name());
    auto text = [&](const char* key) {
      auto it = c.find(key);
      return it != c.end() && it->is_string() ? it->get<std::string>() : std::string();
    };
    if (text("format") != format) continue;
    ArtifactComponent ac;
    ac.role = text("role");
    const std::string file = text("file");
    // Inside the export after every symlink, and a regular file (a FIFO would block its reader).
    ac.file = file_inside(dir, file, fmt::format("component {} file", ac.role));
    if (reader)
      if (auto g = with_context(ac.file.string(), [&] { return reader->read_graph(ac.file); })) ac.graph = std::move(*g);
    // The contract's bounds travel in the manifest (and the ONNX metadata); the executor enforces them.
    if (c.contains("dims"))
      for (const auto& [name, d] : c["dims"].items()) {
        SymbolBounds b;
        if (d.contains("min") && d["min"].is_number_integer()) b.min = d["min"].get<int64_t>();
        if (d.contains("max") && d["max"].is_number_integer()) b.max = d["max"].get<int64_t>();
        ac.graph.symbols().set_bounds(name, b);
      }
    for (const auto& i : c["inputs"]) ac.declared_inputs.push_back(i["name"].get<std::string>());
    for (const auto& o : c["outputs"]) ac.declared_outputs.push_back(o["name"].get<std::string>());
    if (auto cache = c.find("cache"); cache != c.end() && cache->is_object() && cache->contains("shared_buffers"))
      for (const auto& pair : (*cache)["shared_buffers"])
        if (pair.is_array() && pair.size() == 2 && pair[0].is_string() && pair[1].is_string())
          ac.shared_buffers.emplace_back(pair[0].get<std::string>(), pair[1].get<std::string>());
    check_cache_inputs(ac, a.cache, a.num_layers, where);
    a.components.push_back(std::move(ac));
  }
  if (a.components.empty()) bad_input("{}: the export has no {} component", dir.string(), format);
  return a;
}

void check_declared_outputs(const Artifact& a, const ArtifactComponent& c) {
  if (c.graph.outputs().empty()) return;  // not read back (openvino): its runtime checks its own ports
  std::vector<std::string> graph_outputs;
  for (auto id : c.graph.outputs()) graph_outputs.push_back(c.graph.value(id).name);
  for (const auto& name : graph_outputs)
    if (std::find(c.declared_outputs.begin(), c.declared_outputs.end(), name) == c.declared_outputs.end())
      bad_input("{}: component {}: the graph has output `{}`, which {} does not declare (declared: {}); not running an "
                "artifact that computes more than its contract",
                c.file.string(), c.role, name, (a.dir / kManifestName).string(), fmt::join(c.declared_outputs, ", "));
  for (const auto& name : c.declared_outputs)
    if (std::find(graph_outputs.begin(), graph_outputs.end(), name) == graph_outputs.end())
      bad_input("{}: component {}: {} declares output `{}`, which the graph does not compute", c.file.string(), c.role,
                (a.dir / kManifestName).string(), name);
}

runtime::ExecOptions artifact_exec_options(const ArtifactComponent& c, int64_t batch, int64_t length) {
  runtime::ExecOptions o;
  o.max_tensor_bytes = runtime::contract_tensor_budget(c.graph, batch, length);
  return o;
}

}  // namespace hfx::pipeline
