// The ONNX backend's `ort` profile, beyond the graph rewrite (passes/ort_contrib_ops.cc): how many
// rows the cos/sin caches get, and the genai_config.json that lets onnxruntime-genai load the folder.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/checkpoint.h"
#include "ir/graph.h"
#include "ir/model_summary.h"
#include "tasks/state_names.h"

namespace hfx::onnx_backend {

// The longest sequence the export serves: max_position_embeddings (or n_positions) of config.json,
// lowered to the contract's total_sequence_length bound when that is tighter. BadInput when neither
// is known.
int64_t ort_context_length(const io::Checkpoint& ckpt, const ir::Graph& graph);

struct GenaiConfigInput {
  const io::Checkpoint* checkpoint = nullptr;
  ir::ModelSummary summary;
  ir::CacheGeometry cache;
  int64_t context_length = 0;
  std::string model_file;  // "model.onnx"
  const ir::Graph* graph = nullptr;  // the written graph: its input and output names
  // GroupQueryAttention's cache buffers are max-length and updated in place; a portable graph's grow
  // by concatenation.
  bool past_present_share_buffer = true;
  // The component's state and the name set it is named by: a hybrid's convolution states add
  // onnxruntime-genai's past_conv_names / present_conv_names, layer_types and conv_cache_size (its
  // LFM2 model, builders/lfm2.py).
  std::vector<tasks::StatePort> state;
  const tasks::StateNameSet* names = &tasks::state_names(tasks::StateNames::Decoder);
};

// Whether onnxruntime-genai has a model for `model_type` that carries a recurrent (linear-attention)
// state: its RecurrentState drives Qwen3.5's gated delta-net (qwen3_5_text, and qwen3_5_moe_text, whose
// experts are ordinary graph nodes to it); it has no Mamba or Qwen3-Next model.
bool genai_runs_recurrent_state(const std::string& model_type);

// genai_config.json for a decoder written with the ort profile (onnxruntime-genai's
// model.decoder / search schema), also where its attention fell back to the portable lowering.
nlohmann::ordered_json genai_config(const GenaiConfigInput& in);
// genai_config.json's `search` section for greedy decoding up to `max_length` tokens.
nlohmann::ordered_json genai_greedy_search(int64_t max_length, bool past_present_share_buffer);

}  // namespace hfx::onnx_backend
