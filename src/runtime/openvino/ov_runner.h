// OpenVINO as a runtime::StepRunner: `hfx generate --runtime openvino` runs the decode loop of
// runtime/generate.h on an exported openvino_model.xml with ov::Core (CPU, f32 inference and f32 KV
// cache, so the tokens match Transformers). Built only with the OpenVINO SDK (see CMakeLists.txt).
//
// A stateful IR hides its cache: the runner lists no past_key_values.* inputs and returns no
// present.* outputs, feeds beam_idx = 0..batch-1, and resets the state when a step starts on an empty
// cache (attention_mask as long as input_ids). A stateless IR is run as the ONNX graph is.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "runtime/generate.h"

namespace hfx::runtime {

std::unique_ptr<StepRunner> make_openvino_runner(const std::filesystem::path& xml, const std::string& device = "CPU");

}  // namespace hfx::runtime
