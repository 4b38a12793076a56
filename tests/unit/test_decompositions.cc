// Each composite op's fused kernel against its decomposition into primitives (src/ir/decompose.cc,
// the op's spec): the same graph run with use_composite_kernels = true and = false must agree within
// 1e-5 on random inputs.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "runtime/kernels.h"

#include <cmath>
#include <limits>
#include <random>
#include <set>

#include "core/error.h"
#include "ir/builder.h"
#include "ir/graph.h"
#include "ir/ops.h"
#include "runtime/executor.h"

using namespace hfx;
using hfx::ir::ValueId;
using hfx::runtime::ExecOptions;
using hfx::runtime::Executor;

namespace {

constexpr float kTol = 1e-5f;

struct Case {
  ir::Graph g;
  ir::Builder b{g};
  std::map<std::string, Tensor> feeds;
  std::mt19937 rng{1234};

  Tensor random(std::vector<int64_t> shape, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> dist(lo, hi);
    Tensor t(DType::F32, std::move(shape));
    for (int64_t i = 0; i < t.numel(); ++i) t.as<float>()[i] = dist(rng);
    return t;
  }
  // An input whose declared shape is `declared` (symbols allowed), fed with `value`.
  ValueId input(const std::string& name, const Tensor& value, Shape declared = {}) {
    feeds[name] = value;
    return g.add_input(name, value.dtype(), declared.empty() ? fixed_shape(value.shape()) : declared);
  }
  ValueId weight(const std::string& name, const Tensor& value) { return b.weight(name, ir::WeightRef::constant(value)); }
  std::vector<ValueId> op(const std::string& op, std::vector<ValueId> ins, ir::Attrs attrs = {}) {
    size_t n = ir::op_schema(op).num_outputs;
    std::vector<std::string> names;
    for (size_t i = 0; i < n; ++i) names.push_back("out" + std::to_string(i));
    auto outs = b.add(op, std::move(ins), std::move(attrs), names);
    for (auto o : outs) g.add_output(o);
    return outs;
  }

  std::map<std::string, Tensor> run(bool fused) {
    ExecOptions o;
    o.use_composite_kernels = fused;
    return Executor(g, o).run(feeds);
  }

  // Runs both ways and compares every output; returns the fused outputs.
  std::map<std::string, Tensor> compare() {
    auto fused = run(true);
    auto decomposed = run(false);
    EXPECT_EQ(fused.size(), decomposed.size());
    for (const auto& [name, f] : fused) {
      SCOPED_TRACE(name);
      const Tensor& d = decomposed.at(name);
      EXPECT_EQ(f.dtype(), d.dtype());
      EXPECT_EQ(f.shape(), d.shape());
      if (f.shape() != d.shape() || f.dtype() != DType::F32 || d.dtype() != DType::F32) continue;
      float max_diff = 0;
      for (int64_t i = 0; i < f.numel(); ++i) {
        const float a = f.as<float>()[i], c = d.as<float>()[i];
        if (a == c) continue;  // also equal infinities / lowest
        max_diff = std::max(max_diff, std::fabs(a - c));
      }
      EXPECT_LE(max_diff, kTol);
    }
    return fused;
  }
};

Tensor i64s(std::vector<int64_t> shape, std::vector<int64_t> v) {
  return Tensor::from_vector<int64_t>(DType::I64, std::move(shape), v);
}

std::vector<float> inv_freq(int64_t dim, double base) {
  std::vector<float> f;
  for (int64_t i = 0; i < dim; i += 2) f.push_back(float(1.0 / std::pow(base, double(i) / double(dim))));
  return f;
}

}  // namespace

TEST(Decompositions, CoverEveryCompositeOp) {
  // Keep this list in step with the tests below.
  const std::set<std::string> tested = {"Embedding", "Linear", "FusedMatMul", "RMSNorm", "SwiGLU", "RopeCosSin", "RotaryEmbedding",
                                        "AttentionBias", "Attention", "CacheUpdate"};
  // A composite op with a fused kernel must be tested against its decomposition here. One without a
  // fused kernel always runs its decomposition, which the oracle tests check against Transformers.
  for (const auto& name : ir::all_op_names()) {
    if (ir::op_schema(name).composite && runtime::detail::composite_kernels().count(name)) {
      EXPECT_TRUE(tested.count(name)) << name << " has a fused kernel but no decomposition test";
    }
  }
}

