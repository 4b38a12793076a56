// The onnx-standard-ops pass (LayerNorm and Gelu at every opset; the rest at --onnx-opset 23): what it rewrites, what it must leave alone (rotary
// tables that are not a RopeCosSin's), and that the rewritten graph computes the same numbers as the
// original through the target ops' decompositions, left-padded (fully masked) rows included.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "ir/builder.h"
#include "ir/graph.h"
#include "ir/ops.h"
#include "passes/pass.h"
#include "runtime/executor.h"

using namespace hfx;
using hfx::ir::ValueId;

namespace {

constexpr int64_t kB = 2, kS = 4, kHq = 4, kHkv = 2, kD = 8, kRot = 4;

std::map<std::string, int> op_counts(const ir::Graph& g) {
  std::map<std::string, int> n;
  for (const auto& node : g.nodes()) ++n[node.op];
  return n;
}

Tensor random(std::mt19937& rng, std::vector<int64_t> shape) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Tensor t(DType::F32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.as<float>()[i] = dist(rng);
  return t;
}

// x -> RMSNorm; q, k rotated (partial rotary) with a RopeCosSin's tables; causal attention over a
// left-padded mask; and, with `plain_tables`, k rotated again with tables given as graph inputs.
struct Model {
  ir::Graph g{"m"};
  std::map<std::string, Tensor> feeds;

  explicit Model(bool plain_tables) {
    ir::Builder b(g);
    std::mt19937 rng(7);
    auto input = [&](const std::string& name, Tensor t) {
      auto id = g.add_input(name, t.dtype(), fixed_shape(t.shape()));
      feeds[name] = std::move(t);
      return id;
    };
    ValueId mask = input("attention_mask", Tensor::from_vector<int64_t>(DType::I64, {kB, kS}, {1, 1, 1, 1, 0, 0, 1, 1}));
    ValueId ids = input("input_ids", Tensor::from_vector<int64_t>(DType::I64, {kB, kS}, {5, 6, 7, 8, 0, 0, 9, 10}));
    ValueId pos = input("position_ids", Tensor::from_vector<int64_t>(DType::I64, {kB, kS}, {0, 1, 2, 3, 1, 1, 0, 1}));
    ValueId x = input("x", random(rng, {kB, kS, kD}));
    ValueId q = input("q", random(rng, {kB, kHq, kS, kD}));
    ValueId k = input("k", random(rng, {kB, kHkv, kS, kD}));
    ValueId v = input("v", random(rng, {kB, kHkv, kS, kD}));
    ValueId w = b.weight("norm.weight", ir::WeightRef::constant(random(rng, {kD})));
    g.add_output(b.add("RMSNorm", {x, w}, {{"epsilon", 1e-6}}, {"normed"})[0]);
    std::vector<float> inv = {1.0f, 0.01f};
    ValueId freq = b.weight("inv_freq", ir::WeightRef::constant(Tensor::from_vector<float>(DType::F32, {kRot / 2}, inv)));
    auto tables = b.add("RopeCosSin", {pos, freq});
    q = b.add1("RotaryEmbedding", {q, tables[0], tables[1]});
    k = b.add1("RotaryEmbedding", {k, tables[0], tables[1]});
    if (plain_tables) {
      ValueId cos = input("cos", random(rng, {kB, kS, kRot})), sin = input("sin", random(rng, {kB, kS, kRot}));
      k = b.add1("RotaryEmbedding", {k, cos, sin});
    }
    ValueId bias = b.add1("AttentionBias", {mask, ids});
    g.add_output(b.add("Attention", {q, k, v, bias}, {{"scale", 0.35}}, {"attn"})[0]);
  }
};

float max_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  float worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) worst = std::max(worst, std::fabs(a.as<float>()[i] - b.as<float>()[i]));
  return worst;
}

}  // namespace

