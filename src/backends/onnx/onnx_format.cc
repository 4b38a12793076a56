// The ONNX backend as a unit: `ort` or `portable` lowering (docs/onnx_profiles.md), the writer
// (backends/onnx), the built-in check (verify_export on two shapes and check_tokens greedy tokens), and its
// runtimes: hfx's reference executor over the graphs read back, and ONNX Runtime (through the python
// driver `hfx verify` uses; ONNX Runtime's wheel ships no C/C++ headers).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "backends/onnx/genai_whisper.h"
#include "models/seq2seq.h"
#include "backends/onnx/onnx_reader.h"
#include "backends/onnx/onnx_writer.h"
#include "backends/onnx/ort_profile.h"
#include "core/error.h"
#include "core/files.h"
#include "core/progress.h"
#include "passes/pass.h"
#include "passes/precision.h"
#include "pipeline/backend.h"
#include "backends/onnx/onnx_preflight.h"
#include "backends/onnx/onnx_verify.h"
#include "pipeline/backend_support.h"
#include "pipeline/manifest.h"
#include "pipeline/runtime_probe.h"
#include "pipeline/verify.h"
#include "runtime/tested_runtimes.h"

namespace fs = std::filesystem;

namespace hfx::pipeline {

namespace {

// Measured with onnxruntime-genai 0.18.0 on a `--static-cache --max-cache-len 64` export, with the config
// written as before (growing buffers) and with past_present_share_buffer: genai feeds attention_mask at the
// sequence's length either way ("Got invalid dimensions for input: attention_mask ... Got: 5 Expected:
// 64"), and none of its inputs carries the cache_position slots the graph writes.
constexpr const char* kNoGenaiForStaticCache =
    "no genai_config.json: onnxruntime-genai 0.18 does not run hfx's static-cache contract (it feeds "
    "attention_mask at the sequence's length, not max_cache_len, and has no cache_position input); export without "
    "--static-cache for onnxruntime-genai";

// The runtime the built-in check runs the written files on, and how its summary names it.
struct CheckRuntime {
  std::string runtime = "reference";
  std::string python;   // the driver's interpreter for onnxruntime ("" = driver_python's default)
  std::string summary;  // "checked on ..."
};

// The interpreter check_runtime probes for onnxruntime ("" with --verify-runtime reference): the
// driver's with --verify-runtime onnxruntime, else the one the user's shell runs.
std::string probed_python(const ExportOptions& opt) {
  if (opt.verify_runtime == "reference") return "";
  return opt.verify_runtime == "onnxruntime" ? driver_python("") : export_check_python();
}

// --verify-runtime reference: the files run on the reference executor (the way to skip the real
// runtime); onnxruntime: on ONNX Runtime, through the driver's interpreter, failing when it cannot run;
// unset: on ONNX Runtime whenever $HFX_PYTHON (else python3) imports onnxruntime (probed once), else on
// the reference executor. Either way the oracle's side is the reference executor on the checkpoint.
// Where ONNX Runtime runs, the files do not also run on the reference executor: the runtime they are
// written for is the proof, and the second pass cost more than the export (2.8 s against 2.3 s for the
// f32 Qwen3-0.6B shape: the artifact's 2.3 GB of f32 weights read once per greedy step).
CheckRuntime check_runtime(const ExportOptions& opt) {
  CheckRuntime plan;
  auto on_ort = [&](const std::string& python) {
    plan.runtime = "onnxruntime";
    plan.python = python;
    const auto version = onnxruntime_version(driver_python(python));
    plan.summary = fmt::format("checked on ONNX Runtime {}", version.value_or("(version unknown)"));
  };
  const std::string python = probed_python(opt);
  if (opt.verify_runtime == "reference") {
    plan.summary = "checked on hfx's reference executor only (--verify-runtime reference)";
  } else if (opt.verify_runtime == "onnxruntime") {
    on_ort("");
  } else if (onnxruntime_version(python)) {
    on_ort(python);
  } else {
    plan.summary = fmt::format("checked on hfx's reference executor only (ONNX Runtime not found for {}; set HFX_PYTHON "
                               "to a Python with onnxruntime)",
                               python);
  }
  return plan;
}

// A numbers check whose differences are not finite (outputs NaN or Inf, on the artifact or on the
// reference), read from what verify measured rather than from its text: max_abs is recorded as the
// string "inf" when it is not finite, mean_abs as the number itself.
bool non_finite_difference(const CheckResult& c) {
  const auto& m = c.measured;
  if (m.contains("max_abs") && m["max_abs"].is_string()) return true;
  return m.contains("mean_abs") && m["mean_abs"].is_number() && !std::isfinite(m["mean_abs"].get<double>());
}

// Reasons that share their subject are said once: "static cache (a); static cache (b)" reads
// "static cache (a; b)" (F#19), and a reason repeated per layer appears once.
std::string merged_reasons(const std::vector<std::string>& reasons) {
  std::vector<std::pair<std::string, std::vector<std::string>>> by_subject;  // in first-seen order
  for (const auto& r : reasons) {
    const auto open = r.find(" (");
    const bool bracketed = open != std::string::npos && r.ends_with(")");
    const std::string subject = bracketed ? r.substr(0, open) : r;
    const std::string detail = bracketed ? r.substr(open + 2, r.size() - open - 3) : "";
    auto it = std::find_if(by_subject.begin(), by_subject.end(), [&](const auto& e) { return e.first == subject; });
    if (it == by_subject.end()) it = by_subject.insert(by_subject.end(), {subject, {}});
    if (!detail.empty() && std::find(it->second.begin(), it->second.end(), detail) == it->second.end())
      it->second.push_back(detail);
  }
  std::vector<std::string> out;
  for (const auto& [subject, details] : by_subject)
    out.push_back(details.empty() ? subject : fmt::format("{} ({})", subject, fmt::join(details, "; ")));
  return fmt::format("{}", fmt::join(out, "; "));
}

// The lowering a component gets: the requested profile, or portable where ort cannot express the
// model, with the note that says why.
struct ProfileChoice {
  std::string profile;
  std::string fallback;  // empty when the requested profile is used
  // ort for a hybrid: its recurrent layers' fused ops (passes/ort_state_ops.cc), attention portable.
  bool state_ops = false;
};

ProfileChoice choose_profile(const LoadedModel& m, const tasks::Component& c, const std::string& requested) {
  if (requested != "ort") return {requested, ""};
  if (c.role == "encoder")  // bidirectional attention over padding: the fused ops are causal
    return {"portable", fmt::format("onnx profile ort: {} is an encoder, written with the portable profile (the fused "
                                    "lowering is for causal attention)", m.summary().model_type)};
  if (tasks::first_of_kind(c.state, tasks::StateKind::CrossAttentionKey))
    return {"portable", fmt::format("onnx profile ort: {} {} is an encoder-decoder's step, written with the portable "
                                    "profile (the fused lowering is for decoder-only attention)",
                                    m.summary().model_type, c.role)};
  // A hybrid's convolution (or recurrent) state reads the step's positions in order: the ort profile
  // rolls a left-padded row's tokens to the front for GroupQueryAttention, which would carry pads
  // into the state. Its attention keeps the portable lowering; its recurrent layers get ONNX
  // Runtime's fused state ops.
  for (const auto& p : c.state)
    if (p.spec.update == tasks::StateUpdate::Replace)
      return {"ort",
              fmt::format("onnx profile ort: {} {}: its causal convolutions and scans are com.microsoft "
                          "CausalConvWithState and LinearAttention; attention keeps the portable lowering: its {} ({}) "
                          "reads the step's positions in order, which GroupQueryAttention's left-padding roll would reorder",
                          m.summary().model_type, c.role, tasks::state_kind_name(p.spec.kind),
                          tasks::name_glob(tasks::state_pattern(tasks::state_names_named(m.model.decoder().state_names()),
                                                                p.spec.kind).past)),
              true};
  const auto blockers = passes::ort_profile_blockers(c.graph);
  if (blockers.empty()) return {"ort", ""};
  return {"portable", fmt::format("onnx profile ort: {} {} falls back to the portable profile: {}", m.summary().model_type,
                                  c.role, merged_reasons(blockers))};
}

// onnxruntime-genai loads the folder with either lowering (a decoder asked for with the ort profile),
// unless it carries a recurrent state of a model genai does not run: it drives Qwen3.5's gated
// delta-net (its RecurrentState) but has no Mamba model (docs/ssm.md).
bool writes_genai_config(const LoadedModel& m, const tasks::Component& c, const std::string& requested) {
  const bool genai_runs_its_state = !tasks::first_of_kind(c.state, tasks::StateKind::Recurrent) ||
                                    onnx_backend::genai_runs_recurrent_state(m.summary().model_type);
  return requested == "ort" && c.role == "decoder" && m.task->generative() && genai_runs_its_state;
}

bool genai_layout(const Recipe& r) { return r.options.text("onnx_layout") == "genai"; }

// The genai layout is an encoder-decoder's (its Whisper model); a decoder's genai_config.json comes
// with the ort profile. (The seq2seq task refuses a text encoder-decoder itself.)
void refuse_genai_layout_for(const LoadedModel& m, const Recipe& r) {
  if (genai_layout(r) && !m.model.exposes(models::ModuleKind::Seq2Seq))
    bad_input("--onnx-layout genai is onnxruntime-genai's Whisper layout; {} is not an encoder-decoder (its "
              "genai_config.json comes with --onnx-profile ort, the default)", m.summary().model_type);
}

// The task's inputs that graph `g` (the component as lowered) still takes.
std::vector<tasks::IoSpec> inputs_of(const tasks::Component& c, const ir::Graph& g) {
  std::vector<tasks::IoSpec> kept;
  for (const auto& in : c.inputs)
    if (g.find(in.name) && std::find(g.inputs().begin(), g.inputs().end(), *g.find(in.name)) != g.inputs().end())
      kept.push_back(in);
  return kept;
}

// The ort profile's fused lowering of component `c`: its cos/sin caches as long as the context the export
// serves.
passes::OrtContribOptions ort_options(const tasks::Component& c, const LoadedModel& m) {
  return {onnx_backend::ort_context_length(*m.checkpoint, c.graph)};
}

// --onnx-recurrence scan: the recurrences as ONNX Scans (passes/scan_recurrences.cc), for the portable
// lowering of a model that has them; refused in one line elsewhere.
bool scan_recurrences(const LoadedModel& m, const tasks::Component& c, const Recipe& r, const std::string& profile) {
  if (r.options.text("onnx_recurrence") != "scan") return false;
  if (profile != "portable")
    bad_input("--onnx-recurrence scan is a lowering of the portable profile (--onnx-profile portable); the {} profile "
              "writes {} {}'s recurrences as ONNX Runtime's LinearAttention", profile, m.summary().model_type, c.role);
  if (!passes::has_recurrences(c.graph))
    bad_input("--onnx-recurrence scan: {} {} has no recurrence to write as a Scan (a gated delta rule or a Mamba "
              "scan)", m.summary().model_type, c.role);
  return true;
}

class OnnxBackend final : public Backend {
 public:
  BackendInfo info() const override {
    BackendInfo i;
    i.name = "onnx";
    i.status = "available (ai.onnx opset 21, IR 10; --onnx-opset 23: IR 11)";
    i.files = "onnx/model.onnx + model.onnx_data (or prefill.onnx + decode.onnx), genai_config.json (ort profile, "
              "not with --static-cache)";
    i.options = {
        {"--split-prefill", "split_prefill", "prefill.onnx + decode.onnx instead of one decoder graph"},
        {"--static-cache --max-cache-len N", "static_cache, max_cache_len", "fixed-size KV buffers updated in place"},
        {"--dtype f32|f16|bf16", "dtype", "weight dtype"},
        {"--quantize int4|int8[:block=N|:channel][:sym|:asym][:accuracy=N]", "quantize",
         "weight-only quantization: portable: DequantizeLinear (INT4/UINT4/INT8/UINT8, blocked) + MatMul; ort: MatMulNBits"},
        {"--quantize-lm-head, --quantize-embeddings", "quantize_lm_head, quantize_embeddings",
         "lm_head / embedding tables quantized too (embeddings: ort profile only, GatherBlockQuantized; a tied lm_head "
         "reads the same bytes)"},
        {"--dim NAME=MIN:MAX, --dynamic", "dims, dynamic", "the shape contract's bounds"},
    };
    i.runtimes = {"reference", "onnxruntime"};
    i.tested = fmt::format("onnxruntime {} (CPU), onnxruntime-genai {} (--onnx-profile ort), hfx's reference executor",
                           runtime::kTestedOnnxRuntime, runtime::kTestedOnnxRuntimeGenai);
    return i;
  }

