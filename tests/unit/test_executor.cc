// The reference executor: per-kernel values computed by hand, and input validation.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/error.h"
#include "ir/builder.h"
#include "ir/graph.h"
#include "runtime/executor.h"
#include "runtime/tested_runtimes.h"

using namespace hfx;
using hfx::ir::ValueId;
using hfx::runtime::ExecOptions;
using hfx::runtime::Executor;

namespace {

Tensor f32(std::vector<int64_t> shape, std::vector<float> v) { return Tensor::from_vector<float>(DType::F32, std::move(shape), v); }
Tensor i64(std::vector<int64_t> shape, std::vector<int64_t> v) {
  return Tensor::from_vector<int64_t>(DType::I64, std::move(shape), v);
}
Tensor boolean(std::vector<int64_t> shape, std::vector<uint8_t> v) {
  return Tensor::from_vector<uint8_t>(DType::Bool, std::move(shape), v);
}

template <typename T>
std::vector<T> vals(const Tensor& t) {
  auto s = t.values<T>();
  return {s.begin(), s.end()};
}

// A graph with one node of `op` over the given inputs (named in0, in1, ...; nullopt = absent or a
// constant given in `consts`), returning output "y" (and y1, y2 for more outputs).
struct OneOp {
  ir::Graph g;
  ir::Builder b{g};
  std::map<std::string, Tensor> feeds;

  ValueId input(const std::string& name, const Tensor& t) {
    feeds[name] = t;
    return g.add_input(name, t.dtype(), fixed_shape(t.shape()));
  }
  ValueId constant(const Tensor& t) { return b.constant(t); }
  std::vector<ValueId> op(const std::string& op, std::vector<ValueId> ins, ir::Attrs attrs = {}, size_t outs = 1) {
    std::vector<std::string> names;
    for (size_t i = 0; i < outs; ++i) names.push_back(i == 0 ? "y" : "y" + std::to_string(i));
    auto ids = b.add(op, std::move(ins), std::move(attrs), names);
    for (auto id : ids) g.add_output(id);
    return ids;
  }
  std::map<std::string, Tensor> run(ExecOptions o = {}) { return Executor(g, o).run(feeds); }
  Tensor y(ExecOptions o = {}) { return run(o).at("y"); }
};

void expect_floats(const Tensor& t, std::vector<int64_t> shape, std::vector<float> want, float tol = 1e-6f) {
  ASSERT_EQ(t.dtype(), DType::F32);
  ASSERT_EQ(t.shape(), shape);
  auto got = vals<float>(t);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "at " << i;
}

// Runs `body`, expects an hfx::Error of `kind` whose message contains every one of `parts`.
template <typename Body>
void expect_error(ErrorKind kind, std::vector<std::string> parts, Body body) {
  try {
    body();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.describe();
    for (const auto& p : parts) EXPECT_NE(e.describe().find(p), std::string::npos) << "`" << p << "` not in: " << e.describe();
  }
}

}  // namespace

TEST(Executor, AddBroadcastsBothWays) {
  OneOp t;
  auto a = t.input("a", f32({2, 1}, {1, 2}));
  auto b = t.input("b", f32({3}, {10, 20, 30}));
  t.op("Add", {a, b});
  expect_floats(t.y(), {2, 3}, {11, 21, 31, 12, 22, 32});
}

TEST(Executor, ArithmeticOnIntsAndScalars) {
  OneOp t;
  auto a = t.input("a", i64({2, 2}, {7, -7, 9, 4}));
  t.op("Div", {a, t.constant(Tensor::scalar_i64(2))});
  EXPECT_EQ(vals<int64_t>(t.y()), (std::vector<int64_t>{3, -3, 4, 2}));  // truncation, like C

  OneOp p;
  auto x = p.input("x", f32({3}, {2, 3, -1}));
  p.op("Pow", {x, p.constant(f32({3}, {2, 0.5f, 3}))});
  expect_floats(p.y(), {3}, {4, std::sqrt(3.0f), -1});

  OneOp s;
  auto u = s.input("u", f32({2, 2}, {1, 2, 3, 4}));
  s.op("Sub", {s.constant(Tensor::scalar_f32(10)), u});
  expect_floats(s.y(), {2, 2}, {9, 8, 7, 6});
}

