#include "pipeline/artifact.h"

#include <fmt/format.h>

#include "backends/onnx/onnx_reader.h"
#include "core/error.h"
#include "core/safe_path.h"
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

Artifact open_artifact(const fs::path& dir, const std::string& format) {
  Artifact a;
  a.dir = dir;
  a.manifest = read_manifest(dir);
  const auto where = (dir / kManifestName).string();
  try {
    const auto& model = a.manifest.at("model");
    a.cache.num_layers = model.at("num_layers").get<int64_t>();
    a.cache.num_kv_heads = model.at("num_kv_heads").get<int64_t>();
    a.cache.head_dim = model.at("head_dim").get<int64_t>();
    a.eos_token_ids = model.at("eos_token_ids").get<std::vector<int64_t>>();
    const auto& pad = model.at("pad_token_id");
    a.pad_token_id = pad.is_number_integer() ? pad.get<int64_t>() : a.eos_token_ids.empty() ? 0 : a.eos_token_ids[0];
    const auto& recipe = a.manifest.at("recipe");
    a.cache.static_cache = recipe.at("static_cache").get<bool>();
    a.cache.max_cache_len = recipe.at("max_cache_len").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    bad_input("{}: inconsistent manifest: {}", where, e.what());
  }
  if (a.cache.num_layers < 0 || a.cache.num_kv_heads < 0 || a.cache.head_dim < 0 || a.cache.max_cache_len < 0)
    bad_input("{}: inconsistent manifest: negative cache geometry", where);
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
    // Only ONNX graphs are read back into IR; other formats are run by their own runtime from `file`.
    if (format == "onnx") ac.graph = with_context(ac.file.string(), [&] { return onnx_backend::read_onnx(ac.file); });
    // The contract's bounds travel in the manifest (and the ONNX metadata); the executor enforces them.
    if (c.contains("dims"))
      for (const auto& [name, d] : c["dims"].items()) {
        SymbolBounds b;
        if (d.contains("min") && d["min"].is_number_integer()) b.min = d["min"].get<int64_t>();
        if (d.contains("max") && d["max"].is_number_integer()) b.max = d["max"].get<int64_t>();
        ac.graph.symbols().set_bounds(name, b);
      }
    a.components.push_back(std::move(ac));
  }
  if (a.components.empty()) bad_input("{}: the export has no {} component", dir.string(), format);
  return a;
}

}  // namespace hfx::pipeline
