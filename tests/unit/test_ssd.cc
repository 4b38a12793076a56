// Mamba-2's SSD scan in primitives (models/ssd.h), on the reference executor, against the recurrence
// it computes, stepped position by position in double:
//   h_t = exp(dt_t * A) h_{t-1} + dt_t * x_t ⊗ B_t,   y_t = h_t · C_t + D * x_t,
// over prompts shorter than, equal to and longer than a chunk (the last chunk padded), from a zero
// and from a carried state, and one token at a time with the state fed back.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <span>

#include "ir/builder.h"
#include "ir/graph.h"
#include "models/ssd.h"
#include "runtime/executor.h"
#include "random_weights.h"

using namespace hfx;

namespace {

constexpr int64_t B = 2, H = 3, P = 2, N = 4;

using hfx::testing::random_f32;

std::vector<float> vec(std::span<const float> v) { return {v.begin(), v.end()}; }

struct Scan {
  std::vector<float> y;      // [B, S, H, P]
  std::vector<float> state;  // [B, H, P, N]
};

// Builds a scan over g's inputs (`build`, given the carried state's input or kNone), feeds `feeds`
// (and `initial` when not null), runs it once.
Scan run_scan(ir::Graph& g, std::map<std::string, Tensor> feeds, const Tensor* initial,
              const std::function<models::SsdOut(ir::ValueId)>& build) {
  ir::ValueId init = ir::kNone;
  if (initial) {
    feeds["initial"] = *initial;
    init = g.add_input("initial", DType::F32, fixed_shape(initial->shape()));
  }
  models::SsdOut r = build(init);
  g.rename(r.out, "y");
  g.rename(r.final_state, "state");
  g.add_output(r.out);
  g.add_output(r.final_state);
  auto outs = runtime::Executor(g).run(feeds);
  return {vec(outs.at("y").values<float>()), vec(outs.at("state").values<float>())};
}

// The graph over S positions (a symbol: one graph serves every length), run once.
Scan run_graph(const Tensor& x, const Tensor& dt, const Tensor& A, const Tensor& Bm, const Tensor& Cm, const Tensor& D,
               const Tensor* initial, int64_t chunk) {
  ir::Graph g("main");
  ir::Builder b(g);
  const Dim s = Dim::sym("sequence_length");
  ir::ValueId xv = g.add_input("x", DType::F32, {Dim::fixed(B), s, Dim::fixed(H), Dim::fixed(P)});
  ir::ValueId dtv = g.add_input("dt", DType::F32, {Dim::fixed(B), s, Dim::fixed(H)});
  ir::ValueId bv = g.add_input("B", DType::F32, {Dim::fixed(B), s, Dim::fixed(H), Dim::fixed(N)});
  ir::ValueId cv = g.add_input("C", DType::F32, {Dim::fixed(B), s, Dim::fixed(H), Dim::fixed(N)});
  return run_scan(g, {{"x", x}, {"dt", dt}, {"B", Bm}, {"C", Cm}}, initial, [&](ir::ValueId init) {
    return models::ssd_chunk_scan(b, xv, dtv, b.constant(A), bv, cv, b.constant(D), init, {H, P, N, chunk});
  });
}

// The recurrence, in double, from `initial` (zeros when null).
Scan recurrence(const Tensor& x, const Tensor& dt, const Tensor& A, const Tensor& Bm, const Tensor& Cm, const Tensor& D,
                const Tensor* initial, int64_t S) {
  const auto xs = x.values<float>(), dts = dt.values<float>(), as = A.values<float>(), bs = Bm.values<float>(),
             cs = Cm.values<float>(), ds = D.values<float>();
  std::vector<double> h(size_t(B * H * P * N), 0.0);
  if (initial) {
    const auto is = initial->values<float>();
    for (size_t i = 0; i < h.size(); ++i) h[i] = is[i];
  }
  Scan out;
  out.y.assign(size_t(B * S * H * P), 0.f);
  for (int64_t n = 0; n < B; ++n)
    for (int64_t t = 0; t < S; ++t)
      for (int64_t k = 0; k < H; ++k) {
        const double d = dts[size_t((n * S + t) * H + k)], decay = std::exp(d * as[size_t(k)]);
        for (int64_t p = 0; p < P; ++p) {
          const double xv = xs[size_t(((n * S + t) * H + k) * P + p)];
          double y = ds[size_t(k)] * xv;
          for (int64_t j = 0; j < N; ++j) {
            double& st = h[size_t(((n * H + k) * P + p) * N + j)];
            st = decay * st + d * xv * bs[size_t(((n * S + t) * H + k) * N + j)];
            y += st * cs[size_t(((n * S + t) * H + k) * N + j)];
          }
          out.y[size_t(((n * S + t) * H + k) * P + p)] = float(y);
        }
      }
  out.state.assign(h.begin(), h.end());
  return out;
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 2e-5) << what << " element " << i;
}

