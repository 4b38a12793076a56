// Contract bounds and what verify makes of them (issue #14): contradictory --dim bounds refused, bounds
// past the model's context lowered with a warning, verify's shapes and greedy prompts kept inside the
// bounds, the diagnosis of a failing case, and MatMulNBits accuracy_level 4's int8 activations.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "ir/builder.h"
#include "ir/graph.h"
#include "ir/weight.h"
#include "pipeline/backend_support.h"
#include "pipeline/verify_cases.h"
#include "quant/quantize.h"
#include "random_weights.h"
#include "runtime/executor.h"
#include "tasks/causal_lm.h"

using namespace hfx;

namespace {

// A growing cache of 2 layers, 2 kv heads, head_dim 16, as the contract names it.
runtime::CacheSpec growing_cache() {
  return {tasks::name_states(tasks::kv_cache_states({2, 2, 16, false, 0}), tasks::state_names(tasks::StateNames::Decoder)),
          false, 0};
}

std::string validate_error(const std::map<std::string, SymbolBounds>& dims) {
  tasks::CausalLmOptions o;
  o.dims = dims;
  try {
    tasks::validate(o);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

ir::Graph bounded_graph(const std::map<std::string, SymbolBounds>& dims) {
  ir::Graph g;
  for (const auto& [name, b] : dims) g.symbols().set_bounds(name, b);
  return g;
}

}  // namespace

// F#4 / F#11: the report's contradictory forms are --dim errors naming both bounds.
TEST(ContractBounds, ContradictoryDimsAreRefused) {
  EXPECT_EQ(validate_error({{"total_sequence_length", {1, 5}}}), "");
  EXPECT_EQ(validate_error({{"past_sequence_length", {0, 4}}, {"total_sequence_length", {1, 5}}}), "");
  const auto past = validate_error({{"past_sequence_length", {0, 10}}, {"total_sequence_length", {1, 5}}});
  EXPECT_NE(past.find("--dim past_sequence_length max 10 contradicts total_sequence_length max 5"), std::string::npos) << past;
  EXPECT_NE(past.find("at most 4"), std::string::npos) << past;
  const auto seq = validate_error({{"sequence_length", {1, 16}}, {"total_sequence_length", {1, 8}}});
  EXPECT_NE(seq.find("--dim sequence_length max 16 contradicts total_sequence_length max 8"), std::string::npos) << seq;
  const auto batch = validate_error({{"batch_size", {0, 4}}});
  EXPECT_NE(batch.find("--dim batch_size=0:4: batch_size is at least 1"), std::string::npos) << batch;
  EXPECT_NE(validate_error({{"sequence_length", {0, 4}}}).find("at least 1"), std::string::npos);
  EXPECT_EQ(validate_error({{"past_sequence_length", {0, 4}}}), "");  // an empty cache is a step's normal start
  EXPECT_NE(validate_error({{"batch_size", {4, 2}}}).find("min 4 is above max 2"), std::string::npos);
  const auto unreachable = validate_error({{"past_sequence_length", {0, 2}}, {"sequence_length", {1, 2}},
                                           {"total_sequence_length", {10, 20}}});
  EXPECT_NE(unreachable.find("no step fits"), std::string::npos) << unreachable;
}

// F#5: a bound past max_position_embeddings is warned about: kept with rotary positions (Transformers
// runs past it), lowered to the table with learned positions (GPT-2's n_positions).
TEST(ContractBounds, BoundsPastTheContextAreWarnedAbout) {
  tasks::CausalLmOptions o;
  o.dims["total_sequence_length"] = {1, 100000};
  o.dims["past_sequence_length"] = {0, 99999};
  auto w = tasks::fit_to_context(o, {256, "max_position_embeddings", false});
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].rfind("--dim total_sequence_length max 100000 is beyond max_position_embeddings 256 (kept: ", 0), 0u) << w[0];
  EXPECT_EQ(o.dims["total_sequence_length"].max, 100000);

  auto learned = o;
  w = tasks::fit_to_context(learned, {256, "n_positions", true});
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0], "--dim total_sequence_length max 100000 is beyond n_positions 256 (a learned position table); using 256");
  EXPECT_EQ(w[1], "--dim past_sequence_length max 99999 is beyond n_positions 256 (a learned position table); using 255");
  EXPECT_EQ(learned.dims["total_sequence_length"].max, 256);
  EXPECT_EQ(learned.dims["past_sequence_length"].max, 255);

  tasks::CausalLmOptions s;
  s.static_cache = true;
  s.max_cache_len = 512;
  w = tasks::fit_to_context(s, {256, "max_position_embeddings", false});
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].rfind("--max-cache-len 512 is beyond max_position_embeddings 256 (kept: ", 0), 0u) << w[0];
  EXPECT_EQ(s.max_cache_len, 512);
  w = tasks::fit_to_context(s, {256, "n_positions", true});
  EXPECT_EQ(s.max_cache_len, 256);

  tasks::CausalLmOptions inside;
  inside.dims["total_sequence_length"] = {1, 256};
  inside.static_cache = true;
  inside.max_cache_len = 256;
  EXPECT_TRUE(tasks::fit_to_context(inside, {256, "max_position_embeddings", true}).empty());

  tasks::CausalLmOptions min_past;
  min_past.dims["total_sequence_length"] = {300, 400};
  EXPECT_THROW(tasks::fit_to_context(min_past, {256, "n_positions", true}), Error);
}

