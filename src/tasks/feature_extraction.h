// The feature-extraction task (and sequence classification when the checkpoint has the head), with
// the I/O Optimum and transformers.js use for encoders:
//   input_ids, attention_mask [, token_type_ids]  i64 [batch_size, sequence_length]
//   -> last_hidden_state f32 [batch_size, sequence_length, hidden] [, logits f32 [batch_size, num_labels]]
#pragma once

#include "models/encoder.h"
#include "tasks/causal_lm.h"

namespace hfx::tasks {

std::vector<Component> build_feature_extraction(const models::Encoder& model, const CausalLmOptions& options);

// The feature-extraction task: needs an encoder, one `encoder` component, no state (tasks/task.h).
const Task& feature_extraction_task();

}  // namespace hfx::tasks
