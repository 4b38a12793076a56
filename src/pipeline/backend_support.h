// What the formats (src/backends/<format>/) share: each component's metadata (the contract as
// key/value pairs every format stores in its own way), progress over a graph's weights, and the
// greedy check of a format run step by step.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

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

// Unsupported, naming the format, when `c` carries a Mamba-2 or Mamba-1 scan state (the pt2 lowering, which the
// executorch writer builds on, has no floor division for the scan's chunk count; docs/ssm.md).
void refuse_ssd_scan(const tasks::Component& c, const std::string& format);
// Unsupported for an encoder-decoder (T5, BART): `format` (executorch) does not write one yet.
void refuse_encoder_decoder(const LoadedModel& m, const std::string& format);

struct ExportJob;

// The greedy tokens an export's built-in check decodes: 8, fewer for a model-sized export, whose every
// decode step reads all of its weights once (0.2 s a step for the 2.3 GB of the f32 Qwen3-0.6B on the
// reference executor, streamed from the page cache: the check's largest cost). As many steps as
// kCheckStepBytes of weights read allow, at least 3 (the cache carried over several steps) and at most 7;
// `weight_bytes` are the format's weights as written. `hfx verify` decodes 64 (docs/verify.md).
inline constexpr int64_t kCheckStepBytes = int64_t(2) << 30;
int64_t check_tokens(int64_t weight_bytes);
// check_tokens of the weights `format` wrote in `job`.
int64_t check_tokens(const ExportJob& job, const std::string& format);

// The built-in check of a format's components that are not decoder-only steps (an encoder, an
// encoder-decoder's graphs): verify's first shape cases on the staged export (and an encoder-decoder's
// check_tokens greedy tokens), run by `runtime`, against the reference executor. Returns how many checks passed; Mismatch naming the failing check
// otherwise ("the <format> export does not match its reference (<what>): ..., nothing was written").
size_t check_shape_cases(const ExportJob& job, const std::string& format, const std::string& runtime,
                         const std::string& what);

// The built-in check of a decoder format its runtime runs step by step: check_tokens greedy tokens (for a
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

}  // namespace hfx::pipeline
