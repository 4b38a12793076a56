// OpenVINO as a runtime::StepRunner: `hfx generate --runtime openvino` runs the decode loop of
// runtime/generate.h on an exported openvino_model.xml with ov::Core (CPU, f32 inference and f32 KV
// cache, so the tokens match Transformers). Built only with the OpenVINO SDK (see CMakeLists.txt).
//
// A stateful IR hides its cache: the runner lists none of the state's past inputs and returns
// none of its present outputs, feeds beam_idx = 0..batch-1, and resets the state when a step starts on an empty
// cache (attention_mask as long as input_ids). A stateless IR is run as the ONNX graph is.
#pragma once

#include <filesystem>
#include <map>
#include <utility>
#include <vector>
#include <memory>
#include <string>

#include "runtime/generate.h"

namespace hfx::runtime {

std::unique_ptr<StepRunner> make_openvino_runner(const std::filesystem::path& xml, const std::string& device = "CPU");

// The I/O of an IR as written (ov::Core::read_model, nothing compiled): per port its name and
// "dtype[d0,d1,...]" with "?" for a dynamic dimension, in the model's order.
struct OpenVinoSignature {
  std::vector<std::pair<std::string, std::string>> inputs, outputs;
};
OpenVinoSignature openvino_signature(const std::filesystem::path& xml);

// What the CPU plugin compiled (f32 hints as the runner): layer type -> runtime precision -> count,
// from the compiled model's execution graph.
std::map<std::string, std::map<std::string, int>> openvino_exec_summary(const std::filesystem::path& xml);

}  // namespace hfx::runtime