  std::vector<FormatOption> options() const override {
    return {
        {.field = "onnx_profile",
         .flag = "--onnx-profile",
         .noun = "onnx profile",
         .values = {"ort", "portable"},
         .default_value = "",  // complete_options: follows the opset
         .recipe_position = 2,
         .per_component = true,
         .shapes_contract = true,
         .help = "onnx: `ort` (default: ONNX Runtime's fused GroupQueryAttention / SimplifiedLayerNormalization, packed "
                 "q|k|v, genai_config.json; falls back to portable per model, e.g. encoders and --static-cache; its "
                 "com.microsoft ops fail onnx.checker's full check) or `portable` (standard ops only, for other ONNX "
                 "runtimes; the default with --onnx-opset 23)"},
        {.field = "onnx_opset",
         .flag = "--onnx-opset",
         .noun = "onnx opset",
         .kind = FormatOption::Kind::Integer,
         .values = {"21", "23"},
         .default_value = 21,
         .recorded_when_written = false,  // recipes from before --onnx-opset keep their bytes
         .recipe_position = 4,
         .shapes_contract = true,
         .help = "onnx: ai.onnx opset 21 (default) or 23 (RMSNormalization, RotaryEmbedding, Attention where they are "
                 "exact; the rest decomposed)"},
        {.field = "onnx_recurrence",
         .flag = "--onnx-recurrence",
         .noun = "onnx recurrence",
         .values = {"chunked", "scan"},
         .default_value = "chunked",
         .recorded_when_written = false,  // recipes from before --onnx-recurrence keep their bytes
         .recipe_position = 6,
         .help = "onnx, portable profile, state-space and gated delta-net models: `chunked` (default: the recurrences "
                 "as loop-free chunked products, no loop op; memory grows with chunk^2, and with the prompt^1.5 for "
                 "Mamba-1's sqrt chunks) or `scan` (an ONNX Scan over time whose body is Transformers' one-step "
                 "update: memory linear in the prompt, one step per token; on ONNX Runtime a faster prefill than "
                 "chunked, slower than the ort profile's fused ops at Qwen3.5's widths and faster on Mamba-1's many "
                 "1 x 1 heads: docs/benchmarks.md). The causal conv stays loop-free either way"},
        {.field = "onnx_layout",
         .flag = "--onnx-layout",
         .noun = "onnx layout",
         .values = {"optimum", "genai"},
         .default_value = "optimum",
         .recorded_when_written = false,  // recipes from before --onnx-layout keep their bytes
         .recipe_position = 5,
         .shapes_contract = true,
         .help = "onnx, encoder-decoders: `optimum` (default: encoder_model + decoder_model + decoder_with_past_model + "
                 "decoder_model_merged, as Optimum and transformers.js load them) or `genai` (Whisper only: "
                 "onnxruntime-genai's encoder.onnx + decoder.onnx + genai_config.json)"},
    };
  }

