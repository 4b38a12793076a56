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

#include <openvino/core/model.hpp>

namespace hfx::openvino_backend {

// Pairs every `past_key_values.<rest>` parameter with the `present.<rest>` result. BadInput when a
// pair is incomplete or the graph has no cache inputs at all; the batch size of the initial state
// is read from the `input_ids` parameter.
void make_stateful(const std::shared_ptr<ov::Model>& model);

}  // namespace hfx::openvino_backend