// F#4: every shape case and the greedy prompts stay inside the contract, here total_sequence_length 1:5.
TEST(ContractBounds, VerifyShapesStayInsideTheBounds) {
  for (int64_t total : {1, 2, 5, 7}) {
    const auto g = bounded_graph({{"batch_size", {1, std::nullopt}}, {"sequence_length", {1, std::nullopt}},
                                  {"past_sequence_length", {0, std::nullopt}}, {"total_sequence_length", {1, total}}});
    const runtime::CacheSpec cache = growing_cache();
    for (const auto& c : pipeline::shape_matrix(g, "decoder", cache, true, true)) {
      EXPECT_LE(c.past + c.seq, total) << c.name;
      EXPECT_GE(c.seq, 1) << c.name;
    }
    int64_t tokens = 8;
    const auto prompts = pipeline::greedy_prompts(pipeline::step_bounds(g), cache, 512, true, tokens);
    ASSERT_EQ(prompts.size(), 2u);
    EXPECT_GE(tokens, 1);
    EXPECT_LE(int64_t(prompts[0].size()) + tokens - 1, total) << "total " << total;  // the last token is not fed
    for (const auto& p : prompts)
      for (int64_t id : p) EXPECT_LT(id, 512);
  }
  // The defaults are the matrix `hfx verify` always ran: (2, 8, 0), (1, 1, 12), ...
  const auto g = bounded_graph({{"batch_size", {1, std::nullopt}}, {"sequence_length", {1, std::nullopt}},
                                {"past_sequence_length", {0, std::nullopt}}, {"total_sequence_length", {1, std::nullopt}}});
  const auto cases = pipeline::shape_matrix(g, "decoder", growing_cache(), true, true);
  ASSERT_EQ(cases.size(), 6u);
  EXPECT_EQ(std::make_tuple(cases[0].batch, cases[0].seq, cases[0].past), std::make_tuple(2, 8, 0));
  EXPECT_EQ(std::make_tuple(cases[1].batch, cases[1].seq, cases[1].past), std::make_tuple(1, 1, 12));
  EXPECT_EQ(std::make_tuple(cases[4].batch, cases[4].seq, cases[4].past), std::make_tuple(2, 1, 23));
  // A batch_size min of 3 gives three rows, and a matrix at batch 3 and more.
  const auto g3 = bounded_graph({{"batch_size", {3, 8}}});
  for (const auto& c : pipeline::shape_matrix(g3, "decoder", growing_cache(), true, true)) EXPECT_GE(c.batch, 3) << c.name;
  int64_t tokens = 8;
  EXPECT_EQ(pipeline::greedy_prompts(pipeline::step_bounds(g3), growing_cache(), 512, true, tokens).size(), 3u);
  // GroupQueryAttention runs chunks at batch 1 only: with batch_size min 2 that case is skipped, and said.
  std::vector<std::string> skipped;
  const auto g2 = bounded_graph({{"batch_size", {2, 4}}});
  for (const auto& c : pipeline::shape_matrix(g2, "decoder", growing_cache(), true, false, &skipped))
    EXPECT_GE(c.batch, 2) << c.name;
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("chunk, cache partial"), std::string::npos);
}

