#include "pipeline/verify_session.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <set>

#include "core/error.h"
#include "core/memory.h"
#include "core/progress.h"
#include "pipeline/backend.h"
#include "pipeline/manifest.h"
#include "pipeline/verify.h"
#include "pipeline/verify_cases.h"
#include "runtime/seq2seq_generate.h"

namespace fs = std::filesystem;

namespace hfx::pipeline {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The backend's placement of every component, merged: op (or compiled layer) -> where / in what
// precision -> count.
Backend::Placement merged_placement(const Backend& backend, const Artifact& art, const std::string& runtime) {
  Backend::Placement all;
  for (const auto& comp : art.components)
    for (const auto& [op, where] : backend.placement(comp, runtime))
      for (const auto& [w, n] : where) all[op][w] += n;
  return all;
}

// Greedy tokens from a first and a next step runner, with progress; sets `generate_s`.
std::vector<std::vector<int64_t>> timed_generate(runtime::StepRunner& first, runtime::StepRunner* next,
                                                 const Artifact& art, const SessionWork& w, const std::string& runtime,
                                                 double& generate_s) {
  const int64_t greedy_total = w.sampling.max_new_tokens * int64_t(w.prompts.size());
  const auto t0 = Clock::now();
  Progress progress = Progress::steps("verify: greedy, artifact on " + runtime, greedy_total, "tokens");
  auto tokens = runtime::generate(first, next ? *next : first, art.cache, w.prompts, w.sampling,
                                  [&](size_t, int64_t) { progress.advance(1, 0); });
  progress.finish();
  generate_s = seconds_since(t0);
  return tokens;
}

// The dtype of a step's input_ids: from its graph when read back, else the manifest's entry.
DType art_ids_dtype(const Artifact& art, const ArtifactComponent& step) {
  if (!step.graph.inputs().empty()) return runtime::input_ids_dtype(step.graph);
  for (const auto& x : art.manifest["components"])
    if (x["role"] == step.role)
      for (const auto& in : x["inputs"])
        if (in["name"] == "input_ids" && in["dtype"] == "i32") return DType::I32;
  return DType::I64;
}

// An encoder-decoder's greedy tokens, its three graphs run by `runner_for`.
std::vector<std::vector<int64_t>> timed_generate_seq2seq(
    const std::function<std::unique_ptr<runtime::StepRunner>(const ArtifactComponent&)>& runner_for, const Artifact& art,
    const SessionWork& w, const std::string& runtime, double& generate_s) {
  auto encoder = runner_for(art.component("encoder"));
  const Artifact::DecoderSteps steps = art.decoder_steps();  // no first step in genai's layout
  auto first = steps.first ? runner_for(*steps.first) : nullptr;
  auto next = steps.next == steps.first ? nullptr : runner_for(*steps.next);  // one runner holds the state
  const int64_t greedy_total = w.sampling.max_new_tokens * int64_t(w.prompts.size());
  const auto t0 = Clock::now();
  Progress progress = Progress::steps("verify: greedy, artifact on " + runtime, greedy_total, "tokens");
  auto tokens = runtime::generate_seq2seq(
      {*encoder, first.get(), next ? *next : *first, art_ids_dtype(art, *steps.next)}, art.cache,
      runtime::prompt_sources(w.prompts, w.sampling.pad_token_id, art.speech),
      {*art.decoder_start_token_id}, w.sampling, [&](size_t, int64_t) { progress.advance(1, 0); });
  progress.finish();
  generate_s = seconds_since(t0);
  return tokens;
}

// The reference executor's step runner whose first run (the greedy prompt) takes the shape cases of
// the same graph along: one lockstep pass (Executor::run_many) reads each weight once for the prompt
// and the cases, which otherwise cost a pass of their own (in the export's check, one pass over the
// artifact's weights in three: 2.3 GB of f32 on the Qwen3-0.6B shape). Later runs are single.
class CasesRidingRunner final : public runtime::StepRunner {
 public:
  CasesRidingRunner(const ir::Graph& g, runtime::ExecOptions options, std::vector<std::map<std::string, Tensor>> cases)
      : exec_(g, std::move(options)), cases_(std::move(cases)) {
    for (auto id : g.inputs()) names_.push_back(g.value(id).name);
  }
  std::vector<std::string> input_names() const override { return names_; }
  std::map<std::string, Tensor> run(const std::map<std::string, Tensor>& inputs) override {
    if (ridden_) return exec_.run(inputs);
    ridden_ = true;
    std::vector<const std::map<std::string, Tensor>*> group{&inputs};
    for (const auto& c : cases_) group.push_back(&c);
    Progress progress = Progress::steps("verify: artifact on the reference executor", int64_t(cases_.size()),
                                        "shape cases (with the greedy prompt)");
    auto outs = exec_.run_many(group);
    progress.advance(int64_t(cases_.size()), 0);
    progress.finish();
    case_outputs_.assign(std::make_move_iterator(outs.begin() + 1), std::make_move_iterator(outs.end()));
    return std::move(outs.front());
  }
  bool ridden() const { return ridden_; }
  std::vector<std::map<std::string, Tensor>> take_case_outputs() { return std::move(case_outputs_); }

