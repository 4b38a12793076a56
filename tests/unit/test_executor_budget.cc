// The reference executor's per-tensor budget (ExecOptions::max_tensor_bytes): a graph read from a
// file that computes a huge tensor fails naming the node, op and shape before allocating it (D19 of
// the hostile-input report: an extra output Expand(1.0, [10000, 100000]) took 7.8 GB).
#include <gtest/gtest.h>

#include "core/error.h"
#include "ir/builder.h"
#include "ir/graph.h"
#include "runtime/executor.h"

using namespace hfx;
using hfx::runtime::ExecOptions;
using hfx::runtime::Executor;

namespace {

constexpr int64_t kMiB = int64_t(1) << 20;

std::string run_error(const ir::Graph& g, const std::map<std::string, Tensor>& feeds, int64_t budget) {
  ExecOptions o;
  o.max_tensor_bytes = budget;
  try {
    Executor(g, o).run(feeds);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput) << e.describe();
    return e.describe();
  }
  return "";
}

}  // namespace

TEST(ExecutorBudget, ExpandAboveTheBudgetFailsBeforeAllocating) {
  ir::Graph g("g");
  ir::Builder b(g);
  // 10000 x 100000 f32 = 3.7 GiB: under a 512 MiB budget the kernel's output is refused, not allocated.
  auto y = b.add("Expand", {b.f32(1.0f), b.i64s({10000, 100000})}, {}, {"huge"});
  g.add_output(y[0]);
  const std::string msg = run_error(g, {}, 512 * kMiB);
  EXPECT_NE(msg.find("(Expand)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("f32[10000,100000]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("3814 MiB"), std::string::npos) << msg;
  EXPECT_NE(msg.find("budget of 512 MiB"), std::string::npos) << msg;
}

TEST(ExecutorBudget, BroadcastOfTwoSmallInputsIsCounted) {
  ir::Graph g("g");
  ir::Builder b(g);
  auto x = g.add_input("x", DType::F32, fixed_shape({20000, 1}));
  auto w = g.add_input("w", DType::F32, fixed_shape({1, 20000}));
  g.add_output(b.add("Add", {x, w}, {}, {"sum"})[0]);  // [20000, 20000] f32 = 1.5 GiB
  std::map<std::string, Tensor> feeds = {{"x", Tensor(DType::F32, {20000, 1})}, {"w", Tensor(DType::F32, {1, 20000})}};
  const std::string msg = run_error(g, feeds, 512 * kMiB);
  EXPECT_NE(msg.find("(Add)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("f32[20000,20000]"), std::string::npos) << msg;
}

TEST(ExecutorBudget, TensorsWithinTheBudgetRun) {
  ir::Graph g("g");
  ir::Builder b(g);
  g.add_output(b.add("Expand", {b.f32(2.0f), b.i64s({3, 4})}, {}, {"small"})[0]);
  ExecOptions o;
  o.max_tensor_bytes = 1024;  // 48 bytes fit
  auto out = Executor(g, o).run({});
  ASSERT_EQ(out.at("small").shape(), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(out.at("small").as<float>()[11], 2.0f);
  // The budget covers the run only: a tensor made afterwards on this thread is not limited.
  Tensor big(DType::F32, {1024, 1024});
  EXPECT_EQ(big.nbytes(), size_t(4 * kMiB));
}

TEST(ExecutorBudget, ContractBudgetFollowsTheDeclaredPorts) {
  ir::Graph g("g");
  ir::Builder b(g);
  auto ids = g.add_input("input_ids", DType::I64, {Dim::sym("batch_size"), Dim::sym("sequence_length")});
  // A tiny contract: the 512 MiB floor.
  auto small = b.add("Cast", {ids}, {{"to", std::string("f32")}}, {"out"});
  g.add_output(small[0]);
  EXPECT_EQ(runtime::contract_tensor_budget(g, 2, 80), 512 * kMiB);
  // Attention scores dominate long runs: batch x 256 heads x length^2 x 4 bytes.
  EXPECT_EQ(runtime::contract_tensor_budget(g, 1, 4096), int64_t(256) * 4 * 4096 * 4096);
  // A declared output of 8 Gi elements: 16 x its size in 8-byte elements; bounds cap the symbols.
  ir::Graph big("big");
  ir::Builder bb(big);
  auto x = big.add_input("x", DType::F32, {Dim::sym("batch_size"), Dim::fixed(1 << 20), Dim::fixed(1 << 13)});
  big.add_output(bb.add("Neg", {x}, {}, {"y"})[0]);
  EXPECT_EQ(runtime::contract_tensor_budget(big, 1, 10), int64_t(16) * 8 * (int64_t(1) << 33));
  big.symbols().set_bounds("batch_size", {1, 1});
  EXPECT_EQ(runtime::contract_tensor_budget(big, 1000, 10), int64_t(16) * 8 * (int64_t(1) << 33));
  // Dims near INT64_MAX saturate rather than overflow.
  ir::Graph huge("huge");
  ir::Builder hb(huge);
  auto h = huge.add_input("h", DType::F32, {Dim::fixed(INT64_MAX / 2), Dim::fixed(INT64_MAX / 2)});
  huge.add_output(hb.add("Neg", {h}, {}, {"y"})[0]);
  EXPECT_GT(runtime::contract_tensor_budget(huge, 1, 1), int64_t(1) << 60);
}
