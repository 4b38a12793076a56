#include "pipeline/export.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>

#include "backends/onnx/onnx_writer.h"
#include "core/error.h"
#include "core/files.h"
#include "core/progress.h"
#include "models/registry.h"
#include "passes/pass.h"
#include "tasks/causal_lm.h"

namespace fs = std::filesystem;

namespace hfx::pipeline {

namespace {

// Tensors a checkpoint may carry that no definition reads, ignored on purpose: rope tables that old
// Transformers versions saved as buffers (hfx recomputes them from the config).
bool deliberately_ignored(const std::string& name) { return name.ends_with("rotary_emb.inv_freq"); }

void check_weight_accounting(const io::Checkpoint& ckpt, const std::string& model_type) {
  std::vector<std::string> leftovers;
  for (const auto& name : ckpt.unused())
    if (!deliberately_ignored(name)) leftovers.push_back(name);
  if (leftovers.empty()) return;
  const size_t shown = std::min<size_t>(leftovers.size(), 5);
  bad_input("{}: {} tensor(s) in the checkpoint are not used by the `{}` definition: {}{}", ckpt.dir().string(),
            leftovers.size(), model_type,
            fmt::join(std::vector<std::string>(leftovers.begin(), leftovers.begin() + long(shown)), ", "),
            leftovers.size() > shown ? ", ..." : "");
}

nlohmann::ordered_json io_json(const std::vector<tasks::IoSpec>& specs) {
  auto arr = nlohmann::ordered_json::array();
  for (const auto& s : specs) {
    std::vector<std::string> dims;
    for (const auto& d : s.shape) dims.push_back(d.str());
    arr.push_back({{"name", s.name}, {"dtype", dtype_name(s.dtype)}, {"shape", dims}});
  }
  return arr;
}

std::vector<fs::path> list_files(const fs::path& root) {
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (e.is_regular_file()) files.push_back(fs::relative(e.path(), root));
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

LoadedModel load_model(const fs::path& model_dir) {
  LoadedModel m{std::make_unique<io::Checkpoint>(io::Checkpoint::open(model_dir)), nullptr, ir::Graph()};
  m.model = models::load_causal_lm(*m.checkpoint);
  m.graph = with_context(m.checkpoint->dir().string(), [&] { return tasks::build_causal_lm(*m.model); });
  check_weight_accounting(*m.checkpoint, m.model->summary().model_type);
  return m;
}

std::vector<std::string> backend_passes(const std::string& format) {
  if (format == "onnx") return {"decompose-composites", "fold-weight-transforms"};
  unsupported("unknown format `{}` (supported: onnx)", format);
}

ExportResult run_export(const ExportOptions& opt) {
  const auto start = std::chrono::steady_clock::now();
  for (const auto& f : opt.formats) backend_passes(f);  // reject unknown formats before any work
  LoadedModel m = load_model(opt.model_dir);
  StagedDirectory staged(opt.out_dir, opt.overwrite);
  ExportResult result;
  result.out_dir = opt.out_dir;

  nlohmann::ordered_json components = nlohmann::ordered_json::array();
  std::vector<std::string> applied;
  for (const auto& format : opt.formats) {
    std::vector<std::string> passes_run;
    ir::Graph g = passes::run_pipeline(m.graph, backend_passes(format), &passes_run);
    for (auto& p : passes_run) applied.push_back(format + ":" + p);
    const fs::path dir = staged.path() / format;
    fs::create_directories(dir);
    onnx_backend::OnnxWriteOptions wo;
    wo.metadata["hfx.version"] = HFX_VERSION;
    wo.metadata["hfx.model_type"] = m.model->summary().model_type;
    wo.metadata["hfx.role"] = "decoder";
    for (const auto& [name, bounds] : g.symbols().all()) wo.metadata["hfx.dim." + name] = bounds.str();
    for (const auto& r : g.symbols().relations()) wo.metadata["hfx.relation." + r.sum] = r.a + " + " + r.b;
    int64_t total_bytes = 0;
    for (auto id : g.weights()) total_bytes += int64_t(g.weight(id)->nbytes());
    Progress progress("export " + format, int64_t(g.weights().size()), total_bytes);
    wo.on_weight_written = [&](int64_t n, int64_t bytes) { progress.advance(n, bytes); };
    auto written = with_context("format " + format, [&] { return onnx_backend::write_onnx(g, dir, wo); });
    progress.finish();
    result.weight_bytes_written += written.data_bytes;
    // Model config and tokenizer files beside the graph, and at the top of the folder where
    // transformers.js and Optimum look for them.
    for (const auto& side : m.checkpoint->side_files()) {
      fs::copy_file(side, dir / side.filename(), fs::copy_options::overwrite_existing);
      fs::copy_file(side, staged.path() / side.filename(), fs::copy_options::overwrite_existing);
    }
    components.push_back({{"role", "decoder"},
                          {"format", format},
                          {"file", (fs::path(format) / wo.model_file).string()},
                          {"inputs", io_json(tasks::causal_lm_inputs(*m.model))},
                          {"outputs", io_json(tasks::causal_lm_outputs(*m.model))}});
  }

  // Manifest: what was exported from what, and the checksum of every file written.
  nlohmann::ordered_json manifest;
  manifest["schema_version"] = 1;
  manifest["tool"] = {{"name", "hfx"}, {"version", HFX_VERSION}};
  nlohmann::ordered_json source_files = nlohmann::ordered_json::object();
  source_files["config.json"] = sha256_file(m.checkpoint->config().path);
  for (const auto& f : m.checkpoint->weight_files()) source_files[f.filename().string()] = sha256_file(f);
  manifest["source"] = {{"model_type", m.model->summary().model_type}, {"files", source_files}};
  manifest["recipe"] = {{"formats", opt.formats}};
  manifest["components"] = components;
  manifest["passes"] = applied;
  nlohmann::ordered_json files = nlohmann::ordered_json::object();
  for (const auto& rel : list_files(staged.path())) files[rel.string()] = sha256_file(staged.path() / rel);
  manifest["files"] = files;
  write_text_file(staged.path() / "hfx.json", manifest.dump(2) + "\n");

  result.files = list_files(staged.path());
  staged.commit();
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace hfx::pipeline
