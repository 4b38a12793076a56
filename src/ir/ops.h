// Op schemas: one table of every op the IR knows, with its arity, shape/dtype inference and, for
// composite ops, the decomposition into primitives that is both its spec and its fallback.
//
// Primitives have exactly ONNX's semantics (opset 21) and ONNX's names for ops and attributes, so a
// backend lowers them one to one. Exception: Cast's `to` is an hfx dtype name ("f32", "i64", "bool"),
// the one dtype vocabulary every layer shares. The table also holds target ops (ONNX Runtime's contrib
// ops, opset-23 fused ops; below) that the formats' passes produce: they are IR ops because the
// reference executor runs the graphs read back from files that contain them.
//
//   Elementwise (numpy broadcasting): Add Sub Mul Div Pow Mod(fmod) | Equal Less LessOrEqual Greater
//     GreaterOrEqual -> bool | And Or (bool) | unary: Neg Sqrt Reciprocal Exp Log Sin Cos Tanh Erf
//     Sigmoid Not Identity
//   MatMul(a, b)                         numpy matmul with batch broadcasting (rank >= 2)
//   Gather(data, indices; axis=0)        ONNX Gather
//   GatherElements(data, indices; axis=0)  out shaped as indices (ONNX GatherElements)
//   Softmax(x; axis=-1)
//   ReduceMean/ReduceMax/ReduceSum(x, axes; keepdims=1)   axes is a 1-D int64 constant input
//   Transpose(x; perm) Reshape(x, shape) (0 copies, -1 infers) Unsqueeze(x, axes) Squeeze(x, axes)
//   Concat(xs...; axis) Slice(x, starts, ends, axes[, steps]) Expand(x, shape) Where(c, x, y)
//   Cast(x; to) Range(start, limit, delta) Shape(x; start, end) CumSum(x, axis)
//   ScatterElements(data, indices, updates; axis)
//   DequantizeLinear(x, x_scale, x_zero_point?; axis=1, block_size=0)   per-axis or blocked (opset 21)
//   MatMulNBits(A[..., K], B, scales, zero_points?; K, N, bits, block_size) -> [..., N]
//       com.microsoft's weight-only quantized MatMul (layouts in quant/quantize.h)
//
// Composite (high-level) ops; hfx's own domain, each decomposed in decompose.cc:
//   Embedding(weight[V,H], ids[...]) -> [..., H]                      = Gather(weight, ids)
//   Linear(x[..., in], weight[out, in], bias[out]?) -> [..., out]     = x @ weight^T + bias
//   RMSNorm(x[..., n], weight[n]; epsilon) -> x * rsqrt(mean(x^2) + eps) * weight
//   SwiGLU(gate, up) -> silu(gate) * up
//   Gelu(x; approximate="none"|"tanh") -> 0.5 x (1 + erf(x / sqrt 2))
//                                       | 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
//   LayerNorm(x[..., n], weight, bias?; epsilon) -> (x - mean) / sqrt(var + eps) * weight + bias over the last
//       axis (biased variance); weight and bias are [n] or broadcast to x's trailing dims ([heads, n] per head)
//   Softcap(x; cap) -> tanh(x / cap) * cap                              (Gemma 2 logit soft-capping)
//   RopeCosSin(position_ids[b,s] i64, inv_freq[d/2] f32; attention_scaling=1,
//              dynamic_* attrs, see decompose.cc) -> cos[b,s,d], sin[b,s,d] (f32)
//       freqs = position * inv_freq; emb = concat(freqs, freqs); cos = cos(emb) * scaling ...
//   RotaryEmbedding(x[b,h,s,d], cos[b,s,r], sin[b,s,r]; interleaved=0) -> [b,h,s,d]
//       rotate-half rope on the first r dims of x (r = d unless partial), the rest passes through;
//       interleaved=1 (GPT-J style, Helium): pairs (2j, 2j + 1) rotate by frequency j (the tables'
//       first half, repeated pairwise)
//   AttentionBias(attention_mask[b,t] i64, input_ids[b,s], cache_position[s] i64?; sliding_window=0)
//             -> [b,1,s,t] f32
//       0 where query i (at cache position pos_i = cache_position[i], or t - s + i without it) may
//       see key j: j <= pos_i, mask[b,j] != 0, and, with a window w > 0, pos_i - j < w; the lowest
//       f32 elsewhere (as Transformers' eager mask does)
//   PaddingBias(attention_mask[b,t] i64) -> [b,1,1,t] f32
//       bidirectional (encoder) attention: 0 where mask[b,j] != 0, the lowest f32 elsewhere; broadcast over
//       the queries (Transformers' eager create_bidirectional_mask)
//   Attention(q[b,hq,s,d], k[b,hkv,t,d], v[b,hkv,t,d], bias[b,1,s,t]; scale) -> out[b,hq,s,d]
//       each group of hq/hkv query heads shares one kv head; out = softmax(q @ k^T * scale + bias) @ v
//       (the caller assembles k and v: Concat(past, new) for a growing cache, CacheUpdate for a static one)
//   SoftcapAttention(q, k, v, bias; scale, softcap) -> as Attention with the scores soft-capped before the
//       bias: softmax(Softcap(q @ k^T * scale; softcap) + bias) @ v     (Gemma 2)
//   CacheUpdate(cache[b,h,n,d], new[b,h,s,d], cache_position[s] i64) -> [b,h,n,d]
//       the cache with new written at slots cache_position (a static cache's in-place write)
//
// Target ops: ONNX Runtime's fused ops, with ORT's names, attributes and semantics, emitted only by
// the ONNX backend's `ort` profile (passes/ort_contrib_ops.cc). decompose-composites keeps them (the
// writer lowers them one to one); the reference executor runs their decomposition (decompose.cc),
// which is their spec here:
//   SimplifiedLayerNormalization(x, scale; epsilon, axis=-1, stash_type=1) -> RMSNorm(x, scale)
//   SkipSimplifiedLayerNormalization(input, skip, gamma; epsilon) -> (RMSNorm(input + skip), input + skip)
//       ORT outputs 0 and 3 (output, input_skip_bias_sum); 1 and 2 (mean, inv_std_var) are left out
//   GroupQueryAttention(query[b,s,hq*d or (hq+2hkv)*d], key?, value?, past_key[b,hkv,p,d]?, past_value?,
//       seqlens_k[b] i32, total_sequence_length[] i32, cos_cache[m,r/2]?, sin_cache?; num_heads,
//       kv_num_heads, scale, do_rotary, rotary_interleaved=0, local_window_size=-1, softcap=0)
//       -> output[b,s,hq*d], present_key[b,hkv,p+s,d], present_value
//       growing-cache semantics without left padding: new tokens sit at positions p + i (rotary from
//       the cache rows), key j is visible to query i when j <= p + i and j <= seqlens_k[b] (and, with
//       local_window_size > 0, p + i - j < local_window_size: ORT 1.31 CPU's count, Transformers' window)
//   FusedMatMul(x[..., K], w[N, K]) -> [..., N] = Linear(x, w) without bias: com.microsoft FusedMatMul with
//       transB=1 (alpha 1), over a Linear layer's weight as the checkpoint stores it (passes/ort_fused_matmul.cc)
//
// Target op of the ONNX backend's `--onnx-recurrence scan` (passes/scan_recurrences.cc), written as an
// ONNX Scan over the time axis whose body is one step of the rule (backends/onnx/onnx_scan.h); its
// inputs and outputs are the Scan's, in the Scan's order (carried state first):
//   RecurrenceScan(state, per-step inputs [b, s, ...]...; rule, heads, and the rule's state dims)
//       -> final_state like state, out [b, s, ...]
//     rule gated_delta (key_dim, value_dim): state [b, H, K, V], q, k [b, s, H, K], v [b, s, H, V], g,
//       beta [b, s, H] -> out [b, s, H, V]: GatedDeltaRule from that state
//     rule ssd (head_dim, state_size): state [b, H, P, N], xdt [b, s, H, P], log_decay [b, s, H], B, C
//       [b, s, H, N] -> y [b, s, H, P]: SsdScan's scan without D (x dt and dt A already formed)
//   Its decomposition is the chunked rule of ir/recurrences.h (the same recurrence, summed in chunks).
// Target ops of ONNX opset 23 (ai.onnx), emitted by the ONNX backend's `--onnx-opset 23`
// (passes/onnx_standard_ops.cc); the writer lowers them to the ONNX op named after the arrow:
//   RMSNormalization(x, scale; epsilon, axis=-1, stash_type=1) -> RMSNorm(x, scale)
//   OnnxRotaryEmbedding(x[b,h,s,d], cos[b,s,r/2], sin[b,s,r/2]; rotary_embedding_dim=0|r, interleaved=0|1)
//       -> RotaryEmbedding(x, concat(cos, cos), concat(sin, sin))                      (ONNX RotaryEmbedding)
//   OnnxAttention(q[b,hq,s,d], k[b,hkv,t,d], v, attn_mask[b,1,s,t] f32; scale, softcap=0, q_num_heads,
//       kv_num_heads) -> Attention / SoftcapAttention(q, k, v, attn_mask)                (ONNX Attention)
//
// Target ops of earlier opsets, emitted at every opset hfx writes (opset 21 and 23) by the same pass:
//   LayerNormalization(x, scale, bias?; epsilon, axis=-1, stash_type=1) -> LayerNorm     (opset 17)
//   OnnxGelu(x; approximate=none|tanh) -> Gelu(x; approximate)                           (ONNX Gelu, opset 20)
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace hfx::ir {

class Builder;

struct OpSchema {
  std::string name;
  size_t min_inputs = 0;
  size_t max_inputs = 0;
  size_t num_outputs = 1;
  bool composite = false;
  // A target op (see above): a composite that decompose-composites leaves for the backend.
  bool target_op = false;
  // Output dtypes and shapes (names are set by the caller).
  std::function<std::vector<Value>(const Graph&, const Node&)> infer;
  // For composite ops: emits primitives computing the node's outputs, in order.
  std::function<std::vector<ValueId>(Builder&, const Node&)> decompose;
};

// Throws Unsupported naming the op when it is unknown.
const OpSchema& op_schema(const std::string& op);
bool is_known_op(const std::string& op);
std::vector<std::string> all_op_names();

// Checks arity and runs the schema's inference.
std::vector<Value> infer_outputs(const Graph& graph, const Node& node);

// Numpy broadcasting of symbolic shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b);

// Registers the composite ops' decompositions (called once by op_schema's table).
void register_decompositions(std::vector<OpSchema>& table);

}  // namespace hfx::ir
