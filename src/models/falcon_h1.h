// Falcon-H1: Transformers' FalconH1ForCausalLM (modeling_falcon_h1.py). Every layer runs a Mamba-2
// mixer and GQA attention with rope side by side on the same normed input, sums them, then a SwiGLU
// MLP; muP multipliers scale nearly every branch:
//
//   ids ─ embed_tokens ─ * embedding_multiplier ─ layers ─ final_layernorm ─ lm_head ─ * lm_head_multiplier
//
//   a layer: h ─ input_layernorm ─┬─ mamba ─────────────────────────────── * ssm_out ─┐
//                                 └─ * attention_in ─ self_attn ─ * attention_out ───┴─ + ─ + h ─┐
//            ┌───────────────────────────────────────────────────────────────────────────────────┘
//            └─ pre_ff_layernorm ─ down(up(x) * silu(gate(x) * gate_m)) * down_m ─ + ─ next layer
//
// The mixer is models/mamba2_mixer.h's, mamba_d_ssm wide (or mamba_expand * hidden_size when null),
// with ssm_in_multiplier before in_proj and the mup_vector (ssm_multipliers over z, x, B, C, dt)
// after it, out_proj biased by projectors_bias, and its gated RMSNorm before the gate
// (mamba_norm_before_gate), after it, or absent (mamba_rms_norm false). The attention's keys are
// scaled by key_multiplier before rope; head_dim is the config's, else hidden_size / heads. Every
// multiplier is a graph multiplication as Transformers writes it (none folded into weights), left out
// when it is 1. Each layer carries all four states: past_conv.{i}, past_ssm.{i} and
// past_key_values.{i}.key|value (the js-hybrid name set).
#pragma once

#include <memory>

#include "models/model.h"

namespace hfx::models {

std::unique_ptr<CausalLm> make_falcon_h1(const io::Checkpoint& ckpt);

}  // namespace hfx::models