 private:
  runtime::Executor exec_;
  std::vector<std::string> names_;
  std::vector<std::map<std::string, Tensor>> cases_, case_outputs_;
  bool ridden_ = false;
};

// hfx's reference executor over the artifact's graphs read back.
class ExecutorSession final : public VerifySession {
 public:
  ExecutorSession(const Backend& backend, const SessionContext& ctx) : backend_(backend), ctx_(ctx) {}

  RuntimeFacts facts() const override {
    RuntimeFacts f;
    f.graphs_read_back = true;
    f.exact_dims = true;
    return f;
  }

  SessionResult run(const SessionWork& w) override {
    const Artifact& art = ctx_.artifact;
    const RunSizes sizes = artifact_run_sizes(art, ctx_.options.tokens);
    SessionResult r;
    // A decoder-only artifact's greedy steps, and whether its shape cases can ride along with the first
    // (all of them on the first step's graph, within one lockstep group with the prompt).
    GreedySteps steps;
    bool ride = false;
    if (w.generate && !art.seq2seq()) {
      std::vector<std::pair<std::string, const ir::Graph*>> by_role;
      for (const auto& c : art.components) by_role.emplace_back(c.role, &c.graph);
      steps = greedy_steps(by_role, "the artifact", art.dir);
      size_t longest = 0;
      for (const auto& p : w.prompts) longest = std::max(longest, p.size());
      std::vector<int64_t> positions = {int64_t(w.prompts.size() * longest)};
      ride = !w.cases.empty();
      for (const auto& c : w.cases) {
        ride = ride && &c.component->graph == steps.first;
        positions.push_back(c.positions);
      }
      ride = ride && lockstep_groups(positions).size() == 1;
    }
    if (!ride) {
      // One executor per component; a component's consecutive cases run in lockstep groups (each
      // weight read once per group).
      std::map<const ArtifactComponent*, std::unique_ptr<runtime::Executor>> execs;
      Progress progress = Progress::steps("verify: artifact on the reference executor", int64_t(w.cases.size()), "shape cases");
      for (size_t begin = 0; begin < w.cases.size();) {
        const ArtifactComponent* comp = w.cases[begin].component;
        size_t end = begin;
        std::vector<int64_t> positions;
        for (; end < w.cases.size() && w.cases[end].component == comp; ++end) positions.push_back(w.cases[end].positions);
        auto& e = execs[comp];
        if (!e) e = std::make_unique<runtime::Executor>(comp->graph, executor_options(comp->graph, ctx_.options, sizes));
        for (const auto& [from, to] : lockstep_groups(positions)) {
          std::vector<std::map<std::string, Tensor>> inputs;
          for (size_t i = begin + from; i < begin + to; ++i) inputs.push_back(own_inputs(comp->graph, w.cases[i].inputs));
          std::vector<const std::map<std::string, Tensor>*> group;
          for (const auto& in : inputs) group.push_back(&in);
          for (auto& out : e->run_many(group)) r.outputs.push_back(std::move(out));
          progress.advance(int64_t(to - from), 0);
        }
        begin = end;
      }
      progress.finish();
    }
    if (w.generate && art.seq2seq()) {
      r.tokens = timed_generate_seq2seq(
          [&](const ArtifactComponent& c) {
            return runtime::make_executor_runner(c.graph, executor_options(c.graph, ctx_.options, sizes));
          },
          art, w, ctx_.runtime, r.generate_s);
    } else if (w.generate) {
      std::unique_ptr<runtime::StepRunner> first;
      CasesRidingRunner* riding = nullptr;
      if (ride) {
        std::vector<std::map<std::string, Tensor>> cases;
        for (const auto& c : w.cases) cases.push_back(own_inputs(*steps.first, c.inputs));
        auto runner = std::make_unique<CasesRidingRunner>(*steps.first, executor_options(*steps.first, ctx_.options, sizes),
                                                          std::move(cases));
        riding = runner.get();
        first = std::move(runner);
      } else {
        first = runtime::make_executor_runner(*steps.first, executor_options(*steps.first, ctx_.options, sizes));
      }
      auto next = steps.next ? runtime::make_executor_runner(*steps.next, executor_options(*steps.next, ctx_.options, sizes))
                             : nullptr;
      r.tokens = timed_generate(*first, next.get(), art, w, ctx_.runtime, r.generate_s);
      HFX_CHECK(!riding || riding->ridden(), "verify: the greedy loop never ran its first step");
      if (riding) r.outputs = riding->take_case_outputs();
    }
    r.load_s = ctx_.open_s;
    std::vector<std::string> parts;
    const auto all = merged_placement(backend_, art, ctx_.runtime);
    for (const auto& [op, where] : all)
      for (const auto& [place, n] : where) parts.push_back(fmt::format("{} x{}", op, n));
    r.placement.detail = fmt::format("reference executor kernels: {}", fmt::join(parts, ", "));
    for (const auto& [op, where] : all) r.placement.measured[op] = where;
    return r;
  }

