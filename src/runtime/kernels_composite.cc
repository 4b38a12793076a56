// Fused kernels of the composite ops. Each one mirrors its decomposition in src/ir/decompose.cc
// operation by operation (same f32 roundings in the same order), so the two agree to within sgemm
// summation-order differences; tests/unit/test_decompositions.cc checks 1e-5.
#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/kernels.h"

namespace hfx::runtime::detail {

namespace {

// Embedding(weight[V, H], ids[...]) = Gather(weight, ids, axis=0).
std::vector<Tensor> embedding_kernel(const ir::Node& node, const KernelInputs& in) {
  const Tensor& w = arg(node, in, 0);
  if (w.rank() != 2) bad_input("Embedding: weight must be 2-D, got {}", shape_string(w.shape()));
  ir::Node gather = node;
  gather.attrs = {{"axis", int64_t(0)}};
  return primitive_kernels().at("Gather")(gather, in);
}

}  // namespace

void add_linear_bias(const ir::Node& node, const KernelInputs& in, float* c, int64_t rows, int64_t n) {
  if (in.size() <= 2 || !in[2]) return;
  const Tensor& b = *in[2];
  expect_dtype(node, b, DType::F32, "bias");
  if (b.numel() != n) bad_input("Linear: bias {} for {} outputs", shape_string(b.shape()), n);
  const float* pb = b.as<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) c[r * n + j] = c[r * n + j] + pb[j];
}

namespace {

// Linear(x[..., in], weight[out, in], bias[out]?) = x @ weight^T + bias: one sgemm over all rows.
std::vector<Tensor> linear_kernel(const ir::Node& node, const KernelInputs& in) {
  const Tensor& x = arg(node, in, 0);
  const Tensor& w = arg(node, in, 1);
  expect_dtype(node, x, DType::F32, "input");
  expect_dtype(node, w, DType::F32, "weight");
  if (w.rank() != 2 || x.rank() < 1 || x.shape().back() != w.shape()[1])
    bad_input("Linear: input {} does not match weight {}", shape_string(x.shape()), shape_string(w.shape()));
  const int64_t k = w.shape()[1], n = w.shape()[0];
  const int64_t rows = numel_of(std::vector<int64_t>(x.shape().begin(), x.shape().end() - 1));
  std::vector<int64_t> shape = x.shape();
  shape.back() = n;
  Tensor out(DType::F32, shape);
  float* c = out.as<float>();
  gemm(false, true, rows, n, k, 1.0f, x.as<float>(), k, w.as<float>(), k, c, n);
  add_linear_bias(node, in, c, rows, n);
  return {std::move(out)};
}

// RMSNorm: normed = x * (1 / sqrt(mean(x * x) + eps)); out = normed * weight. The mean sums the f32
// squares in double, as the ReduceMean kernel does.
std::vector<Tensor> rms_norm_kernel(const ir::Node& node, const KernelInputs& in) {
  const Tensor& x = arg(node, in, 0);
  const Tensor& w = arg(node, in, 1);
  expect_dtype(node, x, DType::F32, "input");
  expect_dtype(node, w, DType::F32, "weight");
  if (x.rank() < 1) bad_input("RMSNorm of a scalar");
  const int64_t n = x.shape().back();
  if (w.numel() != n) bad_input("RMSNorm: weight {} for input {}", shape_string(w.shape()), shape_string(x.shape()));
  const float eps = float(node.attr_float("epsilon"));
  Tensor out(DType::F32, x.shape());
  const float* px = x.as<float>();
  const float* pw = w.as<float>();
  float* po = out.as<float>();
  const int64_t rows = n ? x.numel() / n : 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = px + r * n;
    float* orow = po + r * n;
    double acc = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float sq = xr[i] * xr[i];
      acc += double(sq);
    }
    const float mean = float(acc / double(n));
    const float denom = std::sqrt(mean + eps);
    const float inv = 1.0f / denom;
    for (int64_t i = 0; i < n; ++i) {
      const float normed = xr[i] * inv;
      orow[i] = normed * pw[i];
    }
  }
  return {std::move(out)};
}

