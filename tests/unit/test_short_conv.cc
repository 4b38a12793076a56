// The causal depthwise conv with carried state (models/short_conv.h), on the reference executor,
// against the definition computed by hand: out[c, t] = bias[c] + sum_k w[c, k] * (past ++ x)[c, t + k],
// the state the last kernel - 1 columns; and LFM2's padding mask of the conv layers.
#include <gtest/gtest.h>

#include "ir/builder.h"
#include "ir/graph.h"
#include "models/short_conv.h"
#include "runtime/executor.h"
#include "tasks/state_names.h"

using namespace hfx;

namespace {

Tensor f32(std::vector<int64_t> shape, std::vector<float> v) { return Tensor::from_vector<float>(DType::F32, std::move(shape), v); }

std::vector<float> ramp(size_t n, float scale, float offset) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(i) * scale + offset;
  return v;
}

// Runs the block over x [B, C, S] with `past` [B, C, K - 1] (empty: none, zeros) and checks both outputs.
void check_conv(int64_t B, int64_t C, int64_t S, int64_t K, bool with_past, bool with_bias) {
  const Tensor x = f32({B, C, S}, ramp(size_t(B * C * S), 0.37f, -1.f));
  const Tensor w = f32({C, K}, ramp(size_t(C * K), -0.21f, 0.9f));
  const Tensor bias = f32({C}, ramp(size_t(C), 0.5f, -0.3f));
  const Tensor past = f32({B, C, K - 1}, with_past ? ramp(size_t(B * C * (K - 1)), 0.11f, 0.2f)
                                                   : std::vector<float>(size_t(B * C * (K - 1)), 0.f));
  ir::Graph g("main");
  ir::Builder b(g);
  std::map<std::string, Tensor> feeds = {{"x", x}};
  ir::ValueId xv = g.add_input("x", DType::F32, fixed_shape(x.shape()));
  ir::ValueId pv = ir::kNone;
  if (with_past) {
    feeds["past"] = past;
    pv = g.add_input("past", DType::F32, fixed_shape(past.shape()));
  }
  models::ConvOut r = models::causal_depthwise_conv(b, xv, pv, b.constant(w), with_bias ? b.constant(bias) : ir::kNone, C, K);
  g.rename(r.out, "out");
  g.rename(r.present, "present");
  g.add_output(r.out);
  g.add_output(r.present);
  auto outs = runtime::Executor(g).run(feeds);
  const auto got = outs.at("out").values<float>();
  const auto state = outs.at("present").values<float>();
  ASSERT_EQ(outs.at("out").shape(), (std::vector<int64_t>{B, C, S}));
  ASSERT_EQ(outs.at("present").shape(), (std::vector<int64_t>{B, C, K - 1}));
  const auto xs = x.values<float>(), ws = w.values<float>(), ps = past.values<float>(), bs = bias.values<float>();
  const int64_t T = K - 1 + S;
  for (int64_t n = 0; n < B; ++n)
    for (int64_t c = 0; c < C; ++c) {
      auto full = [&](int64_t j) {  // (past ++ x)[n, c, j]
        return j < K - 1 ? ps[size_t((n * C + c) * (K - 1) + j)] : xs[size_t((n * C + c) * S + j - (K - 1))];
      };
      for (int64_t t = 0; t < S; ++t) {
        double want = with_bias ? bs[size_t(c)] : 0.0;
        for (int64_t k = 0; k < K; ++k) want += double(ws[size_t(c * K + k)]) * full(t + k);
        EXPECT_NEAR(got[size_t((n * C + c) * S + t)], want, 1e-5) << "row " << n << " channel " << c << " step " << t;
      }
      for (int64_t j = 0; j < K - 1; ++j)
        EXPECT_EQ(state[size_t((n * C + c) * (K - 1) + j)], full(T - (K - 1) + j)) << "state column " << j;
    }
}

}  // namespace

TEST(ShortConv, PromptFromZeroState) { check_conv(2, 3, 5, 3, false, false); }
TEST(ShortConv, PromptShorterThanTheStateKeepsZeros) { check_conv(2, 3, 1, 4, false, true); }
TEST(ShortConv, CachedStepsReadThePast) {
  check_conv(2, 3, 1, 3, true, false);
  check_conv(1, 4, 3, 4, true, true);
}

TEST(ShortConv, PaddingMaskIsTheStepsColumnsAndNoneForOneToken) {
  ir::Graph g("main");
  ir::Builder b(g);
  models::CausalLmInputs in;
  in.input_ids = g.add_input("input_ids", DType::I64, {Dim::fixed(2), Dim::sym("sequence_length")});
  in.attention_mask = g.add_input("attention_mask", DType::I64, {Dim::fixed(2), Dim::sym("total_sequence_length")});
  auto mask = models::padding_states_mask(b, in);
  ASSERT_TRUE(mask);
  g.rename(*mask, "m");
  g.add_output(*mask);
  auto run = [&](std::vector<int64_t> ids_shape, std::vector<int64_t> m) {
    std::map<std::string, Tensor> feeds = {
        {"input_ids", Tensor::from_vector<int64_t>(DType::I64, ids_shape, std::vector<int64_t>(size_t(ids_shape[0] * ids_shape[1]), 5))},
        {"attention_mask", Tensor::from_vector<int64_t>(DType::I64, {2, int64_t(m.size() / 2)}, m)}};
    const auto outs = runtime::Executor(g).run(feeds);  // held: values() views the tensor
    auto v = outs.at("m").values<float>();
    return std::vector<float>(v.begin(), v.end());
  };
  // A 3-token step after 2 cached positions: the mask's last 3 columns.
  EXPECT_EQ(run({2, 3}, {1, 1, 0, 1, 1, /**/ 0, 0, 0, 1, 1}), (std::vector<float>{0, 1, 1, 0, 1, 1}));
  // One token: never masked (Transformers' create_recurrent_attention_mask returns None).
  EXPECT_EQ(run({2, 1}, {1, 0, /**/ 0, 0}), (std::vector<float>{1, 1}));
  // A decode graph (one token by its shape) builds no mask at all.
  ir::Graph d("main");
  ir::Builder db(d);
  models::CausalLmInputs din;
  din.input_ids = d.add_input("input_ids", DType::I64, {Dim::sym("batch_size"), Dim::fixed(1)});
  din.attention_mask = d.add_input("attention_mask", DType::I64, {Dim::sym("batch_size"), Dim::sym("total_sequence_length")});
  EXPECT_FALSE(models::padding_states_mask(db, din));
}

TEST(ShortConv, ManifestNamesRoundTrip) {
  for (auto k : tasks::kStateKinds) EXPECT_EQ(tasks::parse_state_kind(tasks::state_kind_name(k)), k);
  EXPECT_FALSE(tasks::parse_state_kind("convolution"));
  EXPECT_EQ(tasks::find_state_names("js-hybrid")->name, "js-hybrid");
  EXPECT_EQ(tasks::find_state_names("nope"), nullptr);
  const auto ports = tasks::name_states({tasks::conv_state(3, 64, 2)}, tasks::state_names_named("js-hybrid"));
  EXPECT_EQ(ports[0].past, "past_conv.3");
  EXPECT_EQ(ports[0].present, "present_conv.3");
  EXPECT_EQ(tasks::state_dims(ports[0].spec, 2, 99), (std::vector<int64_t>{2, 64, 2}));
}