 private:
  const Backend& backend_;
  SessionContext ctx_;
};

// The format's own step runners over its files, in this process.
class StepSession final : public VerifySession {
 public:
  StepSession(const Backend& backend, const SessionContext& ctx) : backend_(backend), ctx_(ctx) {}

  RuntimeFacts facts() const override { return {}; }

  SessionResult run(const SessionWork& w) override {
    const Artifact& art = ctx_.artifact;
    SessionResult r;
    {
      std::map<const ArtifactComponent*, std::unique_ptr<runtime::StepRunner>> runners;
      Progress progress = Progress::steps("verify: artifact on " + ctx_.runtime, int64_t(w.cases.size()), "shape cases");
      for (const auto& c : w.cases) {
        auto& runner = runners[c.component];
        if (!runner) {  // the runtime's own load (compile) time
          const auto t0 = Clock::now();
          runner = backend_.make_runner(*c.component, ctx_.runtime);
          r.load_s += seconds_since(t0);
        }
        runner->start_over();  // each case from an empty state (a stateful runner keeps the last case's)
        if (c.prefix) runner->run(*c.prefix);
        r.held.push_back(c.prefix ? runner->held_state() : std::map<std::string, Tensor>{});
        r.outputs.push_back(runner->run(c.inputs));
        progress.advance(1, 0);
      }
      progress.finish();
    }
    if (w.generate && art.seq2seq()) {
      r.tokens = timed_generate_seq2seq(
          [&](const ArtifactComponent& c) { return backend_.make_runner(c, ctx_.runtime); }, art, w, ctx_.runtime,
          r.generate_s);
    } else if (w.generate) {
      const bool split = art.components.size() > 1;
      auto first = backend_.make_runner(art.component(split ? "prefill" : ""), ctx_.runtime);
      auto next = split ? backend_.make_runner(art.component("decode"), ctx_.runtime) : nullptr;
      r.tokens = timed_generate(*first, next.get(), art, w, ctx_.runtime, r.generate_s);
    }
    std::vector<std::string> parts, reduced;
    const auto all = merged_placement(backend_, art, ctx_.runtime);
    // Layers that move or hold values without arithmetic: a bf16 table gathered in bf16 (an embedding,
    // T5's position bias) is the stored weights, not reduced-precision inference.
    static const std::set<std::string> moves = {"Const", "Gather", "Reshape", "Transpose", "Concatenation", "Input",
                                                "Output", "ShapeOf", "Convert"};
    for (const auto& [op, where] : all)
      for (const auto& [place, n] : where) {
        parts.push_back(fmt::format("{} x{} in {}", op, n, place));
        if ((place == "bf16" || place == "f16") && !moves.count(op)) reduced.push_back(op);
      }
    // A place named bf16 or f16 is a layer the runtime computes in reduced precision (OpenVINO names
    // each compiled layer's runtime precision, and is asked for f32 inference): it breaks the gate.
    r.placement.gate = "every compiled layer runs in f32 or an integer type (no bf16/f16 inference)";
    r.placement.passed = reduced.empty() && !all.empty();
    r.placement.detail = fmt::format("{} on CPU: {}", ctx_.runtime, fmt::join(parts, ", "));
    for (const auto& [op, where] : all) r.placement.measured[op] = where;
    return r;
  }

 private:
  const Backend& backend_;
  SessionContext ctx_;
};

}  // namespace

RunSizes artifact_run_sizes(const Artifact& art, int64_t tokens) {
  return {std::max<int64_t>(4, bound(art.components[0].graph, "batch_size", false).value_or(1)),
          std::max({int64_t(80), tokens + 16, art.cache.static_cache ? art.cache.max_cache_len : 0})};
}

