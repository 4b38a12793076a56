// The causal-LM task: fixes the graph I/O of a decoder step to the contract that Optimum,
// onnxruntime-genai and transformers.js load:
//   input_ids [batch_size, sequence_length] i64
//   attention_mask [batch_size, total_sequence_length] i64
//   position_ids [batch_size, sequence_length] i64
//   past_key_values.{i}.key|value [batch_size, kv_heads, past_sequence_length, head_dim]
//   -> logits [batch_size, sequence_length, vocab] f32, present.{i}.key|value [.., total_sequence_length, ..]
// with total_sequence_length = past_sequence_length + sequence_length. The query axis is symbolic,
// so one graph serves the prompt (empty cache), single-token steps and multi-token chunks.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"
#include "models/model.h"

namespace hfx::tasks {

struct IoSpec {
  std::string name;
  DType dtype;
  Shape shape;
};

// Builds the whole step graph for `model`.
ir::Graph build_causal_lm(const models::CausalLm& model);

// The contract as a list (for `inspect`, the manifest and tests).
std::vector<IoSpec> causal_lm_inputs(const models::CausalLm& model);
std::vector<IoSpec> causal_lm_outputs(const models::CausalLm& model);

}  // namespace hfx::tasks
