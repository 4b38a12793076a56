#include "pipeline/manifest.h"

#include <fmt/format.h>

#include <set>

#include "core/error.h"
#include "core/files.h"
#include "core/safe_path.h"
#include "io/hub_cache.h"
#include "io/json_fields.h"
#include "models/seq2seq.h"
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
  // D16: never a std::filesystem_error (exit 70). A folder that cannot be read (permissions, removed
  // meanwhile) and an entry whose type cannot be found (a symlink loop) are an Io error naming the
  // path: what check cannot see it cannot vouch for. Anything that is not, or does not lead to, a
  // regular file (a dangling link, a FIFO) is skipped; folder symlinks are not followed.
  std::vector<fs::path> files;
  std::vector<fs::path> pending = {root};
  while (!pending.empty()) {
    const fs::path dir = std::move(pending.back());
    pending.pop_back();
    std::error_code ec;
    fs::directory_iterator it(dir, ec), end;
    for (; !ec && it != end; it.increment(ec)) {
      std::error_code sec;
      const auto st = it->symlink_status(sec);
      if (fs::is_directory(st)) {
        pending.push_back(it->path());
        continue;
      }
      const auto target = fs::status(it->path(), sec);
      if (sec && sec != std::errc::no_such_file_or_directory)
        fail(ErrorKind::Io, "{}: cannot tell what it is: {}", it->path().string(), sec.message());
      if (fs::is_regular_file(target)) files.push_back(it->path().lexically_relative(root));
    }
    if (ec) fail(ErrorKind::Io, "{}: cannot list: {}", dir.string(), ec.message());
  }
  std::sort(files.begin(), files.end());
  return files;
}

namespace {

// Each state as {layer, kind, shape (symbols by name, fixed dims as numbers), update, axis}.
nlohmann::ordered_json states_json(const std::vector<tasks::StatePort>& ports) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const auto& p : ports) {
    nlohmann::ordered_json shape = nlohmann::ordered_json::array();
    for (const auto& d : p.spec.shape) shape.push_back(d.is_fixed() ? nlohmann::ordered_json(d.value) : nlohmann::ordered_json(d.symbol));
    list.push_back({{"layer", p.spec.layer},
                    {"kind", tasks::state_kind_name(p.spec.kind)},
                    {"shape", shape},
                    {"update", tasks::state_update_name(p.spec.update)},
                    {"axis", p.spec.axis}});
  }
  return list;
}

}  // namespace

