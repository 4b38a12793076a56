// The OpenVINO backend: the lowering table covers every IR primitive; one graph using every lowering
// runs on OpenVINO's CPU plugin with the numbers of the reference executor; a composite without a
// lowering fails before a file is written. Built only with the OpenVINO SDK.
#ifdef HFX_HAVE_OPENVINO

#include <gtest/gtest.h>
#include <unistd.h>

#include <openvino/openvino.hpp>

#include <cmath>
#include <filesystem>
#include <set>

#include "backends/openvino/ov_lowering.h"
#include "backends/openvino/ov_writer.h"
#include "core/error.h"
#include "ir/builder.h"
#include "ir/ops.h"
#include "runtime/executor.h"

namespace fs = std::filesystem;
using namespace hfx;
using namespace hfx::openvino_backend;

namespace {

struct TempDir {
  fs::path p = fs::temp_directory_path() / ("hfx-ov-test-" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(p); }
  ~TempDir() { fs::remove_all(p); }
};

Tensor f32_tensor(std::vector<int64_t> shape, float scale) {
  Tensor t(DType::F32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.as<float>()[i] = scale * std::sin(float(i) * 0.7f + 0.3f);
  return t;
}

double at(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::F32: return t.as<float>()[i];
    case DType::I64: return double(t.as<int64_t>()[i]);
    case DType::Bool: return t.as<uint8_t>()[i];
    default: ADD_FAILURE() << "dtype"; return 0;
  }
}

}  // namespace

// MatMulNBits and GatherBlockQuantized are ONNX Runtime's ops: the openvino precision target never emits
// them (DequantizeLinear is lowered to OpenVINO's compressed-weight pattern; quantized embedding tables
// are refused). Any other primitive must be covered.
const std::set<std::string> kNotYetLowered = {"MatMulNBits", "GatherBlockQuantized"};

TEST(OpenVinoLowering, CoversEveryPrimitive) {
  for (const auto& op : ir::all_op_names()) {
    const auto& s = ir::op_schema(op);
    if (!s.composite && !kNotYetLowered.count(op)) {
      EXPECT_NE(find_ov_lowering(op), nullptr) << op;
    }
  }
  for (const auto& [op, lowering] : ov_lowering_table()) EXPECT_TRUE(ir::is_known_op(op)) << op;
}

