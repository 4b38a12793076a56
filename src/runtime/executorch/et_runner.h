// ExecuTorch's C++ runtime as a runtime::StepRunner: the `.pte`'s forward method loaded through
// ExecuTorch's Module API (libexecutorch + the kernel libraries of the executorch wheel, linked when
// the build finds them: -DHFX_EXECUTORCH_RUNTIME), so `hfx verify/generate --runtime executorch` and the
// export's built-in check run the program without Python.
//
// A decoder's program keeps its KV cache in its mutable buffers, alive as long as the loaded method:
// the runner lists only the method's own inputs (input_ids, cache_position), returns `logits`, and
// loads the method afresh (zeroed buffers) when a step's cache_position starts at 0, a new sequence.
// An encoder's returns last_hidden_state [, logits]: the outputs are named by `output_names`, in order.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "runtime/generate.h"

namespace hfx::runtime {

// Mismatch with ExecuTorch's error when it refuses the program or a step.
std::unique_ptr<StepRunner> make_executorch_cpp_runner(const std::filesystem::path& pte, const std::vector<std::string>& input_names,
                                                       const std::vector<std::string>& output_names);

// The ExecuTorch release this hfx links ("1.5.1").
std::string executorch_runtime_version();

}  // namespace hfx::runtime
