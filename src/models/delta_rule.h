// The gated delta rule (gated delta-net's recurrence: Qwen3-Next, Qwen3.5) as the graph's composite
// GatedDeltaRule: its decomposition into primitives, with no loop op, is ir/recurrences.h's
// (Transformers' chunked prefill and recurrent decode, which compute the same recurrence
//
//   S_t = exp(g_t) S_{t-1} + k_t (beta_t (v_t - (exp(g_t) S_{t-1})^T k_t))^T,   o_t = S_t^T q_t
//
// with S [key_dim, value_dim] per head); the onnx `ort` profile writes it as ONNX Runtime's
// com.microsoft LinearAttention (update_rule gated_delta) instead.
#pragma once

#include "ir/builder.h"
#include "ir/recurrences.h"

namespace hfx::models {

using ir::DeltaRuleOut;
using ir::DeltaRuleShape;

// q, k [b, s, heads, key_dim] (l2-normalised, q already scaled by key_dim^-0.5, each key head repeated
// over its value heads); v [b, s, heads, value_dim]; g (log decay, <= 0) and beta [b, s, heads];
// initial [b, heads, key_dim, value_dim] or kNone for a zero state.
DeltaRuleOut gated_delta_rule(ir::Builder& b, ir::ValueId q, ir::ValueId k, ir::ValueId v, ir::ValueId g,
                              ir::ValueId beta, ir::ValueId initial, const DeltaRuleShape& shape);

}  // namespace hfx::models
