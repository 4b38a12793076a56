// The recurrences of state-space and linear-attention layers in primitives: the decompositions of the
// composite ops CausalConv, GatedDeltaRule and SsdScan (ir/ops.h), which models emit
// (models/short_conv.h, models/delta_rule.h, models/ssd.h) and which the onnx `ort` profile writes as
// ONNX Runtime's fused com.microsoft CausalConvWithState and LinearAttention instead
// (passes/ort_state_ops.cc).
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

// Mamba-2's state-space duality (SSD) scan: Transformers' mamba2_chunk_scan (the torch_forward path of
// modeling_mamba2.py), which needs no loop. A step is cut into chunks of `chunk` positions (the last
// padded with zeros, which neither decay nor feed the state; a step shorter than `chunk` is one chunk
// of its own length; chunk 0: floor(sqrt(s)), at most kMaxSqrtChunk); within a chunk the scan is a
// masked, decayed attention-like product, and the chunks' start states come from one more such
// product over the chunk index, seeded with the carried state.
//   h_t = exp(log_decay_t) h_{t-1} + xdt_t ⊗ B_t,   y_t = h_t · C_t
// xdt [b, s, heads, head_dim] (x already times dt); log_decay [b, s, heads] (dt * A); B, C [b, s,
// heads, state_size]; initial [b, heads, head_dim, state_size] or kNone for zeros. Out: y [b, s,
// heads, head_dim] (no D skip), final_state [b, heads, head_dim, state_size].
inline constexpr int64_t kMaxSqrtChunk = 256;
struct SsdScanShape {
  int64_t heads = 0, head_dim = 0, state_size = 0, chunk = 0;
};
struct SsdScanOut {
  ValueId out = kNone;
  ValueId final_state = kNone;
};
SsdScanOut ssd_scan_primitives(Builder& b, ValueId xdt, ValueId log_decay, ValueId B, ValueId C, ValueId initial,
                               const SsdScanShape& shape);

// One step of each recurrence, as Transformers' recurrent paths compute it (the body of the ONNX
// backend's `--onnx-recurrence scan` lowering, backends/onnx/onnx_scan.h): per-step tensors without
// the time axis.
struct RecurrenceStep {
  ValueId state = kNone;  // the state after the step
  ValueId out = kNone;    // the step's output
};
// torch_recurrent_gated_delta_rule (modeling_qwen3_5.py), one position: state [b, H, K, V], q, k
// [b, H, K] (q already scaled), v [b, H, V], g, beta [b, H]:
//   S = S exp(g); kv_mem = k^T S; S += k ⊗ (v - kv_mem) beta; out = q^T S   [b, H, V]
RecurrenceStep gated_delta_rule_step(Builder& b, ValueId state, ValueId q, ValueId k, ValueId v, ValueId g, ValueId beta);
// Mamba-2's cached update (torch_forward in modeling_mamba2.py; Mamba-1's slow_forward step is the same
// with heads of 1 x 1): state [b, H, P, N], xdt [b, H, P] (x times dt), log_decay [b, H] (dt A), B, C
// [b, H, N]:   h = h exp(dt A) + xdt ⊗ B;  y = sum_N(h C)   [b, H, P] (no D skip)
RecurrenceStep ssd_step(Builder& b, ValueId state, ValueId xdt, ValueId log_decay, ValueId B, ValueId C);

// Transformers' segment_sum followed by exp over the last axis of x [..., m] (m the i64 scalar
// `size`): out[..., i, j] = exp(sum of x[..., k] for j < k <= i) for j <= i and 0 above the
// diagonal, summed as Transformers sums it (a masked cumulative sum, not a difference of two).
ValueId exp_segment_sum(Builder& b, ValueId x, ValueId size);

}  // namespace hfx::ir