TEST(Decompositions, Embedding) {
  Case c;
  auto w = c.weight("embed", c.random({10, 6}));
  auto ids = c.input("ids", i64s({2, 3}, {0, 9, 4, 4, -1, 3}), {Dim::sym("batch"), Dim::sym("seq")});
  c.op("Embedding", {w, ids});
  auto out = c.compare();
  EXPECT_EQ(out.at("out0").shape(), (std::vector<int64_t>{2, 3, 6}));
}

TEST(Decompositions, LinearWithAndWithoutBias) {
  for (bool bias : {false, true}) {
    SCOPED_TRACE(bias);
    Case c;
    auto x = c.input("x", c.random({2, 3, 16}), {Dim::sym("batch"), Dim::sym("seq"), Dim::fixed(16)});
    auto w = c.weight("w", c.random({5, 16}));
    std::vector<ValueId> ins = {x, w};
    if (bias) ins.push_back(c.weight("b", c.random({5})));
    c.op("Linear", ins);
    auto out = c.compare();
    EXPECT_EQ(out.at("out0").shape(), (std::vector<int64_t>{2, 3, 5}));
  }
}

// The ort profile's FusedMatMul (transB=1) runs Linear's kernel over the same [N, K] weight.
TEST(Decompositions, FusedMatMul) {
  Case c;
  auto x = c.input("x", c.random({2, 3, 16}), {Dim::sym("batch"), Dim::sym("seq"), Dim::fixed(16)});
  c.op("FusedMatMul", {x, c.weight("w", c.random({5, 16}))});
  auto out = c.compare();
  EXPECT_EQ(out.at("out0").shape(), (std::vector<int64_t>{2, 3, 5}));
}

TEST(Decompositions, RMSNorm) {
  Case c;
  auto x = c.input("x", c.random({2, 3, 32}, -4.0f, 4.0f));
  auto w = c.weight("w", c.random({32}, 0.5f, 1.5f));
  c.op("RMSNorm", {x, w}, {{"epsilon", 1e-6}});
  c.compare();
}

TEST(Decompositions, SwiGLU) {
  Case c;
  auto g = c.input("gate", c.random({2, 3, 24}, -20.0f, 20.0f));
  auto u = c.input("up", c.random({2, 3, 24}, -2.0f, 2.0f));
  c.op("SwiGLU", {g, u});
  c.compare();
}

TEST(Decompositions, RopeCosSinPlainAndScaled) {
  for (double scaling : {1.0, 0.75}) {
    SCOPED_TRACE(scaling);
    Case c;
    auto pos = c.input("pos", i64s({2, 4}, {0, 1, 2, 3, 7, 100, 2047, 4095}), {Dim::sym("batch"), Dim::sym("seq")});
    auto f = inv_freq(8, 10000.0);
    auto inv = c.weight("inv_freq", Tensor::from_vector<float>(DType::F32, {4}, f));
    ir::Attrs attrs;
    if (scaling != 1.0) attrs["attention_scaling"] = scaling;
    c.op("RopeCosSin", {pos, inv}, attrs);
    auto out = c.compare();
    // Spot check: position 1, frequency 0 is cos(1) * scaling at dims 0 and 4.
    const Tensor& cos = out.at("out0");
    EXPECT_EQ(cos.shape(), (std::vector<int64_t>{2, 4, 8}));
    EXPECT_NEAR(cos.as<float>()[8], std::cos(1.0f) * scaling, 1e-6);
    EXPECT_NEAR(cos.as<float>()[12], std::cos(1.0f) * scaling, 1e-6);
  }
}

