// Qwen3.5's text model: Transformers' Qwen3_5ForCausalLM (modeling_qwen3_5.py, model_type
// qwen3_5_text), a hybrid whose layers are gated delta-net linear attention or gated full attention,
// per config.json's layer_types ("linear_attention" | "full_attention"; by default every
// full_attention_interval-th layer is full):
//
//   ids ─ embed_tokens ─┬─ input_layernorm ─ linear_attn or self_attn ─ + ─┬─ post_attention_layernorm ─ mlp ─ + ─ ...
//                       └──────────────────────────────────────────────────┘└──────────────────────────────────┘
//   ... ─ norm ─ lm_head (untied by default) ─ logits
//
// Every RMSNorm but the delta-net's gated one multiplies by (1 + weight) (Qwen3_5RMSNorm, zero-centred).
// The attention: q_proj gives each head its query and a gate (per head [query | gate]), q/k RMSNorm per
// head, partial rotary (partial_rotary_factor, 0.25 by default), GQA through the key/value cache, the
// output times sigmoid(gate), o_proj. Qwen3.5's rope is multimodal (mrope_section), but a text step's
// three position rows are one row, so it is the plain rope of that row. A linear_attn layer is the
// gated delta-net (models/gated_deltanet.h) carrying past_conv.{i} and past_recurrent.{i} (the
// js-linear-attention name set, transformers.js's names for these models).
//
// Qwen3-Next (Transformers' Qwen3NextForCausalLM, model_type qwen3_next) is the same network with two
// differences, so one definition builds both: its delta-net projections are fused (in_proj_qkvz,
// in_proj_ba), and its MLPs are sparse mixtures of experts (Qwen3NextSparseMoeBlock: top-k of
// num_experts, norm_topk_prob, plus sigmoid(shared_expert_gate(x)) * shared_expert(x); models/moe.h)
// on every decoder_sparse_step-th layer but those mlp_only_layers lists, a dense MLP on the others.
//
// Qwen3.5-MoE's text model (Qwen3_5MoeForCausalLM, model_type qwen3_5_moe_text) is Qwen3.5's network
// (split projections) with Qwen3_5MoeSparseMoeBlock as every layer's MLP: the same top-k of num_experts
// and sigmoid-gated shared expert, the top-k weights always renormalised (no norm_topk_prob), the
// experts per expert as Transformers saves them or stacked (experts.gate_up_proj / down_proj).
#pragma once

#include <memory>

#include "models/model.h"

namespace hfx::models {

std::unique_ptr<CausalLm> make_qwen3_5_text(const io::Checkpoint& ckpt);
std::unique_ptr<CausalLm> make_qwen3_next(const io::Checkpoint& ckpt);
std::unique_ptr<CausalLm> make_qwen3_5_moe_text(const io::Checkpoint& ckpt);

}  // namespace hfx::models
