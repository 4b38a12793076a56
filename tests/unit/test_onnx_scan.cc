// RecurrenceScan (ir/ops.h) and its ONNX Scan lowering (backends/onnx/onnx_scan.h): the one-step body,
// stepped position by position on the reference executor, against the op's chunked decomposition (its
// spec); the written Scan read back into the same node; a Scan whose body is not the one hfx writes
// refused in one line.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "backends/onnx/onnx_reader.h"
#include "backends/onnx/onnx_scan.h"
#include "backends/onnx/onnx_writer.h"
#include "core/error.h"
#include "ir/builder.h"
#include "runtime/executor.h"
#include "random_weights.h"

namespace fs = std::filesystem;
using namespace hfx;

namespace {

constexpr int64_t kBatch = 2, kSteps = 7, kHeads = 2, kRows = 3, kCols = 4;

struct Rule {
  std::string name;
  ir::Attrs attrs;
  // Per-step inputs: name, dims after [batch, steps, heads], and the range of their values.
  struct Input {
    std::string name;
    std::vector<int64_t> tail;
    float lo, hi;
  };
  std::vector<Input> inputs;
};

Rule gated_delta() {
  return {"gated_delta",
          {{"rule", std::string("gated_delta")}, {"heads", kHeads}, {"key_dim", kRows}, {"value_dim", kCols}},
          {{"q", {kRows}, -0.5f, 0.5f}, {"k", {kRows}, -0.5f, 0.5f}, {"v", {kCols}, -1, 1}, {"g", {}, -1, 0},
           {"beta", {}, 0, 1}}};
}

Rule ssd() {
  return {"ssd",
          {{"rule", std::string("ssd")}, {"heads", kHeads}, {"head_dim", kRows}, {"state_size", kCols}},
          {{"xdt", {kRows}, -1, 1}, {"log_decay", {}, -1, 0}, {"B", {kCols}, -1, 1}, {"C", {kCols}, -1, 1}}};
}

using hfx::testing::random_f32;

// x [batch, steps, rest...] at step t: [batch, rest...].
Tensor at_step(const Tensor& x, int64_t t) {
  std::vector<int64_t> shape = x.shape();
  const int64_t steps = shape[1];
  shape.erase(shape.begin() + 1);
  int64_t inner = 1;
  for (size_t i = 1; i < shape.size(); ++i) inner *= shape[i];
  std::vector<float> out;
  const auto all = x.values<float>();
  for (int64_t b = 0; b < shape[0]; ++b)
    for (int64_t i = 0; i < inner; ++i) out.push_back(all[size_t((b * steps + t) * inner + i)]);
  return Tensor::from_vector<float>(DType::F32, shape, out);
}

struct Case {
  ir::Graph graph{"scan"};
  std::map<std::string, Tensor> feeds;
};

// state [batch, heads, rows, cols] and the rule's inputs over kSteps positions -> RecurrenceScan.
Case make_case(const Rule& rule) {
  std::mt19937 rng(7);
  Case c;
  ir::Builder b(c.graph);
  const Shape state_shape = {Dim::sym("batch"), Dim::fixed(kHeads), Dim::fixed(kRows), Dim::fixed(kCols)};
  std::vector<ir::ValueId> ins = {c.graph.add_input("state", DType::F32, state_shape)};
  c.feeds["state"] = random_f32({kBatch, kHeads, kRows, kCols}, rng, -1, 1);
  for (const auto& in : rule.inputs) {
    Shape shape = {Dim::sym("batch"), Dim::sym("steps"), Dim::fixed(kHeads)};
    std::vector<int64_t> dims = {kBatch, kSteps, kHeads};
    for (int64_t d : in.tail) {
      shape.push_back(Dim::fixed(d));
      dims.push_back(d);
    }
    ins.push_back(c.graph.add_input(in.name, DType::F32, shape));
    c.feeds[in.name] = random_f32(dims, rng, in.lo, in.hi);
  }
  auto scope = b.scope("layer");
  auto outs = b.add("RecurrenceScan", ins, rule.attrs, {"final_state", "out"});
  c.graph.add_output(outs[0]);
  c.graph.add_output(outs[1]);
  return c;
}

class TempDir {
 public:
  TempDir() : path_(fs::temp_directory_path() / ("hfx_onnx_scan_" + std::to_string(::getpid()) + "_" +
                                                 ::testing::UnitTest::GetInstance()->current_test_info()->name())) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

onnx::ModelProto read_model(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  onnx::ModelProto m;
  EXPECT_TRUE(m.ParseFromString(ss.str()));
  return m;
}

void write_model(const fs::path& p, const onnx::ModelProto& m) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  const std::string bytes = m.SerializeAsString();
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

}  // namespace

TEST(RecurrenceScan, StepByStepBodyMatchesTheChunkedRule) {
  for (const Rule& rule : {gated_delta(), ssd()}) {
    SCOPED_TRACE(rule.name);
    Case c = make_case(rule);
    const auto chunked = runtime::Executor(c.graph).run(c.feeds);  // the decomposition: the op's spec

    const ir::Node& node = c.graph.nodes().back();
    ir::Graph step = onnx_backend::recurrence_step_graph(node);
    runtime::Executor body(step);
    Tensor state = c.feeds.at("state");
    std::vector<Tensor> outs;
    for (int64_t t = 0; t < kSteps; ++t) {
      std::map<std::string, Tensor> feeds = {{"state", state}};
      for (const auto& in : rule.inputs) feeds[in.name] = at_step(c.feeds.at(in.name), t);
      auto r = body.run(feeds);
      state = r.at(step.value(step.outputs()[0]).name);
      outs.push_back(r.at(step.value(step.outputs()[1]).name));
    }
    auto near = [](std::span<const float> a, std::span<const float> b, const char* what) {
      ASSERT_EQ(a.size(), b.size()) << what;
      for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5) << what << " [" << i << "]";
    };
    near(state.values<float>(), chunked.at("final_state").values<float>(), "final state");
    const auto out = chunked.at("out").values<float>();
    const size_t per_step = outs[0].values<float>().size() / kBatch;
    for (int64_t t = 0; t < kSteps; ++t)
      for (int64_t b = 0; b < kBatch; ++b) {
        const auto want = outs[size_t(t)].values<float>().subspan(size_t(b) * per_step, per_step);
        near(want, out.subspan(size_t((b * kSteps + t)) * per_step, per_step), "out");
      }
  }
}