TEST(Decompositions, RopeCosSinDynamicNtk) {
  // max position 16: the first batch stays below it (inv_freq unchanged), the second goes past it.
  for (int64_t last : {int64_t(10), int64_t(40)}) {
    SCOPED_TRACE(last);
    Case c;
    auto pos = c.input("pos", i64s({1, 4}, {0, 3, 9, last}));
    auto inv = c.weight("inv_freq", Tensor::from_vector<float>(DType::F32, {4}, inv_freq(8, 10000.0)));
    c.op("RopeCosSin", {pos, inv},
         {{"dynamic", int64_t(1)}, {"dynamic_base", 10000.0}, {"dynamic_factor", 2.0},
          {"dynamic_max_position", int64_t(16)}, {"rotary_dim", int64_t(8)}});
    c.compare();
  }
}

TEST(Decompositions, RotaryEmbeddingFullAndPartial) {
  for (int64_t r : {int64_t(8), int64_t(4)})
  for (int64_t interleaved : {int64_t(0), int64_t(1)}) {  // rotate-half, and GPT-J pairs (Helium)
    SCOPED_TRACE(fmt::format("r {} interleaved {}", r, interleaved));
    Case c;
    auto x = c.input("x", c.random({2, 3, 5, 8}), {Dim::sym("batch"), Dim::fixed(3), Dim::sym("seq"), Dim::fixed(8)});
    Tensor angles = c.random({2, 5, r}, -3.0f, 3.0f);
    Tensor cos(DType::F32, angles.shape()), sin(DType::F32, angles.shape());
    for (int64_t i = 0; i < angles.numel(); ++i) {
      cos.as<float>()[i] = std::cos(angles.as<float>()[i]);
      sin.as<float>()[i] = std::sin(angles.as<float>()[i]);
    }
    auto cv = c.input("cos", cos, {Dim::sym("batch"), Dim::sym("seq"), Dim::fixed(r)});
    auto sv = c.input("sin", sin, {Dim::sym("batch"), Dim::sym("seq"), Dim::fixed(r)});
    c.op("RotaryEmbedding", {x, cv, sv}, {{"interleaved", interleaved}});
    auto out = c.compare();
    // The dims past r pass through unchanged.
    const Tensor& y = out.at("out0");
    const Tensor& xin = c.feeds.at("x");
    for (int64_t row = 0; row < 2 * 3 * 5; ++row)
      for (int64_t j = r; j < 8; ++j) EXPECT_EQ(y.as<float>()[row * 8 + j], xin.as<float>()[row * 8 + j]);
  }
}