  // --onnx-layout picks an encoder-decoder's graphs, which every format of the export would then
  // write: genai's are for onnxruntime-genai alone.
  void shape_task(const FormatSettings& s, tasks::CausalLmOptions& task) const override {
    task.seq2seq_layout = s.text("onnx_layout");
  }

  // The profile when none is named: `ort` (ONNX Runtime is the ONNX target hfx verifies against),
  // `portable` with opset 23, whose point is the standard fused ops.
  void complete_options(FormatSettings& s) const override {
    if (s.text("onnx_profile").empty())
      s.set_text(*find_format_option("onnx_profile"), s.integer("onnx_opset") == 23 ? "portable" : "ort", "--onnx-profile");
  }

  passes::PrecisionTarget precision_target(const Recipe& recipe, const std::string& role) const override {
    return recipe.text_option("onnx_profile", role) == "ort" ? passes::PrecisionTarget::OrtContrib : passes::PrecisionTarget::Portable;
  }

  std::vector<std::string> passes() const override { return {"decompose-composites", "fold-weight-transforms"}; }

  std::optional<Preflight> preflight(const LoadedModel& m) const override { return onnx_preflight(m, passes()); }

  std::optional<ir::Graph> read_graph(const std::filesystem::path& file) const override { return onnx_backend::read_onnx(file); }

