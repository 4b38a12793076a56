// LFM2: Transformers' Lfm2ForCausalLM (modeling_lfm2.py), the first hybrid: each layer is either
// attention (Llama-style GQA with per-head q/k RMSNorm, rope, the key/value cache) or a short
// convolution (Lfm2ShortConv), chosen by config.json's layer_types ("full_attention" | "conv").
//
//   ids ─ Embedding ─┬─ operator_norm ─ attention or short conv ─ + ─┬─ ffn_norm ─ w2(silu(w1) * w3) ─ + ─ ...
//                    └───────────────────────────────────────────────┘└────────────────────────────────┘
//   ... ─ embedding_norm (the final norm, named so in the checkpoint) ─ lm_head (tied by default) ─ logits
//
// The short conv: padded positions zeroed (apply_mask_to_padding_states), in_proj to [B | C | x],
// B * x, a causal depthwise conv of kernel conv_L_cache over the carried last kernel - 1 inputs and
// the new ones, C * that, out_proj. Its state is a StateKind::Convolution StateSpec [batch_size,
// hidden_size, conv_L_cache - 1] (ir::conv_state), replaced by each step; named past_conv.{i} ->
// present_conv.{i} (the js-hybrid name set: transformers.js and onnxruntime-genai's LFM2).
#pragma once

#include <memory>

#include "models/model.h"

namespace hfx::models {

std::unique_ptr<CausalLm> make_lfm2(const io::Checkpoint& ckpt);

}  // namespace hfx::models
