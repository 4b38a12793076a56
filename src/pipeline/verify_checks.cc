#include "pipeline/verify_checks.h"

#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "core/error.h"
#include "core/files.h"
#include "pipeline/backend.h"
#include "pipeline/manifest.h"
#include "runtime/executor.h"
#include "runtime/seq2seq_generate.h"

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace hfx::pipeline {

namespace {

int64_t peak_rss_bytes() {
  struct rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return int64_t(ru.ru_maxrss) * 1024;
}

// The logits budget of MatMulNBits accuracy_level 4 on a runtime that rounds its activations to int8
// (RuntimeFacts::int8_activations; see VerifyContext::atol_for): measured worst max abs 3.3e-6 on the
// tiny test models, 0.066 (keys behind Qwen3's k_norm; logits 0.024) on a 13 M-parameter bf16 qwen3 and
// 0.059 on a 56 M-parameter bf16 llama; about 4x that, as f16's.
constexpr double kInt8ActivationAtol = 0.25;

struct Diff {
  double max_abs = 0, mean_abs = 0;
  int64_t mismatched = 0, total = 0;
  std::string worst;  // output with the largest difference
};

double max_magnitude(const Tensor& t) {
  const Tensor f = t.cast(DType::F32);
  double m = 0;
  for (int64_t i = 0; i < f.numel(); ++i) m = std::max(m, double(std::fabs(f.as<float>()[i])));
  return std::isfinite(m) ? m : 1.0;
}

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

// Re-runs one failing case with every layer's output kept, and returns each layer's output difference
// (empty when the graphs do not expose them), for diagnose_divergence.
std::vector<LayerDiff> layer_diffs(const ir::Graph& ref, const ir::Graph& art, const std::map<std::string, Tensor>& in,
                                   int64_t layers, double atol) {
  // Each layer the graphs name so, up to the first they do not (an encoder-decoder's encoder has its
  // own depth, not the manifest's decoder layers).
  std::vector<std::string> keep;
  for (int64_t i = 0; i < layers; ++i) {
    std::string name = fmt::format("/model/layers.{}/output", i);
    if (!ref.find(name) || !art.find(name)) break;
    keep.push_back(std::move(name));
  }
  if (keep.empty()) return {};
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

// Where the artifact's greedy tokens first part from the reference's in a row, and by how much the
// reference prefers its own token there (its best logit minus its logit of the artifact's token).
struct Parting {
  size_t row;
  size_t step;
  double margin;
};

// Where a row of the artifact's greedy tokens first parts from the oracle's: the step of the first
// different token, or where one row ends first (its token there is then none).
struct RowParting {
  size_t row, step;
  std::optional<int64_t> expected, actual;
};
std::vector<RowParting> row_partings(const std::vector<std::vector<int64_t>>& expected,
                                     const std::vector<std::vector<int64_t>>& actual) {
  std::vector<RowParting> out;
  for (size_t b = 0; b < expected.size(); ++b) {
    const auto& e = expected[b];
    const auto a = b < actual.size() ? actual[b] : std::vector<int64_t>{};
    size_t i = 0;
    while (i < e.size() && i < a.size() && e[i] == a[i]) ++i;
    if (i == e.size() && i == a.size()) continue;
    out.push_back({b, i, i < e.size() ? std::optional(e[i]) : std::nullopt, i < a.size() ? std::optional(a[i]) : std::nullopt});
  }
  return out;
}

// Re-runs the reference (`first`: the decoder or prefill graph) at batch 1 on each parting row's prompt
// plus the tokens both agreed on, and reads the scores at the parting step.
std::vector<Parting> near_tie_partings(const ir::Graph& first, const runtime::CacheSpec& cache, int64_t vocab,
                                       const std::vector<std::vector<int64_t>>& prompts,
                                       const std::vector<std::vector<int64_t>>& expected,
                                       const std::vector<std::vector<int64_t>>& actual) {
  std::vector<Parting> out;
  for (const auto& p : row_partings(expected, actual)) {
    const size_t b = p.row, i = p.step;
    if (!p.expected || !p.actual || *p.actual < 0 || *p.actual >= vocab) {  // one stopped early: not a near-tie
      out.push_back({b, i, INFINITY});
      continue;
    }
    std::vector<int64_t> ids = prompts[b];
    ids.insert(ids.end(), expected[b].begin(), expected[b].begin() + long(i));
    const int64_t T = int64_t(ids.size());
    auto in = make_inputs(first, {"parting", 1, T, 0}, cache, vocab, 0);  // one unpadded row, empty cache
    in["input_ids"] = Tensor::from_vector<int64_t>(DType::I64, {1, T}, ids);
    const Tensor logits = runtime::Executor(first).run(in).at("logits");
    const float* last = logits.as<float>() + (T - 1) * vocab;
    out.push_back({b, i, double(*std::max_element(last, last + vocab)) - double(last[*p.actual])});
  }
  return out;
}

// The same for an encoder-decoder: the reference encodes the parting row's source alone and its first
// decoder step reads the decoder prompt plus the agreed tokens.
std::vector<Parting> near_tie_partings_seq2seq(const VerifyContext& ctx, const std::vector<std::vector<int64_t>>& expected,
                                               const std::vector<std::vector<int64_t>>& actual) {
  std::optional<ReferenceSeq2SeqRunners> runners;  // built at the first parting that needs them
  std::vector<Parting> out;
  for (const auto& p : row_partings(expected, actual)) {
    const size_t b = p.row, i = p.step;
    if (!p.expected || !p.actual || *p.actual < 0 || *p.actual >= ctx.vocab || !ctx.art.decoder_start_token_id) {
      out.push_back({b, i, INFINITY});
      continue;
    }
    if (!runners) runners = reference_seq2seq_runners(ctx.ref->components, ctx.opt);
    std::vector<int64_t> prompt = {*ctx.art.decoder_start_token_id};
    prompt.insert(prompt.end(), expected[b].begin(), expected[b].begin() + long(i));
    runtime::SamplingOptions one;
    one.max_new_tokens = 1;
    one.pad_token_id = ctx.art.pad_token_id;
    double margin = INFINITY;
    runtime::generate_seq2seq({*runners->encoder, runners->first.get(), *runners->next, runners->ids}, ctx.art.cache,
                              runtime::prompt_sources({ctx.prompts[b]}, ctx.art.pad_token_id, ctx.art.speech), prompt, one, {},
                              [&](size_t, const float* scores, int64_t vocab) {
                                margin = double(*std::max_element(scores, scores + vocab)) - double(scores[*p.actual]);
                              });
    out.push_back({b, i, margin});
  }
  return out;
}

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

// ---- The checks, in report order ----

// The artifact is what its manifest says.
std::vector<CheckResult> artifact_checksums(const VerifyContext& ctx) {
  const auto& r = ctx.checked;
  const char* matched = ctx.opt.rehash ? "{} files match hfx.json" : "{} files listed in hfx.json, hashed as this export wrote them";
  return {{"artifact checksums", r.problems.empty(),
           r.problems.empty() ? fmt::format(fmt::runtime(matched), r.files_checked)
           : r.problems.size() == 1
               ? r.problems.front()
               : fmt::format("{} (and {} more problems: `hfx check {}` lists them)", r.problems.front(),
                             r.problems.size() - 1, ctx.out.string()),
           "sha256 equal",
           {}}};
}

// --oracle auto that could not run Transformers says so.
std::vector<CheckResult> oracle_fallback(const VerifyContext& ctx) {
  if (ctx.opt.oracle != "auto" || ctx.on_transformers) return {};
  return {{"oracle", true, fmt::format("Transformers not run: {}; compared with hfx's reference executor", ctx.oracle_missing),
           "--oracle auto: Transformers where it runs", {}}};
}

// The checkpoint's config and weights hash as they did at export.
std::vector<CheckResult> source_unchanged(const VerifyContext& ctx) {
  if (!ctx.opt.rehash)
    return {{"source unchanged", true, "config and weights hashed as this export read them", "sha256 equal", {}}};
  const std::string& problem = ctx.source_problem;
  return {{"source unchanged", problem.empty(), problem.empty() ? "config and weights hash as at export" : problem,
           "sha256 equal", {}}};
}

// I/O signature: files vs manifest, per component.
std::vector<CheckResult> io_signature(const VerifyContext& ctx) {
  std::vector<CheckResult> rows;
  for (const auto& c : ctx.art.components) {
    const nlohmann::json* mc = nullptr;
    for (const auto& x : ctx.manifest["components"])
      if (x["role"] == c.role && x["format"] == ctx.format) mc = &x;
    const auto sig = ctx.backend->signature(c);
    const auto& file_in = sig.inputs;
    bool ok = mc && sig_matches(file_in, manifest_sig((*mc)["inputs"])) && sig_matches(sig.outputs, manifest_sig((*mc)["outputs"]));
    std::string detail = ok ? fmt::format("{} inputs, {} outputs as the manifest declares", file_in.size(), sig.outputs.size())
                            : fmt::format("file: {}{}; manifest differs", sig_str(file_in), sig_str(sig.outputs));
    rows.push_back({"I/O signature: " + c.role, ok, detail,
                    ctx.facts.exact_dims ? "names, dtypes and dims identical"
                                         : "names and dtypes identical, dims equal or dynamic in the file",
                    {}});
  }
  return rows;
}

// What picking the shape cases found: a component the reference lacks, cases the contract leaves no room for.
std::vector<CheckResult> shape_cases(const VerifyContext& ctx) { return ctx.case_notes; }

// Numbers per component over the shape matrix.
std::vector<CheckResult> numbers(const VerifyContext& ctx) {
  std::vector<CheckResult> rows;
  const Artifact& art = ctx.art;
  for (const auto& r : ctx.runs) {
    const double atol = ctx.atol_for(r.comp->role);
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
      // A recurrent state (a Mamba scan's) is a running sum whose size grows with the sequence: fp32
      // rounds it relative to that size, so its gate is atol times its largest magnitude (at least 1).
      const tasks::StatePort* port = tasks::find_present(art.cache.states, name);
      const double scale = port && port->spec.kind == tasks::StateKind::Recurrent ? std::max(1.0, max_magnitude(t)) : 1.0;
      Diff one;
      accumulate(one, name, r.actual.at(name), t, atol * scale);
      per_output.push_back({name, one.max_abs / scale});
      outputs[name] = {{"max_abs", std::isfinite(one.max_abs) ? json(one.max_abs) : json("inf")},
                       {"mismatched", one.mismatched}, {"elements", one.total}};
      if (scale != 1.0) outputs[name]["gate_scale"] = scale;
      accumulate(d, name, r.actual.at(name), t, atol * scale);
    }
    const std::string label =
        ctx.causal || r.sc.past > 0 ? fmt::format("numbers: {} / {} (batch {}, seq {}, past {})", r.comp->role, r.sc.name, r.sc.batch, r.sc.seq, r.sc.past)
                   : fmt::format("numbers: {} / {} (batch {}, seq {})", r.comp->role, r.sc.name, r.sc.batch, r.sc.seq);
    CheckResult c{label, d.mismatched == 0, "", ctx.tol_numbers(r.comp->role), {}};
    auto number = [](double v) { return std::isfinite(v) ? json(v) : json("inf"); };
    if (ctx.on_transformers) c.tolerance = "against Transformers eager on the checkpoint: " + c.tolerance;
    c.measured = {{"max_abs", number(d.max_abs)}, {"mean_abs", d.mean_abs}, {"mismatched", d.mismatched},
                  {"elements", d.total}, {"atol", atol}, {"outputs", outputs}};
    c.detail = fmt::format("max abs {:.3g}, mean abs {:.3g}, {} of {} elements over tolerance", d.max_abs, d.mean_abs,
                           d.mismatched, d.total);
    if (!c.passed) {
      // Kept in the report as numbers too, for report.html's per-layer chart (pipeline/report_html.h).
      // (Against Transformers there are no layer outputs to compare: hfx's own layers would say nothing.)
      const bool layered = ctx.facts.graphs_read_back && !ctx.on_transformers;
      const auto layers = layered ? layer_diffs(r.refc->graph, r.comp->graph, r.inputs, art.num_layers, atol)
                                  : std::vector<LayerDiff>{};
      c.measured["worst_output"] = d.worst;
      c.measured["layers"] = json::array();
      for (const auto& l : layers) c.measured["layers"].push_back({{"max_abs", number(l.max_abs)}, {"mean_abs", number(l.mean_abs)}});
      c.detail += "; worst output " + d.worst + "; " +
                  (ctx.on_transformers ? over_tolerance(per_output, atol) +
                                             "; Transformers' layer outputs are not compared (where `hfx verify` against "
                                             "hfx's reference executor passes, hfx's definition of the model is what differs)"
                   : !ctx.facts.graphs_read_back
                       ? std::string("layer outputs are not exposed by the compiled model (`hfx verify --runtime "
                                     "reference` localises the first diverging layer)")
                       : diagnose_divergence(per_output, layers, atol, art.cache.states));
    }
    rows.push_back(std::move(c));
  }
  return rows;
}

// Greedy generation, oracle vs artifact (decoders and encoder-decoders).
std::vector<CheckResult> greedy_generation(const VerifyContext& ctx) {
  if (!ctx.generates()) return {};
  const auto& expected_tokens = ctx.expected_tokens;
  const auto& actual_tokens = ctx.artifact.tokens;
  size_t same = 0, total = 0;
  for (size_t b = 0; b < expected_tokens.size(); ++b)
    for (size_t i = 0; i < expected_tokens[b].size(); ++i, ++total)
      same += b < actual_tokens.size() && i < actual_tokens[b].size() && actual_tokens[b][i] == expected_tokens[b][i];
  bool ok = expected_tokens == actual_tokens;
  std::string detail = ok ? "identical tokens" : fmt::format("{} of {} tokens agree", same, total);
  // Where each row first parts (the artifact's token against the oracle's), for the report.
  json divergence = json::array();
  for (const auto& p : row_partings(expected_tokens, actual_tokens)) {
    auto token = [](const std::optional<int64_t>& t) { return t ? json(*t) : json(); };
    divergence.push_back({{"row", p.row}, {"step", p.step}, {"expected", token(p.expected)}, {"actual", token(p.actual)}});
    if (divergence.size() == 1)
      detail += fmt::format("; row {} first parts at token {}: {} gives {}, the artifact {}", p.row, p.step, ctx.oracle_word,
                            p.expected ? std::to_string(*p.expected) : "none", p.actual ? std::to_string(*p.actual) : "none");
  }
  std::string gate = "identical tokens";
  // The component whose logits pick the tokens (an encoder-decoder's steps, not its encoder).
  const tasks::Component& first_ref = ctx.ref->components.front();
  const std::string logits_role = ctx.seq2seq ? "decoder_with_past" : first_ref.role;
  if (ctx.generates() && (ctx.int8_activations(logits_role) || ctx.f16_activations(logits_role))) {
    // Where the numbers may differ by the budget, greedy paths may part at a near-tie and then differ
    // (chaos): each row must agree up to a step where the reference's own top score and its score of
    // the artifact's token are within twice the logits budget.
    const double margin_gate = 2 * ctx.atol_for(logits_role);
    gate = fmt::format("identical tokens, or parting only where the reference's best and the artifact's token score "
                       "within {:g} (2x the logits budget: {})",
                       margin_gate,
                       ctx.int8_activations(logits_role) ? "accuracy_level 4 on " + ctx.facts.int8_activations
                                                         : std::string("f16 activations"));
    if (!ok) {
      const auto parts = ctx.seq2seq ? near_tie_partings_seq2seq(ctx, expected_tokens, actual_tokens)
                                     : near_tie_partings(first_ref.graph, ctx.art.cache, ctx.vocab, ctx.prompts, expected_tokens,
                                                         actual_tokens);
      ok = std::all_of(parts.begin(), parts.end(), [&](const Parting& p) { return p.margin <= margin_gate; });
      for (const auto& p : parts)
        detail += fmt::format("; row {} parts at token {} where the reference scores the artifact's token {:.3g} below its own",
                              p.row, p.step, p.margin);
    }
  }
  CheckResult c{fmt::format("greedy generation ({} tokens, batch {})", ctx.tokens, ctx.prompts.size()), ok, detail, gate, {}};
  c.measured = {{"expected", expected_tokens}, {"actual", actual_tokens}, {"first_divergence", divergence}};
  if (ctx.on_transformers) c.tolerance += " (Transformers' model.generate, greedy, same prompts)";
  return {std::move(c)};
}

// Where ops ran, as the session measured it.
std::vector<CheckResult> op_placement(const VerifyContext& ctx) {
  const PlacementReport& p = ctx.artifact.placement;
  CheckResult c{"op placement", p.passed, p.detail, "every node on the intended provider, none unsupported", p.measured};
  if (!p.gate.empty()) c.tolerance = p.gate;
  return {std::move(c)};
}

// Latency, memory, size (measured, not gated: timings depend on the machine).
std::vector<CheckResult> performance(const VerifyContext& ctx) {
  int64_t size = 0;
  // Only listed files that are regular files inside OUT: the others failed "artifact checksums".
  for (const auto& [rel, sha] : ctx.manifest["files"].items()) {
    std::error_code ec;
    const auto p = listed_file(ctx.out, rel);
    const uintmax_t n = p ? fs::file_size(*p, ec) : 0;
    if (!ec) size += int64_t(n);
  }
  int64_t new_tokens = 0;
  for (const auto& r : ctx.artifact.tokens) new_tokens += int64_t(r.size());
  const double gen_s = ctx.artifact.generate_s, load_s = ctx.artifact.load_s;
  CheckResult c{"performance", true, "", "measured only (no timing gate)", {}};
  const char* weights = executor_options(ctx.ref->components.at(0).graph, ctx.opt).cache_weights ? "held" : "streamed";
  c.measured = {{"runtime", ctx.opt.runtime}, {"load_s", load_s},
                {"generate_s", gen_s}, {"tokens_per_s", gen_s > 0 ? double(new_tokens) / gen_s : 0.0},
                {"peak_rss_bytes", peak_rss_bytes()}, {"artifact_bytes", size}, {"reference_weights", weights}};
  if (ctx.generates()) {
    c.detail = fmt::format("load {:.3f} s, {} tokens in {:.3f} s ({:.1f} tok/s), peak RSS {} MiB (this process; reference "
                           "weights {}), artifact {} KiB",
                           load_s, new_tokens, gen_s, gen_s > 0 ? double(new_tokens) / gen_s : 0.0, peak_rss_bytes() >> 20,
                           weights, size >> 10);
  } else {
    // An encoder generates nothing (F#17): its figure is the sequences of the shape cases it ran.
    int64_t sequences = 0;
    for (const auto& r : ctx.runs) sequences += r.sc.batch;
    c.measured["sequences"] = sequences;
    c.measured["encode_s"] = ctx.runs_s;
    c.detail = fmt::format("{} sequences in {:.1f} ms ({} shape cases{}), peak RSS {} MiB (this process; reference "
                           "weights {}), artifact {} KiB",
                           sequences, ctx.runs_s * 1e3, ctx.runs.size(),
                           ctx.facts.runs_timing_note.empty() ? "" : ", " + ctx.facts.runs_timing_note,
                           peak_rss_bytes() >> 20, weights, size >> 10);
  }
  return {std::move(c)};
}

// A re-export from the same source and recipe reproduces the same bytes.
std::vector<CheckResult> reexport(const VerifyContext& ctx) {
  if (!ctx.opt.reexport) return {};
  const fs::path again = ctx.scratch->path() / "reexport";
  ExportOptions eo;
  eo.model_dir = ctx.source;
  eo.out_dir = again;
  eo.recipe = ctx.recipe;
  eo.verify = false;
  run_export(eo);
  std::string problem;
  for (const auto& [rel, sha] : ctx.manifest["files"].items())
    if (auto p = listed_file(again, rel); !p || !sha.is_string() || sha256_file(*p) != sha.get<std::string>()) {
      problem = rel + " differs";
      break;
    }
  if (problem.empty()) {
    // The same text but for source.path, which is relative to each export's own folder.
    auto ours = json::parse(read_text_file(ctx.out / kManifestName)), theirs = json::parse(read_text_file(again / kManifestName));
    if (ours["source"].contains("path")) theirs["source"]["path"] = ours["source"]["path"];
    if (ours != theirs) problem = "hfx.json differs";
  }
  return {{"re-export reproduces bytes", problem.empty(), problem.empty() ? "every file identical" : problem, "sha256 equal", {}}};
}

}  // namespace

std::string source_problem(const fs::path& source, const nlohmann::json& manifest) {
  if (!manifest.contains("source") || !manifest["source"].is_object() || !manifest["source"].contains("files")) return "";
  for (const auto& [name, sha] : manifest["source"]["files"].items())
    if (std::string problem = source_file_problem(source, name, sha); !problem.empty()) return problem;
  return "";
}

bool VerifyContext::int8_activations(const std::string& role) const {
  // MatMulNBits accuracy_level 4 on a runtime that rounds the activations to int8, as the reference
  // does (runtime/kernels_quant.cc): an activation that the two f32 summation orders put on either
  // side of a rounding step (a near-tie; frequent with bf16 weights, whose values sit on a coarse
  // grid) rounds one int8 step apart, and that step travels on.
  return !facts.int8_activations.empty() && parsed && parsed->precision_for(role).quant.enabled() &&
         parsed->precision_for(role).quant.accuracy_level == 4;
}

bool VerifyContext::f16_activations(const std::string& role) const {
  // The runtime's f16 kernels round their own way (XNNPACK's f16 FullyConnected, ONNX Runtime's f16
  // MatMul), so the logits differ by up to the f16 budget and a greedy path may part at a near-tie,
  // as with int8 activations.
  return parsed && parsed->precision_for(role).dtype == DType::F16 && !parsed->precision_for(role).quant.enabled();
}

double VerifyContext::atol_for(const std::string& role) const {
  if (opt.atol) return *opt.atol;
  const double t = parsed ? parsed->tolerance_for(role) : kF32Atol;
  return int8_activations(role) ? std::max(t, kInt8ActivationAtol) : t;
}

std::string VerifyContext::tol_numbers(const std::string& role) const {
  const std::string precision = parsed ? parsed->precision_for(role).str() : "f32";
  if (int8_activations(role) && !opt.atol)
    return fmt::format("max abs <= {:g}, no mismatching element (accuracy_level 4: {} and the reference round "
                       "activations to int8 alike; a near-tie rounds one step apart and travels on: measured up to 0.066 "
                       "on 13-56 M-parameter bf16 models, docs/verify.md)",
                       atol_for(role), facts.int8_activations);
  const bool recurrent = tasks::first_of_kind(art.cache.states, tasks::StateKind::Recurrent);
  const std::string scaled = recurrent ? "; a recurrent state's gate is that times its largest magnitude, at least 1" : "";
  return precision == "f32"
             ? fmt::format("max abs <= {:g}, no mismatching element (fp32: only summation order differs{})", atol_for(role),
                           scaled)
             : fmt::format("max abs <= {:g}, no mismatching element (the reference runs the same precision, {}{})",
                           atol_for(role), precision, scaled);
}

const std::vector<Check>& verify_checks() {
  static const std::vector<Check> checks = {
      {"artifact checksums", artifact_checksums},
      {"oracle", oracle_fallback},
      {"source unchanged", source_unchanged},
      {"I/O signature", io_signature},
      {"shape cases", shape_cases},
      {"numbers", numbers},
      {"greedy generation", greedy_generation},
      {"op placement", op_placement},
      {"performance", performance},
      {"re-export reproduces bytes", reexport},
  };
  return checks;
}

}  // namespace hfx::pipeline
