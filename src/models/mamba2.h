// Mamba-2: Transformers' Mamba2ForCausalLM (modeling_mamba2.py), a pure state-space model. Every
// layer is a Mamba2Mixer between an RMSNorm and a residual:
//
//   ids ─ embeddings ─┬─ norm ─ mixer ─ + ─┬─ ... ─ norm_f ─ lm_head ─ logits
//                     └───────────────────┘
//
// The mixer (torch_forward): padded positions zeroed; in_proj to [gate | xBC | dt]; xBC through a
// causal depthwise conv (kernel conv_kernel, its last conv_kernel - 1 inputs carried as past_conv.{i}
// [batch, intermediate + 2 groups state, conv_kernel - 1]) and silu, padded positions zeroed again;
// dt = softplus(dt + dt_bias) within time_step_limit; the SSD scan (models/ssd.h) from the carried
// state past_ssm.{i} [batch, heads, head_dim, state_size]; a gated group RMSNorm (y * silu(gate),
// n_groups groups) and out_proj. The js-hybrid name set (transformers.js's past_conv / past_ssm).
#pragma once

#include <memory>

#include "models/model.h"

namespace hfx::models {

std::unique_ptr<CausalLm> make_mamba2(const io::Checkpoint& ckpt);

}  // namespace hfx::models
