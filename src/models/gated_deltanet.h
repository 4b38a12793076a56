// Gated delta-net, the linear-attention mixer of Qwen3.5 (Qwen3_5GatedDeltaNet) and Qwen3-Next
// (Qwen3NextGatedDeltaNet), as one block:
//
//   x ─ (padding zeroed) ─┬─ qkv ─ causal depthwise conv ─ silu ─ q, k (l2-normalised), v ─┐
//                         ├─ b ─ sigmoid = beta ──────────────────────────────────────────┤
//                         ├─ a ─ -exp(A_log) softplus(a + dt_bias) = g ───────────────────┴─ gated delta rule
//                         └─ z ──────────────────────────────────────────────── RMSNorm(o) * weight * silu(z) ─ out_proj
//
// Qwen3.5 stores the projections split (in_proj_qkv, in_proj_z, in_proj_b, in_proj_a); Qwen3-Next
// fused (in_proj_qkvz, in_proj_ba, grouped per key head: [q | k | v | z] and [b | a]). The conv has
// no bias and the padded positions are not zeroed again after it (Transformers does neither).
// Its state: the conv's last kernel - 1 inputs [batch, conv_dim, kernel - 1] (a Convolution state)
// and the delta rule's [batch, value_heads, key_head_dim, value_head_dim] (a Recurrent state, in
// Transformers' cache layout), both replaced each step.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "io/json_fields.h"
#include "ir/builder.h"
#include "ir/state.h"
#include "models/model.h"

namespace hfx::models {

enum class DeltaNetProjections { Split, Fused };  // Qwen3.5's four, Qwen3-Next's two

struct GatedDeltaNetSpec {
  int64_t hidden = 0, key_heads = 0, value_heads = 0, key_head_dim = 0, value_head_dim = 0, conv_kernel = 4;
  int64_t max_positions = 0;  // the longest step the delta rule's chunk scan is built for
  double eps = 1e-6;          // the gated RMSNorm's (rms_norm_eps)
  DeltaNetProjections projections = DeltaNetProjections::Split;

  int64_t key_dim() const { return key_heads * key_head_dim; }
  int64_t value_dim() const { return value_heads * value_head_dim; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
  std::vector<ir::StateSpec> states(int64_t layer) const;  // its conv state, then its recurrent state
  std::string describe() const;                              // for a model summary's features
};

// The linear_* numbers from `config` (Qwen3.5's and Qwen3-Next's names and defaults), checked:
// value heads a multiple of key heads, a kernel of 2 or more, hidden_act silu.
GatedDeltaNetSpec parse_gated_deltanet(const io::JsonFile& config, int64_t hidden, int64_t max_positions,
                                       double eps, DeltaNetProjections projections);

struct GatedDeltaNetOut {
  ir::ValueId out = ir::kNone;                                     // [b, s, hidden]
  ir::ValueId conv_state = ir::kNone, recurrent_state = ir::kNone;  // the states the next step reads
};

// x [b, s, hidden] (normalized); weights under `prefix` (…linear_attn.); the carried states or kNone
// (zeros); `pad_mask` the step's (models/short_conv.h).
GatedDeltaNetOut gated_deltanet(ir::Builder& b, const io::Checkpoint& ckpt, ir::ValueId x, const std::string& prefix,
                                const GatedDeltaNetSpec& spec, ir::ValueId past_conv, ir::ValueId past_recurrent,
                                const std::optional<ir::ValueId>& pad_mask);

}  // namespace hfx::models
