// Turns an explicit-cache decoder ov::Model into the stateful layout OpenVINO GenAI's LLMPipeline
// runs (what optimum-intel's export produces):
//
//   beam_idx[batch] i32 ─┐
//   init = zeros[batch, kv_heads, 0, head_dim] ─► ReadValue(var) ─► Gather(axis 0) ─► (old past input's users)
//   (old present output's producer) ─► Assign(var)
//
// Inputs become input_ids, attention_mask, position_ids, beam_idx; outputs logits only.
//
// An encoder-decoder's merged decoder (tasks/seq2seq.h) becomes optimum-intel's stateful
// openvino_decoder_model.xml, which OpenVINO GenAI's WhisperPipeline runs: its self-attention cache as
// above, and each cross-attention key/value a variable whose initializer is its projection of
// encoder_hidden_states, so OpenVINO computes it when the state is reset (the first step) and reads it
// back after:
//
//   k_proj(encoder_hidden_states) ─► ReadValue(var) ─► (the attention)      ─► Assign(var)
//
// In the merged graph that value is kept_or_computed (models/seq2seq.h): Slice(Concat(past, computed),
// 0 .. computed's length); the rewrite takes `computed` from it. Inputs become input_ids,
// [encoder_attention_mask,] encoder_hidden_states, beam_idx; use_cache_branch, which only tells
// Optimum the graph is merged, goes.
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
