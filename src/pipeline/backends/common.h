// What the backends of src/pipeline/backends share: each component's metadata (the contract as
// key/value pairs every format stores in its own way) and progress over a graph's weights.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "core/progress.h"
#include "ir/graph.h"
#include "pipeline/export.h"

namespace hfx::pipeline {

// hfx.version, model type, task, role, each symbol's bounds and relations, shared buffers.
std::map<std::string, std::string> component_metadata(const LoadedModel& m, const tasks::Component& c, const ir::Graph& g);

// Progress over the weights of `g` (count and bytes), labelled `what`.
std::unique_ptr<Progress> weight_progress(const std::string& what, const ir::Graph& g);

// The backends this file set builds (backend.cc lists them).
const class Backend& onnx_format();
const class Backend& pt2_format();
#ifdef HFX_HAVE_OPENVINO
const class Backend& openvino_format();
#endif

}  // namespace hfx::pipeline
