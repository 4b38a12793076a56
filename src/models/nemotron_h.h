// Nemotron-H: Transformers' NemotronHForCausalLM (modeling_nemotron_h.py): the Nemotron-H and
// Nemotron Nano 2 models, and Nemotron 3 Nano's MoE layers. Every layer is one block after an
// RMSNorm (`norm`) with a residual around it, the block per layers_block_type (or the legacy
// hybrid_override_pattern string: M mamba, * attention, - MLP, E MoE):
//
//   ids ─ embeddings ─┬─ norm ─ mixer (Mamba-2 | attention | MLP | MoE) ─ + ─┬─ ... ─ norm_f ─ lm_head ─ logits
//                     └────────────────────────────────────────────────────┘
//
// The Mamba-2 mixer is Bamba's with its own names (mamba_num_heads x mamba_head_dim wide, whatever
// expand says; dt clamped below at time_step_min), the attention GQA with no position embedding at
// all and scores scaled by head_dim^-0.5, the MLP down(relu2(up(x))) with no gate. A mamba layer
// carries past_conv.{i} and past_ssm.{i}, an attention layer past_key_values.{i}.key|value, an MLP
// or MoE layer nothing. The MoE layers ("moe", E: Nemotron 3 Nano's) are models/sigmoid_moe.h's, with
// one expert group (n_group 1).
#pragma once

#include <memory>

#include "models/model.h"

namespace hfx::models {

std::unique_ptr<CausalLm> make_nemotron_h(const io::Checkpoint& ckpt);

}  // namespace hfx::models
