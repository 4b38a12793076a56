// The pt2 lowering: symbolic dims as torch writes them, shape arithmetic evaluated into SymInt nodes,
// the contract's relations as derived dims and runtime asserts, the static cache as an input mutation.
#include <gtest/gtest.h>

#include "backends/pt2/pt2_program.h"
#include "backends/pt2/sym_expr.h"
#include "core/error.h"
#include "ir/builder.h"

using namespace hfx;
using namespace hfx::ir;
using hfx::pt2_backend::SymExpr;
using nlohmann::json;

namespace {

Dim sym(const char* s) { return Dim::sym(s); }
Dim n(int64_t v) { return Dim::fixed(v); }

const json& node_with(const json& program, const std::string& target) {
  for (const auto& node : program["graph_module"]["graph"]["nodes"])
    if (node["target"] == target) return node;
  throw std::runtime_error("no node " + target);
}

}  // namespace

TEST(SymExpr, ArithmeticAndSympyForms) {
  const SymExpr s0 = SymExpr::symbol(0), s1 = SymExpr::symbol(1);
  EXPECT_EQ((s0 + s1).sympy(),
            "Add(Symbol('s1', positive=True, integer=True), Symbol('s0', positive=True, integer=True))");
  EXPECT_EQ((s0 * SymExpr(4)).sympy(), "Mul(Integer(4), Symbol('s0', positive=True, integer=True))");
  EXPECT_EQ(((s0 + s1) - s1), s0);
  EXPECT_EQ(((s0 + SymExpr(1)) * s1).str(), "s1 + s0*s1");
  EXPECT_EQ((s0 * s1 * SymExpr(64)).divide_exact(s0 * SymExpr(16))->str(), "4*s1");
  EXPECT_FALSE((s0 + s1).divide_exact(s0).has_value());  // not a monomial multiple
  EXPECT_EQ((s0 * s1 + SymExpr(3)).eval({2, 5}), 13);
  EXPECT_TRUE(SymExpr(7).is_const());
  EXPECT_EQ(s1.as_symbol(), 1);
}

TEST(Pt2Program, DerivedDimIsTheSumAndItsBoundIsARuntimeAssert) {
  Graph g;
  Builder b{g};
  g.symbols().declare("batch_size", {1, 8});
  g.symbols().declare("sequence_length", {1, 16});
  g.symbols().declare("past_sequence_length", {0, std::nullopt});
  g.symbols().declare("total_sequence_length", {1, 32});
  g.symbols().relate_sum("total_sequence_length", "past_sequence_length", "sequence_length");
  auto x = g.add_input("x", DType::F32, {sym("batch_size"), sym("sequence_length"), n(4)});
  auto mask = g.add_input("attention_mask", DType::I64, {sym("batch_size"), sym("total_sequence_length")});
  auto past = g.add_input("past_key_values.0.key", DType::F32, {sym("batch_size"), sym("past_sequence_length"), n(4)});
  auto cat = b.concat({past, x}, 1);
  g.rename(cat, "present.0.key");
  g.add_output(cat);
  // Positions of the whole sequence from the mask's shape: Range(0, Shape(mask)[1]).
  auto total = b.squeeze(b.shape_of(mask, 1, 2), {0});
  auto r = b.add1("Range", {b.i64(0), total, b.i64(1)});
  g.rename(r, "positions");
  g.add_output(r);

  const auto p = pt2_backend::lower_to_pt2(g, {});
  const json& m = p.model;
  // Roots: batch, sequence, past in input order; total is their sum, checked by torch on every call.
  EXPECT_EQ(m["range_constraints"]["s0"], (json{{"min_val", 1}, {"max_val", 8}}));
  EXPECT_EQ(m["range_constraints"]["s1"], (json{{"min_val", 1}, {"max_val", 16}}));
  EXPECT_EQ(m["range_constraints"]["s2"]["max_val"], nullptr);
  const json& mask_meta = m["graph_module"]["graph"]["tensor_values"]["attention_mask"];
  EXPECT_EQ(mask_meta["sizes"][1]["as_expr"]["expr_str"], (SymExpr::symbol(1) + SymExpr::symbol(2)).sympy());
  // total <= 32 is not implied by the roots' ranges: a deferred runtime assert.
  const json& assert_node = node_with(m, "torch.ops.aten._assert_scalar.default");
  EXPECT_NE(assert_node["inputs"][1]["arg"]["as_string"].get<std::string>().find("<= 32"), std::string::npos);
  // The Range's end is a SymInt computed from sym_size nodes, not a tensor.
  const json& arange = node_with(m, "torch.ops.aten.arange.start_step");
  EXPECT_TRUE(arange["inputs"][1]["arg"].contains("as_sym_int"));
  const json& cat_node = node_with(m, "torch.ops.aten.cat.default");
  EXPECT_EQ(cat_node["inputs"][1]["arg"]["as_int"], 1);
  // Outputs are a dict by port name; inputs positional under identifier names.
  const auto& sig = m["graph_module"]["module_call_graph"][0]["signature"];
  EXPECT_EQ(sig["forward_arg_names"], (json{"x", "attention_mask", "past_key_values_0_key"}));
  EXPECT_NE(sig["out_spec"].get<std::string>().find("present.0.key"), std::string::npos);
  EXPECT_EQ(m["schema_version"], (json{{"major", 8}, {"minor", 20}}));
}

TEST(Pt2Program, SharedBufferIsAUserInputMutationBeforeTheOutputs) {
  Graph g;
  Builder b{g};
  auto buf = g.add_input("past_key_values.0.key", DType::F32, {n(1), n(2), n(8), n(4)});
  auto upd = g.add_input("new", DType::F32, {n(1), n(2), n(1), n(4)});
  auto idx = g.add_input("index", DType::I64, {n(1), n(2), n(1), n(4)});
  auto written = b.add1("ScatterElements", {buf, idx, upd}, {{"axis", int64_t(2)}});
  g.rename(written, "present.0.key");
  auto logits = b.plus(upd, upd);
  g.rename(logits, "logits");
  g.add_output(logits);
  g.add_output(written);
  const auto p = pt2_backend::lower_to_pt2(g, {{{"past_key_values.0.key", "present.0.key"}}});
  const auto& specs = p.model["graph_module"]["signature"]["output_specs"];
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[0]["user_input_mutation"]["user_input_name"], "past_key_values_0_key");
  EXPECT_TRUE(specs[1].contains("user_output"));
  EXPECT_NE(p.model["graph_module"]["module_call_graph"][0]["signature"]["out_spec"].get<std::string>().find("logits"),
            std::string::npos);
}

TEST(Pt2Program, AnOpWithoutLoweringIsRefusedNamingTheNode) {
  Graph g;
  Builder b{g};
  auto x = g.add_input("x", DType::F32, {n(2), n(4)});
  auto y = b.add1("RMSNorm", {x, b.f32(1.0f)}, {{"epsilon", 1e-6}}, "norm");
  g.add_output(y);
  try {
    pt2_backend::lower_to_pt2(g, {});
    FAIL() << "expected Unsupported";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("RMSNorm"), std::string::npos) << e.what();
  }
}
