// `hfx inspect`'s preflight of an ONNX export (Backend::preflight): the disk it takes and the memory
// `hfx export` holds, from the checkpoint's tensors and the ONNX writer's streaming.
#pragma once

#include <string>
#include <vector>

#include "pipeline/backend.h"

namespace hfx::pipeline {

// `passes`: the ONNX format's pass pipeline, run on the first component before measuring.
Preflight onnx_preflight(const LoadedModel& m, const std::vector<std::string>& passes);

}  // namespace hfx::pipeline
