#include "pipeline/verify.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>

#include "core/error.h"
#include "core/memory.h"
#include "core/files.h"
#include "core/progress.h"
#include "io/safetensors_write.h"
#include "ir/rewrite.h"
#include "passes/precision.h"
#include "pipeline/artifact.h"
#include "pipeline/backend.h"
#include "pipeline/export.h"
#include "pipeline/manifest.h"
#include "pipeline/oracle_transformers.h"
#include "pipeline/report_verdict.h"
#include "pipeline/runtime_probe.h"
#include "pipeline/verify_cases.h"
#include "runtime/executor.h"
#include "runtime/generate.h"
#include "runtime/tested_runtimes.h"

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace hfx::pipeline {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

int64_t peak_rss_bytes() {
  struct rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return int64_t(ru.ru_maxrss) * 1024;
}

struct Diff {
  double max_abs = 0, mean_abs = 0;
  int64_t mismatched = 0, total = 0;
  std::string worst;  // output with the largest difference
};

void accumulate(Diff& d, const std::string& name, const Tensor& a, const Tensor& b, double atol) {
  if (a.shape() != b.shape()) {
    d.mismatched += std::max<int64_t>(1, a.numel());
    d.worst = name + " (shape differs)";
    d.max_abs = INFINITY;
    return;
  }
  Tensor fa = a.cast(DType::F32), fb = b.cast(DType::F32);
  double sum = d.mean_abs * double(d.total);
  for (int64_t i = 0; i < fa.numel(); ++i) {
    const double diff = std::fabs(double(fa.as<float>()[i]) - double(fb.as<float>()[i]));
    const double e = std::isnan(diff) ? INFINITY : diff;
    sum += std::isfinite(e) ? e : 0;
    if (e > atol) ++d.mismatched;
    if (e > d.max_abs) {
      d.max_abs = e;
      d.worst = name;
    }
  }
  d.total += fa.numel();
  d.mean_abs = d.total ? sum / double(d.total) : 0;
}

// The sizes verify runs a graph at, for the executor's per-tensor budget (ExecOptions::max_tensor_bytes):
// batch 0 means no budget (graphs hfx built itself from the checkpoint).
struct RunSizes {
  int64_t batch = 0, length = 0;
};

// How the reference executor runs `g` (VerifyOptions::reference_weights): held, a reference graph
// and an artifact graph together are twice the model in f32 plus the mapped pages read to fill them.
runtime::ExecOptions executor_options(const ir::Graph& g, const VerifyOptions& opt, RunSizes sizes = {}) {
  runtime::ExecOptions o;
  if (sizes.batch > 0) o.max_tensor_bytes = runtime::contract_tensor_budget(g, sizes.batch, sizes.length);
  if (opt.reference_weights != "auto" && opt.reference_weights != "hold" && opt.reference_weights != "stream")
    bad_input("reference weights `{}`: expected auto, hold or stream", opt.reference_weights);
  if (opt.reference_weights == "auto") {
    int64_t f32_bytes = 0;
    for (auto id : g.weights()) f32_bytes += 4 * fixed_numel(g.value(id).shape).value_or(0);
    static const int64_t budget = available_memory_bytes().value_or(int64_t(8) << 30) / 2;
    o.cache_weights = 4 * f32_bytes <= budget;
  } else {
    o.cache_weights = opt.reference_weights == "hold";
  }
  return o;
}

// Re-runs one failing case with every layer's output kept, and returns each layer's output difference
// (empty when the graphs do not expose them), for diagnose_divergence.
std::vector<LayerDiff> layer_diffs(const ir::Graph& ref, const ir::Graph& art, const std::map<std::string, Tensor>& in,
                                   int64_t layers, double atol) {
  std::vector<std::string> keep;
  for (int64_t i = 0; i < layers; ++i) keep.push_back(fmt::format("/model/layers.{}/output", i));
  runtime::ExecOptions o;
  o.cache_weights = false;  // one run each: nothing worth keeping
  o.keep_values = keep;
  auto r = runtime::Executor(ref, o).run(in);
  auto a = runtime::Executor(art, o).run(own_inputs(art, in));
  std::vector<LayerDiff> out;
  for (const auto& name : keep) {
    if (!r.count(name) || !a.count(name)) return {};
    Diff d;
    accumulate(d, name, a.at(name), r.at(name), atol);
    out.push_back({d.max_abs, d.mean_abs});
  }
  return out;
}

// `g` with MatMulNBits accuracy_level 4 computed on f32 activations (the attribute dropped). Verifying
// on the reference runtime, the reference and the artifact's graphs differ in summation order only
// (ONNX Runtime's fused ops against the checkpoint's graph), so rounding their activations to int8
// would turn near-ties into int8 steps; in f32 both compute the weights' own numbers, gated at fp32's
// tolerance. Only a run against ONNX Runtime, whose kernel does round, keeps the rounding.
ir::Graph with_f32_activations(const ir::Graph& g) {
  const bool any = std::any_of(g.nodes().begin(), g.nodes().end(), [](const ir::Node& n) {
    return n.op == "MatMulNBits" && n.attr_int("accuracy_level", 0) == 4;
  });
  if (!any) return g;
  ir::Rewriter r(g);
  for (const auto& node : g.nodes()) {
    ir::Node n = r.mapped(node);
    if (n.op == "MatMulNBits") n.attrs.erase("accuracy_level");
    r.copy(node, n);
  }
  return r.finish();
}

// The logits budget of MatMulNBits accuracy_level 4 on ONNX Runtime (see atol_for in verify_export):
// measured worst max abs 3.3e-6 on the tiny test models, 0.066 (keys behind Qwen3's k_norm; logits 0.024)
// on a 13 M-parameter bf16 qwen3 and 0.059 on a 56 M-parameter bf16 llama; about 4x that, as f16's.
constexpr double kInt8ActivationAtol = 0.25;

// Where the artifact's greedy tokens first part from the reference's in a row, and by how much the
// reference prefers its own token there (its best logit minus its logit of the artifact's token).
struct Parting {
  size_t row;
  size_t step;
  double margin;
};

// Re-runs the reference (`first`: the decoder or prefill graph) at batch 1 on each parting row's prompt
// plus the tokens both agreed on, and reads the scores at the parting step.
std::vector<Parting> near_tie_partings(const ir::Graph& first, const runtime::CacheSpec& cache, int64_t vocab,
                                       const std::vector<std::vector<int64_t>>& prompts,
                                       const std::vector<std::vector<int64_t>>& expected,
                                       const std::vector<std::vector<int64_t>>& actual) {
  std::vector<Parting> out;
  for (size_t b = 0; b < expected.size(); ++b) {
    const auto& e = expected[b];
    const auto a = b < actual.size() ? actual[b] : std::vector<int64_t>{};
    size_t i = 0;
    while (i < e.size() && i < a.size() && e[i] == a[i]) ++i;
    if (i == e.size() && i == a.size()) continue;
    if (i >= e.size() || i >= a.size() || a[i] < 0 || a[i] >= vocab) {  // one stopped early: not a near-tie
      out.push_back({b, i, INFINITY});
      continue;
    }
    std::vector<int64_t> ids = prompts[b];
    ids.insert(ids.end(), e.begin(), e.begin() + long(i));
    const int64_t T = int64_t(ids.size());
    auto in = make_inputs(first, {"parting", 1, T, 0}, cache, vocab, 0);  // one unpadded row, empty cache
    in["input_ids"] = Tensor::from_vector<int64_t>(DType::I64, {1, T}, ids);
    const Tensor logits = runtime::Executor(first).run(in).at("logits");
    const float* last = logits.as<float>() + (T - 1) * vocab;
    out.push_back({b, i, double(*std::max_element(last, last + vocab)) - double(last[a[i]])});
  }
  return out;
}

std::string python_interpreter(const VerifyOptions& o) { return driver_python(o.python); }

// "over tolerance: logits, present.0.key" from each output's largest difference.
std::string over_tolerance(const std::vector<OutputDiff>& outputs, double atol) {
  std::vector<std::string> names;
  for (const auto& o : outputs)
    if (!(o.max_abs <= atol)) names.push_back(o.name);
  return names.empty() ? "no output is over tolerance" : fmt::format("over tolerance: {}", fmt::join(names, ", "));
}

std::string sig_str(const std::vector<std::pair<std::string, std::string>>& sig) {
  std::string s;
  for (const auto& [n, t] : sig) s += n + ":" + t + " ";
  return s;
}

std::vector<std::pair<std::string, std::string>> manifest_sig(const nlohmann::json& list) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& io : list) {
    std::vector<std::string> dims;
    // A dim is a symbol or a number, as a string ("8") or, in a hand-written manifest, an integer.
    for (const auto& d : io["shape"]) dims.push_back(d.is_string() ? d.get<std::string>() : d.dump());
    out.emplace_back(io["name"].get<std::string>(), fmt::format("{}[{}]", io["dtype"].get<std::string>(), fmt::join(dims, ",")));
  }
  return out;
}

