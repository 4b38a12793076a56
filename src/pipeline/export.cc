#include "pipeline/export.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "backends/onnx/onnx_writer.h"
#include "backends/onnx/ort_profile.h"
#ifdef HFX_HAVE_OPENVINO
#include "backends/openvino/ov_writer.h"
#include "runtime/openvino/ov_runner.h"
#endif
#include "core/error.h"
#include "core/files.h"
#include "core/progress.h"
#include "models/registry.h"
#include "passes/pass.h"
#include "passes/precision.h"
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

// OpenVINO file names: `openvino_model.xml` for the one graph (the name OpenVINO GenAI and
// optimum-intel load), `openvino_<stem>_model.xml` for prefill/decode.
std::string openvino_file(const tasks::Component& c) {
  return c.file_stem == "model" ? "openvino_model.xml" : "openvino_" + c.file_stem + "_model.xml";
}

// Whether a component is written in the stateful layout, and its contract then: the past_key_values.*
// inputs and present.* outputs become state, a `beam_idx` input reorders it.
bool openvino_stateful(const Recipe& r, const tasks::Component& c) {
  bool has_cache = false;
  for (const auto& in : c.inputs) has_cache = has_cache || in.name.starts_with("past_key_values.");
  if (!r.openvino_stateful || !has_cache) return false;
  if (c.role != "decoder" || !c.shared_buffers.empty())
    bad_input("openvino: the stateful layout needs one decoder graph with a growing cache, not the {} graph of "
              "--split-prefill/--static-cache; add --stateless", c.role);
  return true;
}

#ifdef HFX_HAVE_OPENVINO
// The built-in check of the OpenVINO IR (decoders): greedy tokens from OpenVINO's CPU plugin in f32
// (runtime/openvino) equal the reference executor's on the checkpoint's graphs, for a left-padded
// batch of 2 when the contract allows it. Encoders are left to tests/oracle/test_openvino.py.
std::string check_openvino(const LoadedModel& m, const fs::path& dir, const Recipe& r) {
  if (!m.model) return "openvino: not checked (encoder; no decode loop)";
  auto find = [&](const std::string& role) -> const tasks::Component* {
    for (const auto& c : m.components)
      if (c.role == role) return &c;
    return nullptr;
  };
  const tasks::Component* first = find("prefill") ? find("prefill") : find("decoder");
  const tasks::Component* next = find("decode");
  HFX_CHECK(first, "no decoder component");
  auto max_of = [&](const char* dim, int64_t fallback) {
    auto it = r.task.dims.find(dim);
    return it != r.task.dims.end() && it->second.max ? *it->second.max : fallback;
  };
  const auto geo = m.model->cache();
  runtime::CacheSpec cache{geo.num_layers, geo.num_kv_heads, geo.head_dim, r.task.static_cache, r.task.max_cache_len};
  const int64_t vocab = std::max<int64_t>(4, m.summary().vocab_size);
  const int64_t len = std::max<int64_t>(1, std::min<int64_t>(7, max_of("sequence_length", 7)));
  int64_t total = r.task.static_cache ? r.task.max_cache_len : max_of("total_sequence_length", INT64_MAX);
  total = std::min(total, max_of("past_sequence_length", INT64_MAX - 1) + 1);
  runtime::SamplingOptions so;
  so.max_new_tokens = std::max<int64_t>(1, std::min<int64_t>(8, total - len));
  so.eos_token_ids = m.summary().eos_token_ids;
  so.pad_token_id = m.summary().pad_token_id.value_or(so.eos_token_ids.empty() ? 0 : so.eos_token_ids[0]);
  std::vector<std::vector<int64_t>> prompts(max_of("batch_size", 2) >= 2 ? 2 : 1);
  for (size_t b = 0; b < prompts.size(); ++b)
    for (int64_t i = 0; i < (b == 0 ? len : std::max<int64_t>(1, len - 3)); ++i)
      prompts[b].push_back(3 + (i * (b == 0 ? 37 : 53) + int64_t(b) * 11) % (vocab - 3));
  auto ref_graph = [&](const tasks::Component* c) { return passes::apply_precision(c->graph, r.precision); };
  auto ref_first = runtime::make_executor_runner(ref_graph(first));
  auto ref_next = next ? runtime::make_executor_runner(ref_graph(next)) : nullptr;
  auto expected = runtime::generate(*ref_first, next ? *ref_next : *ref_first, cache, prompts, so);
  auto ov_first = runtime::make_openvino_runner(dir / openvino_file(*first));
  auto ov_next = next ? runtime::make_openvino_runner(dir / openvino_file(*next)) : nullptr;
  auto actual = runtime::generate(*ov_first, next ? *ov_next : *ov_first, cache, prompts, so);
  if (actual != expected)
    fail(ErrorKind::Mismatch,
         "the openvino export does not match its reference: greedy tokens {} on OpenVINO, {} on the reference executor "
         "(nothing was written; --no-verify skips this check)",
         fmt::join(actual.at(0), ","), fmt::join(expected.at(0), ","));
  return fmt::format("openvino: {} greedy tokens x {} rows on OpenVINO {} (CPU, f32) identical to the reference executor",
                     so.max_new_tokens, prompts.size(), openvino_backend::openvino_version());
}
#endif

