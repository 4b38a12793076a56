#include "pipeline/export.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <future>

#include "core/error.h"
#include "core/files.h"
#include "core/progress.h"
#include "ir/quantized_memo.h"
#include "models/registry.h"
#include "pipeline/backend.h"
#include "pipeline/manifest.h"
#include "pipeline/verify.h"

namespace fs = std::filesystem;

namespace hfx::pipeline {

namespace {

// Tensors a checkpoint may carry that no definition reads, ignored on purpose: rope tables that old
// Transformers versions saved as buffers (hfx recomputes them from the config).
bool deliberately_ignored(const std::string& name) { return name.ends_with("rotary_emb.inv_freq"); }

void check_weight_accounting(const io::Checkpoint& ckpt, const std::string& model_type, const tasks::Task& task) {
  std::vector<std::string> leftovers;
  for (const auto& name : ckpt.unused())
    if (!deliberately_ignored(name) && !task.ignores_weight(name)) leftovers.push_back(name);
  if (leftovers.empty()) return;
  const size_t shown = std::min<size_t>(leftovers.size(), 5);
  bad_input("{}: {} tensor(s) in the checkpoint are not used by the `{}` definition: {}{}", ckpt.dir().string(),
            leftovers.size(), model_type,
            fmt::join(std::vector<std::string>(leftovers.begin(), leftovers.begin() + long(shown)), ", "),
            leftovers.size() > shown ? ", ..." : "");
}

// The real location of `p`, following every symlink on the way (also `p` itself when it is one);
// the part that does not exist yet is appended as written.
fs::path real_location(const fs::path& p) {
  std::error_code ec;
  fs::path r = fs::weakly_canonical(fs::absolute(p, ec), ec);
  return ec ? fs::absolute(p, ec).lexically_normal() : r;
}

// F#1 / D15: --overwrite removes what is at OUT, so OUT must never be, hold or lie in the source.
void check_apart_from_source(const fs::path& model_dir, const fs::path& out) {
  const fs::path model = real_location(model_dir);
  // Where OUT's name lives (what a rename replaces) and where it leads (a symlink's target).
  const fs::path out_name = real_location(out.parent_path().empty() ? fs::path(".") : out.parent_path()) / out.filename();
  for (const fs::path& o : {real_location(out), out_name}) {
    if (o == model)
      bad_input("{}: --overwrite would replace the model folder being exported ({}); choose another output folder",
                out.string(), model.string());
    if (path_is_within(o, model))
      bad_input("{}: --overwrite would replace a folder holding the model being exported ({}); choose another output folder",
                out.string(), model.string());
    if (path_is_within(model, o))
      bad_input("{}: the output folder lies inside the model folder being exported ({}); with --overwrite choose a "
                "folder outside it",
                out.string(), model.string());
  }
}

// Bounds past the model's positions are warned about (tasks::fit_to_context); where they are lowered (a
// learned position table) the components are rebuilt, so the recipe and the components both record
// the bound that was used.
void fit_bounds_to_context(LoadedModel& m, tasks::CausalLmOptions& task, const Recipe& recipe) {
  if (!m.task->generative()) return;
  const auto limit = tasks::model_context(m.checkpoint->config(), m.components);
  if (!limit) return;
  const auto warnings = tasks::fit_to_context(task, *limit);
  for (const auto& w : warnings) fmt::print(stderr, "hfx: warning: {}\n", w);
  if (limit->learned && !warnings.empty())
    m.components = with_context(m.checkpoint->dir().string(), [&] {
      return m.task->components(m.model, task_options(task, recipe.options, recipe.formats));
    });
}

}  // namespace

void ExportResult::add_weight_bytes(const std::string& format, int64_t bytes) {
  auto it = std::find_if(weight_bytes.begin(), weight_bytes.end(), [&](const auto& e) { return e.first == format; });
  if (it == weight_bytes.end()) weight_bytes.emplace_back(format, bytes);
  else it->second += bytes;
}

void check_replaceable_export(const fs::path& out) {
  const std::string keep = "--overwrite only replaces a previous hfx export; remove it yourself or choose another folder";
  std::error_code ec;
  const auto st = fs::status(out, ec);  // follows a symlink: the link is replaced only if it leads to an export
  if (!fs::exists(st)) bad_input("{}: a symlink that leads nowhere, not an hfx export; {}", out.string(), keep);
  if (!fs::is_directory(st)) bad_input("{}: a file, not an hfx export; {}", out.string(), keep);
  try {
    check_is_hfx_export(out);
  } catch (const Error& e) {
    bad_input("{}: not an hfx export ({}); {}", out.string(), e.message(), keep);
  } catch (const fs::filesystem_error& e) {  // hfx.json a symlink loop, an unreadable folder
    bad_input("{}: not an hfx export ({}); {}", out.string(), e.code().message(), keep);
  }
}

void check_output_target(const fs::path& model_dir, const fs::path& out_dir, bool overwrite) {
  const fs::path out = normalize_output_path(out_dir);
  std::error_code ec;
  const bool exists = fs::exists(fs::symlink_status(out, ec));
  if (exists && !overwrite) bad_input("{}: output exists (pass --overwrite to replace it)", out.string());
  if (overwrite) check_apart_from_source(model_dir, out);
  if (exists) check_replaceable_export(out);
  check_output_creatable(out);
}

LoadedModel load_model(const fs::path& model_dir, const tasks::CausalLmOptions& options, const std::string& task) {
  auto checkpoint = std::make_unique<io::Checkpoint>(io::Checkpoint::open(model_dir));
  const models::ModelEntry& entry = models::find_model(checkpoint->model_type());
  models::Model model = models::load_model(*checkpoint);
  const tasks::Task& t = with_context(checkpoint->dir().string(), [&]() -> const tasks::Task& {
    return tasks::task_for(model, task, entry.default_task);
  });
  LoadedModel m{std::move(checkpoint), std::move(model), &t, {}};
  m.components = with_context(m.checkpoint->dir().string(), [&] { return t.components(m.model, options); });
  check_weight_accounting(*m.checkpoint, entry.model_type, t);
  return m;
}

ExportResult run_export(const ExportOptions& opt) {
  const auto start = std::chrono::steady_clock::now();
  // Every format known and in this build before any work; written in the registry's order (ONNX
  // first), whatever order they were asked in, so later formats reuse the bytes ONNX wrote.
  std::vector<const Backend*> backends;
  for (const auto& f : opt.recipe.formats) {
    const Backend* b = &find_backend(f);
    if (std::find(backends.begin(), backends.end(), b) != backends.end()) bad_input("--format {}: listed twice", f);
    backends.push_back(b);
  }
  std::vector<const Backend*> ordered;
  for (const Backend* b : all_backends())
    if (std::find(backends.begin(), backends.end(), b) != backends.end()) ordered.push_back(b);
  tasks::validate(opt.recipe.task);
  check_output_target(opt.model_dir, opt.out_dir, opt.overwrite);
  Recipe recipe = opt.recipe;  // with the bounds actually used
  LoadedModel m = load_model(opt.model_dir, task_options(recipe.task, recipe.options, recipe.formats), recipe.task_name);
  recipe.task_name = m.task->name();  // the manifest records the task that ran
  fit_bounds_to_context(m, recipe.task, recipe);
  {
    std::vector<std::string> roles;
    for (const auto& c : m.components) roles.push_back(c.role);
    recipe.check_component_roles(roles, "export");
  }
  if (opt.on_plan) {
    ExportPlan plan{m.summary().model_type, m.task->name(), {}, {}};
    for (const Backend* backend : ordered)
      for (const auto& c : m.components) {
        const auto p = backend->plan(c, m, recipe, false);
        if (!p.written) continue;
        plan.components.push_back(fmt::format("{} {}{}", backend->info().name, c.role, p.layout.empty() ? "" : " (" + p.layout + ")"));
        plan.notes.insert(plan.notes.end(), p.notes.begin(), p.notes.end());
      }
    opt.on_plan(plan);
  }
  StagedDirectory staged(opt.out_dir, opt.overwrite, check_replaceable_export);
  ExportResult result;
  result.out_dir = staged.final_path();
  result.source_weight_bytes = m.checkpoint->total_weight_bytes();

  ManifestBuilder manifest(*m.checkpoint, m, recipe);
  manifest.set_source_path(staged.final_path());
  if (opt.hub) manifest.set_hub_source(*opt.hub);
  ir::WrittenWeights written;
  ExportJob job{m, recipe, staged.path(), manifest, result, written};
  // The check's reference quantizes the checkpoint's Linear weights as the writers just did: it takes
  // the writers' results from memory instead (ir/quantized_memo.h), up to the weights a check holds (the
  // same bytes move from the memo into the reference's graph, so its memory stays within that bound).
  ir::QuantizedMemo quantized_for_check(opt.verify ? size_t(kHeldWeightLimit) : 0);
  ir::QuantizedMemo::Scope quantized_scope(quantized_for_check);
  // The checks' preludes run while the files are written; held until the checks, which need them (a
  // failed export waits for them on its way out: a probe takes 0.3 s).
  std::vector<std::future<void>> preludes;
  if (opt.verify)
    for (const Backend* backend : ordered)
      if (auto prelude = backend->check_prelude(opt)) preludes.push_back(std::async(std::launch::async, std::move(prelude)));
  for (const Backend* backend : ordered) {
    const std::string format = backend->info().name;
    const fs::path dir = staged.path() / format;
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) fail(ErrorKind::Io, "{}: cannot create: {}", dir.string(), ec.message());
    for (const auto& c : m.components) backend->write_component(c, job);
    // Model config and tokenizer files beside the graphs, and at the top of the folder where
    // transformers.js and Optimum look for them.
    for (const auto& side : m.checkpoint->side_files()) {
      copy_file_checked(side, dir / side.filename());
      copy_file_checked(side, staged.path() / side.filename());
    }
  }
  manifest.write(staged.path());
  // The built-in check runs at every size: the reference executor reads MatMul and Gather weights where
  // they lie in the files and streams them past kHeldWeightLimit (verify_session.h), so its memory
  // follows the largest weight, not the model.
  if (opt.verify) {
    for (auto& prelude : preludes) prelude.get();
    std::vector<std::string> summaries;
    for (const Backend* backend : ordered) summaries.push_back(backend->check(job, opt));
    result.verify_summary = fmt::format("{}", fmt::join(summaries, "; "));
  }
  result.files = list_files(staged.path());
  staged.commit();
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace hfx::pipeline