// A file's ports against the manifest's: same names and dtypes in order, and per dimension the same
// number or symbol, or "?" in the file where the format keeps only "dynamic" (OpenVINO's shape
// inference may also leave a dimension the contract fixes dynamic; the numbers check runs real shapes).
bool sig_matches(const std::vector<std::pair<std::string, std::string>>& file,
                 const std::vector<std::pair<std::string, std::string>>& manifest) {
  if (file.size() != manifest.size()) return false;
  auto split = [](const std::string& sig) {
    const size_t open = sig.find('[');
    std::vector<std::string> parts = {sig.substr(0, open)};
    std::string dims = open == std::string::npos ? "" : sig.substr(open + 1, sig.size() - open - 2);
    for (size_t start = 0; !dims.empty() && start <= dims.size();) {
      size_t comma = dims.find(',', start);
      if (comma == std::string::npos) comma = dims.size();
      parts.push_back(dims.substr(start, comma - start));
      start = comma + 1;
    }
    return parts;
  };
  for (size_t i = 0; i < file.size(); ++i) {
    if (file[i].first != manifest[i].first) return false;
    const auto f = split(file[i].second), m = split(manifest[i].second);
    if (f.size() != m.size() || f[0] != m[0]) return false;
    for (size_t d = 1; d < f.size(); ++d) {
      if (f[d] != m[d] && f[d] != "?") return false;
    }
  }
  return true;
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

// What is wrong with `name` from the manifest's source.files (sha256 `sha`), or "" when the model
// folder's file still hashes so. The names are the manifest's, which whoever shipped the export
// wrote: one that is not a regular file of the model folder (`../../etc/shadow`, `/dev/zero`, a link
// out of the folder) is refused before anything opens it, so verify is no oracle for other files.
std::string source_file_problem(const fs::path& source, const std::string& name, const nlohmann::json& sha) {
  const fs::path p = source / name;
  std::error_code ec;
  const fs::path rel(name);
  const bool plain = !name.empty() && !rel.is_absolute() && std::find(rel.begin(), rel.end(), "..") == rel.end();
  if (plain && !fs::exists(fs::symlink_status(p, ec))) return fmt::format("{} is missing", p.string());
  fs::path file;
  try {
    file = file_inside(source, name, "source file");
  } catch (const Error&) {
    return fmt::format("source.files lists `{}`, which is not a file of the model folder", name);
  }
  if (!sha.is_string()) return fmt::format("source.files[\"{}\"] is {}, not a sha256 string", name, sha.type_name());
  try {
    if (sha256_file(file) != sha.get<std::string>()) return fmt::format("{} changed since the export", name);
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

}  // namespace

VerifyReport verify_export(const fs::path& out, const VerifyOptions& opt) {
  // The format the runtime runs: onnx (reference executor over the graphs read back, or ONNX Runtime
  // through its python driver), or another backend's files through its step runner in this process.
  const Backend& backend = backend_for_runtime(opt.runtime);
  const std::string format = backend.info().name;
  const bool step_runtime = format != "onnx";
  VerifyReport rep;
  rep.dir = out;
  rep.runtime = opt.runtime;
  // The oracle is settled first: asked for and unable to run is an error before any work.
  if (!is_oracle_name(opt.oracle)) bad_input("--oracle {}: expected reference, transformers or auto", opt.oracle);
  const std::string oracle_python = python_interpreter(opt);
  const std::string oracle_missing = opt.oracle == "reference" ? "" : transformers_oracle_unavailable(oracle_python);
  if (opt.oracle == "transformers" && !oracle_missing.empty())
    unsupported("--oracle transformers cannot run: {}", oracle_missing);
  const bool on_transformers = opt.oracle != "reference" && oracle_missing.empty();
  rep.oracle = on_transformers ? transformers_oracle_name(oracle_python) : "hfx's reference executor";
  // A name for the reference side in check details: "the reference" or "Transformers".
  const std::string oracle_word = on_transformers ? "Transformers" : "the reference";
  const auto manifest_for_tol = read_manifest(out);
  std::optional<Recipe> parsed;
  try {  // a recipe that does not parse is reported below, where it is read again
    parsed = Recipe::from_json(manifest_for_tol, (out / kManifestName).string());
  } catch (const Error&) {
  }
  // Each component's gate follows its own precision (recipe "components" may override it).
  // MatMulNBits accuracy_level 4 run by ONNX Runtime: its CPU kernel rounds the activations to int8 and
  // the reference rounds them alike (runtime/kernels_quant.cc), but an activation that the two f32
  // summation orders put on either side of a rounding step (a near-tie; frequent with bf16 weights,
  // whose values sit on a coarse grid) rounds one int8 step apart, and that step travels on.
  auto int8_activations = [&](const std::string& role) {
    return opt.runtime == "onnxruntime" && parsed && parsed->precision_for(role).quant.enabled() &&
           parsed->precision_for(role).quant.accuracy_level == 4;
  };
  // f16 activations: the runtime's f16 kernels round their own way (XNNPACK's f16 FullyConnected, ONNX
  // Runtime's f16 MatMul), so the logits differ by up to the f16 budget and a greedy path may part at
  // a near-tie, as with int8 activations.
  auto f16_activations = [&](const std::string& role) {
    return parsed && parsed->precision_for(role).dtype == DType::F16 && !parsed->precision_for(role).quant.enabled();
  };
  auto atol_for = [&](const std::string& role) {
    if (opt.atol) return *opt.atol;
    const double t = parsed ? parsed->tolerance_for(role) : kF32Atol;
    return int8_activations(role) ? std::max(t, kInt8ActivationAtol) : t;
  };
  auto tol_numbers = [&](const std::string& role) {
    const std::string precision = parsed ? parsed->precision_for(role).str() : "f32";
    if (int8_activations(role) && !opt.atol)
      return fmt::format("max abs <= {:g}, no mismatching element (accuracy_level 4: ONNX Runtime and the reference round "
                         "activations to int8 alike; a near-tie rounds one step apart and travels on: measured up to 0.066 "
                         "on 13-56 M-parameter bf16 models, docs/verify.md)", atol_for(role));
    return precision == "f32"
               ? fmt::format("max abs <= {:g}, no mismatching element (fp32: only summation order differs)", atol_for(role))
               : fmt::format("max abs <= {:g}, no mismatching element (the reference runs the same precision, {})",
                             atol_for(role), precision);
  };
  auto add = [&](CheckResult c) { rep.checks.push_back(std::move(c)); };

  // 1. The artifact is what its manifest says.
  {
    auto r = check_export(out);
    add({"artifact checksums", r.problems.empty(),
         r.problems.empty() ? fmt::format("{} files match hfx.json", r.files_checked)
         : r.problems.size() == 1
             ? r.problems.front()
             : fmt::format("{} (and {} more problems: `hfx check {}` lists them)", r.problems.front(), r.problems.size() - 1,
                           out.string()),
         "sha256 equal", {}});
  }
  const auto manifest = read_manifest(out);
  const fs::path source = opt.model_dir.empty() ? manifest_source_folder(manifest, out) : opt.model_dir;
  if (std::error_code ec; opt.model_dir.empty() && !fs::is_directory(source, ec))
    bad_input("{}: the source checkpoint {} is not there (moved, or another machine): pass --model DIR where it is now",
              (out / kManifestName).string(), source.string());
  if (opt.oracle == "auto" && !on_transformers)
    add({"oracle", true, fmt::format("Transformers not run: {}; compared with hfx's reference executor", oracle_missing),
         "--oracle auto: Transformers where it runs", {}});
  {
    std::string problem;
    for (const auto& [name, sha] : manifest["source"]["files"].items()) {
      problem = source_file_problem(source, name, sha);
      if (!problem.empty()) break;
    }
    add({"source unchanged", problem.empty(), problem.empty() ? "config and weights hash as at export" : problem, "sha256 equal", {}});
  }

  // 2. The reference (eager graphs from the checkpoint) and the artifact read back from its files.
  const auto t_open = Clock::now();
  Artifact art = open_artifact(out, format);
  double open_s = seconds_since(t_open);
  // The artifact's graphs come from files anyone may have edited: they run under a per-tensor budget
  // from their contract at the largest sizes verify uses (shape cases up to batch 4, or the contract's
  // minimum, and 64 positions or the static cache; greedy prompts of 7 plus the new tokens).
  const RunSizes art_sizes{std::max<int64_t>(4, bound(art.components[0].graph, "batch_size", false).value_or(1)),
                           std::max({int64_t(80), opt.tokens + 16, art.cache.static_cache ? art.cache.max_cache_len : 0})};
  Recipe recipe = Recipe::from_json(manifest, (out / kManifestName).string());
  LoadedModel ref = load_model(source, recipe.task, recipe.task_name);
  // The reference runs the export's precision (same rounded and quantized weights): this checks the
  // export, and docs/quantization.md measures the precision itself against fp32.
  for (auto& c : ref.components)
    c.graph = passes::apply_precision(c.graph, recipe.precision_for(c.role),
                                      backend.precision_target(recipe, c.role));
  if (opt.runtime != "onnxruntime") {
    for (auto& c : ref.components) c.graph = with_f32_activations(c.graph);
    for (auto& c : art.components) c.graph = with_f32_activations(c.graph);
  }
  const int64_t vocab = ref.summary().vocab_size;
  const bool causal = ref.task->generative();

  // 3. I/O signature: files vs manifest vs what the reference builds.
  for (const auto& c : art.components) {
    const nlohmann::json* mc = nullptr;
    for (const auto& x : manifest["components"])
      if (x["role"] == c.role && x["format"] == format) mc = &x;
    const auto sig = backend.signature(c);
    const auto& file_in = sig.inputs;
    bool ok = mc && sig_matches(file_in, manifest_sig((*mc)["inputs"])) && sig_matches(sig.outputs, manifest_sig((*mc)["outputs"]));
    std::string detail = ok ? fmt::format("{} inputs, {} outputs as the manifest declares", file_in.size(), sig.outputs.size())
                            : fmt::format("file: {}{}; manifest differs", sig_str(file_in), sig_str(sig.outputs));
    add({"I/O signature: " + c.role, ok, detail, step_runtime ? "names and dtypes identical, dims equal or dynamic in the file" : "names, dtypes and dims identical", {}});
  }

  // 4. Numbers per component over the shape matrix.
  struct Run {
    const ArtifactComponent* comp;
    const tasks::Component* refc;
    ShapeCase sc;
    std::map<std::string, Tensor> inputs, expected, actual;
    // A stateful artifact (openvino) holds its cache: it is filled by running `prefix` first, and its
    // state outputs are not compared (the next step's logits check them).
    std::optional<std::map<std::string, Tensor>> prefix;
    bool stateful = false;
  };
  std::vector<Run> runs;
  uint64_t seed = 1;
  for (const auto& c : art.components) {
    const tasks::Component* rc = nullptr;
    for (const auto& x : ref.components)
      if (x.role == c.role) rc = &x;
    if (!rc) {
      add({"numbers: " + c.role, false, "the reference has no component with this role", tol_numbers(c.role), {}});
      continue;
    }
    bool stateful = false, positions = false, cached = false;
    for (const auto& x : manifest["components"])
      if (x["role"] == c.role && x["format"] == format)
        for (const auto& in : x["inputs"]) {
          stateful = stateful || in["name"] == "beam_idx";
          positions = positions || in["name"] == "position_ids";
          cached = cached || tasks::find_past(art.cache.states, in["name"].get<std::string>());
        }
    // A decoder step with no cache inputs holds its cache itself (openvino stateful, executorch's
    // mutable buffers).
    stateful = stateful || (causal && c.role == "decoder" && !cached);
    // One executor over the reference component for every shape (it converts the weights once).
    runtime::Executor expected(rc->graph, executor_options(rc->graph, opt));
    std::vector<std::string> skipped;
    const auto cases = shape_matrix(c.graph, c.role, art.cache, opt.full_shape_matrix, positions || !cached, &skipped);
    // Said, not failed: the contract's bounds leave no room for these shapes, so no runtime can be asked them.
    if (!skipped.empty())
      add({"shape cases skipped: " + c.role, true, fmt::format("{}", fmt::join(skipped, "; ")), "every case inside the contract's bounds", {}});
    Progress progress = Progress::steps("verify: checkpoint reference, " + c.role, int64_t(cases.size()), "shape cases");
    for (const auto& sc : cases) {
      Run r{&c, rc, sc, {}, {}, {}, std::nullopt, stateful};
      if (stateful)
        r.prefix = stateful_case(rc->graph, sc, art.cache, vocab, seed++, r.inputs);
      else
        // Against Transformers, a static cache's step keeps its padding in the past: a padded query
        // attends over every empty slot of the buffer (all masked), where Transformers' growing cache
        // has the prompt's few; no real position reads it (the greedy check runs padded prompts).
        r.inputs = make_inputs(step_runtime ? rc->graph : c.graph, sc, art.cache, vocab, seed++,
                               on_transformers && art.cache.static_cache);
      if (!on_transformers) r.expected = expected.run(r.inputs);
      runs.push_back(std::move(r));
      progress.advance(1, 0);
    }
    progress.finish();
  }
  // $TMPDIR/hfx-verify-<pid>-XXXXXX, removed on return and on signals; one a SIGKILL left behind is
  // removed by the next verify (D23).
  const ScratchDirectory scratch_dir({}, "hfx-verify-");
  const fs::path& scratch = scratch_dir.path();
  nlohmann::json ort_result;
  const auto runs_start = Clock::now();  // the artifact's shape cases: an encoder's performance figure
  // Prompts for the greedy check: batch 2 (left-padded) when the contract allows it (every causal
  // decoder serves a padded row: graphs with position_ids take the padding from it; the onnx ort
  // profile's GroupQueryAttention graphs roll padded rows themselves). Prompts and token count stay
  // inside the contract's bounds over every component (verify_cases.h).
  std::vector<const ir::Graph*> bounded;
  for (const auto& c : art.components) bounded.push_back(&c.graph);
  int64_t tokens = opt.tokens;
  const auto prompts = greedy_prompts(step_bounds(bounded), art.cache, vocab, causal, tokens);
  // The oracle's side: Transformers on the same step inputs and prompts, in one driver run.
  std::vector<std::vector<int64_t>> oracle_tokens;
  if (on_transformers) {
    TransformersOracleJob job;
    job.model_dir = source;
    job.hf_class = ref.summary().hf_class;
    job.layers = causal ? art.num_layers : 0;
    for (const auto& r : runs) job.runs.push_back(r.inputs);
    job.generate = causal;
    job.prompts = prompts;
    job.max_new_tokens = tokens;
    job.eos_token_ids = art.eos_token_ids;
    job.pad_token_id = art.pad_token_id;
    Progress progress = Progress::steps("verify: Transformers on the checkpoint", 1, "driver runs");
    auto result = run_transformers_oracle(oracle_python, job, scratch);
    progress.advance(1, 0);
    progress.finish();
    for (size_t i = 0; i < runs.size(); ++i) runs[i].expected = std::move(result.outputs[i]);
    oracle_tokens = std::move(result.tokens);
  }
  if (opt.runtime == "onnxruntime") {
    nlohmann::json job;
    job["runs"] = nlohmann::json::array();
    for (size_t i = 0; i < runs.size(); ++i) {
      const auto in = scratch / fmt::format("in{}.safetensors", i), o = scratch / fmt::format("out{}.safetensors", i);
      io::write_safetensors(in, own_inputs(runs[i].comp->graph, runs[i].inputs));
      job["runs"].push_back({{"model", runs[i].comp->file.string()}, {"inputs", in.string()}, {"outputs", o.string()}});
    }
    if (!runs.empty()) job["profile"] = {{"model", runs[0].comp->file.string()}, {"inputs", (scratch / "in0.safetensors").string()}};
    if (causal) job["generate"] = {{"export", fs::absolute(out).string()}, {"prompts", prompts}, {"max_new_tokens", tokens}};
    write_text_file(scratch / "job.json", job.dump());
    ort_result = run_ort_driver(python_interpreter(opt), scratch / "job.json", scratch / "result.json");
    runtime::warn_if_untested("onnxruntime", ort_result.value("ort_version", "?"), runtime::kTestedOnnxRuntime);
    for (size_t i = 0; i < runs.size(); ++i) runs[i].actual = io::load_safetensors(scratch / fmt::format("out{}.safetensors", i));
  } else if (step_runtime) {
    open_s = 0;  // the runtime's own load (compile) time, not the manifest read
    std::map<const ArtifactComponent*, std::unique_ptr<runtime::StepRunner>> runners;
    Progress progress = Progress::steps("verify: artifact on " + opt.runtime, int64_t(runs.size()), "shape cases");
    for (auto& r : runs) {
      auto& runner = runners[r.comp];
      if (!runner) {
        const auto t0 = Clock::now();
        runner = backend.make_runner(*r.comp, opt.runtime);
        open_s += seconds_since(t0);
      }
      if (r.prefix) runner->run(*r.prefix);
      r.actual = runner->run(r.inputs);
      progress.advance(1, 0);
    }
    progress.finish();
  } else {
    std::map<const ArtifactComponent*, std::unique_ptr<runtime::Executor>> execs;
    Progress progress = Progress::steps("verify: artifact on the reference executor", int64_t(runs.size()), "shape cases");
    for (auto& r : runs) {
      auto& e = execs[r.comp];
      if (!e) e = std::make_unique<runtime::Executor>(r.comp->graph, executor_options(r.comp->graph, opt, art_sizes));
      r.actual = e->run(own_inputs(r.comp->graph, r.inputs));
      progress.advance(1, 0);
    }
    progress.finish();
  }
  const double runs_s = seconds_since(runs_start);
  for (auto& r : runs) {
    Diff d;
    std::vector<OutputDiff> per_output;  // for the diagnosis of a failing case
    json outputs = json::object();       // per output: its largest difference and elements over tolerance
    for (const auto& [name, t] : r.expected) {
      if (r.stateful && tasks::find_present(art.cache.states, name)) continue;
      if (!r.actual.count(name)) {
        d.mismatched += 1;
        d.worst = name + " (missing)";
        per_output.push_back({name, INFINITY});
        continue;
      }
      Diff one;
      accumulate(one, name, r.actual.at(name), t, atol_for(r.comp->role));
      per_output.push_back({name, one.max_abs});
      outputs[name] = {{"max_abs", std::isfinite(one.max_abs) ? json(one.max_abs) : json("inf")},
                       {"mismatched", one.mismatched}, {"elements", one.total}};
      accumulate(d, name, r.actual.at(name), t, atol_for(r.comp->role));
    }
    const std::string label =
        causal ? fmt::format("numbers: {} / {} (batch {}, seq {}, past {})", r.comp->role, r.sc.name, r.sc.batch, r.sc.seq, r.sc.past)
               : fmt::format("numbers: {} / {} (batch {}, seq {})", r.comp->role, r.sc.name, r.sc.batch, r.sc.seq);
    CheckResult c{label, d.mismatched == 0, "", tol_numbers(r.comp->role), {}};
    auto number = [](double v) { return std::isfinite(v) ? json(v) : json("inf"); };
    if (on_transformers) c.tolerance = "against Transformers eager on the checkpoint: " + c.tolerance;
    c.measured = {{"max_abs", number(d.max_abs)}, {"mean_abs", d.mean_abs}, {"mismatched", d.mismatched},
                  {"elements", d.total}, {"atol", atol_for(r.comp->role)}, {"outputs", outputs}};
    c.detail = fmt::format("max abs {:.3g}, mean abs {:.3g}, {} of {} elements over tolerance", d.max_abs, d.mean_abs,
                           d.mismatched, d.total);
    if (!c.passed) {
      // Kept in the report as numbers too, for report.html's per-layer chart (pipeline/report_html.h).
      // (Against Transformers there are no layer outputs to compare: hfx's own layers would say nothing.)
      const auto layers = step_runtime || on_transformers ? std::vector<LayerDiff>{}
                                       : layer_diffs(r.refc->graph, r.comp->graph, r.inputs, art.num_layers,
                                                     atol_for(r.comp->role));
      c.measured["worst_output"] = d.worst;
      c.measured["layers"] = json::array();
      for (const auto& l : layers) c.measured["layers"].push_back({{"max_abs", number(l.max_abs)}, {"mean_abs", number(l.mean_abs)}});
      c.detail += "; worst output " + d.worst + "; " +
                  (on_transformers ? over_tolerance(per_output, atol_for(r.comp->role)) +
                                         "; Transformers' layer outputs are not compared (where `hfx verify` against "
                                         "hfx's reference executor passes, hfx's definition of the model is what differs)"
                   : step_runtime ? std::string("layer outputs are not exposed by the compiled model (`hfx verify --runtime "
                                              "reference` localises the first diverging layer)")
                                : diagnose_divergence(per_output, layers, atol_for(r.comp->role), art.cache.states));
    }
    add(std::move(c));
  }

  // 5. Greedy generation, reference vs artifact (decoders only).
  std::vector<std::vector<int64_t>> actual_tokens;
  double gen_s = 0, first_step_s = 0;
  if (causal) {
  runtime::SamplingOptions so;
  so.max_new_tokens = tokens;
  so.eos_token_ids = art.eos_token_ids;
  so.pad_token_id = art.pad_token_id;
  auto runners = [&](const auto& components, const char* whose, RunSizes sizes) {
    auto graphs_by_role = [&](const std::string& role) -> const ir::Graph* {
      for (const auto& c : components)
        if (c.role == role) return &c.graph;
      return nullptr;
    };
    std::pair<std::unique_ptr<runtime::StepRunner>, std::unique_ptr<runtime::StepRunner>> r;
    const ir::Graph* first = graphs_by_role("prefill");
    if (!first) first = graphs_by_role("decoder");
    const ir::Graph* next = graphs_by_role("decode");
    // A hand-edited manifest may relabel every component: greedy decoding has no first step then.
    if (!first) {
      std::vector<std::string> roles;
      for (const auto& c : components) roles.push_back(c.role);
      bad_input("{}: {} has no decoder or prefill component for the greedy check; roles: {}",
                (out / kManifestName).string(), whose, fmt::join(roles, ", "));
    }
    r.first = runtime::make_executor_runner(*first, executor_options(*first, opt, sizes));
    if (next) r.second = runtime::make_executor_runner(*next, executor_options(*next, opt, sizes));
    return r;
  };
  const int64_t greedy_total = tokens * int64_t(prompts.size());
  std::vector<std::vector<int64_t>> expected_tokens = oracle_tokens;
  if (!on_transformers) {
    auto ref_runners = runners(ref.components, "the reference", {});
    Progress ref_progress = Progress::steps("verify: greedy, checkpoint reference", greedy_total, "tokens");
    expected_tokens = runtime::generate(*ref_runners.first, ref_runners.second ? *ref_runners.second : *ref_runners.first,
                                        art.cache, prompts, so, [&](size_t, int64_t) { ref_progress.advance(1, 0); });
    ref_progress.finish();
  }
  if (opt.runtime == "onnxruntime") {
    actual_tokens = ort_result["generate"]["tokens"].get<std::vector<std::vector<int64_t>>>();
    gen_s = ort_result["generate"]["total_s"].get<double>();
    first_step_s = ort_result["generate"]["cold_start_s"].get<double>();
  } else {
    decltype(runners(art.components, "", {})) art_runners;
    if (step_runtime) {  // the runtime's own runners over the files
      const bool split = art.components.size() > 1;
      art_runners.first = backend.make_runner(art.component(split ? "prefill" : ""), opt.runtime);
      art_runners.second = split ? backend.make_runner(art.component("decode"), opt.runtime) : nullptr;
    } else {
      art_runners = runners(art.components, "the artifact", art_sizes);
    }
    const auto t0 = Clock::now();
    bool first = true;
    Progress art_progress = Progress::steps("verify: greedy, artifact on " + opt.runtime, greedy_total, "tokens");
    actual_tokens = runtime::generate(*art_runners.first, art_runners.second ? *art_runners.second : *art_runners.first,
                                      art.cache, prompts, so, [&](size_t, int64_t) {
                                        if (first) first_step_s = seconds_since(t0), first = false;
                                        art_progress.advance(1, 0);
                                      });
    art_progress.finish();
    gen_s = seconds_since(t0);
  }
  {
    size_t same = 0, total = 0;
    for (size_t b = 0; b < expected_tokens.size(); ++b)
      for (size_t i = 0; i < expected_tokens[b].size(); ++i, ++total)
        same += b < actual_tokens.size() && i < actual_tokens[b].size() && actual_tokens[b][i] == expected_tokens[b][i];
    bool ok = expected_tokens == actual_tokens;
    std::string detail = ok ? "identical tokens" : fmt::format("{} of {} tokens agree", same, total);
    // Where each row first parts (the artifact's token against the oracle's), for the report.
    json divergence = json::array();
    for (size_t b = 0; b < expected_tokens.size(); ++b) {
      const auto& e = expected_tokens[b];
      const auto a = b < actual_tokens.size() ? actual_tokens[b] : std::vector<int64_t>{};
      size_t i = 0;
      while (i < e.size() && i < a.size() && e[i] == a[i]) ++i;
      if (i == e.size() && i == a.size()) continue;
      divergence.push_back({{"row", b}, {"step", i}, {"expected", i < e.size() ? json(e[i]) : json()},
                            {"actual", i < a.size() ? json(a[i]) : json()}});
      if (divergence.size() == 1)
        detail += fmt::format("; row {} first parts at token {}: {} gives {}, the artifact {}", b, i, oracle_word,
                              i < e.size() ? std::to_string(e[i]) : "none", i < a.size() ? std::to_string(a[i]) : "none");
    }
    std::string gate = "identical tokens";
    const tasks::Component& first_ref = ref.components.front();
    if (int8_activations(first_ref.role) || f16_activations(first_ref.role)) {
      // Where the numbers may differ by the budget, greedy paths may part at a near-tie and then differ
      // (chaos): each row must agree up to a step where the reference's own top score and its score of
      // the artifact's token are within twice the logits budget.
      const double margin_gate = 2 * atol_for(first_ref.role);
      gate = fmt::format("identical tokens, or parting only where the reference's best and the artifact's token score "
                         "within {:g} (2x the logits budget: {})",
                         margin_gate, int8_activations(first_ref.role) ? "accuracy_level 4 on ONNX Runtime" : "f16 activations");
      if (!ok) {
        const auto parts = near_tie_partings(first_ref.graph, art.cache, vocab, prompts, expected_tokens, actual_tokens);
        ok = std::all_of(parts.begin(), parts.end(), [&](const Parting& p) { return p.margin <= margin_gate; });
        for (const auto& p : parts)
          detail += fmt::format("; row {} parts at token {} where the reference scores the artifact's token {:.3g} below its own",
                                p.row, p.step, p.margin);
      }
    }
    CheckResult c{fmt::format("greedy generation ({} tokens, batch {})", tokens, prompts.size()), ok, detail, gate, {}};
    c.measured = {{"expected", expected_tokens}, {"actual", actual_tokens}, {"first_divergence", divergence}};
    if (on_transformers) c.tolerance += " (Transformers' model.generate, greedy, same prompts)";
    add(std::move(c));
  }
  }

  // 6. Where ops ran.
  {
    CheckResult c{"op placement", true, "", "every node on the intended provider, none unsupported", {}};
    if (opt.runtime == "onnxruntime") {
      const auto& p = ort_result.value("placements", nlohmann::json::object());
      std::vector<std::string> parts, off;
      for (const auto& [op, providers] : p.items())
        for (const auto& [prov, n] : providers.items()) {
          parts.push_back(fmt::format("{} x{} on {}", op, n.get<int>(), prov));
          if (prov != "CPUExecutionProvider") off.push_back(op);
        }
      c.passed = off.empty() && !p.empty();
      c.detail = fmt::format("onnxruntime {}: {}", ort_result.value("ort_version", "?"), fmt::join(parts, ", "));
      c.measured = p;
    } else {
      // Merged over the components: op (or compiled layer) -> where / in what precision -> count.
      Backend::Placement all;
      for (const auto& comp : art.components)
        for (const auto& [op, where] : backend.placement(comp, opt.runtime))
          for (const auto& [w, n] : where) all[op][w] += n;
      std::vector<std::string> parts, reduced;
      for (const auto& [op, where] : all)
        for (const auto& [w, n] : where) {
          parts.push_back(step_runtime ? fmt::format("{} x{} in {}", op, n, w) : fmt::format("{} x{}", op, n));
          if (w == "bf16" || w == "f16") reduced.push_back(op);
        }
      if (step_runtime) {
        // f32 inference was asked (INFERENCE_PRECISION_HINT): a layer in bf16/f16 would break the gate.
        c.tolerance = "every compiled layer runs in f32 or an integer type (no bf16/f16 inference)";
        c.passed = reduced.empty() && !all.empty();
        c.detail = fmt::format("{} CPU plugin: {}", opt.runtime, fmt::join(parts, ", "));
      } else {
        c.detail = fmt::format("reference executor kernels: {}", fmt::join(parts, ", "));
      }
      for (const auto& [op, where] : all) c.measured[op] = where;
    }
    add(std::move(c));
  }

  // 7. Latency, memory, size (measured, not gated: timings depend on the machine).
  {
    int64_t size = 0;
    // Only listed files that are regular files inside OUT: the others failed "artifact checksums".
    for (const auto& [rel, sha] : manifest["files"].items()) {
      std::error_code ec;
      const auto p = listed_file(out, rel);
      const uintmax_t n = p ? fs::file_size(*p, ec) : 0;
      if (!ec) size += int64_t(n);
    }
    int64_t new_tokens = 0;
    for (const auto& r : actual_tokens) new_tokens += int64_t(r.size());
    CheckResult c{"performance", true, "", "measured only (no timing gate)", {}};
    const char* weights = executor_options(ref.components.at(0).graph, opt).cache_weights ? "held" : "streamed";
    c.measured = {{"runtime", opt.runtime}, {"load_s", opt.runtime == "onnxruntime" ? first_step_s : open_s},
                  {"generate_s", gen_s}, {"tokens_per_s", gen_s > 0 ? double(new_tokens) / gen_s : 0.0},
                  {"peak_rss_bytes", peak_rss_bytes()}, {"artifact_bytes", size}, {"reference_weights", weights}};
    const double load_s = opt.runtime == "onnxruntime" ? first_step_s : open_s;
    if (causal) {
      c.detail = fmt::format("load {:.3f} s, {} tokens in {:.3f} s ({:.1f} tok/s), peak RSS {} MiB (this process; reference "
                             "weights {}), artifact {} KiB",
                             load_s, new_tokens, gen_s, gen_s > 0 ? double(new_tokens) / gen_s : 0.0, peak_rss_bytes() >> 20,
                             weights, size >> 10);
    } else {
      // An encoder generates nothing (F#17): its figure is the sequences of the shape cases it ran.
      int64_t sequences = 0;
      for (const auto& r : runs) sequences += r.sc.batch;
      c.measured["sequences"] = sequences;
      c.measured["encode_s"] = runs_s;
      c.detail = fmt::format("{} sequences in {:.1f} ms ({} shape cases{}), peak RSS {} MiB (this process; reference "
                             "weights {}), artifact {} KiB",
                             sequences, runs_s * 1e3, runs.size(),
                             opt.runtime == "onnxruntime" ? ", with the python driver's start" : "", peak_rss_bytes() >> 20,
                             weights, size >> 10);
    }
    add(std::move(c));
  }

  // 8. A re-export from the same source and recipe reproduces the same bytes.
  if (opt.reexport) {
    const fs::path again = scratch / "reexport";
    ExportOptions eo;
    eo.model_dir = source;
    eo.out_dir = again;
    eo.recipe = recipe;
    eo.verify = false;
    run_export(eo);
    std::string problem;
    for (const auto& [rel, sha] : manifest["files"].items())
      if (auto p = listed_file(again, rel); !p || !sha.is_string() || sha256_file(*p) != sha.get<std::string>()) {
        problem = rel + " differs";
        break;
      }
    if (problem.empty()) {
      // The same text but for source.path, which is relative to each export's own folder.
      auto ours = json::parse(read_text_file(out / kManifestName)), theirs = json::parse(read_text_file(again / kManifestName));
      if (ours["source"].contains("path")) theirs["source"]["path"] = ours["source"]["path"];
      if (ours != theirs) problem = "hfx.json differs";
    }
    add({"re-export reproduces bytes", problem.empty(), problem.empty() ? "every file identical" : problem, "sha256 equal", {}});
  }
  return rep;
}

}  // namespace hfx::pipeline
