// Mamba-1: Transformers' MambaForCausalLM (modeling_mamba.py) and FalconMambaForCausalLM
// (modeling_falcon_mamba.py, which differs only by weightless RMS norms on dt, B and C), pure
// state-space models. Every layer is a MambaMixer between an RMSNorm and a residual, as Mamba-2's:
//
//   ids ─ embeddings ─┬─ norm ─ mixer ─ + ─┬─ ... ─ norm_f ─ lm_head ─ logits
//                     └───────────────────┘
//
// The mixer (the torch path, slow_forward's): padded positions zeroed; in_proj to [x | z]; x through
// a causal depthwise conv (kernel conv_kernel, its last conv_kernel - 1 inputs carried as
// past_conv.{i} [batch, intermediate, conv_kernel - 1]) and hidden_act, padded positions zeroed
// again; x_proj to [dt (time_step_rank) | B (state) | C (state)] (FalconMamba: each RMS-normalized,
// without weights, mixer_rms_eps); dt = softplus(dt_proj(dt)); the selective scan (models/ssd.h,
// selective_scan) from the carried state past_ssm.{i} [batch, intermediate, state_size] with
// A = -exp(A_log) [intermediate, state_size] and D; y * silu(z); out_proj.
#pragma once

#include <memory>

#include "models/model.h"

namespace hfx::models {

std::unique_ptr<CausalLm> make_mamba(const io::Checkpoint& ckpt);
std::unique_ptr<CausalLm> make_falcon_mamba(const io::Checkpoint& ckpt);

}  // namespace hfx::models