// SwiGLU(gate, up) = gate * sigmoid(gate) * up, sigmoid(g) = 1 / (1 + exp(-g)).
std::vector<Tensor> swiglu_kernel(const ir::Node& node, const KernelInputs& in) {
  const Tensor& g = arg(node, in, 0);
  const Tensor& u = arg(node, in, 1);
  expect_dtype(node, g, DType::F32, "gate");
  expect_dtype(node, u, DType::F32, "up");
  if (g.shape() != u.shape())
    bad_input("SwiGLU: gate {} and up {} differ", shape_string(g.shape()), shape_string(u.shape()));
  Tensor out(DType::F32, g.shape());
  const float* pg = g.as<float>();
  const float* pu = u.as<float>();
  float* po = out.as<float>();
  for (int64_t i = 0; i < g.numel(); ++i) {
    const float sig = 1.0f / (1.0f + std::exp(-pg[i]));
    const float silu = pg[i] * sig;
    po[i] = silu * pu[i];
  }
  return {std::move(out)};
}

// RopeCosSin(position_ids[b, s], inv_freq[d/2]) -> cos, sin [b, s, d]. With `dynamic`, inv_freq is
// recomputed (dynamic NTK) from the longest position in the batch once it passes the original context;
// every step is the decomposition's f32 arithmetic.
std::vector<Tensor> rope_cos_sin_kernel(const ir::Node& node, const KernelInputs& in) {
  const Tensor& pos_t = arg(node, in, 0);
  const Tensor& inv_t = arg(node, in, 1);
  expect_dtype(node, inv_t, DType::F32, "inv_freq");
  if (inv_t.rank() != 1) bad_input("RopeCosSin: inv_freq must be 1-D, got {}", shape_string(inv_t.shape()));
  std::vector<float> pos(size_t(pos_t.numel()));
  if (pos_t.dtype() == DType::I64) {
    for (size_t i = 0; i < pos.size(); ++i) pos[i] = float(pos_t.as<int64_t>()[i]);
  } else if (pos_t.dtype() == DType::F32) {
    std::copy(pos_t.as<float>(), pos_t.as<float>() + pos_t.numel(), pos.begin());
  } else {
    bad_input("RopeCosSin: position_ids must be integers, got {}", dtype_name(pos_t.dtype()));
  }
  const int64_t half = inv_t.numel();
  std::vector<float> inv(inv_t.as<float>(), inv_t.as<float>() + half);
  if (node.attr_int("dynamic", 0)) {
    const double base = node.attr_float("dynamic_base");
    const double factor = node.attr_float("dynamic_factor");
    const double max_pos = double(node.attr_int("dynamic_max_position"));
    const int64_t dim = node.attr_int("rotary_dim");
    if ((dim + 1) / 2 != half) bad_input("RopeCosSin: rotary_dim {} for {} inverse frequencies", dim, half);
    float mx = std::numeric_limits<float>::lowest();
    for (float p : pos) mx = std::max(mx, p);
    if (pos.empty()) bad_input("RopeCosSin: dynamic scaling of an empty position_ids");
    const float seq_len = mx + 1.0f;
    if (seq_len > float(max_pos)) {
      const float ratio = float(factor / max_pos) * seq_len - float(factor - 1);
      const float scaled_base = float(base) * pow_f32(ratio, float(dim) / float(dim - 2));
      for (int64_t j = 0; j < half; ++j) {
        const float e = float(2 * j) / float(dim);
        inv[size_t(j)] = 1.0f / pow_f32(scaled_base, e);
      }
    }
  }
  const float scaling = float(node.attr_float("attention_scaling", 1.0));
  const bool scaled = node.attr_float("attention_scaling", 1.0) != 1.0;
  std::vector<int64_t> shape = pos_t.shape();
  shape.push_back(2 * half);
  Tensor cos_t(DType::F32, shape), sin_t(DType::F32, shape);
  float* pc = cos_t.as<float>();
  float* ps = sin_t.as<float>();
  for (size_t r = 0; r < pos.size(); ++r) {
    float* cr = pc + int64_t(r) * 2 * half;
    float* sr = ps + int64_t(r) * 2 * half;
    for (int64_t j = 0; j < half; ++j) {
      const float f = pos[r] * inv[size_t(j)];
      float c = std::cos(f), s = std::sin(f);
      if (scaled) {
        c = c * scaling;
        s = s * scaling;
      }
      cr[j] = cr[j + half] = c;
      sr[j] = sr[j + half] = s;
    }
  }
  return {std::move(cos_t), std::move(sin_t)};
}

