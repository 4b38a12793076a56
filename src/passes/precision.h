// The `apply-precision` pass: stores weights in an export's dtype and quantizes Linear layers
// (`hfx export --dtype`, `--quantize`; quant/quantize.h). It runs on the model's graph (composite
// Linear/Embedding, which is how `hfx verify` builds its reference) and on the backend's graph after
// decompose-composites and fold-weight-transforms (MatMul against a [K, N] weight, Gather), and gives
// both the same numbers. See docs/quantization.md for the policy and the measured error.
#pragma once

#include <string>

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
// quantize_lm_head, else stored in the dtype. A product under a /keep_f32/ scope (ir::Builder::kKeepF32Scope:
// a block Transformers computes in f32, such as a sigmoid MoE router) is never quantized and computes
// in f32 from its weight stored in the dtype: MatMul(x, Cast(W as f16|bf16, f32)), on every target. Norm weights, biases, rope tables and constants stay f32;
// the KV cache, every activation outside Linear layers and the logits stay f32.
//
// The target picks the form of the quantized and f16 layers (the numbers of the quantized weights are
// the same in all three; see quant/quantize.h):
//   OrtContrib (onnx --onnx-profile ort): as above, MatMulNBits.
//   Portable (onnx --onnx-profile portable): standard ONNX only. int4/int8 blockwise:
//     MatMul(x', DequantizeLinear(W.q[K, N] i4|u4|i8|u8, W.scales[K/block, N][, W.zp]; axis=0, block_size)).
//     int8:channel and f16/bf16 as above.
//   OpenVino: OpenVINO's compressed weights, computed in f32 (the CPU plugin fuses the decompression
//     into its FullyConnected): quantized: MatMul(x, Transpose(Reshape(DequantizeLinear(W.q[N, K/block,
//     block], W.scales[N, K/block, 1][, W.zp]; axis=2, block_size), [N, K]))) (W.q [N, K] with scales
//     [N, 1] and axis 1 when one block covers K, and for int8:channel); f16/bf16: MatMul(x,
//     Transpose(Cast(W[N, K] as f16|bf16, f32))). The backend lowers MatMul(x, Transpose(W)) to
//     MatMul(transpose_b) and DequantizeLinear to Convert -> Subtract -> Multiply.
//   ExecuTorch: Linear layers stay Linear (an XNNPACK FullyConnected delegate takes the weight [N, K]
//     as it is stored): f16: Cast(Linear(Cast(x, f16), W[N, K] as f16), f32) [+ bias, f32], in f16 as
//     ExecuTorch's XNNPACK and portable kernels compute it; bf16: Linear(x, Cast(W[N, K] as bf16, f32))
//     [+ bias]. int8:channel (symmetric): Linear(x, DequantizeLinear(W.q[N, K] i8, W.scales[N]; axis 0))
//     [+ bias], in f32, XNNPACK's f32 x qc8w FullyConnected; other quantizations are refused.
enum class PrecisionTarget { OrtContrib, Portable, OpenVino, ExecuTorch };

ir::Graph apply_precision(const ir::Graph& graph, const quant::PrecisionSpec& spec,
                          PrecisionTarget target = PrecisionTarget::OrtContrib);

}  // namespace hfx::passes
