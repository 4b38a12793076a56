// What the backends of src/pipeline/backends share: each component's metadata (the contract as
// key/value pairs every format stores in its own way) and progress over a graph's weights.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/progress.h"
#include "ir/graph.h"
#include "pipeline/export.h"
#include "runtime/generate.h"

namespace hfx::pipeline {

// hfx.version, model type, task, role, each symbol's bounds and relations, shared buffers.
std::map<std::string, std::string> component_metadata(const LoadedModel& m, const tasks::Component& c, const ir::Graph& g);

// The bytes of `g`'s weights as stored (quantized ones packed; no file padding).
int64_t graph_weight_bytes(const ir::Graph& g);
// Progress over the weights of `g` (count and bytes), labelled `what`.
std::unique_ptr<Progress> weight_progress(const std::string& what, const ir::Graph& g);

struct ExportJob;

// The built-in check of a decoder format its runtime runs step by step: 8 greedy tokens (for a
// left-padded batch of 2 when the contract allows it, prompts inside its bounds as `hfx verify` picks
// them) from `runner_for(component)` equal the reference executor's on `reference_graph(component)`.
// Mismatch otherwise: "the <format> export does not match its reference: greedy tokens .. on <runtime>, ..".
struct GreedyCheck {
  int64_t tokens = 0;
  size_t rows = 0;
};
GreedyCheck check_greedy_tokens(const ExportJob& job, const std::string& format, const std::string& runtime,
                                const std::function<ir::Graph(const tasks::Component&)>& reference_graph,
                                const std::function<std::unique_ptr<runtime::StepRunner>(const tasks::Component&)>& runner_for);

// ONNX's preflight (onnx_preflight.cc): what an f32 ONNX export of `m` writes and holds.
struct Preflight onnx_preflight(const LoadedModel& m);

// OpenVINO's options (openvino_options.cc), also taken by a build without the OpenVINO SDK.
std::vector<FormatOption> openvino_options();

// The backends this file set builds (backend.cc lists them).
const class Backend& onnx_format();
const class Backend& pt2_format();
const class Backend& executorch_format();
#ifdef HFX_HAVE_OPENVINO
const class Backend& openvino_format();
#endif

}  // namespace hfx::pipeline
