// The recurrences of state-space and linear-attention layers in primitives: the decompositions of the
// composite ops CausalConv and GatedDeltaRule (ir/ops.h), which models emit (models/short_conv.h,
// models/delta_rule.h) and which the onnx `ort` profile writes as ONNX Runtime's fused
// com.microsoft CausalConvWithState and LinearAttention instead (passes/ort_state_ops.cc).
//
// The gated delta rule (gated delta-net's recurrence: Qwen3-Next, Qwen3.5), with no loop op:
// Transformers' torch_chunk_gated_delta_rule (prefill) and torch_recurrent_gated_delta_rule (decode)
// of modeling_qwen3_5.py, which compute the same recurrence
//
//   S_t = exp(g_t) S_{t-1} + k_t (beta_t (v_t - (exp(g_t) S_{t-1})^T k_t))^T,   o_t = S_t^T q_t
//
// with S [key_dim, value_dim] per head. A step is cut into chunks of `chunk` positions (the last
// padded with zeros, which neither decay nor write the state; a step shorter than a chunk, a decode
// step included, is one chunk of its own length). Within a chunk, Transformers' UT transform: the
// unit-lower-triangular system (I + N) solved by the product (I - N)(I + N^2)(I + N^4)... (N is
// nilpotent, so ceil(log2(chunk)) factors are its exact inverse), then one Newton-Schulz refinement
// step against the system itself (the series cancels badly when decays are near 1). Across chunks,
// each chunk maps its start state affinely, S -> M_c S + B_c (M_c [key_dim, key_dim]); the chunks'
// start states are the prefix compositions of those maps, a Hillis-Steele scan of ceil(log2(max
// chunks)) steps whose step at offset o composes element i with element i - o for i >= o (a step
// past the chunk count reads empty slices, so a short step costs none of it). The last chunk's state
// update is applied directly, so a one-token step costs what Transformers' recurrent update costs
// (docs/ssm.md).
#pragma once

#include <cstdint>

#include "ir/builder.h"

namespace hfx::ir {

struct DeltaRuleShape {
  int64_t heads = 0, key_dim = 0, value_dim = 0;
  int64_t chunk = 64;            // Transformers' chunk_size
  int64_t max_positions = 0;     // the longest step the scan is built for (its step count)
};

struct DeltaRuleOut {
  ValueId out = kNone;          // [b, s, heads, value_dim]
  ValueId final_state = kNone;  // [b, heads, key_dim, value_dim]
};

// q, k [b, s, heads, key_dim]; v [b, s, heads, value_dim]; g (log decay, <= 0) and beta [b, s, heads];
// initial [b, heads, key_dim, value_dim] or kNone for a zero state.
DeltaRuleOut gated_delta_rule_primitives(Builder& b, ValueId q, ValueId k, ValueId v, ValueId g, ValueId beta,
                                         ValueId initial, const DeltaRuleShape& shape);

// The number of Hillis-Steele steps that cover every chunk boundary of a step of `max_positions`
// positions in chunks of `chunk`: ceil(log2(ceil(max_positions / chunk) - 1)), at least 0.
int64_t delta_rule_scan_steps(int64_t max_positions, int64_t chunk);

struct CausalConvOut {
  ValueId out = kNone;      // [b, channels, s]
  ValueId present = kNone;  // [b, channels, kernel - 1]
};

// The causal depthwise convolution with carried state: x [b, channels, s], past [b, channels,
// kernel - 1], weight [channels, kernel], bias [channels] or kNone. Over full = past ++ x:
// out[:, c, t] = bias[c] + sum_k weight[c, k] * full[:, c, t + k]; present = full's last kernel - 1
// columns.
CausalConvOut causal_conv_primitives(Builder& b, ValueId x, ValueId past, ValueId weight, ValueId bias, int64_t channels,
                                     int64_t kernel);

}  // namespace hfx::ir
