// The reference's answers shared between the runtimes of one export's check (issue #21): a pass reads
// only what an earlier pass computed for the same component, graph preparation and step inputs, byte
// for byte, and the greedy tokens teacher-forced on the same prompts and tokens.
#include <gtest/gtest.h>

#include "pipeline/reference_memo.h"

using namespace hfx;
using pipeline::ReferenceMemo;

namespace {

ReferenceMemo::Tensors step(std::vector<int64_t> ids) {
  const int64_t n = int64_t(ids.size());
  return {{"input_ids", Tensor::from_vector<int64_t>(DType::I64, {1, n}, ids)},
          {"attention_mask", Tensor::from_vector<int64_t>(DType::I64, {1, n}, std::vector<int64_t>(size_t(n), 1))}};
}

ReferenceMemo::Tensors logits(float v) { return {{"logits", Tensor::from_vector<float>(DType::F32, {1, 1}, {v})}}; }

}  // namespace

TEST(ReferenceMemo, OutputsAreFoundOnlyForTheSameRoleVariantAndInputBytes) {
  ReferenceMemo memo;
  memo.keep_outputs("decoder", "onnx", step({1, 2, 3}), logits(0.5f));
  const auto* hit = memo.outputs("decoder", "onnx", step({1, 2, 3}));
  ASSERT_NE(hit, nullptr);
  EXPECT_EQ(hit->at("logits").as<float>()[0], 0.5f);
  EXPECT_EQ(memo.outputs("decoder", "onnx", step({1, 2, 4})), nullptr);  // one token differs
  EXPECT_EQ(memo.outputs("decoder", "onnx", step({1, 2})), nullptr);     // another shape
  EXPECT_EQ(memo.outputs("prefill", "onnx", step({1, 2, 3})), nullptr);
  EXPECT_EQ(memo.outputs("decoder", "onnx, f32 activations", step({1, 2, 3})), nullptr);
  auto fewer = step({1, 2, 3});
  fewer.erase("attention_mask");
  EXPECT_EQ(memo.outputs("decoder", "onnx", fewer), nullptr);
  auto retyped = step({1, 2, 3});
  retyped["attention_mask"] = Tensor::from_vector<int32_t>(DType::I32, {1, 6}, {1, 0, 1, 0, 1, 0});  // same bytes
  EXPECT_EQ(memo.outputs("decoder", "onnx", retyped), nullptr);
}

TEST(ReferenceMemo, GreedyTokensAreFoundOnlyForTheSamePromptsAndTokens) {
  ReferenceMemo memo;
  const ReferenceMemo::Tokens prompts{{5, 6}, {7}}, tokens{{1, 2}, {3, 4}};
  memo.keep_greedy("onnx", prompts, tokens, tokens);
  ASSERT_TRUE(memo.greedy("onnx", prompts, tokens).has_value());
  EXPECT_EQ(*memo.greedy("onnx", prompts, tokens), tokens);
  EXPECT_FALSE(memo.greedy("onnx", prompts, {{1, 2}, {3, 5}}).has_value());  // the runtimes' tokens differ
  EXPECT_FALSE(memo.greedy("onnx", {{5, 6}, {8}}, tokens).has_value());
  EXPECT_FALSE(memo.greedy("openvino", prompts, tokens).has_value());
}