TEST(Executor, ComparisonsAndLogic) {
  OneOp t;
  auto a = t.input("a", i64({3}, {1, 2, 3}));
  auto b = t.input("b", i64({2, 1}, {2, 5}));
  t.op("LessOrEqual", {a, b});
  EXPECT_EQ(vals<uint8_t>(t.y()), (std::vector<uint8_t>{1, 1, 0, 1, 1, 1}));

  OneOp l;
  auto p = l.input("p", boolean({4}, {0, 1, 0, 1}));
  auto q = l.input("q", boolean({4}, {0, 0, 1, 1}));
  auto n = l.b.add1("Not", {l.b.add1("And", {p, q})});
  l.op("Or", {n, p});
  EXPECT_EQ(vals<uint8_t>(l.y()), (std::vector<uint8_t>{1, 1, 1, 1}));
}

TEST(Executor, UnaryMath) {
  const std::vector<std::pair<std::string, float (*)(float)>> ops = {
      {"Exp", [](float v) { return std::exp(v); }},    {"Tanh", [](float v) { return std::tanh(v); }},
      {"Erf", [](float v) { return std::erf(v); }},    {"Sin", [](float v) { return std::sin(v); }},
      {"Cos", [](float v) { return std::cos(v); }},    {"Neg", [](float v) { return -v; }},
      {"Sigmoid", [](float v) { return 1.0f / (1.0f + std::exp(-v)); }},
      {"Identity", [](float v) { return v; }},
  };
  const std::vector<float> x = {-2.5f, -0.5f, 0.0f, 0.75f, 3.0f};
  for (const auto& [op, f] : ops) {
    OneOp t;
    t.op(op, {t.input("x", f32({5}, x))});
    std::vector<float> want;
    for (float v : x) want.push_back(f(v));
    SCOPED_TRACE(op);
    expect_floats(t.y(), {5}, want);
  }
  OneOp s;
  s.op("Reciprocal", {s.b.add1("Sqrt", {s.b.add1("Log", {s.input("x", f32({2}, {std::exp(4.0f), std::exp(0.25f)}))})})});
  expect_floats(s.y(), {2}, {0.5f, 2.0f});
}

TEST(Executor, MatMulBatchBroadcastMatchesNaiveLoop) {
  // a [2, 1, 3, 4] x b [3, 4, 5] -> [2, 3, 3, 5]
  std::vector<float> av(2 * 3 * 4), bv(3 * 4 * 5);
  for (size_t i = 0; i < av.size(); ++i) av[i] = float(int(i % 7) - 3) * 0.5f;
  for (size_t i = 0; i < bv.size(); ++i) bv[i] = float(int(i % 5) - 2) * 0.25f;
  OneOp t;
  t.op("MatMul", {t.input("a", f32({2, 1, 3, 4}, av)), t.input("b", f32({3, 4, 5}, bv))});
  std::vector<float> want;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int m = 0; m < 3; ++m)
        for (int n = 0; n < 5; ++n) {
          float acc = 0;
          for (int k = 0; k < 4; ++k) acc += av[size_t((i * 3 + m) * 4 + k)] * bv[size_t((j * 4 + k) * 5 + n)];
          want.push_back(acc);
        }
  expect_floats(t.y(), {2, 3, 3, 5}, want, 1e-5f);
}

TEST(Executor, MatMulAgainst2DWeight) {
  // [b, s, k] x [k, n]: the single-sgemm path.
  std::vector<float> av(2 * 3 * 4), bv(4 * 2);
  for (size_t i = 0; i < av.size(); ++i) av[i] = float(i);
  for (size_t i = 0; i < bv.size(); ++i) bv[i] = float(i % 3) - 1;
  OneOp t;
  t.op("MatMul", {t.input("a", f32({2, 3, 4}, av)), t.constant(f32({4, 2}, bv))});
  std::vector<float> want;
  for (int r = 0; r < 6; ++r)
    for (int n = 0; n < 2; ++n) {
      float acc = 0;
      for (int k = 0; k < 4; ++k) acc += av[size_t(r * 4 + k)] * bv[size_t(k * 2 + n)];
      want.push_back(acc);
    }
  expect_floats(t.y(), {2, 3, 2}, want, 1e-5f);
}

TEST(Executor, SoftmaxIsStableAndPerAxis) {
  OneOp t;
  t.op("Softmax", {t.input("x", f32({2, 3}, {1, 2, 3, 1000, 1000, 1000}))}, {{"axis", int64_t(-1)}});
  const float e1 = std::exp(-2.0f), e2 = std::exp(-1.0f), s = e1 + e2 + 1;
  expect_floats(t.y(), {2, 3}, {e1 / s, e2 / s, 1 / s, 1 / 3.f, 1 / 3.f, 1 / 3.f});

  OneOp a;
  a.op("Softmax", {a.input("x", f32({2, 2}, {0, 5, std::log(3.0f), 5}))}, {{"axis", int64_t(0)}});
  expect_floats(a.y(), {2, 2}, {0.25f, 0.5f, 0.75f, 0.5f});
}