  Plan plan(const tasks::Component& c, const LoadedModel& m, const Recipe& recipe, bool contract) const override {
    refuse_genai_layout_for(m, recipe);
    const std::string requested = recipe.text_option("onnx_profile", c.role);
    const ProfileChoice choice = choose_profile(m, c, requested);
    Plan p{"profile " + choice.profile, {}, c.inputs, c.outputs};
    if (scan_recurrences(m, c, recipe, choice.profile)) p.layout += ", recurrences as ONNX Scan";
    if (genai_layout(recipe)) p.layout += ", onnxruntime-genai's layout";
    if (!choice.fallback.empty()) p.notes.push_back(choice.fallback);
    if (writes_genai_config(m, c, requested) && !c.shared_buffers.empty()) p.notes.push_back(kNoGenaiForStaticCache);
    if (contract && choice.profile == "ort" && !choice.state_ops) {
      // The fused lowering derives positions in the graph: its inputs are the task's minus what it no
      // longer reads (position_ids, except for learned position tables).
      const ir::Graph g = passes::ort_contrib_ops(c.graph, ort_options(c, m));
      p.inputs = inputs_of(c, g);
    }
    return p;
  }

  void write_component(const tasks::Component& c, ExportJob& job) const override {
    const LoadedModel& m = job.model;
    refuse_genai_layout_for(m, job.recipe);
    if (genai_layout(job.recipe) && job.recipe.formats.size() > 1)
      bad_input("--onnx-layout genai writes onnxruntime-genai's Whisper graphs, for it alone: export {} without it, in "
                "another folder", fmt::join(job.recipe.formats, ","));
    std::vector<std::string> passes_run;
    // The graph after the fused-op passes: ONNX Runtime's contrib ops first (--onnx-profile ort, where
    // the model allows them), then the standard fused ops.
    std::optional<ir::Graph> lowered;
    // Quantized Linear layers follow the requested profile even where attention falls back: ONNX
    // Runtime runs MatMulNBits for the ort profile whatever the attention is (and `hfx verify` builds
    // its reference from the recipe's profile).
    const std::string requested = job.recipe.text_option("onnx_profile", c.role);
    // The fallback note was printed before the work (plan); it is recorded in the manifest below.
    const ProfileChoice choice = choose_profile(m, c, requested);
    const std::string& profile = choice.profile;
    const std::string& fallback = choice.fallback;
    if (scan_recurrences(m, c, job.recipe, profile)) {
      lowered = with_context(c.role + ": pass scan-recurrences", [&] { return passes::scan_recurrences(c.graph); });
      passes_run.push_back("scan-recurrences");
    } else if (profile == "ort" && choice.state_ops) {
      lowered = with_context(c.role + ": pass ort-state-ops", [&] { return passes::ort_state_ops(c.graph); });
      passes_run.push_back("ort-state-ops");
    } else if (profile == "ort") {
      lowered = with_context(c.role + ": pass ort-contrib-ops",
                             [&] { return passes::ort_contrib_ops(c.graph, ort_options(c, m)); });
      passes_run.push_back("ort-contrib-ops");
    }
    // Standard fused ops: LayerNormalization and Gelu at every opset; with --onnx-opset 23 the portable
    // lowering (also where ort fell back) writes the opset-23 fused ops where they are exact. An
    // ort-fused graph stays at opset 21 (its contrib ops were measured there).
    const bool ort_fused = profile == "ort" && lowered.has_value();
    const int64_t opset = ort_fused ? 21 : job.recipe.options.integer("onnx_opset");
    std::string kept_note;
    {
      std::vector<std::string> kept;
      lowered = with_context(c.role + ": pass onnx-standard-ops",
                           [&] { return passes::onnx_standard_ops(lowered ? *lowered : c.graph, opset, &kept); });
      passes_run.push_back("onnx-standard-ops");
      if (!kept.empty()) {
        kept_note = fmt::format("onnx opset 23: {} {} keeps decomposed: {}", m.summary().model_type, c.role, fmt::join(kept, "; "));
        job.result.notes.push_back(kept_note);
      }
    }
    ir::Graph g = with_context(c.role, [&] {
      return passes::run_pipeline(lowered ? *lowered : c.graph, passes(), &passes_run);
    });
    const quant::PrecisionSpec& precision = job.recipe.precision_for(c.role);
    if (!precision.is_default()) {
      g = with_context(c.role, [&] { return passes::apply_precision(g, precision, precision_target(job.recipe, c.role)); });
      passes_run.push_back("apply-precision");
    }
    if (profile == "ort") {  // after the precision: what stays an f32 product reads its stored [N, K] weight
      g = with_context(c.role + ": pass ort-fused-matmul", [&] { return passes::ort_fused_matmul(g); });
      passes_run.push_back("ort-fused-matmul");
    }
    const fs::path dir = job.staging / "onnx";
    onnx_backend::OnnxWriteOptions wo;
    wo.model_file = c.file_stem + ".onnx";
    wo.data_file = c.file_stem + ".onnx_data";
    wo.opset = opset;
    wo.metadata = component_metadata(m, c, g);
    wo.metadata["hfx.onnx_profile"] = profile;
    wo.written = &job.written;
    wo.share_data_files = !c.own_weight_files;
    auto progress = weight_progress("onnx " + c.role, g);
    wo.on_weight_written = [&](int64_t n, int64_t bytes) { progress->advance(n, bytes); };
    auto written = with_context("onnx " + c.role, [&] { return onnx_backend::write_onnx(g, dir, wo); });
    progress->finish();
    job.result.add_weight_bytes("onnx", graph_weight_bytes(g) - written.shared_bytes);  // stored once when graphs share them
    // Hashed as they were written: the manifest does not read them back.
    job.manifest.add_file_digest(fs::path("onnx") / wo.model_file, written.model_sha256, fs::file_size(written.model_path));
    for (const auto& copy : written.data_copies)  // the checkpoint's files themselves (checkpoint_mirror.h)
      job.manifest.add_file_copy(fs::path("onnx") / copy.file.filename(), copy.copy_of, copy.size);
    if (written.data_copies.empty() && !written.data_path.empty())
      job.manifest.add_file_digest(fs::path("onnx") / wo.data_file, written.data_sha256, uintmax_t(written.data_bytes));
    job.result.source_bytes_read += written.source_bytes_read;
    for (const auto& line : written.non_finite) {
      job.result.notes.push_back("non-finite weight, written as the checkpoint holds it: " + line);
      job.result.non_finite_weights.push_back(line);
    }
    // The contract as written: the ort profile derives positions in the graph (no position_ids input)
    // and bounds the total length by its rotary caches' rows.
    tasks::Component contract{c.role, c.file_stem, c.graph, inputs_of(c, g), c.outputs, c.shared_buffers, c.state};
    contract.graph.symbols() = g.symbols();
    job.manifest.add_component(contract, "onnx", (fs::path("onnx") / wo.model_file).string(), passes_run);
    // onnxruntime-genai loads the folder with either lowering: a model whose attention fell back to
    // portable gets its config too, with growing (not shared) cache buffers. Not a static cache: its
    // contract (cache_position slots, a max-length mask) is one genai does not drive.
    const bool genai = writes_genai_config(m, c, requested);
    const std::string genai_note = genai && !c.shared_buffers.empty() ? std::string(kNoGenaiForStaticCache) : std::string();  // said by plan()
    std::vector<std::string> profile_notes;
    for (const std::string* n : std::initializer_list<const std::string*>{&fallback, &kept_note, &genai_note})
      if (!n->empty()) profile_notes.push_back(*n);
    {
      // hfx.json's onnx_profiles: the profile each component was written with, and why when it is not
      // the requested one.
      nlohmann::ordered_json entry = {{"role", c.role}, {"profile", profile}};
      if (!profile_notes.empty()) entry["note"] = fmt::format("{}", fmt::join(profile_notes, "; "));
      job.manifest.add_format_entry("onnx_profiles", std::move(entry));
    }
    // The genai layout's config, once its decoder (written last) is.
    if (genai_layout(job.recipe) && m.model.exposes(models::ModuleKind::Seq2Seq) && c.role == "decoder_with_past") {
      const models::Seq2SeqLm& s2s = m.model.seq2seq();
      onnx_backend::GenaiWhisperInput gi;
      gi.checkpoint = m.checkpoint.get();
      gi.summary = m.summary();
      gi.decoder_layers = s2s.decoder_layers();
      gi.decoder_heads = s2s.heads();
      gi.head_dim = s2s.head_dim();
      gi.decoder_start_token_id = s2s.decoder_start_token_id();
      gi.context_length = s2s.position_limits().target.value_or(0);
      gi.decoder_file = wo.model_file;
      write_text_file(dir / "genai_config.json", onnx_backend::genai_whisper_config(gi).dump(4) + "\n");
      write_text_file(dir / "audio_processor_config.json",
                      onnx_backend::genai_whisper_audio_processor(s2s.source().mel_bins).dump(4) + "\n");
    }
    if (genai && genai_note.empty()) {
      onnx_backend::GenaiConfigInput gi;
      gi.checkpoint = m.checkpoint.get();
      gi.summary = m.summary();
      gi.cache = m.model.decoder().cache();
      gi.context_length = onnx_backend::ort_context_length(*m.checkpoint, c.graph);
      gi.model_file = wo.model_file;
      gi.graph = &g;
      gi.past_present_share_buffer = profile == "ort" && !choice.state_ops;  // GroupQueryAttention's buffers
      gi.state = c.state;
      gi.names = &tasks::state_names_named(m.model.decoder().state_names());
      write_text_file(dir / "genai_config.json", onnx_backend::genai_config(gi).dump(4) + "\n");
    }
  }