tasks::Component stateful_contract(const tasks::Component& c) {
  tasks::Component s{c.role, c.file_stem, c.graph, {}, {}, {}};
  for (const auto& in : c.inputs)
    if (!in.name.starts_with("past_key_values.")) s.inputs.push_back(in);
  s.inputs.push_back({"beam_idx", DType::I32, {Dim::sym("batch_size")}});
  for (const auto& out : c.outputs)
    if (!out.name.starts_with("present.")) s.outputs.push_back(out);
  return s;
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
  if (format == "openvino") {
#ifdef HFX_HAVE_OPENVINO
    return {"decompose-composites-keep-attention", "fold-weight-transforms"};
#else
    unsupported("format `openvino`: {}", kOpenVinoHint);
#endif
  }
  unsupported("unknown format `{}` (supported: onnx, openvino)", format);
}

ExportResult run_export(const ExportOptions& opt) {
  const auto start = std::chrono::steady_clock::now();
  for (const auto& f : opt.recipe.formats) backend_passes(f);  // reject unknown formats before any work
  check_onnx_profile(opt.recipe.onnx_profile, "--onnx-profile");
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
      // onnx --onnx-profile ort: ONNX Runtime's fused ops first, where the model allows them.
      std::optional<ir::Graph> fused;
      std::string profile = format == "onnx" ? opt.recipe.onnx_profile : "";
      if (profile == "ort" && !m.model) {
        profile = "portable";
        result.notes.push_back(fmt::format("onnx profile ort: {} is an encoder; written with the portable profile (the "
                                           "fused lowering covers decoders)", m.summary().model_type));
      } else if (profile == "ort") {
        auto blockers = passes::ort_profile_blockers(c.graph);
        if (blockers.empty()) {
          const int64_t rows = onnx_backend::ort_context_length(*m.checkpoint, c.graph);
          fused = with_context(c.role + ": pass ort-contrib-ops", [&] { return passes::ort_contrib_ops(c.graph, {rows}); });
          passes_run.push_back("ort-contrib-ops");
        } else {
          profile = "portable";
          result.notes.push_back(fmt::format("onnx profile ort: {} {} falls back to the portable profile: {}",
                                             m.summary().model_type, c.role, fmt::join(blockers, "; ")));
        }
      }
      ir::Graph g = with_context(c.role, [&] { return passes::run_pipeline(fused ? *fused : c.graph, backend_passes(format), &passes_run); });
      if (!opt.recipe.precision.is_default()) {
        g = with_context(c.role, [&] { return passes::apply_precision(g, opt.recipe.precision); });
        passes_run.push_back("apply-precision");
      }
#ifdef HFX_HAVE_OPENVINO
      if (format == "openvino") {
        openvino_backend::OvWriteOptions ow;
        ow.model_file = openvino_file(c);
        ow.metadata = onnx_metadata(m, c, g);
        ow.stateful = openvino_stateful(opt.recipe, c);
        int64_t total = 0;
        for (auto id : g.weights()) total += int64_t(g.weight(id)->nbytes());
        Progress progress(fmt::format("{} {}", format, c.role), int64_t(g.weights().size()), total);
        ow.on_weight_written = [&](int64_t n, int64_t bytes) { progress.advance(n, bytes); };
        auto written = with_context(fmt::format("{} {}", format, c.role), [&] { return openvino_backend::write_openvino(g, dir, ow); });
        progress.finish();
        result.weight_bytes_written += written.bin_bytes;
        manifest.add_component(ow.stateful ? stateful_contract(c) : c, format, (fs::path(format) / ow.model_file).string(),
                               passes_run);
        continue;
      }
#endif
      onnx_backend::OnnxWriteOptions wo;
      wo.model_file = c.file_stem + ".onnx";
      wo.data_file = c.file_stem + ".onnx_data";
      wo.metadata = onnx_metadata(m, c, g);
      wo.metadata["hfx.onnx_profile"] = profile;
      int64_t total_bytes = 0;
      for (auto id : g.weights()) total_bytes += int64_t(g.weight(id)->nbytes());
      Progress progress(fmt::format("{} {}", format, c.role), int64_t(g.weights().size()), total_bytes);
      wo.on_weight_written = [&](int64_t n, int64_t bytes) { progress.advance(n, bytes); };
      auto written = with_context(fmt::format("{} {}", format, c.role), [&] { return onnx_backend::write_onnx(g, dir, wo); });
      progress.finish();
      result.weight_bytes_written += written.data_bytes;
      // The contract as written: the ort profile derives positions in the graph (no position_ids input).
      tasks::Component contract{c.role, c.file_stem, c.graph, {}, c.outputs, c.shared_buffers};
      for (const auto& in : c.inputs)
        if (g.find(in.name) && std::find(g.inputs().begin(), g.inputs().end(), *g.find(in.name)) != g.inputs().end())
          contract.inputs.push_back(in);
      manifest.add_component(contract, format, (fs::path(format) / wo.model_file).string(), passes_run);
      manifest.add_onnx_profile(c.role, profile, profile == "ort" || result.notes.empty() ? "" : result.notes.back());
      if (profile == "ort" && c.role == "decoder") {
        onnx_backend::GenaiConfigInput gi;
        gi.checkpoint = m.checkpoint.get();
        gi.summary = m.summary();
        gi.cache = m.model->cache();
        gi.context_length = onnx_backend::ort_context_length(*m.checkpoint, c.graph);
        gi.model_file = wo.model_file;
        gi.graph = &g;
        write_text_file(dir / "genai_config.json", onnx_backend::genai_config(gi).dump(4) + "\n");
      }
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
  const bool has_onnx = std::find(opt.recipe.formats.begin(), opt.recipe.formats.end(), "onnx") != opt.recipe.formats.end();
  const bool has_openvino =
      std::find(opt.recipe.formats.begin(), opt.recipe.formats.end(), "openvino") != opt.recipe.formats.end();
  if (opt.verify && f32_weight_bytes > opt.verify_max_bytes) {
    result.verify_summary = fmt::format(
        "not verified: {} of f32 weights is above the built-in check's limit of {} (it holds the model twice); "
        "run `hfx verify {}`",
        human_bytes(f32_weight_bytes), human_bytes(opt.verify_max_bytes), opt.out_dir.string());
  } else if (opt.verify) {
    std::vector<std::string> summaries;
#ifdef HFX_HAVE_OPENVINO
    if (has_openvino) summaries.push_back(check_openvino(m, staged.path() / "openvino", opt.recipe));
#else
    (void)has_openvino;
#endif
    if (has_onnx) {
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
          fail(ErrorKind::Mismatch,
               "the export does not match its reference ({}): {}: {} (nothing was written; --no-verify skips this check)",
               rt, c.name, c.detail);
    }
    summaries.insert(summaries.begin(), fmt::format("verified against the reference executor, artifact run on {}: {} checks passed",
                                                    fmt::join(runtimes, ", "), checks));
    }
    result.verify_summary = fmt::format("{}", fmt::join(summaries, "; "));
  }
  result.files = list_files(staged.path());
  staged.commit();
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace hfx::pipeline
