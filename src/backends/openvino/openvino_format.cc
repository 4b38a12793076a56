// The OpenVINO backend as a unit (compiled only with the OpenVINO SDK): the IR after
// decompose-composites-keep-attention (SDPA stays) and fold-weight-transforms, stateful for decoders
// with a growing cache unless --stateless, written by ov::serialize (backends/openvino); the built-in
// check runs check_tokens greedy tokens on OpenVINO's CPU plugin (ov_runner.cc) against the reference
// executor; the runtime driver is that same ov::Core runner.
#include <fmt/format.h>

#include "backends/openvino/ov_writer.h"
#include "core/error.h"
#include "passes/pass.h"
#include "passes/precision.h"
#include "pipeline/backend.h"
#include "backends/openvino/openvino_options.h"
#include "pipeline/backend_support.h"
#include "pipeline/manifest.h"
#include "backends/openvino/ov_runner.h"
#include "runtime/tested_runtimes.h"

namespace fs = std::filesystem;

namespace hfx::pipeline {

namespace {

// `openvino_model.xml` for the one graph (the name OpenVINO GenAI and optimum-intel load),
// `openvino_<stem>_model.xml` for prefill/decode, `openvino_<stem>.xml` for a stem that already says
// `_model` (an encoder-decoder's: optimum-intel's openvino_encoder_model.xml, ...,
// openvino_decoder_model_merged.xml).
std::string openvino_file(const tasks::Component& c) {
  if (c.file_stem == "model") return "openvino_model.xml";
  return "openvino_" + c.file_stem + (c.file_stem.find("_model") != std::string::npos ? ".xml" : "_model.xml");
}

bool has_cross_state(const tasks::Component& c) {
  return tasks::first_of_kind(c.state, tasks::StateKind::CrossAttentionKey) != nullptr;
}

// An encoder-decoder's stateful layout is its merged decoder, which a static cache has none of.
void refuse_stateful_static_seq2seq(const Recipe& r, const tasks::Component& c) {
  if (r.options.flag("openvino_stateful") && has_cross_state(c) && !tasks::shared_buffers_of(c.state).empty())
    bad_input("openvino: an encoder-decoder's stateful layout is its merged decoder with a growing cache (optimum-intel's, "
              "WhisperPipeline's); with --static-cache add --stateless");
}

// Whether a component is written in the stateful layout: its state's past inputs and present outputs
// become variables, a `beam_idx` input reorders them. An encoder-decoder's stateful decoder is its
// merged decoder (optimum-intel's openvino_decoder_model.xml, which WhisperPipeline runs).
bool stateful(const Recipe& r, const tasks::Component& c) {
  refuse_stateful_static_seq2seq(r, c);
  bool has_cache = false;
  for (const auto& in : c.inputs) has_cache = has_cache || tasks::find_past(c.state, in.name);
  if (!r.options.flag("openvino_stateful") || !has_cache) return false;
  if (has_cross_state(c)) return c.role == "decoder_merged";
  if (c.role != "decoder" || !c.shared_buffers.empty())
    bad_input("openvino: the stateful layout needs one decoder graph with a growing cache, not the {} graph of "
              "--split-prefill/--static-cache; add --stateless", c.role);
  return true;
}

// The stateful layout of an encoder-decoder holds one decoder: its first-step and with-past graphs are
// not written (their steps are the stateful merged decoder's first and later calls).
bool stands_aside(const Recipe& r, const tasks::Component& c) {
  refuse_stateful_static_seq2seq(r, c);
  return r.options.flag("openvino_stateful") && has_cross_state(c) && c.role != "decoder_merged";
}

// The stateful decoder's file: optimum-intel's openvino_decoder_model.xml.
std::string openvino_file(const Recipe& r, const tasks::Component& c) {
  if (stateful(r, c) && has_cross_state(c)) return "openvino_decoder_model.xml";
  return openvino_file(c);
}

tasks::Component stateful_contract(const tasks::Component& c) {
  tasks::Component s{c.role, c.file_stem, c.graph, {}, {}, {}, {}};
  for (const auto& in : c.inputs)
    if (!tasks::find_past(c.state, in.name) && in.name != "use_cache_branch") s.inputs.push_back(in);
  s.inputs.push_back({"beam_idx", DType::I32, {Dim::sym("batch_size")}});
  for (const auto& out : c.outputs)
    if (!tasks::find_present(c.state, out.name)) s.outputs.push_back(out);
  return s;
}

// "2026.4.1" of "2026.4.1-22982-e213a147257-releases/2026/4": the build tag is noise in a summary (F#19).
std::string short_version(const std::string& v) { return v.substr(0, v.find('-')); }

class OpenVinoBackend final : public Backend {
 public:
  BackendInfo info() const override {
    BackendInfo i;
    i.name = "openvino";
    i.status = fmt::format("available (OpenVINO {}, ov::serialize, ops up to opset 16)", openvino_backend::openvino_version());
    i.files = "openvino/openvino_model.xml + openvino_model.bin (openvino_<prefill|decode>_model.xml with --split-prefill)";
    i.options = {
        {"--split-prefill, --static-cache, --dim, --dynamic", "", "as for onnx"},
        {"--dtype f16|bf16", "dtype", "Linear weights stored f16/bf16 (Constant -> Convert), computed in f32"},
        {"--quantize int4|int8[:block=N|:channel][:sym|:asym]", "quantize",
         "compressed weights (u4/i4/u8/i8 Constant -> Convert -> [Subtract zp] -> Multiply scale, groups of N)"},
        {"--quantize-lm-head, --quantize-embeddings", "quantize_lm_head, quantize_embeddings",
         "lm_head / embedding tables compressed too (a Gather over the table's decompression; a tied lm_head reads the "
         "same constants)"},
    };
    i.runtimes = {"openvino"};
    i.tested = fmt::format("openvino {0} (CPU, INFERENCE_PRECISION_HINT=f32, KV_CACHE_PRECISION=f32), openvino-genai {0} "
                           "LLMPipeline (PA and SDPA attention backends)", runtime::kTestedOpenVino);
    return i;
  }

