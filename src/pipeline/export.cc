#include "pipeline/export.h"

#include <fmt/format.h>

#include <chrono>

#include "backends/onnx/onnx_writer.h"
#include "core/error.h"
#include "core/files.h"
#include "core/progress.h"
#include "models/registry.h"
#include "passes/pass.h"
#include "pipeline/manifest.h"
#include "pipeline/verify.h"
#include "tasks/feature_extraction.h"

namespace fs = std::filesystem;

namespace hfx::pipeline {

namespace {

// Tensors a checkpoint may carry that no definition reads, ignored on purpose: rope tables that old
// Transformers versions saved as buffers (hfx recomputes them from the config).
bool deliberately_ignored(const std::string& name) { return name.ends_with("rotary_emb.inv_freq"); }

// And in an encoder checkpoint (BERT family), BertModel's pooler: pooler.dense.weight / .bias, bare or
// under one base-model prefix ("bert.", "roberta."). The feature-extraction outputs are fixed
// (last_hidden_state, logits) and Optimum's feature-extraction export drops the pooler too; a
// sequence-classification head that needs it binds it, so it only reaches here when unused.
bool deliberately_ignored_by_encoder(const std::string& name) {
  for (const std::string leaf : {"pooler.dense.weight", "pooler.dense.bias"}) {
    if (name == leaf) return true;
    if (name.size() > leaf.size() + 1 && name.ends_with("." + leaf) && name.find('.') == name.size() - leaf.size() - 1)
      return true;
  }
  return false;
}

void check_weight_accounting(const io::Checkpoint& ckpt, const std::string& model_type) {
  std::vector<std::string> leftovers;
  const bool encoder = models::find_encoder(model_type) != nullptr;
  for (const auto& name : ckpt.unused())
    if (!deliberately_ignored(name) && !(encoder && deliberately_ignored_by_encoder(name))) leftovers.push_back(name);
  if (leftovers.empty()) return;
  const size_t shown = std::min<size_t>(leftovers.size(), 5);
  bad_input("{}: {} tensor(s) in the checkpoint are not used by the `{}` definition: {}{}", ckpt.dir().string(),
            leftovers.size(), model_type,
            fmt::join(std::vector<std::string>(leftovers.begin(), leftovers.begin() + long(shown)), ", "),
            leftovers.size() > shown ? ", ..." : "");
}

std::map<std::string, std::string> onnx_metadata(const LoadedModel& m, const tasks::Component& c, const ir::Graph& g) {
  std::map<std::string, std::string> md;
  md["hfx.version"] = HFX_VERSION;
  md["hfx.model_type"] = m.summary().model_type;
  md["hfx.task"] = m.task();
  md["hfx.role"] = c.role;
  // The shape contract: each symbol's bounds and relations, readable by any ONNX consumer.
  for (const auto& [name, bounds] : g.symbols().all()) md["hfx.dim." + name] = bounds.str();
  for (const auto& r : g.symbols().relations()) md["hfx.relation." + r.sum] = r.a + " + " + r.b;
  for (const auto& [in, out] : c.shared_buffers) md["hfx.shared_buffer." + in] = out;
  return md;
}

}  // namespace

LoadedModel load_model(const fs::path& model_dir, const tasks::CausalLmOptions& task) {
  LoadedModel m{std::make_unique<io::Checkpoint>(io::Checkpoint::open(model_dir)), nullptr, nullptr, {}};
  const std::string type = m.checkpoint->model_type();
  if (const auto* e = models::find_encoder(type)) {
    m.encoder = with_context(m.checkpoint->config().path.string(), [&] { return e->make(*m.checkpoint); });
    m.components = with_context(m.checkpoint->dir().string(), [&] { return tasks::build_feature_extraction(*m.encoder, task); });
  } else {
    m.model = models::load_causal_lm(*m.checkpoint);
    m.components = with_context(m.checkpoint->dir().string(), [&] { return tasks::build_causal_lm(*m.model, task); });
  }
  check_weight_accounting(*m.checkpoint, type);
  return m;
}

std::vector<std::string> backend_passes(const std::string& format) {
  if (format == "onnx") return {"decompose-composites", "fold-weight-transforms"};
  unsupported("unknown format `{}` (supported: onnx)", format);
}

ExportResult run_export(const ExportOptions& opt) {
  const auto start = std::chrono::steady_clock::now();
  for (const auto& f : opt.recipe.formats) backend_passes(f);  // reject unknown formats before any work
  tasks::validate(opt.recipe.task);
  LoadedModel m = load_model(opt.model_dir, opt.recipe.task);
  StagedDirectory staged(opt.out_dir, opt.overwrite);
  ExportResult result;
  result.out_dir = opt.out_dir;

  ManifestBuilder manifest(*m.checkpoint, m, opt.recipe);
  for (const auto& format : opt.recipe.formats) {
    const fs::path dir = staged.path() / format;
    fs::create_directories(dir);
    for (const auto& c : m.components) {
      std::vector<std::string> passes_run;
      ir::Graph g = with_context(c.role, [&] { return passes::run_pipeline(c.graph, backend_passes(format), &passes_run); });
      onnx_backend::OnnxWriteOptions wo;
      wo.model_file = c.file_stem + ".onnx";
      wo.data_file = c.file_stem + ".onnx_data";
      wo.metadata = onnx_metadata(m, c, g);
      int64_t total_bytes = 0;
      for (auto id : g.weights()) total_bytes += int64_t(g.weight(id)->nbytes());
      Progress progress(fmt::format("{} {}", format, c.role), int64_t(g.weights().size()), total_bytes);
      wo.on_weight_written = [&](int64_t n, int64_t bytes) { progress.advance(n, bytes); };
      auto written = with_context(fmt::format("{} {}", format, c.role), [&] { return onnx_backend::write_onnx(g, dir, wo); });
      progress.finish();
      result.weight_bytes_written += written.data_bytes;
      manifest.add_component(c, format, (fs::path(format) / wo.model_file).string(), passes_run);
    }
    // Model config and tokenizer files beside the graphs, and at the top of the folder where
    // transformers.js and Optimum look for them.
    for (const auto& side : m.checkpoint->side_files()) {
      fs::copy_file(side, dir / side.filename(), fs::copy_options::overwrite_existing);
      fs::copy_file(side, staged.path() / side.filename(), fs::copy_options::overwrite_existing);
    }
  }
  manifest.write(staged.path());
  // The built-in check runs the reference executor over the checkpoint and over the artifact, each
  // holding the weights in f32: past a size that makes that costly it is left to `hfx verify`.
  int64_t f32_weight_bytes = 0;
  for (auto id : m.components.at(0).graph.weights()) f32_weight_bytes += int64_t(m.components[0].graph.weight(id)->nbytes());
  if (opt.verify && f32_weight_bytes > opt.verify_max_bytes) {
    result.verify_summary = fmt::format(
        "not verified: {} of f32 weights is above the built-in check's limit of {} (it holds the model twice); "
        "run `hfx verify {}`",
        human_bytes(f32_weight_bytes), human_bytes(opt.verify_max_bytes), opt.out_dir.string());
  } else if (opt.verify) {
    // A quick proof before the export is published: two shapes per component and 8 greedy tokens
    // against the reference executor on the checkpoint. `hfx verify` runs the full matrix.
    VerifyOptions vo;
    vo.tokens = 8;
    vo.reexport = false;
    vo.full_shape_matrix = false;
    std::vector<std::string> runtimes = {"reference"};
    if (!opt.verify_runtime.empty() && opt.verify_runtime != "reference") runtimes.push_back(opt.verify_runtime);
    size_t checks = 0;
    for (const auto& rt : runtimes) {
      vo.runtime = rt;
      auto report = verify_export(staged.path(), vo);
      checks += report.checks.size();
      for (const auto& c : report.checks)
        if (!c.passed)
          fail(ErrorKind::Internal,
               "the export does not match its reference ({}): {}: {} (nothing was written; --no-verify skips this check)",
               rt, c.name, c.detail);
    }
    result.verify_summary = fmt::format("verified against the reference executor, artifact run on {}: {} checks passed",
                                        fmt::join(runtimes, ", "), checks);
  }
  result.files = list_files(staged.path());
  staged.commit();
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace hfx::pipeline