// RotaryEmbedding(x[b, h, s, d], cos[b, s, r], sin[b, s, r]): on the first r dims,
// out = x * cos + rotate_half(x) * sin with rotate_half(x) = concat(-x[r/2:r], x[:r/2]); dims r..d
// pass through. cos/sin broadcast over heads (and over a batch or sequence dim of 1).
std::vector<Tensor> rotary_embedding_kernel(const ir::Node& node, const KernelInputs& in) {
  const Tensor& x = arg(node, in, 0);
  const Tensor& cos_t = arg(node, in, 1);
  const Tensor& sin_t = arg(node, in, 2);
  expect_dtype(node, x, DType::F32, "input");
  expect_dtype(node, cos_t, DType::F32, "cos");
  expect_dtype(node, sin_t, DType::F32, "sin");
  if (x.rank() != 4 || cos_t.rank() != 3 || sin_t.shape() != cos_t.shape())
    bad_input("RotaryEmbedding: expects x[b, h, s, d] and cos/sin[b, s, r], got {}, {}, {}", shape_string(x.shape()),
              shape_string(cos_t.shape()), shape_string(sin_t.shape()));
  const int64_t B = x.dim(0), H = x.dim(1), S = x.dim(2), D = x.dim(3);
  const int64_t cb = cos_t.dim(0), cs = cos_t.dim(1), R = cos_t.dim(2);
  if (R > D || R % 2 != 0 || (cb != B && cb != 1) || (cs != S && cs != 1))
    bad_input("RotaryEmbedding: cos/sin {} do not fit x {}", shape_string(cos_t.shape()), shape_string(x.shape()));
  const int64_t half = R / 2;
  const bool interleaved = node.attr_int("interleaved", 0) != 0;  // pairs (2j, 2j + 1) by frequency j
  Tensor out(DType::F32, x.shape());
  const float* px = x.as<float>();
  const float* pc = cos_t.as<float>();
  const float* ps = sin_t.as<float>();
  float* po = out.as<float>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t s = 0; s < S; ++s) {
        const int64_t row = ((b * H + h) * S + s) * D;
        const int64_t crow = ((cb == 1 ? 0 : b) * cs + (cs == 1 ? 0 : s)) * R;
        const float* xr = px + row;
        float* orow = po + row;
        const float* c = pc + crow;
        const float* sn = ps + crow;
        for (int64_t j = 0; j < R; ++j) {
          const float rotated = interleaved ? (j % 2 == 0 ? -xr[j + 1] : xr[j - 1]) : j < half ? -xr[j + half] : xr[j - half];
          const int64_t f = interleaved ? j / 2 : j;  // the table column: cos[..., :R/2] repeated pairwise
          const float a = xr[j] * c[f];
          const float bterm = rotated * sn[f];
          orow[j] = a + bterm;
        }
        for (int64_t j = R; j < D; ++j) orow[j] = xr[j];
      }
  return {std::move(out)};
}

