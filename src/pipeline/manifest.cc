#include "pipeline/manifest.h"

#include <fmt/format.h>

#include <set>

#include "core/error.h"
#include "core/files.h"
#include "io/json_fields.h"
#include "pipeline/manifest_schema.h"

namespace fs = std::filesystem;

namespace hfx::pipeline {

namespace {

nlohmann::ordered_json io_json(const std::vector<tasks::IoSpec>& specs) {
  auto arr = nlohmann::ordered_json::array();
  for (const auto& s : specs) {
    std::vector<std::string> dims;
    for (const auto& d : s.shape) dims.push_back(d.str());
    arr.push_back({{"name", s.name}, {"dtype", dtype_name(s.dtype)}, {"shape", dims}});
  }
  return arr;
}

}  // namespace

std::vector<fs::path> list_files(const fs::path& root) {
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (e.is_regular_file()) files.push_back(fs::relative(e.path(), root));
  std::sort(files.begin(), files.end());
  return files;
}

ManifestBuilder::ManifestBuilder(const io::Checkpoint& ckpt, const LoadedModel& loaded, const Recipe& recipe) {
  json_["schema_version"] = kManifestSchemaVersion;
  json_["tool"] = {{"name", "hfx"}, {"version", HFX_VERSION}};
  // (name, path) of each source file, hashed in this order (the manifest lists them so).
  std::vector<std::pair<std::string, fs::path>> sources = {{"config.json", ckpt.config().path}};
  if (ckpt.generation_config()) sources.emplace_back("generation_config.json", ckpt.generation_config()->path);
  for (const auto& f : ckpt.weight_files()) sources.emplace_back(f.filename().string(), f);
  // A second core reads and hashes the checkpoint while the first converts and writes (the files are
  // the ones the export maps, so the reads mostly hit the page cache). The thread touches nothing
  // but these files and its result; a signal's cleanup never waits for it.
  source_files_ = std::async(std::launch::async, [sources = std::move(sources), cancel = cancel_] {
    nlohmann::ordered_json files = nlohmann::ordered_json::object();
    for (const auto& [name, path] : sources) files[name] = sha256_file(path, cancel.get());
    return files;
  });
  const auto& s = loaded.summary();
  // "files" is filled in by write(), in place: the key order of the manifest does not change.
  json_["source"] = {{"folder", ckpt.dir().string()}, {"model_type", s.model_type}, {"hf_class", s.hf_class},
                     {"files", nlohmann::ordered_json::object()}};
  json_["recipe"] = recipe.to_json();
  json_["recipe"]["task"] = loaded.task();
  const auto g = loaded.model ? loaded.model->cache() : models::CacheGeometry{};
  nlohmann::ordered_json m = {{"task", loaded.task()},
                              {"vocab_size", s.vocab_size},
                              {"hidden_size", s.hidden_size},
                              {"num_layers", loaded.model ? g.num_layers : s.num_layers},
                              {"num_kv_heads", g.num_kv_heads},
                              {"head_dim", g.head_dim},
                              {"sliding_window", g.sliding_window},
                              {"eos_token_ids", s.eos_token_ids}};
  m["bos_token_id"] = s.bos_token_id ? nlohmann::ordered_json(*s.bos_token_id) : nlohmann::ordered_json();
  m["pad_token_id"] = s.pad_token_id ? nlohmann::ordered_json(*s.pad_token_id) : nlohmann::ordered_json();
  json_["model"] = m;
  json_["components"] = nlohmann::ordered_json::array();
  json_["passes"] = nlohmann::ordered_json::array();
}

void ManifestBuilder::add_component(const tasks::Component& c, const std::string& format, const std::string& file,
                                    const std::vector<std::string>& passes) {
  nlohmann::ordered_json dims = nlohmann::ordered_json::object();
  for (const auto& [name, b] : c.graph.symbols().all()) {
    nlohmann::ordered_json d = nlohmann::ordered_json::object();
    d["min"] = b.min ? nlohmann::ordered_json(*b.min) : nlohmann::ordered_json();
    d["max"] = b.max ? nlohmann::ordered_json(*b.max) : nlohmann::ordered_json();
    dims[name] = d;
  }
  nlohmann::ordered_json relations = nlohmann::ordered_json::array();
  for (const auto& r : c.graph.symbols().relations()) relations.push_back(fmt::format("{} = {} + {}", r.sum, r.a, r.b));
  nlohmann::ordered_json shared = nlohmann::ordered_json::array();
  for (const auto& [in, out] : c.shared_buffers) shared.push_back({in, out});
  const bool static_cache = !c.shared_buffers.empty();
  json_["components"].push_back({{"role", c.role},
                                 {"format", format},
                                 {"file", file},
                                 {"inputs", io_json(c.inputs)},
                                 {"outputs", io_json(c.outputs)},
                                 {"dims", dims},
                                 {"relations", relations},
                                 {"cache", {{"layout", static_cache ? "static" : "growing"}, {"shared_buffers", shared}}},
                                 {"passes", passes}});
  for (const auto& p : passes) {
    const std::string name = format + ":" + p;
    if (std::find(json_["passes"].begin(), json_["passes"].end(), name) == json_["passes"].end())
      json_["passes"].push_back(name);
  }
}

void ManifestBuilder::add_onnx_profile(const std::string& role, const std::string& profile, const std::string& note) {
  nlohmann::ordered_json entry = {{"role", role}, {"profile", profile}};
  if (!note.empty()) entry["note"] = note;
  json_["onnx_profiles"].push_back(entry);
}

ManifestBuilder::~ManifestBuilder() {
  cancel_->store(true);  // write() has taken the result already, or the export failed
}

void ManifestBuilder::add_file_digest(const fs::path& rel, std::string sha256, uintmax_t size) {
  digests_[rel.generic_string()] = {std::move(sha256), size};
}

void ManifestBuilder::write(const fs::path& root) {
  if (source_files_.valid()) json_["source"]["files"] = source_files_.get();  // rethrows the hashing thread's error
  nlohmann::ordered_json files = nlohmann::ordered_json::object();
  for (const auto& rel : list_files(root)) {
    auto it = digests_.find(rel.generic_string());
    std::error_code ec;
    const bool known = it != digests_.end() && fs::file_size(root / rel, ec) == it->second.second && !ec;
    files[rel.generic_string()] = known ? it->second.first : sha256_file(root / rel);
  }
  json_["files"] = files;
  write_text_file(root / kManifestName, json_.dump(2) + "\n");
}

nlohmann::json read_manifest(const fs::path& out_dir) {
  const fs::path path = out_dir / kManifestName;
  if (!fs::exists(path)) bad_input("{}: no manifest ({}): not an hfx export, or an incomplete one", out_dir.string(), kManifestName);
  nlohmann::json j;
  try {
    const std::string text = read_text_file(path, kMaxManifestBytes);
    io::check_json_depth(text, path.string());
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    bad_input("{}: not valid JSON: {}", path.string(), e.what());
  }
  if (!j.is_object() || !j.contains("schema_version") || !j["schema_version"].is_number_integer())
    bad_input("{}: missing schema_version", path.string());
  if (j["schema_version"] != kManifestSchemaVersion)
    bad_input("{}: schema_version {} (this hfx reads {})", path.string(), j["schema_version"].dump(), kManifestSchemaVersion);
  // Every member the readers (check, generate, verify) index is checked here, once: after this they
  // read the JSON without guarding each access.
  validate_manifest(j, path.string());
  return j;
}

CheckReport check_export(const fs::path& out_dir) {
  const nlohmann::json m = read_manifest(out_dir);
  CheckReport r;
  std::set<std::string> listed;
  for (const auto& [rel, sha] : m["files"].items()) {
    listed.insert(rel);
    const fs::path p = out_dir / rel;
    if (rel.find("..") != std::string::npos || fs::path(rel).is_absolute()) {
      r.problems.push_back(fmt::format("{}: listed path escapes the folder", rel));
      continue;
    }
    ++r.files_checked;
    std::error_code ec;  // a hand-edited name may be too long, or name a folder
    if (!fs::is_regular_file(p, ec)) r.problems.push_back(fmt::format("{}: listed in the manifest but missing", rel));
    else if (!sha.is_string() || sha256_file(p) != sha.get<std::string>())
      r.problems.push_back(fmt::format("{}: sha256 mismatch (the file changed after export)", rel));
  }
  for (const auto& rel : list_files(out_dir))
    if (rel != kManifestName && !listed.count(rel.generic_string()) && *rel.begin() != kReportDir)
      r.problems.push_back(fmt::format("{}: present but not in the manifest", rel.generic_string()));
  for (const auto& c : m["components"]) {
    // A hand-edited manifest may hold anything here: report it, never throw a JSON type error.
    auto text = [&](const char* key, const char* fallback) {
      return c.is_object() && c.contains(key) && c[key].is_string() ? c[key].get<std::string>() : std::string(fallback);
    };
    const std::string file = text("file", "");
    if (!listed.count(file)) r.problems.push_back(fmt::format("component {}: file {} is not listed", text("role", "?"), file));
  }
  return r;
}

}  // namespace hfx::pipeline
