// The torch runtime as a runtime::StepRunner: torch.export.load(FILE.pt2).module() in a Python step
// server (python/hfx_torch_runner.py) that lives as long as the runner, so a decode loop pays for
// importing torch and loading the program once, not per step.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/generate.h"

namespace hfx::pipeline {

// Starts `python hfx_torch_runner.py --serve pt2` (the driver in hfx's python/ folder, as for the ONNX
// Runtime driver) and waits until it has loaded the program. `input_names` are the component's inputs
// in the manifest's order: the program is called with them positionally. `shared_buffers` are its
// (input, output) pairs updated in place (the static cache): the server writes each mutated input out
// as that output, so run() returns present.* as a growing cache's program would.
//
// Each run() writes the inputs to a safetensors file in a private scratch folder, asks the server to
// run them, and reads its outputs back. Errors, as one line with the runtime's own words:
//   Unsupported  the interpreter cannot be started or cannot import torch ("No module named 'torch'");
//   Mismatch     torch refused the archive, or the step ("Expected input at *args[0].shape[0] ..."), or
//                the server died while running (its stderr's last line, or how it ended).
// The destructor kills and reaps the server.
std::unique_ptr<runtime::StepRunner> make_torch_runner(const std::filesystem::path& pt2, const std::vector<std::string>& input_names,
                                                       const std::vector<std::pair<std::string, std::string>>& shared_buffers,
                                                       const std::string& python);

// The executorch runtime the same way: python/hfx_executorch_runner.py loads the `.pte` with
// executorch.runtime and keeps its forward method loaded, so the mutable buffers (the KV cache) carry
// over from one run() to the next; a step whose cache_position starts at 0 reloads the method, which
// zeroes them. `output_names` name the method's outputs in order (logits; an encoder's
// last_hidden_state [, logits]). Errors as for torch, with executorch's own words.
std::unique_ptr<runtime::StepRunner> make_executorch_runner(const std::filesystem::path& pte, const std::vector<std::string>& input_names,
                                                            const std::vector<std::string>& output_names, const std::string& python);
std::string executorch_version(const std::string& python);

// torch.__version__ as `python` imports it ("2.13.0+cpu"), or "" when it cannot (no such interpreter,
// no torch). Probed once per interpreter per process.
std::string torch_version(const std::string& python);

}  // namespace hfx::pipeline