TEST(OpenVinoWriter, EveryLoweringMatchesTheReferenceExecutor) {
  ir::Graph g("ops");
  ir::Builder b(g);
  auto x = g.add_input("x", DType::F32, {Dim::sym("batch_size"), Dim::fixed(3), Dim::fixed(4)});
  auto ids = g.add_input("ids", DType::I64, {Dim::sym("batch_size"), Dim::fixed(3)});
  auto w = b.weight("w", ir::WeightRef::constant(f32_tensor({4, 5}, 0.5f)));
  auto table = b.weight("table", ir::WeightRef::constant(f32_tensor({8, 4}, 1.0f)));
  auto one = b.f32(1.0f);
  auto sq1 = b.plus(b.times(x, x), one);  // > 0
  std::vector<ir::ValueId> outs;
  auto out = [&](ir::ValueId v) { outs.push_back(b.add1("Identity", {v})); };
  out(b.minus(b.divide(b.plus(x, one), b.f32(2.0f)), x));
  out(b.add1("Pow", {x, b.f32(2.0f)}));
  out(b.add1("Reciprocal", {sq1}));
  out(b.add1("Exp", {b.add1("Neg", {x})}));
  for (const char* op : {"Log", "Sqrt"}) out(b.add1(op, {sq1}));
  for (const char* op : {"Sin", "Cos", "Tanh", "Erf", "Sigmoid"}) out(b.add1(op, {x}));
  out(b.add1("Softmax", {x}, {{"axis", int64_t(-1)}}));
  out(b.add1("ReduceMean", {x, b.i64s({-1})}));
  out(b.add1("ReduceMax", {x}, {{"keepdims", int64_t(0)}}));  // no axes: every axis
  out(b.add1("ReduceSum", {x, b.i64s({1})}, {{"keepdims", int64_t(0)}}));
  auto mm = b.matmul(x, w);  // [b, 3, 5]
  out(b.reshape(b.transpose(mm, {0, 2, 1}), {0, -1}));
  out(b.squeeze(b.unsqueeze(mm, {0}), {0}));
  out(b.add1("Slice", {b.concat({x, x}, 1), b.i64s({1}), b.i64s({5}), b.i64s({1})}));
  out(b.add1("Slice", {x, b.i64s({0, 3}), b.i64s({2, 0}), b.i64s({1, 2}), b.i64s({1, -1})}));
  out(b.add1("Expand", {b.reshape(x, {0, 3, 4, 1}), b.i64s({1, 1, 1, 2})}));
  out(b.add1("Gather", {table, ids}));
  out(b.add1("Gather", {x, b.i64s({2, 0})}, {{"axis", int64_t(1)}}));
  auto neg = b.add1("Less", {x, b.f32(0.0f)});
  out(b.add1("Where", {neg, b.add1("Neg", {x}), x}));
  auto small = b.add1("LessOrEqual", {x, b.f32(0.2f)});
  auto big = b.add1("GreaterOrEqual", {x, b.f32(-0.2f)});
  auto mid = b.add1("And", {small, big});
  auto edge = b.add1("Or", {b.add1("Greater", {x, b.f32(0.9f)}), b.add1("Not", {mid})});
  out(b.cast(b.add1("Equal", {mid, edge}), DType::F32));
  out(b.cast(b.add1("Range", {b.i64(1), b.i64(9), b.i64(3)}), DType::F32));
  out(b.cast(b.shape_of(x, 1, 3), DType::F32));
  out(b.cast(b.add1("Div", {b.i64s({7, -7}), b.i64(2)}), DType::F32));  // integer Div truncates
  out(b.add1("CumSum", {ids, b.i64(1)}));
  auto slots = b.add1("Expand", {b.reshape(b.i64s({2, 0}), {1, 2, 1}), b.shape_of(b.slice(x, 0, 2, 1), 0, 3)});
  out(b.add1("ScatterElements", {b.add1("Mul", {x, b.f32(0.0f)}), slots, b.slice(x, 0, 2, 1)}, {{"axis", int64_t(1)}}));
  // Mod: fmod=0 takes the divisor's sign (7 % -3 = -2), fmod=1 the dividend's.
  out(b.cast(b.add1("Mod", {b.i64s({7, -7, 7, -7, 6}), b.i64s({3, 3, -3, -3, 3})}), DType::F32));
  out(b.add1("Mod", {b.minus(x, b.f32(0.5f)), b.f32(0.3f)}, {{"fmod", int64_t(1)}}));
  auto picks = b.add1("Expand", {b.reshape(b.i64s({-1, 0}), {1, 2, 1}), b.shape_of(b.slice(x, 0, 2, 1), 0, 3)});
  out(b.add1("GatherElements", {x, b.add1("Mod", {b.plus(picks, b.i64(1)), b.i64(3)})}, {{"axis", int64_t(1)}}));
  out(b.add1("GatherElements", {x, picks}, {{"axis", int64_t(1)}}));  // a negative index counts from the end
  for (size_t i = 0; i < outs.size(); ++i) {
    g.rename(outs[i], "out" + std::to_string(i));
    g.add_output(outs[i]);
  }
  g.validate();

  TempDir dir;
  auto written = write_openvino(g, dir.p, {});
  ASSERT_TRUE(fs::exists(written.xml_path));
  ASSERT_TRUE(fs::exists(written.bin_path));

  Tensor xv = f32_tensor({2, 3, 4}, 1.0f);
  Tensor idv(DType::I64, {2, 3});
  for (int64_t i = 0; i < 6; ++i) idv.as<int64_t>()[i] = (i * 5 + 1) % 8;
  runtime::Executor exec(g);
  auto expected = exec.run({{"x", xv}, {"ids", idv}});

  ov::Core core;
  auto compiled = core.compile_model(written.xml_path.string(), "CPU", ov::hint::inference_precision(ov::element::f32));
  auto req = compiled.create_infer_request();
  req.set_tensor("x", ov::Tensor(ov::element::f32, ov::Shape{2, 3, 4}, xv.data()));
  req.set_tensor("ids", ov::Tensor(ov::element::i64, ov::Shape{2, 3}, idv.data()));
  req.infer();
  for (size_t i = 0; i < outs.size(); ++i) {
    const std::string name = "out" + std::to_string(i);
    const Tensor& want = expected.at(name);
    ov::Tensor got = req.get_tensor(name);
    const ov::Shape shape = got.get_shape();
    ASSERT_EQ(std::vector<int64_t>(shape.begin(), shape.end()), want.shape()) << name;
    for (int64_t k = 0; k < want.numel(); ++k) {
      double v = 0;
      if (got.get_element_type() == ov::element::f32) v = got.data<float>()[k];
      else if (got.get_element_type() == ov::element::i64) v = double(got.data<int64_t>()[k]);
      else FAIL() << name << ": " << got.get_element_type();
      ASSERT_NEAR(v, at(want, k), 1e-5) << name << " element " << k;
    }
  }
}

TEST(OpenVinoWriter, CompositeWithoutLoweringFailsBeforeWriting) {
  ir::Graph g("composite");
  ir::Builder b(g);
  auto x = g.add_input("x", DType::F32, {Dim::fixed(2), Dim::fixed(4)});
  auto w = b.weight("w", ir::WeightRef::constant(f32_tensor({4}, 1.0f)));
  g.add_output(b.add1("RMSNorm", {x, w}, {{"epsilon", 1e-6}}, "y"));
  TempDir dir;
  try {
    write_openvino(g, dir.p / "out", {});
    FAIL() << "expected Unsupported";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("RMSNorm"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir.p / "out" / "openvino_model.xml"));
  EXPECT_FALSE(fs::exists(dir.p / "out" / "openvino_model.bin"));
}

#endif  // HFX_HAVE_OPENVINO