  // Attention stays whole: it lowers to OpenVINO's ScaledDotProductAttention.
  std::vector<FormatOption> options() const override { return openvino_options(); }
  passes::PrecisionTarget precision_target(const Recipe&, const std::string&) const override {
    return passes::PrecisionTarget::OpenVino;
  }

  std::vector<std::string> passes() const override { return {"decompose-composites-keep-attention", "fold-weight-transforms"}; }

  Plan plan(const tasks::Component& c, const LoadedModel&, const Recipe& recipe, bool) const override {
    if (stands_aside(recipe, c)) {
      Plan p{"not written: the stateful decoder_model_merged runs its steps", {}, {}, {}};
      p.written = false;
      return p;
    }
    const bool state = stateful(recipe, c);
    const tasks::Component io = state ? stateful_contract(c) : c;
    return {state ? "stateful KV cache" : "", {}, io.inputs, io.outputs};
  }

  void write_component(const tasks::Component& c, ExportJob& job) const override {
    if (stands_aside(job.recipe, c)) return;
    std::vector<std::string> passes_run;
    ir::Graph g = with_context(c.role, [&] {
      return passes::run_pipeline(c.graph, passes(), &passes_run);
    });
    const quant::PrecisionSpec& precision = job.recipe.precision_for(c.role);
    if (!precision.is_default()) {
      g = with_context(c.role, [&] { return passes::apply_precision(g, precision, passes::PrecisionTarget::OpenVino); });
      passes_run.push_back("apply-precision");
    }
    openvino_backend::OvWriteOptions ow;
    ow.model_file = openvino_file(job.recipe, c);
    ow.metadata = component_metadata(job.model, c, g);
    ow.stateful = stateful(job.recipe, c);
    if (ow.stateful) ow.state = c.state;
    ow.written = &job.written;
    auto progress = weight_progress("openvino " + c.role, g);
    ow.on_weight_written = [&](int64_t n, int64_t bytes) { progress->advance(n, bytes); };
    auto written = with_context("openvino " + c.role, [&] { return openvino_backend::write_openvino(g, job.staging / "openvino", ow); });
    progress->finish();
    job.result.add_weight_bytes("openvino", graph_weight_bytes(g));
    job.result.source_bytes_read += written.source_bytes_read;
    job.manifest.add_component(ow.stateful ? stateful_contract(c) : c, "openvino", (fs::path("openvino") / ow.model_file).string(),
                               passes_run);
  }

  // Decoders: greedy tokens from OpenVINO's CPU plugin in f32 equal the reference executor's on the
  // checkpoint's graphs, for a left-padded batch of 2 when the contract allows it. Other components
  // (an encoder, an encoder-decoder's graphs): verify's first shape cases on OpenVINO.
  std::string check(ExportJob& job, const ExportOptions&) const override {
    const LoadedModel& m = job.model;
    const std::string version = short_version(openvino_backend::openvino_version());
    if (!m.task->generative())
      return fmt::format("openvino: {} checks passed on OpenVINO {} (CPU, f32) against the reference executor",
                         check_shape_cases(job, "openvino", "openvino", "OpenVINO " + version), version);
    const Recipe& r = job.recipe;
    const fs::path dir = job.staging / "openvino";
    const GreedyCheck done = check_greedy_tokens(
        job, "openvino", "OpenVINO",
        [&](const tasks::Component& c) {  // the same weights and forms as the IR
          return passes::apply_precision(c.graph, r.precision_for(c.role), passes::PrecisionTarget::OpenVino);
        },
        [&](const tasks::Component& c) { return runtime::make_openvino_runner(dir / openvino_file(r, c)); });
    return fmt::format("openvino: {} greedy tokens x {} rows on OpenVINO {} (CPU, f32) identical to the reference executor",
                       done.tokens, done.rows, version);
  }

  std::unique_ptr<runtime::StepRunner> make_runner(const ArtifactComponent& c, const std::string& rt) const override {
    HFX_CHECK(rt == "openvino", "openvino backend asked for runtime {}", rt);
    return runtime::make_openvino_runner(c.file);
  }

  Signature signature(const ArtifactComponent& c) const override {
    auto sig = runtime::openvino_signature(c.file);
    return {sig.inputs, sig.outputs};
  }

  Placement placement(const ArtifactComponent& c, const std::string&) const override {
    return runtime::openvino_exec_summary(c.file);
  }
};

}  // namespace

HFX_REGISTER_BACKEND(OpenVinoBackend, 1);

}  // namespace hfx::pipeline