TEST(Executor, ReshapeCopiesZeroAndInfersMinusOne) {
  OneOp t;
  std::vector<float> v(24);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i);
  t.op("Reshape", {t.input("x", f32({2, 3, 4}, v)), t.b.i64s({0, -1, 2})});
  Tensor y = t.y();
  EXPECT_EQ(y.shape(), (std::vector<int64_t>{2, 6, 2}));
  EXPECT_EQ(vals<float>(y), v);
}

TEST(Executor, SliceNegativeClampedAndStepped) {
  std::vector<float> v = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  {
    OneOp t;  // last two columns of [3, 4], rows from -100 (clamped) to INT64_MAX
    t.op("Slice", {t.input("x", f32({3, 4}, v)), t.b.i64s({-100, -2}), t.b.i64s({INT64_MAX, INT64_MAX}), t.b.i64s({0, 1})});
    expect_floats(t.y(), {3, 2}, {2, 3, 6, 7, 10, 11});
  }
  {
    OneOp t;  // reverse the columns: start -1, end INT64_MIN, step -1; rows 0 and 2 (step 2)
    t.op("Slice", {t.input("x", f32({3, 4}, v)), t.b.i64s({-1, 0}), t.b.i64s({INT64_MIN, 10}), t.b.i64s({-1, 0}),
                   t.b.i64s({-1, 2})});
    expect_floats(t.y(), {2, 4}, {3, 2, 1, 0, 11, 10, 9, 8});
  }
  {
    OneOp t;  // empty: start past end
    t.op("Slice", {t.input("x", f32({3, 4}, v)), t.b.i64s({3}), t.b.i64s({1}), t.b.i64s({1})});
    EXPECT_EQ(t.y().shape(), (std::vector<int64_t>{3, 0}));
  }
}

TEST(Executor, GatherNegativeIndicesOnAnyAxis) {
  OneOp t;
  t.op("Gather", {t.input("x", f32({2, 3}, {0, 1, 2, 3, 4, 5})), t.input("i", i64({2, 2}, {-1, 0, 1, -3}))},
       {{"axis", int64_t(1)}});
  expect_floats(t.y(), {2, 2, 2}, {2, 0, 1, 0, 5, 3, 4, 3});

  OneOp bad;
  bad.op("Gather", {bad.input("x", f32({2, 3}, {0, 1, 2, 3, 4, 5})), bad.input("i", i64({1}, {2}))});
  expect_error(ErrorKind::BadInput, {"index 2 is out of range", "Gather"}, [&] { bad.y(); });
}

TEST(Executor, WhereBroadcastsThreeWays) {
  OneOp t;
  auto c = t.input("c", boolean({2, 1}, {1, 0}));
  auto x = t.input("x", f32({3}, {1, 2, 3}));
  auto y = t.constant(Tensor::scalar_f32(-1));
  t.op("Where", {c, x, y});
  expect_floats(t.y(), {2, 3}, {1, 2, 3, -1, -1, -1});
}

TEST(Executor, RangeIntAndFloat) {
  OneOp t;
  t.op("Range", {t.input("s", Tensor::scalar_i64(5)), t.input("l", Tensor::scalar_i64(-2)), t.b.i64(-3)});
  EXPECT_EQ(vals<int64_t>(t.y()), (std::vector<int64_t>{5, 2, -1}));

  OneOp f;
  f.op("Range", {f.constant(Tensor::scalar_f32(0.5f)), f.input("l", Tensor::scalar_f32(2.0f)), f.b.f32(0.5f)});
  expect_floats(f.y(), {3}, {0.5f, 1.0f, 1.5f});

  OneOp e;
  e.op("Range", {e.input("s", Tensor::scalar_i64(3)), e.b.i64(3), e.b.i64(1)});
  EXPECT_EQ(e.y().shape(), (std::vector<int64_t>{0}));
}