TEST(RecurrenceScan, WrittenAsAScanAndReadBack) {
  for (const Rule& rule : {gated_delta(), ssd()}) {
    SCOPED_TRACE(rule.name);
    TempDir dir;
    Case c = make_case(rule);
    const auto written = onnx_backend::write_onnx(c.graph, dir.path(), {});
    const onnx::ModelProto m = read_model(written.model_path);
    ASSERT_EQ(m.graph().node_size(), 1);
    const auto& scan = m.graph().node(0);
    EXPECT_EQ(scan.op_type(), "Scan");
    EXPECT_EQ(scan.domain(), "");
    EXPECT_EQ(scan.input(0), "state");  // the carried state first, then the scanned inputs
    EXPECT_EQ(scan.output(0), "final_state");
    ir::Graph back = onnx_backend::read_onnx(written.model_path);
    ASSERT_EQ(back.nodes().size(), 1u);
    EXPECT_EQ(back.nodes()[0].op, "RecurrenceScan");
    EXPECT_EQ(back.nodes()[0].attrs, rule.attrs);
  }
}

TEST(RecurrenceScan, ReaderRefusesAScanWhoseBodyHfxDoesNotWrite) {
  TempDir dir;
  Case c = make_case(gated_delta());
  const auto written = onnx_backend::write_onnx(c.graph, dir.path(), {});
  onnx::ModelProto m = read_model(written.model_path);
  onnx::GraphProto* body = m.mutable_graph()->mutable_node(0)->mutable_attribute(0)->mutable_g();
  ASSERT_EQ(body->node(0).op_type(), "Exp");
  body->mutable_node(0)->set_op_type("Neg");  // a Scan of another recurrence: same I/O, another step
  write_model(written.model_path, m);
  try {
    onnx_backend::read_onnx(written.model_path);
    FAIL() << "a foreign Scan body was read";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(e.describe().find("Scan node /layer/RecurrenceScan is not a recurrence hfx writes (its attributes differ "
                                "from the gated_delta step hfx writes for a state of 2 x 3 x 4"),
              std::string::npos)
        << e.describe();
    EXPECT_EQ(e.describe().find('\n'), std::string::npos) << e.describe();
  }
}
