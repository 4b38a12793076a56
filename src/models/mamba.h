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
#include <optional>
#include <string>

#include "models/blocks.h"
#include "models/model.h"
#include "models/ssm_backbone.h"

namespace hfx::models {

// One Mamba-1 mixer's shape and options.
struct MambaMixerSpec {
  int64_t hidden = 0, intermediate = 0, state_size = 16, conv_kernel = 4, time_step_rank = 0;
  bool proj_bias = false, conv_bias = true;
  Activation act = Activation::Silu;  // the conv's (hidden_act); the gate is always silu
  // RMS norms on dt, B and C before dt_proj: FalconMamba's weightless ones, Jamba's with weights
  // (dt_layernorm, b_layernorm, c_layernorm); none for Mamba.
  enum class DtBcNorms { None, Weightless, Weighted } dt_bc_norms = DtBcNorms::None;
  double dt_bc_eps = 1e-6;
};

// time_step_rank `key` of config.json; "auto" (or absent) is ceil(hidden_size / 16), as MambaConfig and
// JambaConfig (mamba_dt_rank) make it.
int64_t time_step_rank(const io::JsonFile& f, const nlohmann::json& j, const char* key, int64_t hidden_size);

// The mixer of the layer whose weights are under `prefix` (in_proj, conv1d, x_proj, dt_proj, A_log, D,
// out_proj), from the carried states (kNone: zeros) and the step's padding mask (models/short_conv.h).
SsmMixerOut mamba1_mixer(ir::Builder& b, const io::Checkpoint& ckpt, const MambaMixerSpec& spec, const std::string& prefix,
                         ir::ValueId x, ir::ValueId past_conv, ir::ValueId past_ssm, const std::optional<ir::ValueId>& pad_mask);

std::unique_ptr<CausalLm> make_mamba(const io::Checkpoint& ckpt);
std::unique_ptr<CausalLm> make_falcon_mamba(const io::Checkpoint& ckpt);

}  // namespace hfx::models