TEST(Decompositions, AttentionBiasLeftPaddingAndSlidingWindow) {
  // Batch 0 is left-padded by 2; past length 3, 2 new tokens (query positions 3 and 4).
  const std::vector<int64_t> mask = {0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
  for (int64_t window : {int64_t(0), int64_t(2)}) {
    SCOPED_TRACE(window);
    Case c;
    auto m = c.input("attention_mask", i64s({2, 5}, mask), {Dim::sym("batch"), Dim::sym("total")});
    auto ids = c.input("input_ids", i64s({2, 2}, {5, 6, 7, 8}), {Dim::sym("batch"), Dim::sym("seq")});
    c.op("AttentionBias", {m, ids}, {{"sliding_window", window}});
    auto out = c.compare();
    const Tensor& bias = out.at("out0");
    ASSERT_EQ(bias.shape(), (std::vector<int64_t>{2, 1, 2, 5}));
    const float L = std::numeric_limits<float>::lowest();
    std::vector<float> want;
    if (window == 0)
      want = {L, L, 0, 0, L, L, L, 0, 0, 0,   // batch 0: pads masked; query 0 cannot see key 4
              0, 0, 0, 0, L, 0, 0, 0, 0, 0};  // batch 1
    else
      want = {L, L, 0, 0, L, L, L, L, 0, 0,   // window 2: query at 3 sees 2..3, at 4 sees 3..4
              L, L, 0, 0, L, L, L, L, 0, 0};
    EXPECT_EQ(std::vector<float>(bias.as<float>(), bias.as<float>() + 20), want);
  }
}

TEST(Decompositions, AttentionBiasWithCachePosition) {
  // A static cache of 6 slots; 2 new tokens written at slots 3 and 4; slot 5 is not written yet.
  for (int64_t window : {int64_t(0), int64_t(2)}) {
    SCOPED_TRACE(window);
    Case c;
    auto m = c.input("attention_mask", i64s({1, 6}, {0, 1, 1, 1, 1, 0}));
    auto ids = c.input("input_ids", i64s({1, 2}, {5, 6}));
    auto pos = c.input("cache_position", i64s({2}, {3, 4}));
    c.op("AttentionBias", {m, ids, pos}, {{"sliding_window", window}});
    const Tensor bias = c.compare().at("out0");
    const float L = std::numeric_limits<float>::lowest();
    std::vector<float> want = window == 0 ? std::vector<float>{L, 0, 0, 0, L, L, L, 0, 0, 0, 0, L}
                                          : std::vector<float>{L, L, 0, 0, L, L, L, L, L, 0, 0, L};
    EXPECT_EQ(std::vector<float>(bias.as<float>(), bias.as<float>() + 12), want);
  }
}

TEST(Decompositions, AttentionGqaWithPast) {
  // hq = 4 query heads sharing hkv = 2 kv heads, past length 3 + 2 new tokens (k and v assembled by
  // Concat, as a growing cache does), head dim 8; the bias comes from a left-padded mask, with and
  // without a sliding window, so some scores are the lowest f32.
  for (int64_t window : {int64_t(0), int64_t(2)}) {
    SCOPED_TRACE(window);
    Case c;
    const Dim B = Dim::sym("batch"), S = Dim::sym("seq"), P = Dim::sym("past"), T = Dim::sym("total");
    c.g.symbols().relate_sum("total", "past", "seq");
    auto q = c.input("q", c.random({2, 4, 2, 8}, -2.0f, 2.0f), {B, Dim::fixed(4), S, Dim::fixed(8)});
    auto k = c.input("k", c.random({2, 2, 2, 8}, -2.0f, 2.0f), {B, Dim::fixed(2), S, Dim::fixed(8)});
    auto v = c.input("v", c.random({2, 2, 2, 8}), {B, Dim::fixed(2), S, Dim::fixed(8)});
    auto pk = c.input("past_k", c.random({2, 2, 3, 8}, -2.0f, 2.0f), {B, Dim::fixed(2), P, Dim::fixed(8)});
    auto pv = c.input("past_v", c.random({2, 2, 3, 8}), {B, Dim::fixed(2), P, Dim::fixed(8)});
    auto m = c.input("attention_mask", i64s({2, 5}, {0, 0, 1, 1, 1, 1, 1, 1, 1, 1}), {B, T});
    auto ids = c.input("input_ids", i64s({2, 2}, {1, 2, 3, 4}), {B, S});
    auto bias = c.b.add1("AttentionBias", {m, ids}, {{"sliding_window", window}});
    auto kk = c.b.concat({pk, k}, 2), vv = c.b.concat({pv, v}, 2);
    c.op("Attention", {q, kk, vv, bias}, {{"scale", 1.0 / std::sqrt(8.0)}});
    auto out = c.compare();
    EXPECT_EQ(out.at("out0").shape(), (std::vector<int64_t>{2, 4, 2, 8}));
  }
}

TEST(Decompositions, CacheUpdate) {
  for (std::vector<int64_t> slots : {std::vector<int64_t>{3, 4}, std::vector<int64_t>{5, 0}, std::vector<int64_t>{-1, 1}}) {
    Case c;
    auto cache = c.input("cache", c.random({2, 2, 6, 4}));
    auto cur = c.input("new", c.random({2, 2, 2, 4}));
    auto pos = c.input("cache_position", i64s({2}, slots));
    c.op("CacheUpdate", {cache, cur, pos});
    const Tensor y = c.compare().at("out0");
    const Tensor& before = c.feeds.at("cache");
    const Tensor& rows = c.feeds.at("new");
    for (int64_t bh = 0; bh < 4; ++bh)
      for (int64_t n = 0; n < 6; ++n)
        for (int64_t d = 0; d < 4; ++d) {
          int64_t src = -1;
          for (int64_t i = 0; i < 2; ++i)
            if ((slots[size_t(i)] + 6) % 6 == n) src = i;
          const float want = src < 0 ? before.as<float>()[(bh * 6 + n) * 4 + d] : rows.as<float>()[(bh * 2 + src) * 4 + d];
          EXPECT_EQ(y.as<float>()[(bh * 6 + n) * 4 + d], want);
        }
  }
}

TEST(Decompositions, StaticCacheAttentionStep) {
  // The static-cache step: write the new k/v into a fixed-size cache at cache_position, attend over
  // the whole cache with a bias that masks the slots not written yet.
  Case c;
  auto q = c.input("q", c.random({1, 4, 2, 8}, -2.0f, 2.0f));
  auto k = c.input("k", c.random({1, 2, 2, 8}, -2.0f, 2.0f));
  auto v = c.input("v", c.random({1, 2, 2, 8}));
  auto ck = c.input("cache_k", c.random({1, 2, 7, 8}, -2.0f, 2.0f));
  auto cv = c.input("cache_v", c.random({1, 2, 7, 8}));
  auto pos = c.input("cache_position", i64s({2}, {3, 4}));
  auto m = c.input("attention_mask", i64s({1, 7}, {1, 1, 1, 1, 1, 0, 0}));
  auto ids = c.input("input_ids", i64s({1, 2}, {1, 2}));
  auto kk = c.b.add1("CacheUpdate", {ck, k, pos}), vv = c.b.add1("CacheUpdate", {cv, v, pos});
  c.g.add_output(kk);
  c.g.add_output(vv);
  auto bias = c.b.add1("AttentionBias", {m, ids, pos});
  c.op("Attention", {q, kk, vv, bias}, {{"scale", 0.125}});
  EXPECT_EQ(c.compare().size(), 3u);
}

TEST(Decompositions, AttentionMatchesANaiveLoop) {
  // The fused kernel against softmax(q k^T * scale + bias) v written out, with GQA head sharing.
  Case c;
  const int64_t HQ = 4, HKV = 2, S = 2, Tn = 3, D = 4;
  Tensor qt = c.random({1, HQ, S, D}), kt = c.random({1, HKV, Tn, D}), vt = c.random({1, HKV, Tn, D});
  Tensor bt = c.random({1, 1, S, Tn});
  c.op("Attention", {c.input("q", qt), c.input("k", kt), c.input("v", vt), c.input("bias", bt)}, {{"scale", 0.5}});
  auto out = c.compare().at("out0");
  for (int64_t h = 0; h < HQ; ++h)
    for (int64_t i = 0; i < S; ++i) {
      const int64_t g = h / (HQ / HKV);
      std::vector<double> p(static_cast<size_t>(Tn));
      double mx = -1e300, sum = 0;
      for (int64_t t = 0; t < Tn; ++t) {
        double dot = 0;
        for (int64_t d = 0; d < D; ++d)
          dot += double(qt.as<float>()[(h * S + i) * D + d]) * kt.as<float>()[(g * Tn + t) * D + d];
        p[size_t(t)] = dot * 0.5 + bt.as<float>()[i * Tn + t];
        mx = std::max(mx, p[size_t(t)]);
      }
      for (auto& x : p) sum += (x = std::exp(x - mx));
      for (int64_t d = 0; d < D; ++d) {
        double o = 0;
        for (int64_t t = 0; t < Tn; ++t) o += p[size_t(t)] / sum * vt.as<float>()[(g * Tn + t) * D + d];
        EXPECT_NEAR(out.as<float>()[(h * S + i) * D + d], o, 1e-5) << h << " " << i << " " << d;
      }
    }
}

TEST(Decompositions, KeepValuesSurviveDecomposition) {
  // Values named in the source graph are returned in both modes, even when their producer was
  // replaced by primitives.
  Case c;
  auto x = c.input("x", c.random({1, 2, 8}));
  auto n = c.b.add1("RMSNorm", {x, c.weight("w", c.random({8}))}, {{"epsilon", 1e-5}}, "normed");
  c.op("SwiGLU", {n, n});
  for (bool fused : {true, false}) {
    ExecOptions o;
    o.use_composite_kernels = fused;
    o.keep_values = {"normed"};
    auto out = Executor(c.g, o).run(c.feeds);
    EXPECT_EQ(out.at("normed").shape(), (std::vector<int64_t>{1, 2, 8}));
    EXPECT_EQ(out.count("out0"), 1u);
  }
}