struct Inputs {
  Tensor x, dt, A, Bm, Cm, D, initial;
};

Inputs make_inputs(int64_t S, uint32_t seed) {
  std::mt19937 rng(seed);
  return {random_f32({B, S, H, P}, rng, -1.f, 1.f),  random_f32({B, S, H}, rng, 0.05f, 0.9f),
          random_f32({H}, rng, -2.f, -0.2f),         random_f32({B, S, H, N}, rng, -1.f, 1.f),
          random_f32({B, S, H, N}, rng, -1.f, 1.f),  random_f32({H}, rng, -0.5f, 0.5f),
          random_f32({B, H, P, N}, rng, -1.f, 1.f)};
}

void check(int64_t S, int64_t chunk, bool carried) {
  const Inputs in = make_inputs(S, uint32_t(S * 31 + chunk));
  const Tensor* init = carried ? &in.initial : nullptr;
  const Scan got = run_graph(in.x, in.dt, in.A, in.Bm, in.Cm, in.D, init, chunk);
  const Scan want = recurrence(in.x, in.dt, in.A, in.Bm, in.Cm, in.D, init, S);
  const std::string what = "S " + std::to_string(S) + ", chunk " + std::to_string(chunk) + (carried ? ", carried" : "");
  expect_near(got.y, want.y, what + ": y");
  expect_near(got.state, want.state, what + ": final state");
}

}  // namespace

TEST(SsdScan, PromptWithinOneChunk) { check(3, 4, false); }
TEST(SsdScan, PromptOfWholeChunks) { check(8, 4, false); }
TEST(SsdScan, PromptWithAPaddedLastChunk) {
  check(10, 4, false);
  check(7, 3, true);
}
TEST(SsdScan, CarriedStateAndOneToken) {
  check(1, 4, true);
  check(1, 1, true);
}

// One token at a time, the state fed back, equals the whole prompt at once (prefill + decode agree).
TEST(SsdScan, StepsEqualThePrompt) {
  const int64_t S = 5, chunk = 2;
  const Inputs in = make_inputs(S, 7);
  const Scan whole = run_graph(in.x, in.dt, in.A, in.Bm, in.Cm, in.D, nullptr, chunk);
  auto column = [&](const Tensor& t, int64_t i) {  // position i of [B, S, ...]
    std::vector<int64_t> shape = t.shape();
    const int64_t inner = t.numel() / (B * S);
    shape[1] = 1;
    const auto v = t.values<float>();
    std::vector<float> out;
    for (int64_t n = 0; n < B; ++n) out.insert(out.end(), v.begin() + (n * S + i) * inner, v.begin() + (n * S + i + 1) * inner);
    return Tensor::from_vector<float>(DType::F32, shape, out);
  };
  Tensor state = Tensor::from_vector<float>(DType::F32, {B, H, P, N}, std::vector<float>(size_t(B * H * P * N), 0.f));
  for (int64_t i = 0; i < S; ++i) {
    const Scan step = run_graph(column(in.x, i), column(in.dt, i), in.A, column(in.Bm, i), column(in.Cm, i), in.D, &state, chunk);
    for (int64_t n = 0; n < B; ++n)
      for (int64_t j = 0; j < H * P; ++j)
        EXPECT_NEAR(step.y[size_t(n * H * P + j)], whole.y[size_t((n * S + i) * H * P + j)], 2e-5) << "step " << i;
    state = Tensor::from_vector<float>(DType::F32, {B, H, P, N}, step.state);
  }
  expect_near(vec(state.values<float>()), whole.state, "final state after the steps");
}

TEST(SsdScan, ExpSegmentSumIsTheMaskedDecay) {
  ir::Graph g("main");
  ir::Builder b(g);
  const Tensor a = Tensor::from_vector<float>(DType::F32, {1, 4}, {-0.5f, -1.f, -0.25f, -2.f});
  ir::ValueId av = g.add_input("a", DType::F32, fixed_shape(a.shape()));
  ir::ValueId out = models::exp_segment_sum(b, av, b.i64(4));
  g.rename(out, "out");
  g.add_output(out);
  const auto outs = runtime::Executor(g).run({{"a", a}});
  const auto got = outs.at("out").values<float>();
  const auto av_ = a.values<float>();
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      double sum = 0;
      for (int k = j + 1; k <= i; ++k) sum += av_[size_t(k)];
      EXPECT_NEAR(got[size_t(i * 4 + j)], j <= i ? std::exp(sum) : 0.0, 1e-6) << i << "," << j;
    }
}

