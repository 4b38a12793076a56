// Jamba: Transformers' JambaForCausalLM (modeling_jamba.py), Mamba-1 + attention with mixture-of-experts
// feed-forwards. Layer i is attention when i % attn_layer_period == attn_layer_offset, else a Mamba-1
// mixer with RMS norms (with weights) on dt, B and C (models/mamba.h); its feed-forward is a sparse MoE
// when i % expert_layer_period == expert_layer_offset (and num_experts > 1), else a Llama MLP:
//
//   ids ─ embed_tokens ─┬─ input_layernorm ─ mamba or self_attn ─ + ─┬─ pre_ff_layernorm ─
//     feed_forward (MLP, or router softmax -> top-k, weights not renormalised, experts) ─ + ─ ...
//   ... ─ final_layernorm ─ lm_head ─ logits
//
// Attention has no position embedding at all (the mixers carry order), scores scaled by head_dim^-0.5.
// A mamba layer carries past_conv.{i} and past_ssm.{i}, an attention layer past_key_values.{i}.key|value
// (the js-hybrid name set).
#pragma once

#include <memory>

#include "models/model.h"

namespace hfx::models {

std::unique_ptr<CausalLm> make_jamba(const io::Checkpoint& ckpt);

}  // namespace hfx::models