  // A quick proof before the export is published: two shapes per component and 8 greedy tokens (4 at
  // model scale: check_tokens) against the reference executor on the checkpoint, run on ONNX Runtime
  // itself when this machine has it (a graph the real runtime refuses is never published as checked),
  // else on hfx's reference executor. `hfx verify` runs the full matrix, on both.
  std::string check(ExportJob& job, const ExportOptions& opt) const override {
    VerifyOptions vo;
    vo.tokens = check_tokens(job, "onnx");
    vo.reexport = false;
    vo.full_shape_matrix = false;
    vo.rehash = false;  // this process hashed every file as it wrote it
    const CheckRuntime plan = check_runtime(opt);
    vo.python = plan.python;
    vo.model_dir = job.model.checkpoint->dir();  // the staged manifest's source.path is relative to the final folder
    size_t checks = 0;
    // The runtime against hfx's reference executor, then (--verify-oracle) against Transformers: the
    // summary names every oracle that ran.
    struct Pass {
      std::string runtime, oracle;
    };
    std::vector<Pass> passes = {{plan.runtime, "reference"}};
    if (opt.verify_oracle != "reference") passes.push_back({plan.runtime, opt.verify_oracle});
    std::string oracles = "hfx's reference executor";
    for (const auto& [rt, oracle] : passes) {
      vo.runtime = rt;
      vo.oracle = oracle;
      if (oracle != "reference" && plan.python.empty()) vo.python = export_check_python();
      // Where the real runtime refused or differed, say how to publish without it.
      const std::string skip = rt == "reference" ? "--no-verify skips this check"
                                                 : "--verify-runtime reference checks on hfx's reference executor only, "
                                                   "--no-verify skips this check";
      VerifyReport report;
      try {
        report = verify_export(job.staging, vo);
      } catch (const Error& e) {
        if (rt == "reference" && oracle == "reference") throw;
        if (oracle != "reference")
          throw Error(e.kind(), fmt::format("{} (nothing was written; --verify-oracle reference checks against hfx's "
                                            "reference executor only)", e.describe()));
        throw Error(e.kind(), fmt::format("{} (nothing was written; {})", e.describe(), skip));
      }
      checks += report.checks.size();
      if (oracle != "reference") {
        const bool ran = report.oracle != "hfx's reference executor";
        std::string note;
        for (const auto& c : report.checks)
          if (c.name == "oracle") note = c.detail;
        oracles += ran ? " and " + report.oracle : fmt::format(" ({})", note);
      }
      for (const auto& c : report.checks)
        if (!c.passed) {
          if (!job.result.non_finite_weights.empty() && non_finite_difference(c))
            bad_input("the export cannot be verified: its outputs are not finite ({}: {}) because the checkpoint holds "
                      "non-finite weights: {} (the checkpoint's values, not the export's; --no-verify writes it anyway)",
                      c.name, c.detail, fmt::join(job.result.non_finite_weights, "; "));
          fail(ErrorKind::Mismatch, "the export does not match its reference ({}{}): {}: {} (nothing was written; {})", rt,
               oracle == "reference" ? "" : ", against " + report.oracle, c.name, c.detail, skip);
        }
    }
    return fmt::format("{}; oracle: {}: {} checks passed", plan.summary, oracles, checks);
  }

