// Reference decompositions of the composite ops into primitives. Each one is the op's spec (the
// reference executor's fused kernels are tested against it), the fallback for backends without a
// fused form, and what the ONNX backend writes today.
#include <cmath>
#include <limits>

#include "core/error.h"
#include "ir/builder.h"
#include "ir/ops.h"
#include "ir/recurrences.h"

namespace hfx::ir {

namespace {

std::vector<ValueId> embedding(Builder& b, const Node& n) {
  return {b.add1("Gather", {n.inputs[0], n.inputs[1]}, {{"axis", int64_t(0)}})};
}

// x @ W^T + bias. The Transpose of a weight is folded into the stored tensor by the
// fold-weight-transforms pass, so backends see a plain MatMul against a [in, out] initializer.
std::vector<ValueId> linear(Builder& b, const Node& n) {
  ValueId wt = b.transpose(n.inputs[1], {1, 0});
  ValueId y = b.matmul(n.inputs[0], wt);
  if (n.input(2) != kNone) y = b.plus(y, n.inputs[2]);
  return {y};
}

// Transformers' RMSNorm: x * rsqrt(mean(x^2, -1) + eps) * weight, computed in f32.
std::vector<ValueId> rms_norm(Builder& b, const Node& n) {
  ValueId x = n.inputs[0];
  ValueId sq = b.times(x, x);
  ValueId mean = b.add1("ReduceMean", {sq, b.i64s({-1})}, {{"keepdims", int64_t(1)}});
  ValueId denom = b.add1("Sqrt", {b.plus(mean, b.f32(float(n.attr_float("epsilon"))))});
  ValueId normed = b.times(x, b.add1("Reciprocal", {denom}));
  return {b.times(normed, n.inputs[1])};
}

std::vector<ValueId> swiglu(Builder& b, const Node& n) {
  ValueId gate = n.inputs[0];
  ValueId silu = b.times(gate, b.add1("Sigmoid", {gate}));
  return {b.times(silu, n.inputs[1])};
}

// Transformers' gelu (erf) and gelu_pytorch_tanh / gelu_new (tanh approximation), as torch computes them.
std::vector<ValueId> gelu(Builder& b, const Node& n) {
  ValueId x = n.inputs[0];
  const std::string approximate = n.attr_str("approximate", "none");
  ValueId inner;
  if (approximate == "tanh") {
    const double beta = std::sqrt(2.0 / 3.14159265358979323846);
    ValueId cube = b.times(b.times(x, x), x);
    ValueId arg = b.times(b.plus(x, b.times(cube, b.f32(0.044715f))), b.f32(float(beta)));
    inner = b.add1("Tanh", {arg});
  } else if (approximate == "none") {
    inner = b.add1("Erf", {b.times(x, b.f32(float(1.0 / std::sqrt(2.0))))});
  } else {
    unsupported("{}: Gelu approximate=\"{}\" (expected none or tanh)", n.name, approximate);
  }
  return {b.times(b.times(x, b.f32(0.5f)), b.plus(inner, b.f32(1.0f)))};
}

// torch.nn.LayerNorm over the last axis: biased variance, computed in f32.
std::vector<ValueId> layer_norm(Builder& b, const Node& n) {
  ValueId x = n.inputs[0];
  ValueId axes = b.i64s({-1});
  ValueId mean = b.add1("ReduceMean", {x, axes}, {{"keepdims", int64_t(1)}});
  ValueId d = b.minus(x, mean);
  ValueId var = b.add1("ReduceMean", {b.times(d, d), axes}, {{"keepdims", int64_t(1)}});
  ValueId denom = b.add1("Sqrt", {b.plus(var, b.f32(float(n.attr_float("epsilon"))))});
  ValueId y = b.times(b.times(d, b.add1("Reciprocal", {denom})), n.inputs[1]);
  if (n.input(2) != kNone) y = b.plus(y, n.inputs[2]);
  return {y};
}

// tanh(x / cap) * cap, in the order Transformers writes it.
ValueId softcap_values(Builder& b, ValueId x, double cap) {
  ValueId c = b.f32(float(cap));
  return b.times(b.add1("Tanh", {b.divide(x, c)}), c);
}

// ONNX LayerNormalization as hfx writes it: LayerNorm over the last axis with f32 statistics.
std::vector<ValueId> onnx_layer_normalization(Builder& b, const Node& n) {
  const int64_t rank = int64_t(b.graph().value(n.inputs[0]).shape.size());
  const int64_t axis = n.attr_int("axis", -1);
  if (axis != -1 && axis != rank - 1)
    unsupported("{}: LayerNormalization over axis {} of a rank-{} input (hfx reads the last axis only)", n.name, axis, rank);
  if (n.attr_int("stash_type", 1) != 1) unsupported("{}: LayerNormalization with stash_type other than 1 (f32)", n.name);
  Node with_eps = n;
  with_eps.attrs["epsilon"] = n.attr_float("epsilon", 1e-5);  // ONNX's default
  return layer_norm(b, with_eps);
}

std::vector<ValueId> softcap(Builder& b, const Node& n) {
  return {softcap_values(b, n.inputs[0], n.attr_float("cap"))};
}

// cos/sin tables for the positions given. With dynamic NTK scaling (Transformers' "dynamic" rope),
// inv_freq is recomputed from the longest position in the batch once it passes the original
// context length:  base' = base * (factor * L / L0 - (factor - 1)) ^ (d / (d - 2)).
std::vector<ValueId> rope_cos_sin(Builder& b, const Node& n) {
  ValueId pos = b.cast(n.inputs[0], DType::F32);
  ValueId inv_freq = n.inputs[1];
  if (n.attr_int("dynamic", 0)) {
    const double base = n.attr_float("dynamic_base");
    const double factor = n.attr_float("dynamic_factor");
    const double max_pos = double(n.attr_int("dynamic_max_position"));
    const int64_t dim = n.attr_int("rotary_dim");
    ValueId seq_len = b.plus(b.add1("ReduceMax", {pos}, {{"keepdims", int64_t(0)}}), b.f32(1.0f));
    ValueId longer = b.add1("Greater", {seq_len, b.f32(float(max_pos))});
    ValueId ratio = b.minus(b.times(b.f32(float(factor / max_pos)), seq_len), b.f32(float(factor - 1)));
    ValueId scaled_base = b.times(b.f32(float(base)), b.add1("Pow", {ratio, b.f32(float(dim) / float(dim - 2))}));
    std::vector<float> exponents;
    for (int64_t i = 0; i < dim; i += 2) exponents.push_back(float(i) / float(dim));
    ValueId exps = b.constant(Tensor::from_vector<float>(DType::F32, {int64_t(exponents.size())}, exponents), "rope_exponents");
    ValueId dyn = b.add1("Reciprocal", {b.add1("Pow", {scaled_base, exps})});
    inv_freq = b.add1("Where", {longer, dyn, inv_freq});
  }
  ValueId freqs = b.times(b.unsqueeze(pos, {-1}), inv_freq);  // [b, s, d/2]
  ValueId emb = b.concat({freqs, freqs}, -1);                  // [b, s, d]
  ValueId cos = b.add1("Cos", {emb});
  ValueId sin = b.add1("Sin", {emb});
  const double scaling = n.attr_float("attention_scaling", 1.0);
  if (scaling != 1.0) {
    cos = b.times(cos, b.f32(float(scaling)));
    sin = b.times(sin, b.f32(float(scaling)));
  }
  return {cos, sin};
}

// Rotate-half rope on the first r = cos.shape[-1] dims of x [b, h, s, d]; the rest passes through.
std::vector<ValueId> rotary_embedding(Builder& b, const Node& n) {
  const Graph& g = b.graph();
  ValueId x = n.inputs[0];
  // Copies: the builder appends values below, which may reallocate the graph's value table.
  const Dim d = g.value(x).shape.back();
  const Dim r = g.value(n.inputs[1]).shape.back();
  HFX_CHECK(d.is_fixed() && r.is_fixed() && r.value % 2 == 0, "{}: rotary dims must be fixed and even", n.name);
  ValueId cos = b.unsqueeze(n.inputs[1], {1});  // [b, 1, s, r]
  ValueId sin = b.unsqueeze(n.inputs[2], {1});
  ValueId rot = r.value == d.value ? x : b.slice(x, 0, r.value, -1);
  ValueId rotated;
  if (n.attr_int("interleaved", 0)) {
    // GPT-J style (Helium): pairs (2j, 2j + 1) rotate by frequency j, so each table's first half is
    // repeated element-wise, cos[..., :r/2].repeat_interleave(2), and rotate(x)[2j, 2j + 1] = (-x[2j + 1], x[2j]).
    auto pairwise = [&](ValueId table) {
      ValueId half = b.unsqueeze(b.slice(table, 0, r.value / 2, -1), {-1});  // [b, 1, s, r/2, 1]
      return b.reshape(b.concat({half, half}, -1), {0, 0, 0, r.value});
    };
    cos = pairwise(cos);
    sin = pairwise(sin);
    ValueId pairs = b.reshape(rot, {0, 0, 0, r.value / 2, 2});
    ValueId even = b.slice(pairs, 0, 1, -1), odd = b.slice(pairs, 1, 2, -1);
    rotated = b.reshape(b.concat({b.add1("Neg", {odd}), even}, -1), {0, 0, 0, r.value});
  } else {
    ValueId x1 = b.slice(rot, 0, r.value / 2, -1);
    ValueId x2 = b.slice(rot, r.value / 2, r.value, -1);
    rotated = b.concat({b.add1("Neg", {x2}), x1}, -1);
  }
  ValueId out = b.plus(b.times(rot, cos), b.times(rotated, sin));
  if (r.value != d.value) out = b.concat({out, b.slice(x, r.value, d.value, -1)}, -1);
  return {out};
}

// Additive attention bias [b, 1, s, t]: 0 where allowed, the lowest f32 elsewhere. Query i sits at
// cache position p + i with p = t - s (the past length).
std::vector<ValueId> attention_bias(Builder& b, const Node& n) {
  ValueId mask = n.inputs[0];  // [b, t]
  ValueId t = b.squeeze(b.shape_of(mask, 1, 2), {0});
  ValueId kv_idx = b.unsqueeze(b.add1("Range", {b.i64(0), t, b.i64(1)}), {0});     // [1, t]
  ValueId q_pos;                                                                   // [s, 1]
  if (n.input(2) != kNone) {
    q_pos = b.unsqueeze(n.inputs[2], {1});
  } else {
    ValueId s = b.squeeze(b.shape_of(n.inputs[1], 1, 2), {0});
    q_pos = b.unsqueeze(b.add1("Range", {b.minus(t, s), t, b.i64(1)}), {1});
  }
  ValueId allowed = b.add1("LessOrEqual", {kv_idx, q_pos});                         // [s, t]
  const int64_t window = n.attr_int("sliding_window", 0);
  if (window > 0) {
    ValueId in_window = b.add1("Greater", {kv_idx, b.minus(q_pos, b.i64(window))});
    allowed = b.add1("And", {allowed, in_window});
  }
  ValueId keep = b.unsqueeze(b.cast(mask, DType::Bool), {1, 2});                  // [b, 1, 1, t]
  allowed = b.add1("And", {allowed, keep});                                        // [b, 1, s, t]
  return {b.add1("Where", {allowed, b.f32(0.0f), b.f32(std::numeric_limits<float>::lowest())})};
}

// Bidirectional padding bias [b, 1, 1, t]: 0 where attention_mask != 0, the lowest f32 elsewhere, as
// Transformers' eager create_bidirectional_mask (bool mask -> where(mask, 0, finfo.min)); the query
// axis is broadcast by the Attention it feeds.
std::vector<ValueId> padding_bias(Builder& b, const Node& n) {
  ValueId keep = b.unsqueeze(b.cast(n.inputs[0], DType::Bool), {1, 2});  // [b, 1, 1, t]
  return {b.add1("Where", {keep, b.f32(0.0f), b.f32(std::numeric_limits<float>::lowest())})};
}

// Eager attention as Transformers writes it: repeat kv heads for GQA, softmax(q k^T * scale + bias) v;
// with softcap > 0 the scaled scores are soft-capped before the bias is added (Gemma 2).
std::vector<ValueId> eager_attention(Builder& b, const Node& n, double softcap) {
  const Graph& g = b.graph();
  ValueId q = n.inputs[0];
  ValueId k = n.inputs[1], v = n.inputs[2];
  const Dim hq = g.value(q).shape[1];  // copies, as in rotary_embedding
  const Dim hkv = g.value(n.inputs[1]).shape[1];
  const Dim hd = g.value(q).shape[3];
  HFX_CHECK(hq.is_fixed() && hkv.is_fixed() && hd.is_fixed() && hq.value % hkv.value == 0,
            "{}: head counts must be fixed, q heads a multiple of kv heads", n.name);
  if (const int64_t rep = hq.value / hkv.value; rep > 1) {
    auto repeat = [&](ValueId x) {
      ValueId e = b.add1("Expand", {b.unsqueeze(x, {2}), b.i64s({1, 1, rep, 1, 1})});
      return b.reshape(e, {0, hq.value, -1, hd.value});
    };
    k = repeat(k);
    v = repeat(v);
  }
  ValueId scores = b.times(b.matmul(q, b.transpose(k, {0, 1, 3, 2})), b.f32(float(n.attr_float("scale"))));
  if (softcap > 0) scores = softcap_values(b, scores, softcap);
  scores = b.plus(scores, n.inputs[3]);
  ValueId probs = b.add1("Softmax", {scores}, {{"axis", int64_t(-1)}});
  return {b.matmul(probs, v)};
}

std::vector<ValueId> attention(Builder& b, const Node& n) { return eager_attention(b, n, 0.0); }

std::vector<ValueId> softcap_attention(Builder& b, const Node& n) {
  const double cap = n.attr_float("softcap");
  HFX_CHECK(cap > 0, "{}: SoftcapAttention needs softcap > 0", n.name);
  return eager_attention(b, n, cap);
}

// Writes new [b, h, s, d] into cache [b, h, n, d] at slots cache_position[s]: ScatterElements on
// axis 2 with the slot index broadcast over b, h and d.
std::vector<ValueId> cache_update(Builder& b, const Node& n) {
  ValueId slots = b.reshape(n.inputs[2], {1, 1, -1, 1});
  ValueId indices = b.add1("Expand", {slots, b.add1("Shape", {n.inputs[1]})});
  return {b.add1("ScatterElements", {n.inputs[0], indices, n.inputs[1]}, {{"axis", int64_t(2)}})};
}

// ORT's SimplifiedLayerNormalization over the last axis: the RMSNorm Transformers computes.
std::vector<ValueId> simplified_layer_norm(Builder& b, const Node& n) {
  HFX_CHECK(n.attr_int("axis", -1) == -1, "{}: SimplifiedLayerNormalization over axis {} (hfx emits -1)", n.name,
            n.attr_int("axis", -1));
  return {b.add1("RMSNorm", {n.inputs[0], n.inputs[1]}, {{"epsilon", n.attr_float("epsilon", 1e-5)}})};
}

// ORT's SkipSimplifiedLayerNormalization: (RMSNorm(input + skip), input + skip).
std::vector<ValueId> skip_simplified_layer_norm(Builder& b, const Node& n) {
  ValueId sum = b.plus(n.inputs[0], n.inputs[1]);
  return {b.add1("RMSNorm", {sum, n.inputs[2]}, {{"epsilon", n.attr_float("epsilon", 1e-5)}}), sum};
}

// ORT's GroupQueryAttention for a growing cache (see ops.h), row by row as ORT's CPU kernel runs it:
// row b's past holds past_b = seqlens_k[b] + 1 - s valid keys from position 0 (fewer than the buffer's
// when the ort profile rolled a left-padded row); its queries sit at positions past_b + i (rotated with
// those rows of the cos/sin caches), its new keys and values are written at past_b.. of the present,
// and it attends causally over keys 0..past_b + i (local_window_size > 0: only keys j with past_b + i -
// j < local_window_size; softcap > 0 caps the scaled scores before the mask). Rows with past_b equal to
// the buffer's length (every unpadded batch) reduce to appending the new keys.
std::vector<ValueId> group_query_attention(Builder& b, const Node& n) {
  const Graph& g = b.graph();
  const int64_t hq = n.attr_int("num_heads"), hkv = n.attr_int("kv_num_heads");
  const int64_t window = n.attr_int("local_window_size", -1);
  if (window == 0 || window < -1) unsupported("{}: GroupQueryAttention with local_window_size {}", n.name, window);
  const Dim width = g.value(n.inputs[0]).shape.at(2);  // a copy: the value table may grow below
  const bool packed = n.input(1) == kNone;
  HFX_CHECK(width.is_fixed(), "{}: GroupQueryAttention query width must be fixed", n.name);
  const int64_t d = width.value / (packed ? hq + 2 * hkv : hq);
  ValueId q = n.inputs[0], k = n.input(1), v = n.input(2);
  if (packed) {
    k = b.slice(q, hq * d, (hq + hkv) * d, -1);
    v = b.slice(q, (hq + hkv) * d, (hq + 2 * hkv) * d, -1);
    q = b.slice(q, 0, hq * d, -1);
  }
  auto heads = [&](ValueId x, int64_t h) { return b.transpose(b.reshape(x, {0, 0, h, d}), {0, 2, 1, 3}); };
  q = heads(q, hq);
  k = heads(k, hkv);
  v = heads(v, hkv);
  const bool has_past = n.input(3) != kNone;
  const ValueId step = b.squeeze(b.shape_of(n.inputs[0], 1, 2), {0});
  const ValueId buffer = has_past ? b.squeeze(b.shape_of(n.inputs[3], 2, 3), {0}) : b.i64(0);
  const ValueId width_t = b.plus(buffer, step);  // keys in the present
  const ValueId i = b.unsqueeze(b.add1("Range", {b.i64(0), step, b.i64(1)}), {0});  // [1, s]
  // past_b = seqlens_k + 1 - s, and 0 on a first prompt, whose rows may end in padding (ORT: is_first_prompt).
  const ValueId last = b.unsqueeze(b.cast(n.inputs[5], DType::I64), {1});  // [b, 1]: the row's last valid key
  ValueId past_b = b.minus(b.plus(last, b.i64(1)), step);
  past_b = b.add1("Where", {b.add1("Less", {past_b, b.i64(0)}), b.i64(0), past_b});  // [b, 1]
  const ValueId pos = b.plus(past_b, i);  // [b, s]
  if (n.attr_int("do_rotary", 0)) {
    HFX_CHECK(n.input(7) != kNone && n.input(8) != kNone, "{}: do_rotary without cos/sin caches", n.name);
    auto table = [&](ValueId cache) {
      ValueId rows = b.add1("Gather", {cache, pos}, {{"axis", int64_t(0)}});  // [b, s, r/2]
      return b.concat({rows, rows}, -1);                                        // [b, s, r]
    };
    ValueId cos = table(n.inputs[7]), sin = table(n.inputs[8]);
    const ir::Attrs rope = {{"interleaved", n.attr_int("rotary_interleaved", 0)}};
    q = b.add1("RotaryEmbedding", {q, cos, sin}, rope);
    k = b.add1("RotaryEmbedding", {k, cos, sin}, rope);
  }
  const ValueId t = b.unsqueeze(b.add1("Range", {b.i64(0), width_t, b.i64(1)}), {0});  // [1, t]
  // present[b, :, t] = past[b, :, t] for t < past_b, new[b, :, t - past_b] up to past_b + s, else as
  // appended (never read: past the row's keys): one gather of rows from Concat(past, new).
  auto present = [&](ValueId past, ValueId fresh) {
    if (!has_past) return fresh;
    const ValueId cat = b.concat({past, fresh}, 2);  // [b, h, t, d]
    const ValueId in_new = b.add1("And", {b.add1("GreaterOrEqual", {t, past_b}), b.add1("Less", {t, b.plus(past_b, step)})});
    const ValueId src = b.add1("Where", {in_new, b.plus(buffer, b.minus(t, past_b)), t});  // [b, t]
    const ValueId rows = b.plus(src, b.unsqueeze(b.times(b.add1("Range", {b.i64(0), b.squeeze(b.shape_of(cat, 0, 1), {0}), b.i64(1)}), width_t), {1}));
    const ValueId flat = b.reshape(b.transpose(cat, {0, 2, 1, 3}), {-1, hkv * d});  // [b * t, h * d]
    const ValueId picked = b.add1("Gather", {flat, rows}, {{"axis", int64_t(0)}});  // [b, t, h * d]
    return b.transpose(b.reshape(picked, {0, 0, hkv, d}), {0, 2, 1, 3});
  };
  ValueId pk = present(n.input(3), k), pv = present(n.input(4), v);
  ValueId allowed = b.add1("And", {b.add1("LessOrEqual", {b.unsqueeze(t, {1}), b.unsqueeze(pos, {2})}),
                                   b.unsqueeze(b.add1("LessOrEqual", {t, last}), {1})});  // [b, s, t]: causal, the row's keys
  if (window > 0)  // key j visible to query i at p + i when p + i - j < window (Transformers' sliding window)
    allowed = b.add1("And", {allowed, b.add1("Greater", {b.unsqueeze(t, {1}), b.unsqueeze(b.minus(pos, b.i64(window)), {2})})});
  allowed = b.unsqueeze(allowed, {1});  // [b, 1, s, t]
  ValueId bias = b.add1("Where", {allowed, b.f32(0.0f), b.f32(std::numeric_limits<float>::lowest())});
  const double scale = n.attr_float("scale", 1.0 / std::sqrt(double(d)));
  const double cap = n.attr_float("softcap", 0.0);
  ValueId attn = cap > 0 ? b.add1("SoftcapAttention", {q, pk, pv, bias}, {{"scale", scale}, {"softcap", cap}})
                         : b.add1("Attention", {q, pk, pv, bias}, {{"scale", scale}});
  ValueId out = b.reshape(b.transpose(attn, {0, 2, 1, 3}), {0, 0, hq * d});
  return {out, pk, pv};
}

// ONNX opset-23 RMSNormalization over the last axis (stash_type 1: f32): the RMSNorm Transformers computes.
std::vector<ValueId> rms_normalization(Builder& b, const Node& n) {
  HFX_CHECK(n.attr_int("axis", -1) == -1 && n.attr_int("stash_type", 1) == 1,
            "{}: RMSNormalization over axis {} with stash_type {} (hfx emits -1 and 1)", n.name, n.attr_int("axis", -1),
            n.attr_int("stash_type", 1));
  return {b.add1("RMSNorm", {n.inputs[0], n.inputs[1]}, {{"epsilon", n.attr_float("epsilon", 1e-5)}})};
}

// ONNX opset-23 RotaryEmbedding on x[b,h,s,d] with cos/sin[b,s,r/2] (no position_ids), rotate-half
// (interleaved=0) or pairwise (interleaved=1) over the first r dims: the composite with the half
// tables repeated, as RopeCosSin builds them (concat(freqs, freqs)).
std::vector<ValueId> onnx_rotary_embedding(Builder& b, const Node& n) {
  const Dim half = b.graph().value(n.inputs[1]).shape.back();  // a copy: the value table may grow below
  const int64_t r = n.attr_int("rotary_embedding_dim", 0);
  HFX_CHECK(half.is_fixed() && (r == 0 || r == 2 * half.value), "{}: rotary_embedding_dim {} for tables of width {}", n.name,
            r, half.str());
  ValueId cos = b.concat({n.inputs[1], n.inputs[1]}, -1), sin = b.concat({n.inputs[2], n.inputs[2]}, -1);
  return {b.add1("RotaryEmbedding", {n.inputs[0], cos, sin}, {{"interleaved", n.attr_int("interleaved", 0)}})};
}

// ONNX opset-23 Attention on 4-D q/k/v with an additive float mask: eager attention, the scores
// soft-capped (softcap > 0) before the mask is added, as the ONNX spec and Gemma 2 order it.
std::vector<ValueId> onnx_attention(Builder& b, const Node& n) {
  HFX_CHECK(n.attr_int("is_causal", 0) == 0, "{}: Attention with is_causal=1 (hfx passes the causal mask)", n.name);
  const double scale = n.attr_float("scale");
  const double cap = n.attr_float("softcap", 0.0);
  if (cap > 0) return {b.add1("SoftcapAttention", {n.inputs[0], n.inputs[1], n.inputs[2], n.inputs[3]}, {{"scale", scale}, {"softcap", cap}})};
  return {b.add1("Attention", {n.inputs[0], n.inputs[1], n.inputs[2], n.inputs[3]}, {{"scale", scale}})};
}

// CausalConv (models/short_conv.h): the conv over past ++ x, tap by tap.
std::vector<ValueId> causal_conv(Builder& b, const Node& n) {
  const CausalConvOut r = causal_conv_primitives(b, n.inputs[0], n.inputs[1], n.inputs[2], n.input(3),
                                                 n.attr_int("channels"), n.attr_int("kernel"));
  return {r.out, r.present};
}

// GatedDeltaRule (models/delta_rule.h): the chunked rule of ir/recurrences.h.
std::vector<ValueId> gated_delta_rule(Builder& b, const Node& n) {
  const DeltaRuleOut r = gated_delta_rule_primitives(
      b, n.inputs[0], n.inputs[1], n.inputs[2], n.inputs[3], n.inputs[4], n.input(5),
      {n.attr_int("heads"), n.attr_int("key_dim"), n.attr_int("value_dim"), n.attr_int("chunk"), n.attr_int("max_positions")});
  return {r.out, r.final_state};
}

// SsdScan (models/ssd.h): x * dt and dt * A into the chunked scan of ir/recurrences.h, plus D's skip.
std::vector<ValueId> ssd_scan(Builder& b, const Node& n) {
  const int64_t H = n.attr_int("heads");
  const ValueId x = n.inputs[0], dt = n.inputs[1];
  const SsdScanOut r = ssd_scan_primitives(b, b.times(x, b.unsqueeze(dt, {3})), b.times(dt, n.inputs[2]), n.inputs[3],
                                           n.inputs[4], n.input(6),
                                           {H, n.attr_int("head_dim"), n.attr_int("state_size"), n.attr_int("chunk")});
  ValueId y = r.out;
  if (n.input(5) != kNone) y = b.plus(y, b.times(x, b.reshape(n.inputs[5], {H, 1})));
  return {y, r.final_state};
}

// ONNX Runtime's CausalConvWithState (com.microsoft), read back from an `ort` profile graph: channels
// first, weight [C, 1, K], an absent past_state zeros, activation none or silu.
std::vector<ValueId> causal_conv_with_state(Builder& b, const Node& n) {
  HFX_CHECK(n.attr_int("channels_last", 0) == 0 && n.attr_int("dilation", 1) == 1 && n.attr_int("ndim", 1) == 1 &&
                n.attr_int("state_window", 0) == 0,
            "{}: CausalConvWithState beyond channels-first 1-D undilated convolution", n.name);
  const Value& w = b.graph().value(n.inputs[1]);
  HFX_CHECK(w.shape.size() == 3 && w.shape[0].is_fixed() && w.shape[2].is_fixed(), "{}: weight must be [C, 1, K]", n.name);
  const int64_t C = w.shape[0].value, K = w.shape[2].value;
  ValueId past = n.input(3);
  if (past == kNone) {
    ValueId dims = b.concat({b.shape_of(n.inputs[0], 0, 1), b.i64s({C, K - 1})}, 0);
    past = b.add1("Expand", {b.f32(0.0f), dims});
  }
  CausalConvOut r = causal_conv_primitives(b, n.inputs[0], past, b.reshape(n.inputs[1], {C, K}), n.input(2), C, K);
  const std::string act = n.attr_str("activation", "");
  if (act == "silu" || act == "swish") r.out = b.times(r.out, b.add1("Sigmoid", {r.out}));
  else HFX_CHECK(act.empty() || act == "none", "{}: CausalConvWithState activation \"{}\"", n.name, act);
  return {r.out, r.present};
}

// ONNX Runtime's LinearAttention (com.microsoft), read back from an `ort` profile graph, one state per
// query head: update_rule gated_delta (with decay and beta) as the chunked delta rule, gated (with
// decay) as the SSD scan (key = B, value = x dt, query = C; its state [dk, dv] is the SSD's transposed).
std::vector<ValueId> linear_attention(Builder& b, const Node& n) {
  const std::string rule = n.attr_str("update_rule", "linear");
  const int64_t hq = n.attr_int("q_num_heads"), hkv = n.attr_int("kv_num_heads");
  const bool gated = rule == "gated" && n.input(4) != kNone;
  if (!(rule == "gated_delta" || gated) || hq != hkv || n.input(4) == kNone || (!gated && n.input(5) == kNone))
    unsupported("{}: LinearAttention with update_rule {} over {} query and {} key/value heads (hfx runs gated_delta with "
                "decay and beta, and gated with decay, one state per head)", n.name, rule, hq, hkv);
  const Value& k = b.graph().value(n.inputs[1]);
  const Value& v = b.graph().value(n.inputs[2]);
  const int64_t dk = k.shape.at(2).value / hkv, dv = v.shape.at(2).value / hkv;
  auto heads = [&](ValueId x, int64_t d) { return b.reshape(x, {0, 0, hkv, d}); };
  ValueId q = heads(n.inputs[0], dk);
  const double scale = n.attr_float("scale", 1.0 / std::sqrt(double(dk)));
  if (scale != 1.0) q = b.times(q, b.f32(float(scale)));
  if (gated) {
    const ValueId initial = n.input(3) == kNone ? kNone : b.transpose(n.inputs[3], {0, 1, 3, 2});
    const SsdScanOut r = ssd_scan_primitives(b, heads(n.inputs[2], dv), n.inputs[4], heads(n.inputs[1], dk), q, initial,
                                             {hkv, dv, dk, n.attr_int("chunk_size", 0)});
    return {b.reshape(r.out, {0, 0, hkv * dv}), b.transpose(r.final_state, {0, 1, 3, 2})};
  }
  // A graph read back names no step bound: a scan that covers 2^20 positions (steps past a step's
  // chunk count read empty slices and cost nothing).
  const DeltaRuleOut r = gated_delta_rule_primitives(b, q, heads(n.inputs[1], dk), heads(n.inputs[2], dv), n.inputs[4],
                                                     n.inputs[5], n.input(3),
                                                     {hkv, dk, dv, n.attr_int("chunk_size", 64), int64_t(1) << 20});
  return {b.reshape(r.out, {0, 0, hkv * dv}), r.final_state};
}

// RecurrenceScan (the ONNX backend's Scan lowering, read back): the chunked rules of ir/recurrences.h
// from the carried state. A graph read back names no step bound: the delta rule's chunk scan covers
// 2^20 positions, as LinearAttention's does.
std::vector<ValueId> recurrence_scan(Builder& b, const Node& n) {
  const int64_t H = n.attr_int("heads");
  if (n.attr_str("rule") == "ssd") {
    const SsdScanOut r = ssd_scan_primitives(b, n.inputs[1], n.inputs[2], n.inputs[3], n.inputs[4], n.inputs[0],
                                             {H, n.attr_int("head_dim"), n.attr_int("state_size"), 0});
    return {r.final_state, r.out};
  }
  const DeltaRuleOut r = gated_delta_rule_primitives(b, n.inputs[1], n.inputs[2], n.inputs[3], n.inputs[4], n.inputs[5],
                                                     n.inputs[0],
                                                     {H, n.attr_int("key_dim"), n.attr_int("value_dim"), 64, int64_t(1) << 20});
  return {r.final_state, r.out};
}

}  // namespace

void register_decompositions(std::vector<OpSchema>& table) {
  const std::map<std::string, std::function<std::vector<ValueId>(Builder&, const Node&)>> fns = {
      {"Embedding", embedding},         {"Linear", linear},
      {"RMSNorm", rms_norm},            {"SwiGLU", swiglu},
      {"Gelu", gelu},                   {"LayerNorm", layer_norm},
      {"OnnxGelu", gelu},               {"LayerNormalization", onnx_layer_normalization},
      {"Softcap", softcap},             {"SoftcapAttention", softcap_attention},
      {"RopeCosSin", rope_cos_sin},     {"RotaryEmbedding", rotary_embedding},
      {"AttentionBias", attention_bias}, {"Attention", attention},
      {"CacheUpdate", cache_update},
      {"CausalConv", causal_conv},       {"GatedDeltaRule", gated_delta_rule},
      {"SsdScan", ssd_scan},
      {"CausalConvWithState", causal_conv_with_state},
      {"LinearAttention", linear_attention},
      {"FusedMatMul", linear},  // transB=1: x @ W^T, a Linear without bias
      {"RecurrenceScan", recurrence_scan},
      {"PaddingBias", padding_bias},
      {"SimplifiedLayerNormalization", simplified_layer_norm},
      {"SkipSimplifiedLayerNormalization", skip_simplified_layer_norm},
      {"GroupQueryAttention", group_query_attention},
      {"RMSNormalization", rms_normalization},
      {"OnnxRotaryEmbedding", onnx_rotary_embedding},
      {"OnnxAttention", onnx_attention},
  };
  for (auto& s : table)
    if (auto it = fns.find(s.name); it != fns.end()) s.decompose = it->second;
}

}  // namespace hfx::ir
