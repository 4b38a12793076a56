// Mamba-2 + attention hybrids, one network told apart by per-family traits:
//
// Granite 4.0-H: Transformers' GraniteMoeHybridForCausalLM (modeling_granitemoehybrid.py), dense
// variants (num_local_experts 0: granite-4.0-h-1b, h-350m, h-micro). Each layer is a Mamba-2 mixer
// or GQA attention (per layer_types: "mamba"/"linear_attention" or "attention"/"full_attention"),
// then the shared MLP, both residuals scaled by residual_multiplier:
//
//   ids ─ embed_tokens * embedding_multiplier ─┬─ input_layernorm ─ mamba or self_attn ─ * r ─ + ─┬─
//     post_attention_layernorm ─ shared_mlp (silu(gate) * up of one fused input_linear) ─ * r ─ + ─ ...
//   ... ─ norm ─ lm_head ─ / logits_scaling ─ logits
//
// Attention scales scores by attention_multiplier (not 1/sqrt(head_dim)) and applies rope only when
// position_embedding_type is "rope". A mamba layer carries past_conv.{i} and past_ssm.{i}, an
// attention layer past_key_values.{i}.key|value (the js-hybrid name set transformers.js loads).
// Sparse-MoE variants (num_local_experts > 0) are refused.
//
// Bamba: Transformers' BambaForCausalLM (modeling_bamba.py): the same two layer kinds (attention at
// attn_layer_indices), a Llama MLP (feed_forward.gate/up/down_proj) after pre_ff_layernorm, no
// multipliers, scores scaled by head_dim^-0.5, partial rotary (rope_parameters' factor, 0.5 by
// default), final_layernorm.
//
// This file reads their configs; the network itself is mamba2_hybrid_network.h's, which Nemotron-H
// (nemotron_h.h) shares.
#pragma once

#include <memory>

#include "models/model.h"

namespace hfx::models {

std::unique_ptr<CausalLm> make_granitemoehybrid(const io::Checkpoint& ckpt);
std::unique_ptr<CausalLm> make_bamba(const io::Checkpoint& ckpt);

}  // namespace hfx::models
