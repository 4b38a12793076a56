// The pass scan-recurrences (passes/scan_recurrences.cc): GatedDeltaRule and SsdScan become
// RecurrenceScan (an absent initial state as zeros, SsdScan's x dt, dt A and D's skip around it), the
// graph computing the same numbers on the reference executor; a graph without a recurrence (a causal
// conv alone) is left as it is.
#include <gtest/gtest.h>

#include <random>

#include "ir/builder.h"
#include "models/delta_rule.h"
#include "models/short_conv.h"
#include "models/ssd.h"
#include "passes/pass.h"
#include "runtime/executor.h"
#include "random_weights.h"

using namespace hfx;

namespace {

constexpr int64_t kBatch = 2, kSteps = 9, kHeads = 2, kKey = 3, kValue = 4;

using hfx::testing::random_f32;

std::vector<std::string> ops(const ir::Graph& g) {
  std::vector<std::string> out;
  for (const auto& n : g.nodes()) out.push_back(n.op);
  return out;
}

size_t count(const ir::Graph& g, const std::string& op) {
  const auto all = ops(g);
  return size_t(std::count(all.begin(), all.end(), op));
}

// A delta rule from a zero state (no initial input: a prefill graph's) and an SSD scan with D from a
// carried one, side by side, with their feeds.
struct Case {
  ir::Graph graph{"recurrences"};
  std::map<std::string, Tensor> feeds;
};

Case make_case() {
  std::mt19937 rng(11);
  Case c;
  ir::Builder b(c.graph);
  auto input = [&](const std::string& name, std::vector<int64_t> dims, float lo, float hi) {
    Shape shape = {Dim::sym("batch"), Dim::sym("steps")};
    for (size_t i = 2; i < dims.size(); ++i) shape.push_back(Dim::fixed(dims[i]));
    c.feeds[name] = random_f32(dims, rng, lo, hi);
    return c.graph.add_input(name, DType::F32, shape);
  };
  const auto q = input("q", {kBatch, kSteps, kHeads, kKey}, -0.5f, 0.5f);
  const auto k = input("k", {kBatch, kSteps, kHeads, kKey}, -0.5f, 0.5f);
  const auto v = input("v", {kBatch, kSteps, kHeads, kValue}, -1, 1);
  const auto g = input("g", {kBatch, kSteps, kHeads}, -1, 0);
  const auto beta = input("beta", {kBatch, kSteps, kHeads}, 0, 1);
  const auto x = input("x", {kBatch, kSteps, kHeads, kValue}, -1, 1);
  const auto dt = input("dt", {kBatch, kSteps, kHeads}, 0, 1);
  const auto Bm = input("B", {kBatch, kSteps, kHeads, kKey}, -1, 1);
  const auto Cm = input("C", {kBatch, kSteps, kHeads, kKey}, -1, 1);
  c.feeds["past_ssm"] = random_f32({kBatch, kHeads, kValue, kKey}, rng, -1, 1);
  const auto past = c.graph.add_input("past_ssm", DType::F32,
                                      {Dim::sym("batch"), Dim::fixed(kHeads), Dim::fixed(kValue), Dim::fixed(kKey)});
  const auto A = b.constant(random_f32({kHeads}, rng, -1, -0.1f), "A");
  const auto D = b.constant(random_f32({kHeads}, rng, -1, 1), "D");
  auto delta = models::gated_delta_rule(b, q, k, v, g, beta, ir::kNone, {kHeads, kKey, kValue, 4, 64});
  auto ssd = models::ssd_chunk_scan(b, x, dt, A, Bm, Cm, D, past, {kHeads, kValue, kKey, 4});
  c.graph.rename(delta.out, "delta_out");
  c.graph.rename(delta.final_state, "delta_state");
  c.graph.rename(ssd.out, "ssd_out");
  c.graph.rename(ssd.final_state, "ssd_state");
  for (auto id : {delta.out, delta.final_state, ssd.out, ssd.final_state}) c.graph.add_output(id);
  return c;
}

}  // namespace

TEST(ScanRecurrences, RewritesBothRecurrencesComputingTheSameNumbers) {
  Case c = make_case();
  ASSERT_TRUE(passes::has_recurrences(c.graph));
  const ir::Graph scanned = passes::scan_recurrences(c.graph);
  scanned.validate();
  EXPECT_EQ(count(scanned, "RecurrenceScan"), 2u);
  EXPECT_EQ(count(scanned, "GatedDeltaRule") + count(scanned, "SsdScan"), 0u);
  EXPECT_EQ(count(scanned, "Expand"), 1u);  // the delta rule's zero state
  EXPECT_FALSE(passes::has_recurrences(scanned));

  const auto before = runtime::Executor(c.graph).run(c.feeds);
  const auto after = runtime::Executor(scanned).run(c.feeds);
  for (const char* name : {"delta_out", "delta_state", "ssd_out", "ssd_state"}) {
    const auto want = before.at(name).values<float>(), got = after.at(name).values<float>();
    ASSERT_EQ(want.size(), got.size()) << name;
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << name << " [" << i << "]";
  }
}

TEST(ScanRecurrences, LeavesAGraphWithoutARecurrenceAsItIs) {
  ir::Graph g("conv");
  ir::Builder b(g);
  const auto x = g.add_input("x", DType::F32, {Dim::sym("batch"), Dim::fixed(4), Dim::sym("steps")});
  const auto past = g.add_input("past", DType::F32, {Dim::sym("batch"), Dim::fixed(4), Dim::fixed(2)});
  std::mt19937 rng(3);
  const auto w = b.constant(random_f32({4, 3}, rng, -1, 1), "w");
  auto conv = models::causal_depthwise_conv(b, x, past, w, ir::kNone, 4, 3);
  g.add_output(conv.out);
  g.add_output(conv.present);
  EXPECT_FALSE(passes::has_recurrences(g));
  EXPECT_EQ(ops(passes::scan_recurrences(g)), ops(g));  // the conv keeps its loop-free form
}