TEST(OnnxStandardOps, RewritesNormRotaryAttention) {
  Model m(false);
  std::vector<std::string> notes;
  const ir::Graph out = passes::onnx_standard_ops(m.g, 23, &notes);
  auto n = op_counts(out);
  EXPECT_EQ(n["RMSNormalization"], 1);
  EXPECT_EQ(n["OnnxRotaryEmbedding"], 2);
  EXPECT_EQ(n["OnnxAttention"], 1);
  EXPECT_EQ(n["RMSNorm"] + n["RotaryEmbedding"] + n["Attention"], 0);
  EXPECT_EQ(n["Slice"], 2);  // one half table each for cos and sin, shared by q and k
  EXPECT_TRUE(notes.empty());
  for (const auto& node : out.nodes())
    if (node.op == "OnnxRotaryEmbedding") {
      EXPECT_EQ(node.attr_int("rotary_embedding_dim", 0), kRot);
    }
  // Same numbers through the decompositions; row 1 holds fully masked queries (left padding).
  auto want = runtime::Executor(m.g).run(m.feeds);
  auto got = runtime::Executor(out).run(m.feeds);
  EXPECT_LE(max_diff(got.at("normed"), want.at("normed")), 1e-6f);
  EXPECT_LE(max_diff(got.at("attn"), want.at("attn")), 1e-6f);
}

TEST(OnnxStandardOps, KeepsRotaryWithOtherTables) {
  Model m(true);
  std::vector<std::string> notes;
  const ir::Graph out = passes::onnx_standard_ops(m.g, 23, &notes);
  auto n = op_counts(out);
  EXPECT_EQ(n["OnnxRotaryEmbedding"], 2);
  EXPECT_EQ(n["RotaryEmbedding"], 1);  // the one fed plain inputs: their halves are not known to repeat
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("RopeCosSin"), std::string::npos) << notes[0];
  auto want = runtime::Executor(m.g).run(m.feeds);
  auto got = runtime::Executor(out).run(m.feeds);
  EXPECT_LE(max_diff(got.at("attn"), want.at("attn")), 1e-6f);
}

// LayerNorm (with and without bias) and both Gelu forms become LayerNormalization and OnnxGelu at
// opset 21 (the ops date from opsets 17 and 20), and compute the same numbers; the opset-23 ops stay.
TEST(OnnxStandardOps, LayerNormAndGeluAtEveryOpset) {
  ir::Graph g{"m"};
  ir::Builder b(g);
  std::mt19937 rng(3);
  std::map<std::string, Tensor> feeds = {{"x", random(rng, {kB, kS, kD})}};
  ValueId x = g.add_input("x", DType::F32, fixed_shape({kB, kS, kD}));
  ValueId w = b.weight("ln.weight", ir::WeightRef::constant(random(rng, {kD})));
  ValueId bias = b.weight("ln.bias", ir::WeightRef::constant(random(rng, {kD})));
  ValueId y = b.add1("LayerNorm", {x, w, bias}, {{"epsilon", 1e-5}});
  y = b.add1("Gelu", {y}, {{"approximate", std::string("none")}});
  y = b.add1("LayerNorm", {y, w}, {{"epsilon", 1e-12}});
  y = b.add1("Gelu", {y}, {{"approximate", std::string("tanh")}});
  g.add_output(b.add("RMSNorm", {y, w}, {{"epsilon", 1e-6}}, {"out"})[0]);

  std::vector<std::string> notes;
  const ir::Graph out = passes::onnx_standard_ops(g, 21, &notes);
  auto n = op_counts(out);
  EXPECT_EQ(n["LayerNormalization"], 2);
  EXPECT_EQ(n["OnnxGelu"], 2);
  EXPECT_EQ(n["LayerNorm"] + n["Gelu"], 0);
  EXPECT_EQ(n["RMSNorm"], 1);  // RMSNormalization is opset 23
  EXPECT_TRUE(notes.empty());
  std::vector<std::string> approximations;
  for (const auto& node : out.nodes()) {
    if (node.op == "OnnxGelu") approximations.push_back(node.attr_str("approximate"));
    if (node.op == "LayerNormalization") {
      EXPECT_EQ(node.attr_int("axis"), -1);
      EXPECT_EQ(node.attr_int("stash_type"), 1);
    }
  }
  EXPECT_EQ(approximations, (std::vector<std::string>{"none", "tanh"}));
  auto want = runtime::Executor(g).run(feeds);
  auto got = runtime::Executor(out).run(feeds);
  EXPECT_LE(max_diff(got.at("out"), want.at("out")), 1e-6f);
}