TEST(Executor, ShapeStartEndClamp) {
  auto run = [](int64_t start, std::optional<int64_t> end) {
    OneOp t;
    ir::Attrs attrs = {{"start", start}};
    if (end) attrs["end"] = *end;
    t.op("Shape", {t.input("x", Tensor(DType::F32, {2, 3, 4, 5}))}, attrs);
    return vals<int64_t>(t.y());
  };
  EXPECT_EQ(run(0, std::nullopt), (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(run(-2, std::nullopt), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(run(1, -1), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(run(-100, 100), (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(run(3, 1), (std::vector<int64_t>{}));
}

TEST(Executor, ReduceMeanKeepdimsAndAxes) {
  std::vector<float> v(12);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i);
  {
    OneOp t;  // middle axis of [2, 3, 2], kept
    t.op("ReduceMean", {t.input("x", f32({2, 3, 2}, v)), t.b.i64s({1})}, {{"keepdims", int64_t(1)}});
    expect_floats(t.y(), {2, 1, 2}, {2, 3, 8, 9});
  }
  {
    OneOp t;  // last axis, dropped
    t.op("ReduceMean", {t.input("x", f32({2, 3, 2}, v)), t.b.i64s({-1})}, {{"keepdims", int64_t(0)}});
    expect_floats(t.y(), {2, 3}, {0.5f, 2.5f, 4.5f, 6.5f, 8.5f, 10.5f});
  }
  {
    OneOp t;  // no axes: everything
    t.op("ReduceSum", {t.input("x", f32({2, 3, 2}, v))}, {{"keepdims", int64_t(0)}});
    expect_floats(t.y(), {}, {66});
  }
  {
    OneOp t;
    t.op("ReduceMax", {t.input("x", i64({2, 3}, {1, 9, 3, -4, -2, -8})), t.b.i64s({0, 1})}, {{"keepdims", int64_t(1)}});
    EXPECT_EQ(vals<int64_t>(t.y()), (std::vector<int64_t>{9}));
  }
}

TEST(Executor, CastRoundsThroughHalfTypes) {
  const std::vector<float> x = {1.0001f, 65520.0f, 1.0f / 3.0f, -2.5f, 1e-8f};
  {
    OneOp t;
    t.op("Cast", {t.input("x", f32({5}, x))}, {{"to", std::string("f16")}});
    Tensor y = t.y();
    ASSERT_EQ(y.dtype(), DType::F32);  // stored back as f32
    auto v = vals<float>(y);
    EXPECT_EQ(v[0], 1.0f);
    EXPECT_TRUE(std::isinf(v[1]));
    EXPECT_EQ(v[2], 0.333251953125f);
    EXPECT_EQ(v[3], -2.5f);
    EXPECT_EQ(v[4], 0.0f);
  }
  {
    OneOp t;
    t.op("Cast", {t.input("x", f32({5}, x))}, {{"to", std::string("bf16")}});
    auto v = vals<float>(t.y());
    EXPECT_EQ(v[0], 1.0f);
    EXPECT_EQ(v[2], 0.333984375f);
  }
  {
    OneOp t;  // float -> int truncates toward zero; -> bool is != 0
    auto i = t.b.cast(t.input("x", f32({3}, {2.7f, -2.7f, 0.0f})), DType::I32);
    t.op("Cast", {i}, {{"to", std::string("bool")}});
    EXPECT_EQ(vals<uint8_t>(t.y()), (std::vector<uint8_t>{1, 1, 0}));
    OneOp u;
    u.op("Cast", {u.input("x", f32({3}, {2.7f, -2.7f, 0.0f}))}, {{"to", std::string("i32")}});
    Tensor y = u.y();
    EXPECT_EQ(y.dtype(), DType::I64);
    EXPECT_EQ(vals<int64_t>(y), (std::vector<int64_t>{2, -2, 0}));
  }
}

TEST(Executor, MovementOps) {
  std::vector<float> v = {0, 1, 2, 3, 4, 5};
  {
    OneOp t;
    t.op("Transpose", {t.input("x", f32({1, 2, 3}, v))}, {{"perm", std::vector<int64_t>{2, 0, 1}}});
    expect_floats(t.y(), {3, 1, 2}, {0, 3, 1, 4, 2, 5});
  }
  {
    OneOp t;
    auto x = t.input("x", f32({2, 3}, v));
    t.op("Concat", {x, t.input("e", Tensor(DType::F32, {2, 0})), t.constant(f32({2, 1}, {-1, -2}))},
         {{"axis", int64_t(-1)}});
    expect_floats(t.y(), {2, 4}, {0, 1, 2, -1, 3, 4, 5, -2});
  }
  {
    OneOp t;
    auto u = t.b.unsqueeze(t.input("x", f32({2, 3}, v)), {0, -1});  // [1, 2, 3, 1]
    t.op("Squeeze", {u, t.b.i64s({0})});
    EXPECT_EQ(t.y().shape(), (std::vector<int64_t>{2, 3, 1}));
  }
  {
    OneOp t;
    t.op("Expand", {t.input("x", f32({3, 1}, {1, 2, 3})), t.b.i64s({2, 1, 2})});
    expect_floats(t.y(), {2, 3, 2}, {1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3});
  }
  {
    OneOp t;
    t.op("CumSum", {t.input("x", i64({2, 3}, {1, 2, 3, 4, 5, 6})), t.b.i64(-1)});
    EXPECT_EQ(vals<int64_t>(t.y()), (std::vector<int64_t>{1, 3, 6, 4, 9, 15}));
    OneOp r;
    r.op("CumSum", {r.input("x", f32({3}, {1, 2, 3})), r.b.i64(0)}, {{"exclusive", int64_t(1)}, {"reverse", int64_t(1)}});
    expect_floats(r.y(), {3}, {5, 3, 0});
  }
}

TEST(Executor, ScatterElementsOnAnyAxis) {
  {
    OneOp t;  // the ONNX spec's example, axis 0
    t.op("ScatterElements", {t.input("x", Tensor(DType::F32, {3, 3})), t.input("i", i64({2, 3}, {1, 0, 2, 0, 2, 1})),
                             t.input("u", f32({2, 3}, {1.0f, 1.1f, 1.2f, 2.0f, 2.1f, 2.2f}))},
         {{"axis", int64_t(0)}});
    expect_floats(t.y(), {3, 3}, {2.0f, 1.1f, 0, 1.0f, 0, 2.2f, 0, 2.1f, 1.2f});
  }
  {
    OneOp t;  // axis -1 with a negative index
    t.op("ScatterElements", {t.input("x", f32({1, 5}, {1, 2, 3, 4, 5})), t.input("i", i64({1, 2}, {1, -2})),
                             t.input("u", f32({1, 2}, {1.1f, 2.1f}))},
         {{"axis", int64_t(-1)}});
    expect_floats(t.y(), {1, 5}, {1, 1.1f, 3, 2.1f, 5});
  }
  {
    OneOp t;  // reduction add: duplicate indices accumulate
    t.op("ScatterElements", {t.input("x", f32({1, 3}, {1, 2, 3})), t.input("i", i64({1, 3}, {0, 0, 2})),
                             t.input("u", f32({1, 3}, {10, 20, 30}))},
         {{"axis", int64_t(1)}, {"reduction", std::string("add")}});
    expect_floats(t.y(), {1, 3}, {31, 2, 33});
  }
  {
    OneOp t;  // reduction max keeps the larger of data and each update
    t.op("ScatterElements", {t.input("x", f32({1, 3}, {5, 2, 3})), t.input("i", i64({1, 2}, {0, 1})),
                             t.input("u", f32({1, 2}, {4, 9}))},
         {{"axis", int64_t(1)}, {"reduction", std::string("max")}});
    expect_floats(t.y(), {1, 3}, {5, 9, 3});
  }
  {
    OneOp t;  // an unknown reduction is bad input, not a silent overwrite
    t.op("ScatterElements", {t.input("x", f32({1, 2}, {1, 2})), t.input("i", i64({1, 1}, {0})),
                             t.input("u", f32({1, 1}, {7}))},
         {{"axis", int64_t(1)}, {"reduction", std::string("sum")}});
    EXPECT_THROW(t.y(), Error);
  }
}

TEST(Executor, GatherElementsOnAnyAxis) {
  {
    OneOp t;  // the ONNX spec's example, axis 1
    t.op("GatherElements", {t.input("x", f32({2, 2}, {1, 2, 3, 4})), t.input("i", i64({2, 2}, {0, 0, 1, 0}))},
         {{"axis", int64_t(1)}});
    expect_floats(t.y(), {2, 2}, {1, 1, 4, 3});
  }
  {
    OneOp t;  // axis 0, fewer columns than the data, a negative index
    t.op("GatherElements", {t.input("x", f32({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9})), t.input("i", i64({2, 2}, {1, -1, 0, 1}))},
         {{"axis", int64_t(0)}});
    expect_floats(t.y(), {2, 2}, {4, 8, 1, 5});
  }
  {
    OneOp t;  // out of range: an error naming the index, not a read past the data
    t.op("GatherElements", {t.input("x", f32({1, 3}, {1, 2, 3})), t.input("i", i64({1, 1}, {3}))}, {{"axis", int64_t(1)}});
    EXPECT_THROW(t.y(), Error);
  }
}

TEST(Executor, ModTakesTheDivisorsSignUnlessFmod) {
  {
    OneOp t;
    t.op("Mod", {t.input("a", i64({5}, {7, -7, 7, -7, 6})), t.input("b", i64({5}, {3, 3, -3, -3, 3}))});
    EXPECT_EQ(vals<int64_t>(t.y()), (std::vector<int64_t>{1, 2, -2, -1, 0}));
  }
  {
    OneOp t;
    t.op("Mod", {t.input("a", i64({2}, {7, -7})), t.input("b", i64({2}, {3, 3}))}, {{"fmod", int64_t(1)}});
    EXPECT_EQ(vals<int64_t>(t.y()), (std::vector<int64_t>{1, -1}));
  }
  {
    OneOp t;
    t.op("Mod", {t.input("a", f32({2}, {5.5f, -5.5f})), t.input("b", f32({2}, {2, 2}))}, {{"fmod", int64_t(1)}});
    expect_floats(t.y(), {2}, {1.5f, -1.5f});
  }
  {
    OneOp t;  // integer division by zero is refused
    t.op("Mod", {t.input("a", i64({1}, {7})), t.input("b", i64({1}, {0}))});
    EXPECT_THROW(t.y(), Error);
  }
  {
    OneOp t;  // ... but not where no element meets it (an empty step's positions Mod its length 0)
    t.op("Mod", {t.input("a", i64({0}, {})), t.input("b", i64({1}, {0}))});
    EXPECT_EQ(t.y().shape(), (std::vector<int64_t>{0}));
  }
}

TEST(Executor, WeightsAreConvertedToComputeDtypes) {
  ir::Graph g;
  ir::Builder b(g);
  std::vector<uint16_t> half = {f32_to_f16(1.5f), f32_to_f16(-2.0f)};
  auto w = b.weight("w", ir::WeightRef::constant(Tensor::from_vector<uint16_t>(DType::F16, {2}, half)));
  auto idx = b.weight("idx", ir::WeightRef::constant(Tensor::from_vector<int32_t>(DType::I32, {2}, {1, 0})));
  auto x = g.add_input("x", DType::F32, fixed_shape({2}));
  auto y = b.add1("Mul", {b.add1("Cast", {x}, {{"to", std::string("f16")}}), w}, {}, "y");
  g.add_output(y);
  g.add_output(b.add1("Gather", {y, idx}, {{"axis", int64_t(0)}}, "z"));
  Executor ex(g);
  for (int rep = 0; rep < 2; ++rep) {  // the weight cache serves the second run
    auto out = ex.run({{"x", f32({2}, {2, 3})}});
    expect_floats(out.at("y"), {2}, {3, -6});
    expect_floats(out.at("z"), {2}, {-6, 3});
  }
}

TEST(Executor, WeightOnlyValuesHeldOrStreamedAgreeEveryRun) {
  // Transpose(weight) depends on weights only. Held (cache_weights): computed in the first run, cached
  // for the next ones. Streamed: nothing is kept between runs, so the Transpose, the weight returned
  // as an output and the weight read by two nodes are computed again each run. Both agree every run.
  for (const bool held : {true, false}) {
    SCOPED_TRACE(held ? "held" : "streamed");
    ir::Graph g;
    ir::Builder b(g);
    auto w = b.weight("w", ir::WeightRef::constant(f32({2, 3}, {1, 2, 3, 4, 5, 6})));
    auto x = g.add_input("x", DType::F32, {Dim::sym("n"), Dim::fixed(3)});
    auto wt = b.transpose(w, {1, 0});
    g.add_output(b.add1("MatMul", {x, wt}, {}, "y"));
    g.add_output(b.add1("Neg", {wt}, {}, "neg_wt"));  // a weight-only output
    g.add_output(b.add1("Identity", {w}, {}, "w_out"));
    ExecOptions o;
    o.cache_weights = held;
    Executor ex(g, o);
    for (int rep = 0; rep < 3; ++rep) {
      auto out = ex.run({{"x", f32({2, 3}, {1, 0, float(rep), 0, 1, 0})}});
      expect_floats(out.at("y"), {2, 2}, {1 + 3.0f * rep, 4 + 6.0f * rep, 2, 5});
      expect_floats(out.at("neg_wt"), {3, 2}, {-1, -4, -2, -5, -3, -6});
      expect_floats(out.at("w_out"), {2, 3}, {1, 2, 3, 4, 5, 6});
    }
  }
}

TEST(Executor, InputsReturnedAsOutputsAreNotConsumed) {
  ir::Graph g;
  ir::Builder b(g);
  auto x = g.add_input("x", DType::F32, fixed_shape({2}));
  g.add_output(x);
  g.add_output(b.add1("Identity", {x}, {}, "y"));
  Executor ex(g);
  const std::map<std::string, Tensor> in = {{"x", f32({2}, {1, 2})}};
  for (int rep = 0; rep < 2; ++rep) {
    auto out = ex.run(in);
    expect_floats(out.at("x"), {2}, {1, 2});
    expect_floats(out.at("y"), {2}, {1, 2});
  }
  expect_floats(in.at("x"), {2}, {1, 2});
}

TEST(Executor, KeepValuesReturnsIntermediates) {
  OneOp t;
  auto s = t.b.add1("Add", {t.input("x", f32({2}, {1, 2})), t.b.f32(1)}, {}, "plus_one");
  t.op("Mul", {s, s});
  ExecOptions o;
  o.keep_values = {"plus_one"};
  auto out = t.run(o);
  expect_floats(out.at("plus_one"), {2}, {2, 3});
  expect_floats(out.at("y"), {2}, {4, 9});
  o.keep_values = {"nope"};
  expect_error(ErrorKind::BadInput, {"keep_values", "nope"}, [&] { t.run(o); });
}

TEST(Executor, UnknownOpIsUnsupported) {
  ir::Graph g;
  auto x = g.add_input("x", DType::F32, fixed_shape({2}));
  ir::Node n;
  n.op = "FancyOp";
  n.name = "/fancy";
  n.inputs = {x};
  g.add_output(g.add_node(n, {ir::Value{"y", DType::F32, fixed_shape({2}), -1}}).outputs[0]);
  expect_error(ErrorKind::Unsupported, {"reference executor: no kernel for op FancyOp (node /fancy)"}, [&] { Executor ex(g); });
}

TEST(Executor, ComputedShapesAreCheckedAgainstDeclaredOnes) {
  // A node whose declared output disagrees with what its kernel computes: shape inference is wrong.
  ir::Graph g;
  auto x = g.add_input("x", DType::F32, {Dim::sym("n"), Dim::fixed(2)});
  ir::Node n;
  n.op = "Neg";
  n.name = "/neg";
  n.inputs = {x};
  g.add_output(g.add_node(n, {ir::Value{"y", DType::F32, {Dim::sym("n"), Dim::fixed(3)}, -1}}).outputs[0]);
  const std::map<std::string, Tensor> in = {{"x", f32({1, 2}, {1, 2})}};
  expect_error(ErrorKind::Internal, {"node /neg (Neg) computed f32[1, 2] but the graph declares f32[n, 3]"},
               [&] { Executor(g).run(in); });
  ExecOptions o;
  o.check_declared_shapes = false;
  expect_floats(Executor(g, o).run(in).at("y"), {1, 2}, {-1, -2});
}

TEST(Executor, KernelErrorsNameTheNode) {
  ir::Graph g;
  ir::Builder b(g);
  auto x = g.add_input("x", DType::F32, {Dim::sym("n")});
  g.add_output(b.add1("Reshape", {x, b.i64s({4, -1})}, {}, "y"));
  expect_error(ErrorKind::BadInput, {"node /Reshape (Reshape)", "cannot reshape [6]"},
               [&] { Executor(g).run({{"x", f32({6}, {0, 1, 2, 3, 4, 5})}}); });
}

// --- input validation ---

namespace {

ir::Graph two_input_graph() {
  ir::Graph g;
  ir::Builder b(g);
  auto ids = g.add_input("input_ids", DType::I64, {Dim::sym("batch_size"), Dim::sym("sequence_length")});
  auto mask = g.add_input("attention_mask", DType::I64, {Dim::sym("batch_size"), Dim::sym("total_sequence_length")});
  auto past = g.add_input("past", DType::F32, {Dim::sym("batch_size"), Dim::fixed(2), Dim::sym("past_sequence_length")});
  g.symbols().set_bounds("sequence_length", {1, 8});
  g.symbols().relate_sum("total_sequence_length", "past_sequence_length", "sequence_length");
  g.add_output(b.add1("Identity", {ids}, {}, "ids_out"));
  g.add_output(b.add1("Identity", {mask}, {}, "mask_out"));
  g.add_output(b.add1("Identity", {past}, {}, "past_out"));
  return g;
}

std::map<std::string, Tensor> feeds(int64_t batch_ids, int64_t batch_mask, int64_t seq, int64_t total, int64_t past) {
  return {{"input_ids", Tensor(DType::I64, {batch_ids, seq})},
          {"attention_mask", Tensor(DType::I64, {batch_mask, total})},
          {"past", Tensor(DType::F32, {batch_ids, 2, past})}};
}

}  // namespace

TEST(ExecutorInputs, AcceptsAConsistentBinding) {
  Executor ex(two_input_graph());
  auto out = ex.run(feeds(2, 2, 3, 5, 2));
  EXPECT_EQ(out.at("mask_out").shape(), (std::vector<int64_t>{2, 5}));
  out = ex.run(feeds(1, 1, 1, 1, 0));  // an empty past
  EXPECT_EQ(out.at("past_out").shape(), (std::vector<int64_t>{1, 2, 0}));
}

TEST(ExecutorInputs, MissingInput) {
  Executor ex(two_input_graph());
  auto f = feeds(2, 2, 3, 5, 2);
  f.erase("attention_mask");
  expect_error(ErrorKind::BadInput, {"missing input `attention_mask`"}, [&] { ex.run(f); });
}

TEST(ExecutorInputs, UnknownInput) {
  Executor ex(two_input_graph());
  auto f = feeds(2, 2, 3, 5, 2);
  f["position_ids"] = Tensor(DType::I64, {2, 3});
  expect_error(ErrorKind::BadInput, {"unknown input `position_ids`"}, [&] { ex.run(f); });
}

TEST(ExecutorInputs, BatchBoundInconsistently) {
  Executor ex(two_input_graph());
  expect_error(ErrorKind::BadInput, {"input attention_mask dim 0 (`batch_size`) = 3 but input_ids gave 2"},
               [&] { ex.run(feeds(2, 3, 3, 5, 2)); });
}

TEST(ExecutorInputs, SymbolOutOfBounds) {
  Executor ex(two_input_graph());
  expect_error(ErrorKind::BadInput, {"input input_ids dim 1", "sequence_length", "9", "[1, 8]"},
               [&] { ex.run(feeds(2, 2, 9, 11, 2)); });
}

TEST(ExecutorInputs, DeclaredSumMustHold) {
  Executor ex(two_input_graph());
  expect_error(ErrorKind::BadInput, {"total_sequence_length", "= 6", "past_sequence_length", "2 + 3 = 5"},
               [&] { ex.run(feeds(2, 2, 3, 6, 2)); });
}

TEST(ExecutorInputs, DtypeRankAndFixedDims) {
  Executor ex(two_input_graph());
  auto f = feeds(2, 2, 3, 5, 2);
  f["input_ids"] = Tensor(DType::I32, {2, 3});
  expect_error(ErrorKind::BadInput, {"input input_ids has dtype i32", "expects i64"}, [&] { ex.run(f); });
  f = feeds(2, 2, 3, 5, 2);
  f["input_ids"] = Tensor(DType::I64, {2, 3, 1});
  expect_error(ErrorKind::BadInput, {"input input_ids has rank 3", "[batch_size, sequence_length]"}, [&] { ex.run(f); });
  f = feeds(2, 2, 3, 5, 2);
  f["past"] = Tensor(DType::F32, {2, 4, 2});
  expect_error(ErrorKind::BadInput, {"input past dim 1 = 4", "fixes it to 2"}, [&] { ex.run(f); });
}

TEST(TestedRuntimes, WarnsOnlyForAnotherRelease) {
  using hfx::runtime::untested_runtime_warning;
  EXPECT_FALSE(untested_runtime_warning("onnxruntime", "1.31.1", "1.31.1"));
  EXPECT_FALSE(untested_runtime_warning("OpenVINO", "2026.4.1-22982-e213a147257-releases/2026/4", "2026.4.1"));
  auto w = untested_runtime_warning("onnxruntime", "1.31.10", "1.31.1");
  ASSERT_TRUE(w);
  EXPECT_NE(w->find("onnxruntime 1.31.10 is not the version hfx was tested with (1.31.1)"), std::string::npos);
  EXPECT_TRUE(untested_runtime_warning("OpenVINO", "2025.0.0", "2026.4.1"));
}
