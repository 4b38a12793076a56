#include "pipeline/verify.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <future>

#include "core/error.h"
#include "core/memory.h"
#include "core/progress.h"
#include "ir/rewrite.h"
#include "passes/precision.h"
#include "pipeline/backend.h"
#include "pipeline/oracle_transformers.h"
#include "pipeline/report_verdict.h"
#include "pipeline/runtime_probe.h"
#include "pipeline/verify_checks.h"
#include "runtime/executor.h"
#include "runtime/generate.h"
#include "runtime/seq2seq_generate.h"

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace hfx::pipeline {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// `g` with MatMulNBits accuracy_level 4 computed on f32 activations (the attribute dropped). Unless the
// runtime rounds them to int8 as the reference does (RuntimeFacts::int8_activations), the reference and
// the artifact's graphs differ in summation order only (a runtime's fused ops against the checkpoint's
// graph), so rounding their activations to int8 would turn near-ties into int8 steps; in f32 both
// compute the weights' own numbers, gated at fp32's tolerance.
bool rounds_activations(const ir::Graph& g) {
  return std::any_of(g.nodes().begin(), g.nodes().end(), [](const ir::Node& n) {
    return n.op == "MatMulNBits" && n.attr_int("accuracy_level", 0) == 4;
  });
}

ir::Graph with_f32_activations(const ir::Graph& g) {
  if (!rounds_activations(g)) return g;
  ir::Rewriter r(g);
  for (const auto& node : g.nodes()) {
    ir::Node n = r.mapped(node);
    if (n.op == "MatMulNBits") n.attrs.erase("accuracy_level");
    r.copy(node, n);
  }
  return r.finish();
}

}  // namespace

bool VerifyReport::passed() const {
  return std::all_of(checks.begin(), checks.end(), [](const CheckResult& c) { return c.passed; });
}

json VerifyReport::to_json() const {
  json j;
  j["export"] = dir.string();
  j["runtime"] = runtime;
  j["oracle"] = oracle;
  j["passed"] = passed();
  const Verdict v = verdict_of(*this);
  j["verdict"] = {{"headline", v.headline}, {"why", v.why}, {"next", v.next}};
  j["checks"] = json::array();
  for (const auto& c : checks)
    j["checks"].push_back({{"name", c.name}, {"passed", c.passed}, {"detail", c.detail}, {"tolerance", c.tolerance}, {"measured", c.measured}});
  return j;
}

std::string VerifyReport::to_markdown() const {
  std::string md = fmt::format("# hfx verify: {}\n\nRuntime: `{}`. Oracle: {}. Result: **{}** ({} of {} checks passed).\n\n",
                               dir.string(), runtime, oracle, passed() ? "PASS" : "FAIL",
                               std::count_if(checks.begin(), checks.end(), [](const auto& c) { return c.passed; }), checks.size());
  if (const Verdict v = verdict_of(*this); !v.passed) md += fmt::format("**Why:** {}\n\n**What to do:** {}\n\n", v.why, v.next);
  md += "| check | result | detail | tolerance |\n|---|---|---|---|\n";
  for (const auto& c : checks)
    md += fmt::format("| {} | {} | {} | {} |\n", c.name, c.passed ? "pass" : "**FAIL**", c.detail, c.tolerance);
  return md;
}

