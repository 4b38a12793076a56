// Mamba-2's state-space duality (SSD) scan in primitives: Transformers' mamba2_chunk_scan (the
// torch_forward path of modeling_mamba2.py), which needs no loop. A prompt is cut into chunks of
// `chunk` positions (the last padded with zeros, which neither decay nor feed the state; a step
// shorter than `chunk` is one chunk of its own length); within a chunk the scan is a masked, decayed
// attention-like product, and the chunks' start states come from one more such product over the
// chunk index, seeded with the carried state. The same graph serves a prompt and a one-token step
// (one chunk of one position: Transformers' recurrent update), so prefill and decode share it.
#pragma once

#include <cstdint>

#include "ir/builder.h"
#include "ir/recurrences.h"

namespace hfx::models {

struct SsdShape {
  // chunk 0: floor(sqrt(s)) positions (at most kMaxSqrtChunk), chosen per step (selective_scan's:
  // its heads make a chunk's decay matrix heads x chunk^2, so the chunk grows with the prompt's root)
  int64_t heads = 0, head_dim = 0, state_size = 0, chunk = 0;
};
using ir::kMaxSqrtChunk;

struct SsdOut {
  ir::ValueId out = ir::kNone;          // y [b, s, heads, head_dim], D's skip included
  ir::ValueId final_state = ir::kNone;  // [b, heads, head_dim, state_size]: the state after the last position
};

// x [b, s, heads, head_dim]; dt [b, s, heads] (discretized: softplus and limits applied); A [heads]
// (negative: -exp(A_log)); B, C [b, s, heads, state_size] (each group repeated over its heads);
// D [heads] or kNone; initial [b, heads, head_dim, state_size] or kNone for a zero state.
// h_t = exp(dt_t * A) h_{t-1} + dt_t * x_t ⊗ B_t, y_t = h_t · C_t + D * x_t.
SsdOut ssd_chunk_scan(ir::Builder& b, ir::ValueId x, ir::ValueId dt, ir::ValueId A, ir::ValueId B, ir::ValueId C,
                      ir::ValueId D, ir::ValueId initial, const SsdShape& shape);

// Mamba-1's selective scan (Transformers' mamba_selective_scan and mamba_selective_state_update, the
// torch path of modeling_mamba.py and modeling_falcon_mamba.py) as an SSD scan. Its decay
// exp(dt_t[i] * A[i, n]) is per channel i and state n, where Mamba-2's is per head, so each
// (channel, state) pair is a head of head_dim 1 and state 1: x_t[i] and dt_t[i] repeated over n,
// A[i, n] its decay rate, B_t[n] and C_t[n] repeated over i; the heads' outputs are summed over n.
// Chunks of floor(sqrt(s)) positions (SsdShape::chunk 0), so a step costs channels x state x s^1.5.
//   x, dt [b, s, channels] (dt discretized: softplus applied); A [channels, state_size] (negative);
//   B, C [b, s, state_size]; D [channels] or kNone; initial [b, channels, state_size] or kNone.
// out: y [b, s, channels] (D's skip included), final_state [b, channels, state_size].
SsdOut selective_scan(ir::Builder& b, ir::ValueId x, ir::ValueId dt, ir::ValueId A, ir::ValueId B, ir::ValueId C,
                      ir::ValueId D, ir::ValueId initial, int64_t channels, int64_t state_size);

// Transformers' segment_sum followed by exp over the last axis of x [..., m] (m the i64 scalar
// `size`): out[..., i, j] = exp(sum of x[..., k] for j < k <= i) for j <= i and 0 above the
// diagonal, summed as Transformers sums it (a masked cumulative sum, not a difference of two).
ir::ValueId exp_segment_sum(ir::Builder& b, ir::ValueId x, ir::ValueId size);

}  // namespace hfx::models
