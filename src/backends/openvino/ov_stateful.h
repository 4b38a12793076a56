// Turns an explicit-cache decoder ov::Model into the stateful layout OpenVINO GenAI's LLMPipeline
// runs (what optimum-intel's export produces):
//
//   beam_idx[batch] i32 ─┐
//   init = zeros[batch, kv_heads, 0, head_dim] ─► ReadValue(var) ─► Gather(axis 0) ─► (old past input's users)
//   (old present output's producer) ─► Assign(var)
//
// Inputs become input_ids, attention_mask, position_ids, beam_idx; outputs logits only.
#pragma once

#include <memory>
#include <vector>

#include <openvino/core/model.hpp>

#include "tasks/state_names.h"

namespace hfx::openvino_backend {

// Keeps each of `state`'s (past parameter, present result) pairs as one variable named by the
// contract (tasks::openvino_variable_id), in the model's parameter order. BadInput when a pair is
// incomplete or the graph has none of the state's inputs; the batch size of the initial state is
// read from the `input_ids` parameter.
void make_stateful(const std::shared_ptr<ov::Model>& model, const std::vector<tasks::StatePort>& state);

}  // namespace hfx::openvino_backend