// F#2: the diagnosis names the output that differs, and blames the final norm or lm_head only when the
// logits differ and every layer's output agrees.
TEST(VerifyDiagnosis, NamesTheOutputThatDiffers) {
  const double atol = 1e-4;
  const std::vector<pipeline::LayerDiff> agree = {{1e-6, 1e-7}, {2e-6, 1e-7}};
  const auto states = growing_cache().states;
  auto cache = pipeline::diagnose_divergence({{"logits", 5e-5}, {"present.1.key", 3e-3}, {"present.1.value", 1e-6}}, agree, atol, states);
  EXPECT_NE(cache.find("over tolerance: present.1.key"), std::string::npos) << cache;
  EXPECT_NE(cache.find("the cache present.1.key writes"), std::string::npos) << cache;
  EXPECT_EQ(cache.find("the difference is in the final norm or lm_head"), std::string::npos) << cache;

  auto head = pipeline::diagnose_divergence({{"logits", 6e-3}, {"present.0.key", 1e-6}}, agree, atol, states);
  EXPECT_NE(head.find("over tolerance: logits"), std::string::npos) << head;
  EXPECT_NE(head.find("the difference is in the final norm or lm_head"), std::string::npos) << head;

  auto layer = pipeline::diagnose_divergence({{"logits", 6e-3}, {"present.1.key", 2e-3}}, {{1e-6, 1e-7}, {4e-3, 1e-3}}, atol, states);
  EXPECT_NE(layer.find("over tolerance: logits, present.1.key"), std::string::npos) << layer;
  EXPECT_NE(layer.find("first diverging layer: 1"), std::string::npos) << layer;
  EXPECT_EQ(layer.find("lm_head"), std::string::npos) << layer;

  auto hidden = pipeline::diagnose_divergence({{"logits", NAN}}, {}, atol, states);
  EXPECT_NE(hidden.find("over tolerance: logits; layer outputs are not exposed"), std::string::npos) << hidden;
}

// F#2: accuracy_level 4 quantizes each row of A per block to int8 (scale max|a| / 127, rounding half to
// even), as ONNX Runtime's CPU kernel does; level 0 keeps A in f32.
TEST(QuantKernels, MatMulNBitsAccuracyLevel4QuantizesActivationsToInt8) {
  const int64_t K = 32, N = 3, block = 16;
  auto w = hfx::testing::random_matrix(K, N, 7);
  auto parts = ir::WeightRef::constant(Tensor::from_vector<float>(DType::F32, {K, N}, w)).quantized({4, block, true, DType::F32});
  auto q = quant::quantize_blockwise(w.data(), K, N, 4, block, true, DType::F32);
  auto wd = quant::dequantize_blockwise(q.data.data(), q.scales.data(), nullptr, K, N, 4, block);
  // Block 0 has max |a| 127, so a * 127 / max|a| = a: the halves show the rounding (0.5 -> 0, 1.5 -> 2,
  // 2.5 -> 2, -0.5 -> -0, -1.5 -> -2); block 1 a ramp of max 1.
  std::vector<float> a(static_cast<size_t>(K));
  const float halves[] = {127.f, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 3.49f, -100.5f};
  for (int64_t k = 0; k < 16; ++k) a[size_t(k)] = halves[k % 8];
  for (int64_t k = 16; k < K; ++k) a[size_t(k)] = float(k - 24) / 8.f;
  for (int64_t level : {0, 4}) {
    ir::Graph g;
    ir::Builder b(g);
    auto x = g.add_input("a", DType::F32, fixed_shape({1, K}));
    std::vector<ir::ValueId> ins = {x, b.weight("B", parts[0]), b.weight("scales", parts[1])};
    g.add_output(b.add1("MatMulNBits", ins,
                        {{"K", K}, {"N", N}, {"bits", int64_t(4)}, {"block_size", block}, {"accuracy_level", level}}, "y"));
    auto y = runtime::Executor(g).run({{"a", Tensor::from_vector<float>(DType::F32, {1, K}, a)}}).at("y");
    for (int64_t n = 0; n < N; ++n) {
      double want = 0;
      for (int64_t k = 0; k < K; ++k) {
        double ak = a[size_t(k)];
        if (level == 4) {
          const double amax = k < 16 ? 127.0 : 1.0;
          ak = std::nearbyint(ak * 127.0 / amax) * amax / 127.0;
        }
        want += ak * wd[size_t(k * N + n)];
      }
      EXPECT_NEAR(y.as<float>()[n], want, 1e-4 * std::max(1.0, std::fabs(want))) << "level " << level << " n " << n;
    }
  }
}

TEST(CheckTokens, EightGreedyTokensUntilTheDecodeStepsReadMoreThanTheirBudget) {
  // The built-in check's greedy tokens: 8 (7 decode steps) while 7 passes over the weights fit
  // kCheckStepBytes, then as many steps as fit, never fewer than 3 (4 tokens).
  using pipeline::check_tokens;
  using pipeline::kCheckStepBytes;
  EXPECT_EQ(check_tokens(0), 8);  // no weights written: a format that reports none
  EXPECT_EQ(check_tokens(int64_t(1) << 20), 8);
  EXPECT_EQ(check_tokens(kCheckStepBytes / 7), 8);
  EXPECT_EQ(check_tokens(kCheckStepBytes / 7 + 1), 7);
  EXPECT_EQ(check_tokens(kCheckStepBytes / 4), 5);
  EXPECT_EQ(check_tokens(int64_t(876) << 20), 4);   // the int4 Qwen3-0.6B shape
  EXPECT_EQ(check_tokens(int64_t(2297) << 20), 4);  // its f32 export
  EXPECT_EQ(check_tokens(int64_t(64) << 30), 4);
}