// AttentionBias(attention_mask[b, t], input_ids[b, s], cache_position[s]?) -> [b, 1, s, t]: 0 where
// query i (at cache position pos_i = cache_position[i], or t - s + i without it) may see key j (j <= pos_i, mask[b, j] != 0, and pos_i - j < window when the
// window is > 0), the lowest f32 elsewhere.
std::vector<Tensor> attention_bias_kernel(const ir::Node& node, const KernelInputs& in) {
  const Tensor& mask = arg(node, in, 0);
  const Tensor& ids = arg(node, in, 1);
  if (mask.rank() != 2 || ids.rank() != 2)
    bad_input("AttentionBias: expects attention_mask[b, t] and input_ids[b, s], got {} and {}",
              shape_string(mask.shape()), shape_string(ids.shape()));
  const int64_t B = mask.dim(0), T = mask.dim(1), S = ids.dim(1);
  const int64_t window = node.attr_int("sliding_window", 0);
  std::vector<uint8_t> keep(size_t(mask.numel()));
  for (int64_t i = 0; i < mask.numel(); ++i) {
    switch (mask.dtype()) {
      case DType::I64: keep[size_t(i)] = mask.as<int64_t>()[i] != 0; break;
      case DType::F32: keep[size_t(i)] = mask.as<float>()[i] != 0.0f; break;
      case DType::Bool: keep[size_t(i)] = mask.as<uint8_t>()[i] != 0; break;
      default: bad_input("AttentionBias: mask of {}", dtype_name(mask.dtype()));
    }
  }
  Tensor out(DType::F32, {B, 1, S, T});
  float* po = out.as<float>();
  const float lowest = std::numeric_limits<float>::lowest();
  std::vector<int64_t> qpos(static_cast<size_t>(S));
  if (in.size() > 2 && in[2]) {
    qpos = int_values(*in[2]);
    if (int64_t(qpos.size()) != S)
      bad_input("AttentionBias: {} cache positions for {} query tokens", qpos.size(), S);
  } else {
    for (int64_t i = 0; i < S; ++i) qpos[size_t(i)] = T - S + i;
  }
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < S; ++i) {
      const int64_t q = qpos[size_t(i)];
      float* row = po + (b * S + i) * T;
      for (int64_t j = 0; j < T; ++j) {
        bool allowed = j <= q && keep[size_t(b * T + j)];
        if (window > 0) allowed = allowed && j > q - window;
        row[j] = allowed ? 0.0f : lowest;
      }
    }
  return {std::move(out)};
}

// Attention(q[b, hq, s, d], k[b, hkv, t, d], v[b, hkv, t, dv], bias[b, 1, s, t]):
// out = softmax((q @ k^T) * scale + bias) @ v, each group of hq / hkv query heads reading one kv head.
// The group's heads are contiguous in q, so each (batch, kv head) is two sgemms over group * s rows.
std::vector<Tensor> attention_kernel(const ir::Node& node, const KernelInputs& in) {
  const Tensor& q = arg(node, in, 0);
  const Tensor& k = arg(node, in, 1);
  const Tensor& v = arg(node, in, 2);
  const Tensor& bias = arg(node, in, 3);
  expect_dtype(node, q, DType::F32, "q");
  expect_dtype(node, k, DType::F32, "k");
  expect_dtype(node, v, DType::F32, "v");
  expect_dtype(node, bias, DType::F32, "bias");
  if (q.rank() != 4 || k.rank() != 4 || v.rank() != 4)
    bad_input("Attention: expects rank-4 q, k, v, got {}, {}, {}", shape_string(q.shape()), shape_string(k.shape()),
              shape_string(v.shape()));
  const int64_t B = q.dim(0), HQ = q.dim(1), S = q.dim(2), D = q.dim(3);
  const int64_t HKV = k.dim(1), T = k.dim(2), DV = v.dim(3);
  if (k.dim(0) != B || k.dim(3) != D || v.dim(0) != B || v.dim(1) != HKV || v.dim(2) != T || HKV == 0 ||
      HQ % HKV != 0)
    bad_input("Attention: q {} does not fit k {} / v {}", shape_string(q.shape()), shape_string(k.shape()),
              shape_string(v.shape()));
  const std::vector<int64_t> score_shape = {B, HQ, S, T};
  if (bias.rank() > 4 || broadcast_shape(node, {score_shape, bias.shape()}) != score_shape)
    bad_input("Attention: bias {} does not broadcast to scores {}", shape_string(bias.shape()), shape_string(score_shape));
  const auto bst = broadcast_strides(bias.shape(), score_shape);
  const float scale = float(node.attr_float("scale"));
  const int64_t rep = HQ / HKV;
  Tensor out(DType::F32, {B, HQ, S, DV});
  if (out.numel() == 0) return {std::move(out)};
  std::vector<float> scores(static_cast<size_t>(rep * S * T));
  const float* pb = bias.as<float>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t g = 0; g < HKV; ++g) {
      const float* qg = q.as<float>() + (b * HQ + g * rep) * S * D;  // [rep * s, d]
      const float* kg = k.as<float>() + (b * HKV + g) * T * D;      // [t, d]
      const float* vg = v.as<float>() + (b * HKV + g) * T * DV;     // [t, dv]
      float* og = out.as<float>() + (b * HQ + g * rep) * S * DV;    // [rep * s, dv]
      gemm(false, true, rep * S, T, D, 1.0f, qg, D, kg, D, scores.data(), T);
      for (int64_t r = 0; r < rep; ++r) {
        const int64_t h = g * rep + r;
        for (int64_t i = 0; i < S; ++i) {
          float* row = scores.data() + (r * S + i) * T;
          const float* brow = pb + b * bst[0] + h * bst[1] + i * bst[2];
          const int64_t bj = bst[3];
          for (int64_t j = 0; j < T; ++j) {
            const float scaled = row[j] * scale;
            row[j] = scaled + brow[j * bj];
          }
          softmax_row(row, T);
        }
      }
      gemm(false, false, rep * S, DV, T, 1.0f, scores.data(), T, vg, DV, og, DV);
    }
  return {std::move(out)};
}