  // While the files are written: the ONNX Runtime driver the check will run, started (its first line is
  // the probe check_runtime reads), so the check does not wait for an interpreter and its imports.
  std::function<void()> check_prelude(const ExportOptions& opt) const override {
    const std::string python = probed_python(opt);
    if (python.empty()) return {};
    return [python] { start_ort_driver(python); };
  }

  std::unique_ptr<runtime::StepRunner> make_runner(const ArtifactComponent& c, const std::string& rt) const override {
    if (rt == "reference") return runtime::make_executor_runner(c.graph);
    unsupported("onnx: the {0} runtime runs through `hfx verify --runtime {0}` (python driver), not as a step runner "
                "here; `python python/hfx_ort.py OUT --prompt TEXT` generates with ONNX Runtime",
                rt);
  }

  // Verify on the reference executor runs the graphs read back in this process; on ONNX Runtime, the
  // python driver (backends/onnx_verify.cc).
  std::unique_ptr<VerifySession> verify_session(const SessionContext& ctx) const override {
    if (ctx.runtime == "reference") return make_executor_session(*this, ctx);
    if (ctx.runtime == "onnxruntime") return make_onnxruntime_session(ctx);
    unsupported("onnx: no runtime `{}` (runtimes: reference, onnxruntime)", ctx.runtime);
  }

  Signature signature(const ArtifactComponent& c) const override {
    auto ports = [&](const std::vector<ir::ValueId>& ids) {
      std::vector<std::pair<std::string, std::string>> out;
      for (auto id : ids) {
        std::vector<std::string> dims;
        for (const auto& d : c.graph.value(id).shape) dims.push_back(d.str());
        out.emplace_back(c.graph.value(id).name, fmt::format("{}[{}]", dtype_name(c.graph.value(id).dtype), fmt::join(dims, ",")));
      }
      return out;
    };
    return {ports(c.graph.inputs()), ports(c.graph.outputs())};
  }

  // The reference executor runs every node with its own kernel; ONNX Runtime's placement comes from
  // its profiler through `hfx verify --runtime onnxruntime`.
  Placement placement(const ArtifactComponent& c, const std::string& rt) const override {
    if (rt != "reference") unsupported("onnx: placement on {} is measured by its python driver", rt);
    Placement p;
    for (const auto& n : c.graph.nodes()) ++p[n.op]["reference"];
    return p;
  }
};

}  // namespace

HFX_REGISTER_BACKEND(OnnxBackend, 0);

}  // namespace hfx::pipeline