namespace {

// A stateful case's step starts, on the reference's side too, from the state the artifact's runtime
// held after the prefix when the runtime shows it (OpenVINO's variables): the step is then compared
// alone. Otherwise the reference starts from its own state after the prefix, and a recurrent state's
// rounding from two runs compounds in the step (a Mamba-2 scan state read back through C).
void start_from_held_state(VerifyContext& ctx) {
  for (size_t i = 0; i < ctx.runs.size() && i < ctx.artifact.held.size(); ++i) {
    CaseRun& r = ctx.runs[i];
    const auto& held = ctx.artifact.held[i];
    for (const auto& port : ctx.art.cache.states) {
      auto it = held.find(tasks::openvino_variable_id(port));
      if (it == held.end()) it = held.find(port.past);
      auto in = r.inputs.find(port.past);
      if (it == held.end() || in == r.inputs.end() || it->second.shape() != in->second.shape()) continue;
      in->second = it->second;
    }
  }
}

// The reference's side, after the artifact's: per component, its shape cases and, in the
// decoder's (or prefill's) graph, the rows teacher-forced on the artifact's greedy tokens, all run in
// lockstep groups (each weight read once per group: one pass over a streamed model for the check's
// cases and greedy rows together). Where teacher forcing cannot stand for decoding, or the paths part,
// the reference decodes step by step.
void run_reference(VerifyContext& ctx, const runtime::SamplingOptions& so) {
  const VerifyOptions& opt = ctx.opt;
  const LoadedModel& ref = *ctx.ref;
  using Tokens = std::vector<std::vector<int64_t>>;
  std::optional<GreedySteps> steps;
  std::optional<Tokens> agreed;
  std::optional<TeacherForcing> tf;
  if (ctx.causal) {
    std::vector<std::pair<std::string, const ir::Graph*>> by_role;
    for (const auto& c : ref.components) by_role.emplace_back(c.role, &c.graph);
    steps = greedy_steps(by_role, "the reference", ctx.out);
    tf = teacher_forcing(*steps->first, ctx.art.cache, ctx.vocab, ctx.prompts, ctx.artifact.tokens, so);
  }
  std::vector<std::map<std::string, Tensor>> forced_outputs;
  for (const auto& rc : ref.components) {
    std::vector<size_t> cases;  // indices into ctx.runs
    for (size_t i = 0; i < ctx.runs.size(); ++i)
      if (ctx.runs[i].refc == &rc) cases.push_back(i);
    const bool rows = tf && !tf->rows.empty() && &rc.graph == steps->first;
    if (cases.empty() && !rows) continue;
    std::vector<const std::map<std::string, Tensor>*> inputs;
    std::vector<int64_t> sizes;
    for (size_t i : cases) {
      inputs.push_back(&ctx.runs[i].inputs);
      sizes.push_back(ctx.runs[i].sc.positions());
    }
    if (rows)
      for (size_t k = 0; k < tf->inputs.size(); ++k) {
        inputs.push_back(&tf->inputs[k]);
        sizes.push_back(tf->lengths[k]);
      }
    runtime::Executor expected(rc.graph, executor_options(rc.graph, opt));
    std::optional<Progress> progress;
    if (!cases.empty()) progress.emplace(Progress::steps("verify: checkpoint reference, " + rc.role, int64_t(cases.size()), "shape cases"));
    std::vector<std::map<std::string, Tensor>> outs;
    for (const auto& [begin, end] : lockstep_groups(sizes)) {
      auto group = expected.run_many({inputs.begin() + long(begin), inputs.begin() + long(end)});
      for (auto& o : group) outs.push_back(std::move(o));
      if (progress) progress->advance(int64_t(std::min(end, cases.size()) - std::min(begin, cases.size())), 0);
    }
    if (progress) progress->finish();
    for (size_t j = 0; j < cases.size(); ++j) ctx.runs[cases[j]].expected = std::move(outs[j]);
    if (rows) forced_outputs.assign(std::make_move_iterator(outs.begin() + long(cases.size())), std::make_move_iterator(outs.end()));
  }
  const int64_t total = ctx.tokens * int64_t(ctx.prompts.size());
  if (ctx.seq2seq) {  // decoded step by step: a few graphs of an encoder-decoder's size
    const ReferenceSeq2SeqRunners r = reference_seq2seq_runners(ref.components, opt);
    Progress progress = Progress::steps("verify: greedy, checkpoint reference", total, "tokens");
    ctx.expected_tokens = runtime::generate_seq2seq(
        {*r.encoder, r.first.get(), *r.next, r.ids}, ctx.art.cache, runtime::prompt_sources(ctx.prompts, so.pad_token_id, ctx.art.speech),
        {*ctx.art.decoder_start_token_id}, so, [&](size_t, int64_t) { progress.advance(1, 0); });
    progress.finish();
    return;
  }
  if (!ctx.causal) return;
  Progress forced = Progress::steps("verify: greedy, checkpoint reference", total, "tokens");
  if (tf) agreed = teacher_forced_tokens(*tf, forced_outputs, ctx.vocab, ctx.prompts, ctx.artifact.tokens);
  if (agreed) {
    forced.advance(total, 0);
    forced.finish();
    ctx.expected_tokens = std::move(*agreed);
    return;
  }
  forced.finish();
  auto first = runtime::make_executor_runner(*steps->first, executor_options(*steps->first, opt));
  auto next = steps->next ? runtime::make_executor_runner(*steps->next, executor_options(*steps->next, opt)) : nullptr;
  Progress progress = Progress::steps("verify: greedy, checkpoint reference, step by step", total, "tokens");
  ctx.expected_tokens = runtime::generate(*first, next ? *next : *first, ctx.art.cache, ctx.prompts, so,
                                          [&](size_t, int64_t) { progress.advance(1, 0); });
  progress.finish();
}

}  // namespace

int64_t held_weights_to_spare() {
  const auto available = available_memory_bytes();
  return std::max(kHeldWeightLimit, available ? *available / 8 : int64_t(0));
}

