// The Mamba-2 mixer as one block, shared by the families that wire it: Mamba2Mixer (mamba2),
// GraniteMoeHybridMambaLayer (granitemoehybrid), FalconH1Mixer (falcon_h1) and the others built on
// Transformers' torch_forward:
//
//   x ─ (padding zeroed) ─ [* in] ─ in_proj ─ [* zxbcdt] ─┬─ gate ──────────────────────────────────────────┐
//                                                        ├─ xBC ─ causal depthwise conv ─ silu ─ (zeroed) ─┐ │
//                                                        └─ dt ─ + dt_bias ─ softplus ─ limits ────────────┴─ SSD scan ─
//   ─ gated norm ─ out_proj
//
// where the gated norm is, per GatedNorm, group RMSNorm(y * silu(gate)) (Mamba2's MambaRMSNormGated),
// group RMSNorm(y) * silu(gate) (FalconH1RMSNormGated's norm_before_gate) or y * silu(gate) alone
// (Falcon-H1 without mamba_rms_norm); the bracketed multiplications are Falcon-H1's muP multipliers
// (ssm_in_multiplier; ssm_multipliers over the z, x, B, C and dt parts of in_proj's output), left out
// of the graph when they are 1.
//
// Its state: the conv's last kernel - 1 inputs [batch, conv_dim, kernel - 1] (a Convolution state)
// and the scan's [batch, heads, head_dim, state_size] (a Recurrent state), both replaced each step.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "io/json_fields.h"
#include "ir/builder.h"
#include "ir/state.h"
#include "models/model.h"

namespace hfx::models {

// How the scan's output meets the gate before out_proj.
enum class GatedNorm {
  AfterGate,   // MambaRMSNormGated: group RMSNorm(y * silu(gate)) * weight
  BeforeGate,  // FalconH1RMSNormGated(norm_before_gate=True): group RMSNorm(y) * weight * silu(gate)
  None,        // no norm (Falcon-H1's mamba_rms_norm false): y * silu(gate), no norm.weight
};

struct Mamba2MixerSpec {
  int64_t hidden = 0, heads = 0, head_dim = 0, state_size = 0, groups = 1, conv_kernel = 4, chunk = 256;
  double eps = 1e-5;  // the gated group norm's
  bool proj_bias = false, conv_bias = true;
  bool out_proj_bias = false;  // parse_mamba2_mixer: proj_bias (Falcon-H1 biases out_proj by projectors_bias)
  GatedNorm gated_norm = GatedNorm::AfterGate;
  // muP multipliers (Falcon-H1): the input times in_multiplier before in_proj; in_proj's output (bias
  // included) times one multiplier per part, in order gate (z), x, B, C, dt.
  double in_multiplier = 1.0;
  std::array<double, 5> zxbcdt_multipliers = {1.0, 1.0, 1.0, 1.0, 1.0};
  double dt_min = 0.0, dt_max = std::numeric_limits<double>::infinity();  // time_step_limit

  int64_t intermediate() const { return heads * head_dim; }
  int64_t conv_dim() const { return intermediate() + 2 * groups * state_size; }
  std::vector<ir::StateSpec> states(int64_t layer) const;  // its conv state, then its scan state
  std::string describe() const;                              // for a model summary's features
};

// The config keys a family names the mixer's numbers by (mamba2: "num_heads"; granitemoehybrid:
// "mamba_n_heads", ...). Empty: the family has no such key and `fallback` holds; an empty `expand`
// means the family sizes the mixer by heads * head_dim alone (NemotronH), with no expand to agree
// with, and an empty `time_step_limit` that the family clamps dt otherwise (the caller sets dt_min /
// dt_max).
struct Mamba2MixerKeys {
  std::string heads, head_dim, state_size, groups, expand, conv_kernel, chunk, proj_bias, conv_bias, eps;
  std::string act = "hidden_act";  // the conv's activation (silu is what hfx builds)
  std::string time_step_limit = "time_step_limit";
};
struct Mamba2MixerDefaults {
  int64_t heads = 128, head_dim = 64, state_size = 128, groups = 8, expand = 2, conv_kernel = 4, chunk = 256;
  bool proj_bias = false, conv_bias = true;
  double eps = 1e-5;
  bool head_dim_auto = false;  // head_dim "auto" or absent: expand * hidden / heads
};
// Reads and checks the mixer's numbers (heads * head_dim = expand * hidden, heads a multiple of
// groups, a kernel of 2 or more, time_step_limit a range) from `config`, naming the file and key.
Mamba2MixerSpec parse_mamba2_mixer(const io::JsonFile& config, int64_t hidden, const Mamba2MixerKeys& keys,
                                   const Mamba2MixerDefaults& defaults);

struct Mamba2MixerOut {
  ir::ValueId out = ir::kNone;                                   // [b, s, hidden]
  ir::ValueId conv_state = ir::kNone, ssm_state = ir::kNone;     // the states the next step reads
};

// x [b, s, hidden] (normalized); weights under `prefix` (in_proj, conv1d, dt_bias, A_log, D, norm,
// out_proj); `past_conv`, `past_ssm` the carried states or kNone (zeros); `pad_mask` the step's
// padding mask [b, s, 1] (models/short_conv.h) or nullopt; `in` the step's inputs (its length and
// whether positions came before it choose Transformers' recurrent or chunked form's dt limits).
Mamba2MixerOut mamba2_mixer(ir::Builder& b, const io::Checkpoint& ckpt, ir::ValueId x, const std::string& prefix,
                            const Mamba2MixerSpec& spec, ir::ValueId past_conv, ir::ValueId past_ssm,
                            const std::optional<ir::ValueId>& pad_mask, const CausalLmInputs& in);

}  // namespace hfx::models