ManifestBuilder::ManifestBuilder(const io::Checkpoint& ckpt, const LoadedModel& loaded, const Recipe& recipe) {
  json_["schema_version"] = kManifestSchemaVersion;
  json_["tool"] = {{"name", "hfx"}, {"version", HFX_VERSION}};
  // (name, path) of each source file, hashed in this order (the manifest lists them so).
  std::vector<std::pair<std::string, fs::path>> sources = {{"config.json", ckpt.config().path}};
  if (ckpt.generation_config()) sources.emplace_back("generation_config.json", ckpt.generation_config()->path);
  for (const auto& f : ckpt.weight_files()) sources.emplace_back(f.filename().string(), f);
  // A second core reads and hashes the checkpoint while the first converts and writes (the files are
  // the ones the export maps, so the reads mostly hit the page cache; a Hugging Face cache blob named
  // by its sha256 is not read at all). The thread touches nothing but these files and its result; a
  // signal's cleanup never waits for it.
  source_files_ = std::async(std::launch::async, [sources = std::move(sources), cancel = cancel_] {
    nlohmann::ordered_json files = nlohmann::ordered_json::object();
    for (const auto& [name, path] : sources) {
      auto named = io::hub_blob_sha256(path);  // a Hugging Face cache blob is named by its sha256
      files[name] = named ? *named : sha256_file(path, cancel.get());
    }
    return files;
  });
  const auto& s = loaded.summary();
  // "files" is filled in by write(), in place: the key order of the manifest does not change.
  // No absolute path of this machine (F#25, D21): the folder's name, and its path relative to the
  // export folder (set_source_path), which still finds it when both move together.
  json_["source"] = {{"name", ckpt.dir().filename().string()}, {"path", ckpt.dir().string()},
                     {"model_type", s.model_type}, {"hf_class", s.hf_class}, {"files", nlohmann::ordered_json::object()}};
  json_["recipe"] = recipe.to_json();
  // The model block is the decoder's KV geometry (the read-back rebuilds the state from it); a model
  // without a decoder records heads and head_dim 0.
  const bool decoder = loaded.model.exposes(models::ModuleKind::Decoder);
  const auto g = decoder ? loaded.model.decoder().cache() : models::CacheGeometry{};
  nlohmann::ordered_json m = {{"task", loaded.task->name()},
                              {"vocab_size", s.vocab_size},
                              {"hidden_size", s.hidden_size},
                              {"num_layers", decoder ? g.num_layers : s.num_layers},
                              {"num_kv_heads", g.num_kv_heads},
                              {"head_dim", g.head_dim},
                              {"sliding_window", g.sliding_window},
                              {"eos_token_ids", s.eos_token_ids}};
  m["bos_token_id"] = s.bos_token_id ? nlohmann::ordered_json(*s.bos_token_id) : nlohmann::ordered_json();
  m["pad_token_id"] = s.pad_token_id ? nlohmann::ordered_json(*s.pad_token_id) : nlohmann::ordered_json();
  // A hybrid's state is more than the key/value geometry above: its StateSpecs and the client name
  // set they are named by, which the read-back rebuilds the state from (a decoder's manifest keeps
  // the geometry alone, as before).
  if (decoder && loaded.model.decoder().state_names() != "decoder" && !loaded.components.empty()) {
    m["state_names"] = std::string(loaded.model.decoder().state_names());
    m["states"] = states_json(loaded.components.front().state);
  }
  // An encoder-decoder's decoder steps carry self- and cross-attention state (tasks/seq2seq.h).
  if (loaded.model.exposes(models::ModuleKind::Seq2Seq)) {
    m["decoder_start_token_id"] = loaded.model.seq2seq().decoder_start_token_id();
    // A speech encoder's input (Whisper's log-mel features), which decode loops and checks feed it.
    if (const models::Seq2SeqSource src = loaded.model.seq2seq().source(); src.speech)
      m["speech_source"] = {{"mel_bins", src.mel_bins}, {"frames", src.frames}, {"encoder_length", src.encoder_length}};
    for (const auto& c : loaded.components)
      if (!c.state.empty()) {
        // Optimum's names, or onnxruntime-genai's (--onnx-layout genai): the set that named the ports.
        const tasks::StateNameSet& genai = tasks::state_names(tasks::StateNames::GenaiWhisper);
        const bool genai_names = tasks::parse_state_name(genai, c.state.front().past).has_value();
        m["state_names"] = std::string((genai_names ? genai : tasks::state_names(tasks::StateNames::Seq2Seq)).name);
        m["states"] = states_json(c.state);
        break;
      }
  }
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
  // The cache section from the component's state: a static cache is state written in place.
  nlohmann::ordered_json shared = nlohmann::ordered_json::array();
  for (const auto& [in, out] : tasks::shared_buffers_of(c.state)) shared.push_back({in, out});
  const bool static_cache = !shared.empty();
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

void ManifestBuilder::set_source_path(const fs::path& out_dir) {
  // Both sides resolved through their symlinks, as the OS will resolve OUT/<path> when it is read.
  const fs::path from = fs::weakly_canonical(fs::absolute(out_dir));
  const fs::path to = fs::weakly_canonical(fs::absolute(json_["source"]["path"].get<std::string>()));
  fs::path rel = to.lexically_relative(from);
  if (rel.empty()) rel = ".";
  json_["source"]["path"] = rel.generic_string();
}

void ManifestBuilder::set_hub_source(const io::HubSnapshot& hub) {
  json_["source"]["name"] = hub.repo_id;
  json_["source"]["hub"] = {{"id", hub.repo_id}, {"revision", hub.revision}, {"commit", hub.commit}};
}

void ManifestBuilder::add_format_entry(const std::string& section, nlohmann::ordered_json entry) {
  json_[section].push_back(std::move(entry));
}

ManifestBuilder::~ManifestBuilder() {
  cancel_->store(true);  // write() has taken the result already, or the export failed
}

void ManifestBuilder::add_file_digest(const fs::path& rel, std::string sha256, uintmax_t size) {
  digests_[rel.generic_string()] = {std::move(sha256), size};
}

void ManifestBuilder::add_file_copy(const fs::path& rel, const fs::path& source, uintmax_t size) {
  copies_[rel.generic_string()] = {source.filename().string(), size};
}

void ManifestBuilder::write(const fs::path& root) {
  if (source_files_.valid()) json_["source"]["files"] = source_files_.get();  // rethrows the hashing thread's error
  for (const auto& [rel, copy] : copies_) {
    const auto& sources = json_["source"]["files"];
    if (auto it = sources.find(copy.first); it != sources.end() && it->is_string() && !it->get<std::string>().empty())
      digests_.try_emplace(rel, it->get<std::string>(), copy.second);
  }
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

namespace {

// OUT/hfx.json parsed, with the schema version hfx reads; BadInput otherwise. Nothing else checked.
nlohmann::json parse_manifest(const fs::path& out_dir) {
  const fs::path path = out_dir / kManifestName;
  std::error_code ec;  // a symlink loop or an unreadable folder: one line, not a filesystem_error
  if (!fs::exists(fs::symlink_status(path, ec))) bad_input("{}: no manifest ({}): not an hfx export, or an incomplete one", out_dir.string(), kManifestName);
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
  return j;
}

}  // namespace

fs::path manifest_source_folder(const nlohmann::json& manifest, const fs::path& out_dir) {
  const auto& source = manifest.at("source");
  if (source.contains("path")) return fs::weakly_canonical(fs::absolute(out_dir) / source["path"].get<std::string>());
  return source.at("folder").get<std::string>();
}

void check_is_hfx_export(const fs::path& out_dir) {
  const nlohmann::json j = parse_manifest(out_dir);
  if (!j.contains("files") || !j["files"].is_object() || !j.contains("components") || !j["components"].is_array())
    bad_input("{}: no \"files\" object and \"components\" list", (out_dir / kManifestName).string());
}

nlohmann::json read_manifest(const fs::path& out_dir) {
  const fs::path path = out_dir / kManifestName;
  nlohmann::json j = parse_manifest(out_dir);
  // Every member the readers (check, generate, verify) index is checked here, once: after this they
  // read the JSON without guarding each access.
  validate_manifest(j, path.string());
  return j;
}

namespace {

// A listed name as a problem line shows it: a hand-edited manifest may hold a 5000-character one.
std::string shown_name(const std::string& rel) {
  constexpr size_t kShown = 120;
  return rel.size() <= kShown ? rel : fmt::format("{}... ({} characters)", rel.substr(0, kShown), rel.size());
}

// What is wrong with the file `rel` listed in the manifest of `out_dir` (whose real location is
// `real_root`), or "" when it is a regular file inside the export whose sha256 is `sha`. Never
// throws: every answer is a problem line naming the entry. The checks follow symlinks, so a listed
// file (or a folder on its way) linked to somewhere else is refused before anything opens it.
std::string listed_file_problem(const fs::path& out_dir, const fs::path& real_root, const std::string& rel,
                                const nlohmann::json& sha, bool rehash) {
  const std::string name = shown_name(rel);
  const fs::path p = out_dir / rel;
  std::error_code ec;
  const fs::path real = fs::canonical(p, ec);
  if (ec == std::errc::no_such_file_or_directory || ec == std::errc::not_a_directory)
    return fmt::format("{}: listed in the manifest but missing", name);
  if (ec) return fmt::format("{}: listed in the manifest but cannot be looked up: {}", name, ec.message());
  if (!path_is_within(real_root, real)) return fmt::format("{}: resolves outside the export (to {})", name, real.string());
  if (!fs::is_regular_file(fs::status(real, ec))) return fmt::format("{}: not a regular file", name);
  if (!sha.is_string()) return fmt::format("{}: its sha256 in the manifest is {}, not a string", name, sha.type_name());
  if (!rehash) return "";
  try {
    if (sha256_file(real) != sha.get<std::string>()) return fmt::format("{}: sha256 mismatch (the file changed after export)", name);
  } catch (const Error& e) {
    return fmt::format("{}: {}", name, e.message());
  }
  return "";
}

bool escapes(const std::string& rel) { return rel.find("..") != std::string::npos || fs::path(rel).is_absolute(); }

// Each symlink in the export, not listed in the manifest, that resolves outside it or not at all,
// as problem lines. A linked-out folder is invisible to the listing (the walk does not follow it),
// yet an ONNX location `sub/w.bin` under `sub -> /elsewhere` reads through it. Never throws: a walk
// error ends the walk (list_files reports an unreadable tree).
std::vector<std::string> links_out_of(const fs::path& out_dir, const fs::path& real_root,
                                      const std::set<std::string>& listed) {
  std::vector<std::string> problems;
  std::error_code ec;
  fs::recursive_directory_iterator it(out_dir, fs::directory_options::skip_permission_denied, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    std::error_code lec;
    if (!it->is_symlink(lec)) continue;
    const fs::path real = fs::canonical(it->path(), lec);
    const std::string rel = it->path().lexically_relative(out_dir).generic_string();
    if (listed.count(rel)) continue;  // reported with its entry
    // The report folder is not part of the artifact (verify refuses to write through a link there).
    if (fs::path(rel).begin()->string() == kReportDir) {
      if (it->is_directory(lec)) it.disable_recursion_pending();
      continue;
    }
    if (lec) problems.push_back(fmt::format("{}: a symlink that does not resolve", shown_name(rel)));
    else if (!path_is_within(real_root, real))
      problems.push_back(fmt::format("{}: a symlink that resolves outside the export (to {})", shown_name(rel), real.string()));
  }
  return problems;
}

}  // namespace

std::optional<fs::path> listed_file(const fs::path& out_dir, const std::string& rel) {
  try {
    return file_inside(out_dir, rel, "listed file");
  } catch (const Error&) {
    return std::nullopt;
  }
}

std::vector<std::string> checksum_problems(const fs::path& out_dir) {
  const nlohmann::json m = read_manifest(out_dir);
  std::error_code ec;
  const fs::path real_root = fs::canonical(out_dir, ec);
  std::vector<std::string> problems;
  if (ec) return problems;  // check_export reports the folder
  for (const auto& [rel, sha] : m["files"].items()) {
    if (escapes(rel) || !listed_file_problem(out_dir, real_root, rel, sha, false).empty()) continue;  // reported there
    if (std::string problem = listed_file_problem(out_dir, real_root, rel, sha, true); !problem.empty())
      problems.push_back(std::move(problem));
  }
  return problems;
}

CheckReport check_export(const fs::path& out_dir, bool allow_extra, bool rehash) {
  const nlohmann::json m = read_manifest(out_dir);
  CheckReport r;
  std::error_code ec;
  const fs::path real_root = fs::canonical(out_dir, ec);
  if (ec) bad_input("{}: no such export folder", out_dir.string());
  std::set<std::string> listed;
  for (const auto& [rel, sha] : m["files"].items()) {
    listed.insert(rel);
    if (escapes(rel)) {
      r.problems.push_back(fmt::format("{}: listed path escapes the folder", shown_name(rel)));
      continue;
    }
    ++r.files_checked;
    if (std::string problem = listed_file_problem(out_dir, real_root, rel, sha, rehash); !problem.empty())
      r.problems.push_back(std::move(problem));
  }
  for (const auto& rel : list_files(out_dir))
    if (rel != kManifestName && !listed.count(rel.generic_string()) && *rel.begin() != kReportDir) {
      if (allow_extra) r.extras.push_back(rel.generic_string());
      else r.problems.push_back(fmt::format("{}: present but not in the manifest (--allow-extra allows it)", rel.generic_string()));
    }
  for (auto& p : links_out_of(out_dir, real_root, listed)) r.problems.push_back(std::move(p));
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
