// The OpenVINO backend's writer: lowers an IR graph through the table in ov_lowering.h to an
// ov::Model and serialises it with ov::serialize (model.xml + model.bin; the XML is OpenVINO's own).
//
// Weights become ov::op::v0::Constant nodes without a resident copy of the model: a weight stored
// as-is in the checkpoint points into the memory-mapped source file; a transformed one (transposed,
// cast, concatenated) is materialised one tensor at a time into a scratch file beside the output,
// which is then mapped read-only; the serialiser copies both into model.bin and the scratch file is
// removed. Only constants of at most 1 KiB (and shape tensors) are held in memory.
//
// Stateful variant (OpenVINO GenAI's LLM layout): each state's past input / present output pair
// (OvWriteOptions::state, from the contract) becomes a ReadValue / Assign variable, the state read is reordered by a `beam_idx`
// input (Gather on the batch axis) and starts empty ([batch, kv_heads, 0, head_dim], batch taken
// from input_ids).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>

#include "ir/graph.h"
#include "ir/written_weights.h"
#include "tasks/state_names.h"

namespace hfx::openvino_backend {

struct OvWriteOptions {
  std::string model_file = "openvino_model.xml";  // plain file name; the weights go to <stem>.bin
  std::map<std::string, std::string> metadata;    // written to the model's rt_info under "hfx"
  // The stateful layout: these states' past inputs and present outputs become variables (ov_stateful.h).
  bool stateful = false;
  std::vector<tasks::StatePort> state;
  // Progress: called after each weight with increments (1, bytes of that tensor). May be empty.
  std::function<void(int64_t tensors, int64_t bytes)> on_weight_written;
  // Weights an earlier writer of the same export wrote (ONNX's external data): their Constants map
  // those bytes instead of reading and transforming the checkpoint tensor again.
  ir::WrittenWeights* written = nullptr;
};

struct OvWriteResult {
  std::filesystem::path xml_path;
  std::filesystem::path bin_path;
  int64_t num_weights = 0;
  int64_t bin_bytes = 0;
  int64_t source_bytes_read = 0;  // checkpoint bytes read (weights not found in `written`)
  int64_t reused_bytes = 0;       // weight bytes taken from `written`
};

// Writes `out_dir`/model_file and its .bin. Throws Unsupported for an op without a lowering (before
// any weight is read), BadInput when `stateful` is asked of a graph without a growing cache, Io when
// a file cannot be written.
OvWriteResult write_openvino(const ir::Graph& graph, const std::filesystem::path& out_dir, const OvWriteOptions& opts);

// The OpenVINO version hfx was built against (the runtime library's own build string).
std::string openvino_version();

}  // namespace hfx::openvino_backend
