// `hfx verify --runtime onnxruntime`: ONNX Runtime runs the export through python/hfx_ort_runner.py
// (its wheel ships no C/C++ headers), every shape case and the greedy prompts in one driver job, the
// first case's run profiled; the driver reports where each node ran and the time its first generation
// step took, which is the load time verify reports (ONNX Runtime builds its session then).
#include "backends/onnx/onnx_verify.h"

#include <fmt/format.h>

#include "core/files.h"
#include "core/progress.h"
#include "io/safetensors_write.h"
#include "pipeline/runtime_probe.h"
#include "pipeline/verify.h"
#include "pipeline/verify_cases.h"
#include "runtime/tested_runtimes.h"

namespace fs = std::filesystem;

namespace hfx::pipeline {

namespace {

// What the driver is told of the graphs, so it does not parse every model file again with the onnx
// package (0.75 s on the Qwen3-0.6B shape); the graphs were read back from the files.
//  - quantized: a quantized product or table. The driver then keeps ONNX Runtime's weight prepacking
//    (MatMulNBits' int8-activation kernels run on prepacked weights only) and turns it off otherwise.
//  - casts_weights: a weight cast at use (--dtype bf16: stored bf16, computed in f32). The driver then
//    keeps ConstantFolding, which casts them once at load instead of at every run; graphs that cast none
//    skip it (python/hfx_ort_runner.py NO_FOLDING).
struct GraphFacts {
  bool quantized = false, casts_weights = false;
};

GraphFacts graph_facts(const Artifact& artifact) {
  GraphFacts f;
  for (const auto& c : artifact.components)
    for (const auto& n : c.graph.nodes()) {
      f.quantized = f.quantized || n.op == "MatMulNBits" || n.op == "GatherBlockQuantized" || n.op == "DequantizeLinear";
      f.casts_weights = f.casts_weights || (n.op == "Cast" && c.graph.weight(n.input(0)));
    }
  return f;
}

class OrtSession final : public VerifySession {
 public:
  explicit OrtSession(const SessionContext& ctx) : ctx_(ctx) {}

  RuntimeFacts facts() const override {
    RuntimeFacts f;
    f.graphs_read_back = true;
    f.exact_dims = true;
    // Its CPU kernel for MatMulNBits accuracy_level 4 rounds the activations to int8 (the reference
    // rounds them alike: runtime/kernels_quant.cc).
    f.int8_activations = "ONNX Runtime";
    f.runs_timing_note = "with the python driver's start";
    return f;
  }

  SessionResult run(const SessionWork& w) override {
    const fs::path& scratch = w.scratch;
    nlohmann::json job;
    job["runs"] = nlohmann::json::array();
    for (size_t i = 0; i < w.cases.size(); ++i) {
      const auto& c = w.cases[i];
      const auto in = scratch / fmt::format("in{}.safetensors", i), o = scratch / fmt::format("out{}.safetensors", i);
      io::write_safetensors(in, own_inputs(c.component->graph, c.inputs));
      job["runs"].push_back({{"model", c.component->file.string()}, {"inputs", in.string()}, {"outputs", o.string()}});
    }
    const GraphFacts facts = graph_facts(ctx_.artifact);
    job["quantized"] = facts.quantized;
    job["casts_weights"] = facts.casts_weights;
    if (w.generate)
      job["generate"] = {{"export", fs::absolute(ctx_.artifact.dir).string()},
                         {"prompts", w.prompts},
                         {"max_new_tokens", w.sampling.max_new_tokens}};
    write_text_file(scratch / "job.json", job.dump());
    Progress progress = Progress::steps("verify: ONNX Runtime on the artifact", 1, "driver runs");
    const nlohmann::json result = run_ort_driver(driver_python(ctx_.options.python), scratch / "job.json", scratch / "result.json");
    progress.advance(1, 0);
    progress.finish();
    runtime::warn_if_untested("onnxruntime", result.value("ort_version", "?"), runtime::kTestedOnnxRuntime);
    SessionResult r;
    for (size_t i = 0; i < w.cases.size(); ++i) r.outputs.push_back(io::load_safetensors(scratch / fmt::format("out{}.safetensors", i)));
    if (w.generate) {
      r.tokens = result["generate"]["tokens"].get<std::vector<std::vector<int64_t>>>();
      r.generate_s = result["generate"]["total_s"].get<double>();
      r.load_s = result["generate"]["cold_start_s"].get<double>();
    }
    // Where ONNX Runtime's profiler saw each node run: every one on the CPU provider is as intended.
    const auto& p = result.value("placements", nlohmann::json::object());
    std::vector<std::string> parts, off;
    for (const auto& [op, providers] : p.items())
      for (const auto& [prov, n] : providers.items()) {
        parts.push_back(fmt::format("{} x{} on {}", op, n.get<int>(), prov));
        if (prov != "CPUExecutionProvider") off.push_back(op);
      }
    r.placement.passed = off.empty() && !p.empty();
    r.placement.detail = fmt::format("onnxruntime {}: {}", result.value("ort_version", "?"), fmt::join(parts, ", "));
    r.placement.measured = p;
    return r;
  }

 private:
  SessionContext ctx_;
};

}  // namespace

std::unique_ptr<VerifySession> make_onnxruntime_session(const SessionContext& ctx) {
  return std::make_unique<OrtSession>(ctx);
}

}  // namespace hfx::pipeline