// CacheUpdate(cache[b, h, n, d], new[b, h, s, d], cache_position[s]) -> the cache with new[:, :, i]
// written at slot cache_position[i] (negative slots count from the end, as ScatterElements does; a
// slot written twice keeps the later row).
std::vector<Tensor> cache_update_kernel(const ir::Node& node, const KernelInputs& in) {
  const Tensor& cache = arg(node, in, 0);
  const Tensor& cur = arg(node, in, 1);
  const Tensor& pos_t = arg(node, in, 2);
  if (cache.dtype() != cur.dtype())
    bad_input("CacheUpdate: cache is {}, new is {}", dtype_name(cache.dtype()), dtype_name(cur.dtype()));
  if (cache.rank() != 4 || cur.rank() != 4 || cache.dim(0) != cur.dim(0) || cache.dim(1) != cur.dim(1) ||
      cache.dim(3) != cur.dim(3))
    bad_input("CacheUpdate: new {} does not fit cache {}", shape_string(cur.shape()), shape_string(cache.shape()));
  const auto pos = int_values(pos_t);
  const int64_t BH = cache.dim(0) * cache.dim(1), N = cache.dim(2), S = cur.dim(2);
  if (int64_t(pos.size()) != S)
    bad_input("CacheUpdate: {} cache positions for {} new rows", pos.size(), S);
  std::vector<int64_t> slot(pos.size());
  for (size_t i = 0; i < pos.size(); ++i) {
    if (pos[i] < -N || pos[i] >= N) bad_input("CacheUpdate: cache position {} is outside a cache of {}", pos[i], N);
    slot[i] = pos[i] < 0 ? pos[i] + N : pos[i];
  }
  Tensor out = cache;
  const size_t row = size_t(cache.dim(3)) * dtype_size(cache.dtype());
  for (int64_t bh = 0; bh < BH; ++bh)
    for (int64_t i = 0; i < S; ++i)
      std::memcpy(out.data() + size_t(bh * N + slot[size_t(i)]) * row, cur.data() + size_t(bh * S + i) * row, row);
  return {std::move(out)};
}

}  // namespace

void register_composite_kernels(KernelTable& t) {
  t["Embedding"] = embedding_kernel;
  t["Linear"] = linear_kernel;
  t["FusedMatMul"] = linear_kernel;  // transB=1 (the ort profile's Linear layers): x @ W^T
  t["RMSNorm"] = rms_norm_kernel;
  t["SwiGLU"] = swiglu_kernel;
  t["RopeCosSin"] = rope_cos_sin_kernel;
  t["RotaryEmbedding"] = rotary_embedding_kernel;
  t["AttentionBias"] = attention_bias_kernel;
  t["Attention"] = attention_kernel;
  t["CacheUpdate"] = cache_update_kernel;
}

}  // namespace hfx::runtime::detail
