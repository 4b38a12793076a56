#include "pipeline/backend.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "pipeline/backend_support.h"
#include "pipeline/verify.h"
#include "pipeline/verify_cases.h"
#include "runtime/tested_runtimes.h"

namespace hfx::pipeline {

std::map<std::string, std::string> component_metadata(const LoadedModel& m, const tasks::Component& c, const ir::Graph& g) {
  std::map<std::string, std::string> md;
  md["hfx.version"] = HFX_VERSION;
  md["hfx.model_type"] = m.summary().model_type;
  md["hfx.task"] = m.task->name();
  md["hfx.role"] = c.role;
  // The shape contract: each symbol's bounds and relations, readable by any consumer of the file.
  for (const auto& [name, bounds] : g.symbols().all()) md["hfx.dim." + name] = bounds.str();
  for (const auto& r : g.symbols().relations()) md["hfx.relation." + r.sum] = r.a + " + " + r.b;
  for (const auto& [in, out] : c.shared_buffers) md["hfx.shared_buffer." + in] = out;
  return md;
}

tasks::CausalLmOptions task_options(const tasks::CausalLmOptions& task, const FormatSettings& settings,
                                    const std::vector<std::string>& formats) {
  tasks::CausalLmOptions out = task;
  for (const Backend* b : all_backends())
    if (std::find(formats.begin(), formats.end(), b->info().name) != formats.end()) b->shape_task(settings, out);
  return out;
}

Backend::Plan Backend::plan(const tasks::Component& c, const LoadedModel&, const Recipe&, bool) const {
  return {"", {}, c.inputs, c.outputs};
}

void refuse_ssd_scan(const tasks::Component& c, const std::string& format) {
  if (const tasks::StatePort* p = tasks::first_of_kind(c.state, tasks::StateKind::Recurrent))
    unsupported("format {} does not write a Mamba scan yet ({} is its state): the scan's chunk count, ceil(seq / "
                "chunk_size), needs floor division in the program's symbolic shapes; export onnx or openvino (docs/ssm.md)",
                format, p->past);
}

void refuse_encoder_decoder(const LoadedModel& m, const std::string& format) {
  if (m.model.exposes(models::ModuleKind::Seq2Seq))
    unsupported("format {} does not write an encoder-decoder ({}) yet: export onnx, openvino or pt2", format,
                m.summary().model_type);
}

int64_t check_tokens(int64_t weight_bytes) {
  const int64_t steps = weight_bytes > 0 ? kCheckStepBytes / weight_bytes : 7;
  return 1 + std::clamp<int64_t>(steps, 3, 7);
}

int64_t check_tokens(const ExportJob& job, const std::string& format) {
  int64_t bytes = 0;
  for (const auto& [f, n] : job.result.weight_bytes)
    if (f == format) bytes += n;
  return check_tokens(bytes);
}

size_t check_shape_cases(const ExportJob& job, const std::string& format, const std::string& runtime,
                         const std::string& what) {
  VerifyOptions vo;
  vo.runtime = runtime;
  vo.tokens = check_tokens(job, format);  // an encoder-decoder's greedy tokens, as the onnx check decodes
  vo.reexport = false;
  vo.full_shape_matrix = false;
  vo.rehash = false;  // this process hashed every file as it wrote it
  vo.model_dir = job.model.checkpoint->dir();  // the staged manifest's source.path is relative to the final folder
  VerifyReport report;
  try {
    report = verify_export(job.staging, vo);
  } catch (const Error& e) {
    throw Error(e.kind(), fmt::format("{} (nothing was written; --no-verify skips this check)", e.describe()));
  }
  for (const auto& c : report.checks)
    if (!c.passed)
      fail(ErrorKind::Mismatch, "the {} export does not match its reference ({}): {}: {} (nothing was written; "
           "--no-verify skips this check)", format, what, c.name, c.detail);
  return report.checks.size();
}

int64_t graph_weight_bytes(const ir::Graph& g) {
  int64_t total = 0;
  for (auto id : g.weights()) total += int64_t(g.weight(id)->nbytes());
  return total;
}

std::unique_ptr<Progress> weight_progress(const std::string& what, const ir::Graph& g) {
  return std::make_unique<Progress>(what, int64_t(g.weights().size()), graph_weight_bytes(g));
}

GreedyCheck check_greedy_tokens(const ExportJob& job, const std::string& format, const std::string& runtime_name,
                                const std::function<ir::Graph(const tasks::Component&)>& reference_graph,
                                const std::function<std::unique_ptr<runtime::StepRunner>(const tasks::Component&)>& runner_for) {
  const LoadedModel& m = job.model;
  const Recipe& r = job.recipe;
  HFX_CHECK(m.task->generative(), "check_greedy_tokens on a {} export", m.task->name());
  auto find = [&](const std::string& role) -> const tasks::Component* {
    for (const auto& c : m.components)
      if (c.role == role) return &c;
    return nullptr;
  };
  const tasks::Component* first = find("prefill") ? find("prefill") : find("decoder");
  const tasks::Component* next = find("decode");
  HFX_CHECK(first, "no decoder component");
  const runtime::CacheSpec cache{first->state, r.task.static_cache, r.task.max_cache_len};
  runtime::SamplingOptions so;
  so.max_new_tokens = check_tokens(job, format);
  const auto prompts = greedy_prompts(step_bounds(r.task.dims), cache, m.summary().vocab_size, true, so.max_new_tokens);
  so.eos_token_ids = m.summary().eos_token_ids;
  so.pad_token_id = m.summary().pad_token_id.value_or(so.eos_token_ids.empty() ? 0 : so.eos_token_ids[0]);
  auto ref_first = runtime::make_executor_runner(reference_graph(*first));
  auto ref_next = next ? runtime::make_executor_runner(reference_graph(*next)) : nullptr;
  const auto expected = runtime::generate(*ref_first, next ? *ref_next : *ref_first, cache, prompts, so);
  auto art_first = runner_for(*first);
  auto art_next = next ? runner_for(*next) : nullptr;
  const auto actual = runtime::generate(*art_first, next ? *art_next : *art_first, cache, prompts, so);
  if (actual != expected)
    fail(ErrorKind::Mismatch,
         "the {} export does not match its reference: greedy tokens {} on {}, {} on the reference executor "
         "(nothing was written; --no-verify skips this check)",
         format, fmt::join(actual.at(0), ","), runtime_name, fmt::join(expected.at(0), ","));
  return {so.max_new_tokens, prompts.size()};
}

namespace {

std::vector<std::pair<int, const Backend*>>& registrations() {
  static std::vector<std::pair<int, const Backend*>> r;
  return r;
}

}  // namespace

BackendRegistration::BackendRegistration(int rank, const Backend& backend) { registrations().emplace_back(rank, &backend); }

const std::vector<const Backend*>& all_backends() {
  // Built on first use, after every static registration has run.
  static const std::vector<const Backend*> backends = [] {
    auto r = registrations();
    std::stable_sort(r.begin(), r.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<const Backend*> out;
    for (const auto& [rank, b] : r) out.push_back(b);
    HFX_CHECK(!out.empty(), "no format registered: the backends layer was not linked whole");
    return out;
  }();
  return backends;
}

const Backend& find_backend(const std::string& format) {
  std::vector<std::string> names;
  for (const Backend* b : all_backends()) {
    const BackendInfo info = b->info();
    if (info.name == format) {
      if (!info.available) unsupported("format `{}`: {}", format, info.status);
      return *b;
    }
    names.push_back(info.name);
  }
  unsupported("unknown format `{}` (supported: {})", format, fmt::join(names, ", "));
}

const Backend& backend_for_runtime(const std::string& runtime) {
  std::vector<std::string> names;
  for (const Backend* b : all_backends()) {
    const BackendInfo info = b->info();
    for (const auto& r : info.runtimes) {
      if (r == runtime) {
        if (!info.available) unsupported("--runtime {}: {}", runtime, info.status);
        return *b;
      }
      names.push_back(r);
    }
  }
  bad_input("--runtime {}: unknown runtime ({})", runtime, fmt::join(names, ", "));
}

}  // namespace hfx::pipeline
