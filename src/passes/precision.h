// The `apply-precision` pass: stores weights in an export's dtype and quantizes Linear layers
// (`hfx export --dtype`, `--quantize`; quant/quantize.h). It runs on the model's graph (composite
// Linear/Embedding, which is how `hfx verify` builds its reference) and on the backend's graph after
// decompose-composites and fold-weight-transforms (MatMul against a [K, N] weight, Gather), and gives
// both the same numbers. See docs/quantization.md for the policy and the measured error.
#pragma once

#include "ir/graph.h"
#include "quant/quantize.h"

namespace hfx::passes {

// Per Linear layer (Linear(x, W[N, K]) or MatMul(x, W[K, N]) with W a float checkpoint weight):
//   int4, int8 (blockwise):                 MatMulNBits(x', W.q, W.scales[, W.zero_points]) -> f32
//   int8:channel:                           MatMul(x', DequantizeLinear(W.q, W.scales[, W.zp]; axis=1)) -> f32
//   f16 (not quantized):                    MatMul(Cast(x, f16), W as f16) -> Cast f32
//   bf16 (not quantized):                   MatMul(x, Cast(W as bf16, f32))  (ORT CPU has no bf16 MatMul)
// where x' is x cast to f16 (a block larger than K is halved while it still covers K: 128 -> 64 for K = 64) when the dtype is f16 (scales are f16 then), else x; quantization reads W
// rounded to the dtype. Embedding tables (Gather) are stored in the dtype and cast to f32 after the
// lookup; they are never quantized. lm_head (nodes under a /lm_head/ scope) is quantized only with
// quantize_lm_head, else stored in the dtype. Norm weights, biases, rope tables and constants stay f32;
// the KV cache, every activation outside Linear layers and the logits stay f32.
ir::Graph apply_precision(const ir::Graph& graph, const quant::PrecisionSpec& spec);

}  // namespace hfx::passes