// Per value of `g`: whether it is a table that only row lookups (Gather on axis 0, Embedding) read.
static std::vector<bool> looked_up_only(const ir::Graph& g) {
  std::vector<bool> only(g.num_values(), true);
  for (const auto& n : g.nodes()) {
    const bool lookup = n.op == "Embedding" || (n.op == "Gather" && n.attr_int("axis", 0) == 0);
    for (size_t j = 0; j < n.inputs.size(); ++j)
      if (n.inputs[j] != ir::kNone && !(lookup && j == 0)) only[size_t(n.inputs[j])] = false;
  }
  for (auto id : g.outputs()) only[size_t(id)] = false;
  return only;
}

int64_t held_weight_bytes(const ir::Graph& g) {
  const std::vector<bool> lookup = looked_up_only(g);
  int64_t bytes = 0;
  for (auto id : g.weights()) {
    const ir::WeightRef& w = *g.weight(id);
    // Packed quantized bytes are kept as they are (runtime/executor.cc), other weights in f32.
    if (!w.stored_matrix()) bytes += g.value(id).dtype == DType::U8 ? int64_t(w.nbytes()) : 4 * fixed_numel(g.value(id).shape).value_or(0);
    else if (!lookup[size_t(id)]) bytes += int64_t(w.source_bytes());
  }
  return bytes;
}

int64_t looked_up_weight_bytes(const ir::Graph& g) {
  const std::vector<bool> lookup = looked_up_only(g);
  int64_t bytes = 0;
  for (auto id : g.weights())
    if (lookup[size_t(id)]) bytes += int64_t(g.weight(id)->nbytes());
  return bytes;
}

ReferenceSeq2SeqRunners reference_seq2seq_runners(const std::vector<tasks::Component>& components,
                                                  const VerifyOptions& opt) {
  auto find = [&](const std::string& role) -> const tasks::Component* {
    for (const auto& c : components)
      if (c.role == role) return &c;
    return nullptr;
  };
  auto runner = [&](const std::string& role) {
    if (const tasks::Component* c = find(role)) return runtime::make_executor_runner(c->graph, executor_options(c->graph, opt));
    bad_input("the reference has no {} component", role);
  };
  ReferenceSeq2SeqRunners r;
  r.encoder = runner("encoder");
  r.next = runner("decoder_with_past");
  if (find("decoder")) r.first = runner("decoder");
  r.ids = runtime::input_ids_dtype(find("decoder_with_past")->graph);
  return r;
}

runtime::ExecOptions executor_options(const ir::Graph& g, const VerifyOptions& opt, RunSizes sizes) {
  runtime::ExecOptions o;
  if (sizes.batch > 0) o.max_tensor_bytes = runtime::contract_tensor_budget(g, sizes.batch, sizes.length);
  if (opt.reference_weights != "auto" && opt.reference_weights != "hold" && opt.reference_weights != "stream")
    bad_input("reference weights `{}`: expected auto, hold or stream", opt.reference_weights);
  if (opt.reference_weights == "auto") {
    o.cache_weights = held_weight_bytes(g) <= opt.held_weight_limit;
    o.kept_packed_bytes = opt.held_weight_limit;  // streamed: its quantized weights' pages stay mapped, to the limit
  } else {
    o.cache_weights = opt.reference_weights == "hold";
  }
  return o;
}

GreedySteps greedy_steps(const std::vector<std::pair<std::string, const ir::Graph*>>& by_role, const std::string& whose,
                         const fs::path& out) {
  auto graph = [&](const std::string& role) -> const ir::Graph* {
    for (const auto& [r, g] : by_role)
      if (r == role) return g;
    return nullptr;
  };
  GreedySteps s{graph("prefill"), graph("decode")};
  if (!s.first) s.first = graph("decoder");
  // A hand-edited manifest may relabel every component: greedy decoding has no first step then.
  if (!s.first) {
    std::vector<std::string> roles;
    for (const auto& [r, g] : by_role) roles.push_back(r);
    bad_input("{}: {} has no decoder or prefill component for the greedy check; roles: {}", (out / kManifestName).string(),
              whose, fmt::join(roles, ", "));
  }
  return s;
}

std::unique_ptr<VerifySession> make_executor_session(const Backend& backend, const SessionContext& ctx) {
  return std::make_unique<ExecutorSession>(backend, ctx);
}

std::unique_ptr<VerifySession> make_step_session(const Backend& backend, const SessionContext& ctx) {
  return std::make_unique<StepSession>(backend, ctx);
}

std::unique_ptr<VerifySession> Backend::verify_session(const SessionContext& ctx) const {
  return make_step_session(*this, ctx);
}

}  // namespace hfx::pipeline
