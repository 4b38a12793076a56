// Shape and dtype inference over symbolic dims, and the symbol table's contract checks.
#include <gtest/gtest.h>

#include "core/error.h"
#include "ir/builder.h"
#include "ir/ops.h"
#include "ir/rewrite.h"
#include "passes/pass.h"

using namespace hfx;
using namespace hfx::ir;

namespace {

Shape S(std::initializer_list<Dim> dims) { return Shape(dims); }
Dim sym(const char* s) { return Dim::sym(s); }
Dim n(int64_t v) { return Dim::fixed(v); }

struct Fixture : ::testing::Test {
  Graph g;
  Builder b{g};
};

}  // namespace

TEST_F(Fixture, ShapeBroadcastKeepsSymbols) {
  auto x = g.add_input("x", DType::F32, S({sym("batch_size"), sym("sequence_length"), n(8)}));
  auto y = g.add_input("y", DType::F32, S({n(1), n(8)}));
  EXPECT_EQ(g.value(b.plus(x, y)).shape, S({sym("batch_size"), sym("sequence_length"), n(8)}));
  auto z = g.add_input("z", DType::F32, S({n(3)}));
  EXPECT_THROW(b.plus(x, z), Error);
}

TEST_F(Fixture, ShapeConcatUsesDeclaredSumSymbol) {
  g.symbols().relate_sum("total_sequence_length", "past_sequence_length", "sequence_length");
  auto past = g.add_input("past", DType::F32, S({sym("batch_size"), n(2), sym("past_sequence_length"), n(4)}));
  auto cur = g.add_input("cur", DType::F32, S({sym("batch_size"), n(2), sym("sequence_length"), n(4)}));
  auto cat = b.concat({past, cur}, 2);
  EXPECT_EQ(g.value(cat).shape, S({sym("batch_size"), n(2), sym("total_sequence_length"), n(4)}));
  // Without a declared relation the sum is spelled out.
  auto other = g.add_input("other", DType::F32, S({sym("batch_size"), n(2), sym("k"), n(4)}));
  EXPECT_EQ(g.value(b.concat({past, other}, 2)).shape[2].symbol, "past_sequence_length + k");
}

TEST_F(Fixture, ShapeReshapeZeroCopiesAndMinusOneResolves) {
  auto x = g.add_input("x", DType::F32, S({sym("batch_size"), sym("sequence_length"), n(64)}));
  auto r = b.reshape(x, {0, 0, 4, 16});
  EXPECT_EQ(g.value(r).shape, S({sym("batch_size"), sym("sequence_length"), n(4), n(16)}));
  auto t = b.transpose(r, {0, 2, 1, 3});
  EXPECT_EQ(g.value(t).shape, S({sym("batch_size"), n(4), sym("sequence_length"), n(16)}));
  // -1 resolves when the symbols cancel: [b, 4, s, 16] -> [b, 4, -1, 16] gives s.
  auto back = b.reshape(t, {0, 4, -1, 16});
  EXPECT_EQ(g.value(back).shape[2], sym("sequence_length"));
}

TEST_F(Fixture, ShapeMatMulGatherReduceUnsqueeze) {
  auto x = g.add_input("x", DType::F32, S({sym("batch_size"), n(5), n(8)}));
  auto w = b.constant(Tensor(DType::F32, {8, 3}), "w");
  EXPECT_EQ(g.value(b.matmul(x, w)).shape, S({sym("batch_size"), n(5), n(3)}));
  auto table = b.constant(Tensor(DType::F32, {10, 6}), "table");
  auto ids = g.add_input("ids", DType::I64, S({sym("batch_size"), sym("sequence_length")}));
  EXPECT_EQ(g.value(b.add1("Gather", {table, ids}, {{"axis", int64_t(0)}})).shape,
            S({sym("batch_size"), sym("sequence_length"), n(6)}));
  auto mean = b.add1("ReduceMean", {x, b.i64s({-1})}, {{"keepdims", int64_t(1)}});
  EXPECT_EQ(g.value(mean).shape, S({sym("batch_size"), n(5), n(1)}));
  EXPECT_EQ(g.value(b.unsqueeze(ids, {1, 2})).shape, S({sym("batch_size"), n(1), n(1), sym("sequence_length")}));
  auto cmp = b.add1("Less", {ids, b.i64(3)});
  EXPECT_EQ(g.value(cmp).dtype, DType::Bool);
}

TEST_F(Fixture, ShapeCompositeOps) {
  auto h = g.add_input("h", DType::F32, S({sym("batch_size"), sym("sequence_length"), n(16)}));
  auto w = b.constant(Tensor(DType::F32, {12, 16}), "w");
  EXPECT_EQ(g.value(b.add1("Linear", {h, w})).shape, S({sym("batch_size"), sym("sequence_length"), n(12)}));
  auto bad = b.constant(Tensor(DType::F32, {12, 15}), "bad");
  EXPECT_THROW(b.add1("Linear", {h, bad}), Error);
  auto mask = g.add_input("mask", DType::I64, S({sym("batch_size"), sym("total_sequence_length")}));
  auto ids = g.add_input("ids", DType::I64, S({sym("batch_size"), sym("sequence_length")}));
  auto bias = b.add1("AttentionBias", {mask, ids});
  EXPECT_EQ(g.value(bias).shape, S({sym("batch_size"), n(1), sym("sequence_length"), sym("total_sequence_length")}));
}

TEST(SymbolTable, CheckNamesDimValueAndBounds) {
  SymbolTable t;
  t.declare("batch_size", {1, 8});
  EXPECT_NO_THROW(t.check("batch_size", 1, "input_ids"));
  EXPECT_NO_THROW(t.check("batch_size", 8, "input_ids"));
  try {
    t.check("batch_size", 9, "input_ids");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_NE(e.describe().find("batch_size"), std::string::npos);
    EXPECT_NE(e.describe().find("9"), std::string::npos);
    EXPECT_NE(e.describe().find("[1, 8]"), std::string::npos);
  }
}

TEST(OpSchemas, EveryCompositeHasADecomposition) {
  for (const auto& name : all_op_names()) {
    const auto& s = op_schema(name);
    if (s.composite) {
      EXPECT_TRUE(bool(s.decompose)) << name;
    }
  }
  EXPECT_THROW(op_schema("NoSuchOp"), Error);
}

TEST_F(Fixture, PassDecomposeLeavesOnlyPrimitivesAndKeepsOutputNames) {
  auto h = g.add_input("h", DType::F32, S({sym("batch_size"), n(16)}));
  auto w = b.constant(Tensor(DType::F32, {16}), "w");
  auto y = b.add1("RMSNorm", {h, w}, {{"epsilon", 1e-6}}, "normed");
  g.add_output(y);
  Graph out = passes::decompose_composites(g);
  for (const auto& node : out.nodes()) EXPECT_FALSE(op_schema(node.op).composite) << node.op;
  ASSERT_EQ(out.outputs().size(), 1u);
  EXPECT_EQ(out.value(out.outputs()[0]).name, "normed");
  EXPECT_EQ(out.value(out.outputs()[0]).shape, S({sym("batch_size"), n(16)}));
}