// Mamba-1's selective scan (models::selective_scan: an SSD scan of channels x state heads of one, in
// chunks of floor(sqrt(s))) against its recurrence in double, as Transformers' slow path steps it:
//   h_t[i, n] = exp(dt_t[i] A[i, n]) h_{t-1}[i, n] + dt_t[i] x_t[i] B_t[n],  y_t[i] = h_t[i] · C_t + D[i] x_t[i].
namespace {

constexpr int64_t SI = 3, SN = 4;  // channels, state

Scan run_selective(const Tensor& x, const Tensor& dt, const Tensor& A, const Tensor& Bm, const Tensor& Cm,
                   const Tensor& D, const Tensor* initial) {
  ir::Graph g("main");
  ir::Builder b(g);
  const Dim s = Dim::sym("sequence_length");
  ir::ValueId xv = g.add_input("x", DType::F32, {Dim::fixed(B), s, Dim::fixed(SI)});
  ir::ValueId dtv = g.add_input("dt", DType::F32, {Dim::fixed(B), s, Dim::fixed(SI)});
  ir::ValueId bv = g.add_input("B", DType::F32, {Dim::fixed(B), s, Dim::fixed(SN)});
  ir::ValueId cv = g.add_input("C", DType::F32, {Dim::fixed(B), s, Dim::fixed(SN)});
  return run_scan(g, {{"x", x}, {"dt", dt}, {"B", Bm}, {"C", Cm}}, initial, [&](ir::ValueId init) {
    return models::selective_scan(b, xv, dtv, b.constant(A), bv, cv, b.constant(D), init, SI, SN);
  });
}

Scan selective_recurrence(const Tensor& x, const Tensor& dt, const Tensor& A, const Tensor& Bm, const Tensor& Cm,
                          const Tensor& D, const Tensor* initial, int64_t S) {
  const auto xs = x.values<float>(), dts = dt.values<float>(), as = A.values<float>(), bs = Bm.values<float>(),
             cs = Cm.values<float>(), ds = D.values<float>();
  std::vector<double> h(size_t(B * SI * SN), 0.0);
  if (initial) {
    const auto is = initial->values<float>();
    for (size_t i = 0; i < h.size(); ++i) h[i] = is[i];
  }
  Scan out;
  out.y.assign(size_t(B * S * SI), 0.f);
  for (int64_t n = 0; n < B; ++n)
    for (int64_t t = 0; t < S; ++t)
      for (int64_t i = 0; i < SI; ++i) {
        const double d = dts[size_t((n * S + t) * SI + i)], xv = xs[size_t((n * S + t) * SI + i)];
        double y = ds[size_t(i)] * xv;
        for (int64_t j = 0; j < SN; ++j) {
          double& st = h[size_t((n * SI + i) * SN + j)];
          st = std::exp(d * as[size_t(i * SN + j)]) * st + d * xv * bs[size_t((n * S + t) * SN + j)];
          y += st * cs[size_t((n * S + t) * SN + j)];
        }
        out.y[size_t((n * S + t) * SI + i)] = float(y);
      }
  out.state.assign(h.begin(), h.end());
  return out;
}

Inputs selective_inputs(int64_t S, uint32_t seed) {
  std::mt19937 rng(seed);
  return {random_f32({B, S, SI}, rng, -1.f, 1.f),  random_f32({B, S, SI}, rng, 0.05f, 0.9f),
          random_f32({SI, SN}, rng, -2.f, -0.2f),  random_f32({B, S, SN}, rng, -1.f, 1.f),
          random_f32({B, S, SN}, rng, -1.f, 1.f),  random_f32({SI}, rng, -0.5f, 0.5f),
          random_f32({B, SI, SN}, rng, -1.f, 1.f)};
}

void check_selective(int64_t S, bool carried) {
  const Inputs in = selective_inputs(S, uint32_t(S * 17 + carried));
  const Tensor* init = carried ? &in.initial : nullptr;
  const Scan got = run_selective(in.x, in.dt, in.A, in.Bm, in.Cm, in.D, init);
  const Scan want = selective_recurrence(in.x, in.dt, in.A, in.Bm, in.Cm, in.D, init, S);
  const std::string what = "S " + std::to_string(S) + (carried ? ", carried" : "");
  expect_near(got.y, want.y, what + ": y");
  expect_near(got.state, want.state, what + ": final state");
}

}  // namespace

// floor(sqrt(S)) chunks: 1 (a decode step), 2 of 2 (whole), 4 of 3 (the last padded), 4 of 4.
TEST(SelectiveScan, OneToken) {
  check_selective(1, false);
  check_selective(1, true);
}
TEST(SelectiveScan, PromptOfWholeChunks) {
  check_selective(4, false);
  check_selective(16, true);
}
TEST(SelectiveScan, PromptWithAPaddedLastChunk) {
  check_selective(10, false);
  check_selective(10, true);
  check_selective(27, true);
}