void build_verify_context(VerifyContext& ctx) {
  const VerifyOptions& opt = ctx.opt;
  const fs::path& out = ctx.out;
  // The format the runtime runs, and (below) its session: how that runtime runs verify's work.
  ctx.backend = &backend_for_runtime(opt.runtime);
  ctx.format = ctx.backend->info().name;
  // The oracle is settled first: asked for and unable to run is an error before any work.
  if (!is_oracle_name(opt.oracle)) bad_input("--oracle {}: expected reference, transformers or auto", opt.oracle);
  ctx.oracle_python = driver_python(opt.python);
  ctx.oracle_missing = opt.oracle == "reference" ? "" : transformers_oracle_unavailable(ctx.oracle_python);
  if (opt.oracle == "transformers" && !ctx.oracle_missing.empty())
    unsupported("--oracle transformers cannot run: {}", ctx.oracle_missing);
  ctx.on_transformers = opt.oracle != "reference" && ctx.oracle_missing.empty();
  ctx.oracle_word = ctx.on_transformers ? "Transformers" : "the reference";
  ctx.manifest = read_manifest(out);
  try {  // a recipe that does not parse is reported below, where it is read again
    ctx.parsed = Recipe::from_json(ctx.manifest, (out / kManifestName).string());
  } catch (const Error&) {
  }
  ctx.checked = check_export(out, false, /*rehash=*/false);
  ctx.source = opt.model_dir.empty() ? manifest_source_folder(ctx.manifest, out) : opt.model_dir;
  if (std::error_code ec; opt.model_dir.empty() && !fs::is_directory(ctx.source, ec))
    bad_input("{}: the source checkpoint {} is not there (moved, or another machine): pass --model DIR where it is now",
              (out / kManifestName).string(), ctx.source.string());
  // The sha256 of the artifact's files and of the checkpoint (GBs at model scale) on a thread of its
  // own, beside the runs, which read those bytes from the page cache as well: folded into the report
  // before any check is written.
  std::future<std::pair<std::vector<std::string>, std::string>> hashed;
  if (opt.rehash)
    hashed = std::async(std::launch::async, [out = ctx.out, source = ctx.source, manifest = ctx.manifest] {
      return std::make_pair(checksum_problems(out), source_problem(source, manifest));
    });

  // The reference (eager graphs from the checkpoint) and the artifact read back from its files.
  const auto t_open = Clock::now();
  ctx.art = open_artifact(out, ctx.format);
  ctx.open_s = seconds_since(t_open);
  Artifact& art = ctx.art;
  ctx.recipe = Recipe::from_json(ctx.manifest, (out / kManifestName).string());
  LoadedModel& ref = ctx.ref.emplace(load_model(ctx.source, task_options(ctx.recipe.task, ctx.recipe.options, ctx.recipe.formats),
                                                      ctx.recipe.task_name));
  // The reference runs the export's precision (same rounded and quantized weights): this checks the
  // export, and docs/quantization.md measures the precision itself against fp32.
  for (auto& c : ref.components)
    c.graph = passes::apply_precision(c.graph, ctx.recipe.precision_for(c.role),
                                      ctx.backend->precision_target(ctx.recipe, c.role));
  ctx.session = ctx.backend->verify_session({art, opt, opt.runtime, ctx.open_s});
  ctx.facts = ctx.session->facts();
  if (ctx.facts.int8_activations.empty()) {
    for (auto& c : ref.components) c.graph = with_f32_activations(c.graph);
    for (auto& c : art.components) c.graph = with_f32_activations(c.graph);
  }
  ctx.vocab = ref.summary().vocab_size;
  ctx.causal = ref.task->generative();
  ctx.seq2seq = art.seq2seq();

  // The shape cases per component; the reference's side runs them after the artifact's (run_reference).
  uint64_t seed = 1;
  for (const auto& c : art.components) {
    const tasks::Component* rc = nullptr;
    for (const auto& x : ref.components)
      if (x.role == c.role) rc = &x;
    if (!rc) {
      ctx.case_notes.push_back({"numbers: " + c.role, false, "the reference has no component with this role", ctx.tol_numbers(c.role), {}});
      continue;
    }
    bool stateful = false, positions = false, cached = false;
    for (const auto& x : ctx.manifest["components"])
      if (x["role"] == c.role && x["format"] == ctx.format)
        for (const auto& in : x["inputs"]) {
          stateful = stateful || in["name"] == "beam_idx";
          positions = positions || in["name"] == "position_ids";
          cached = cached || tasks::find_past(art.cache.states, in["name"].get<std::string>());
        }
    // A decoder step with no cache inputs holds its cache itself (openvino stateful, executorch's
    // mutable buffers).
    stateful = stateful || (ctx.causal && c.role == "decoder" && !cached);
    std::vector<std::string> skipped;
    const auto cases = shape_matrix(c.graph, c.role, art.cache, opt.full_shape_matrix, positions || !cached, &skipped);
    // Said, not failed: the contract's bounds leave no room for these shapes, so no runtime can be asked them.
    if (!skipped.empty())
      ctx.case_notes.push_back({"shape cases skipped: " + c.role, true, fmt::format("{}", fmt::join(skipped, "; ")),
                                "every case inside the contract's bounds", {}});
    for (const auto& sc : cases) {
      CaseRun r{&c, rc, sc, {}, {}, {}, std::nullopt, stateful};
      if (stateful)
        r.prefix = stateful_case(rc->graph, sc, art.cache, ctx.vocab, seed++, r.inputs);
      else
        // Against Transformers, a static cache's step keeps its padding in the past: a padded query
        // attends over every empty slot of the buffer (all masked), where Transformers' growing cache
        // has the prompt's few; no real position reads it (the greedy check runs padded prompts).
        r.inputs = make_inputs(ctx.facts.graphs_read_back ? c.graph : rc->graph, sc, art.cache, ctx.vocab, seed++,
                               ctx.on_transformers && art.cache.static_cache);
      ctx.runs.push_back(std::move(r));
    }
  }
  // $TMPDIR/hfx-verify-<pid>-XXXXXX, removed on return and on signals; one a SIGKILL left behind is
  // removed by the next verify (D23).
  const fs::path& scratch = ctx.scratch.emplace(fs::path{}, "hfx-verify-").path();
  // Prompts for the greedy check: batch 2 (left-padded) when the contract allows it (every causal
  // decoder serves a padded row: graphs with position_ids take the padding from it; the onnx ort
  // profile's GroupQueryAttention graphs roll padded rows themselves). Prompts and token count stay
  // inside the contract's bounds over every component (verify_cases.h).
  std::vector<const ir::Graph*> bounded;
  for (const auto& c : art.components) bounded.push_back(&c.graph);
  ctx.tokens = opt.tokens;
  ctx.prompts = greedy_prompts(step_bounds(bounded), art.cache, ctx.vocab, ctx.generates(), ctx.tokens);
  runtime::SamplingOptions so;
  so.max_new_tokens = ctx.tokens;
  so.eos_token_ids = art.eos_token_ids;
  so.pad_token_id = art.pad_token_id;
  const auto runs_start = Clock::now();  // the artifact's shape cases: an encoder's performance figure
  // The oracle's side: Transformers on the same step inputs and prompts, in one driver run.
  if (ctx.on_transformers) {
    TransformersOracleJob job;
    job.model_dir = ctx.source;
    job.hf_class = ref.summary().hf_class;
    job.layers = ctx.causal ? art.num_layers : 0;
    for (const auto& r : ctx.runs) job.runs.push_back(r.inputs);
    job.generate = ctx.generates();
    job.prompts = ctx.prompts;
    job.max_new_tokens = ctx.tokens;
    job.eos_token_ids = art.eos_token_ids;
    job.pad_token_id = art.pad_token_id;
    Progress progress = Progress::steps("verify: Transformers on the checkpoint", 1, "driver runs");
    auto result = run_transformers_oracle(ctx.oracle_python, job, scratch);
    progress.advance(1, 0);
    progress.finish();
    for (size_t i = 0; i < ctx.runs.size(); ++i) ctx.runs[i].expected = std::move(result.outputs[i]);
    ctx.expected_tokens = std::move(result.tokens);
  }
  // The artifact's side: the runtime's session runs the same cases and prompts.
  SessionWork work;
  for (const auto& r : ctx.runs) work.cases.push_back({r.comp, r.inputs, r.prefix, r.sc.positions()});
  work.generate = ctx.generates();
  work.prompts = ctx.prompts;
  work.sampling = so;
  work.scratch = scratch;
  ctx.artifact = ctx.session->run(work);
  for (size_t i = 0; i < ctx.runs.size(); ++i) ctx.runs[i].actual = std::move(ctx.artifact.outputs.at(i));
  if (!ctx.on_transformers) start_from_held_state(ctx);
  ctx.runs_s = seconds_since(runs_start);
  // The reference's side last: its greedy rows are teacher-forced on the artifact's tokens, and run
  // with its shape cases in one pass.
  if (!ctx.on_transformers) run_reference(ctx, so);
  if (hashed.valid()) {
    auto [mismatches, source] = hashed.get();
    for (auto& p : mismatches) ctx.checked.problems.push_back(std::move(p));
    ctx.source_problem = std::move(source);
  }
}

VerifyReport verify_export(const fs::path& out, const VerifyOptions& opt) {
  VerifyContext ctx(out, opt);
  build_verify_context(ctx);
  VerifyReport rep;
  rep.dir = out;
  rep.runtime = opt.runtime;
  rep.oracle = ctx.on_transformers ? transformers_oracle_name(ctx.oracle_python) : "hfx's reference executor";
  for (const Check& check : verify_checks())
    for (auto& row : check.run(ctx)) rep.checks.push_back(std::move(row));
  return rep;
}

}  // namespace hfx::pipeline
