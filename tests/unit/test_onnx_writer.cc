// The ONNX backend: writer (proto layout, external data, determinism) and reader (round trip,
// validation of hostile files).
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <fstream>
#include <sstream>

#include "backends/onnx/onnx_reader.h"
#include "backends/onnx/onnx_writer.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "ir/builder.h"
#include "ir/ops.h"

namespace fs = std::filesystem;
using namespace hfx;
using namespace hfx::onnx_backend;

namespace {

class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            ("hfx_onnx_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  // HFX_KEEP_TEST_FILES=1 keeps the files (to check them with onnx/onnxruntime by hand, see
  // tests/oracle/check_onnx_file.py).
  ~TempDir() {
    if (std::getenv("HFX_KEEP_TEST_FILES")) return;
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

onnx::ModelProto parse_model(const fs::path& p) {
  onnx::ModelProto m;
  EXPECT_TRUE(m.ParseFromString(read_bytes(p))) << p;
  return m;
}

std::string external(const onnx::TensorProto& t, const std::string& key) {
  for (const auto& e : t.external_data())
    if (e.key() == key) return e.value();
  return "<missing>";
}

std::string bytes_of(const Tensor& t) { return std::string(reinterpret_cast<const char*>(t.data()), t.nbytes()); }

// A checkpoint-like file: w [4, 512] f32 at 0, b [512] f32 at 8192, s [4] f32 at 10240.
constexpr size_t kOffW = 0, kOffB = 8192, kOffS = 10240, kFileSize = 10256;

fs::path write_checkpoint(const fs::path& dir) {
  std::vector<float> values(kFileSize / 4);
  for (size_t i = 0; i < 2048; ++i) values[i] = float(int(i % 97) - 48) / 256.0f;             // w
  for (size_t i = 0; i < 512; ++i) values[2048 + i] = float(int(i % 13) - 6) / 64.0f;         // b
  for (size_t i = 0; i < 4; ++i) values[2560 + i] = 0.25f * float(i + 1);                      // s
  fs::path p = dir / "weights.bin";
  write_bytes(p, std::string(reinterpret_cast<const char*>(values.data()), kFileSize));
  return p;
}

// The checkpoint-like file's tensors as stored.
struct StoredTensors {
  ir::WeightRef w, b, s;
};
StoredTensors stored_tensors(const fs::path& checkpoint) {
  auto file = MappedFile::open(checkpoint);
  return {ir::WeightRef::source(file, "w", DType::F32, {4, 512}, kOffW),
          ir::WeightRef::source(file, "b", DType::F32, {512}, kOffB),
          ir::WeightRef::source(file, "s", DType::F32, {4}, kOffS)};
}

// x[batch_size, 4] -> probs = Cast(Softmax(((x @ w + b) @ w^T) * s + 0.5), f16), batch = Shape(x)[0:1]
ir::Graph make_graph(const fs::path& checkpoint) {
  const StoredTensors t = stored_tensors(checkpoint);
  ir::Graph g("tiny");
  ir::Builder b(g);
  auto x = g.add_input("x", DType::F32, {Dim::sym("batch_size"), Dim::fixed(4)});
  auto w = b.weight("model.w", t.w);
  auto bias = b.weight("model.b", t.b);
  auto wt = b.weight("model.w_t", t.w.transposed({1, 0}));
  auto s = b.weight("model.s", t.s);
  ir::ValueId probs, batch;
  {
    auto scope = b.scope("model");
    auto h = b.plus(b.matmul(x, w), bias);
    auto z = b.times(b.matmul(h, wt), s);
    z = b.plus(z, b.f32(0.5f));
    auto p = b.add1("Softmax", {z}, {{"axis", int64_t(-1)}});
    probs = b.add1("Cast", {p}, {{"to", std::string("f16")}}, "probs");
    batch = b.add1("Shape", {x}, {{"start", int64_t(0)}, {"end", int64_t(1)}}, "batch");
  }
  g.add_output(probs);
  g.add_output(batch);
  return g;
}

// The streamed layout (the tiny graph's weights are all stored tensors: mirrored by default).
OnnxWriteOptions options() {
  OnnxWriteOptions o;
  o.mirror_checkpoint = false;
  o.metadata = {{"zeta", "last"}, {"alpha", "first"}, {"hfx.task", "text-generation"}};
  return o;
}

}  // namespace

// x[batch_size, 4] -> y = x @ w + b, stacked = Identity(Concat(b, s)): stored tensors and a stack of
// them (the packed q|k|v's shape of weight), which read every byte of the checkpoint file.
ir::Graph make_mirrorable_graph(const fs::path& checkpoint) {
  const StoredTensors t = stored_tensors(checkpoint);
  ir::Graph g("mirror");
  ir::Builder b(g);
  auto x = g.add_input("x", DType::F32, {Dim::sym("batch_size"), Dim::fixed(4)});
  auto stacked = b.weight("model.bs", ir::WeightRef::concat({t.b, t.s}, 0));
  g.add_output(b.add1("Add", {b.matmul(x, b.weight("model.w", t.w)), b.weight("model.b", t.b)}, {}, "y"));
  g.add_output(b.add1("Identity", {stacked}, {}, "stacked"));
  return g;
}

TEST(OnnxWriter, MirrorsTheCheckpointFileWhenItsTensorsAreStoredAsTheyAre) {
  TempDir dir;
  const fs::path ckpt = write_checkpoint(dir.path());
  const ir::Graph g = make_mirrorable_graph(ckpt);
  auto res = write_onnx(g, dir.path() / "out", OnnxWriteOptions{});
  // The data file is the checkpoint's bytes (its sha256 is the checkpoint's: the manifest takes it).
  ASSERT_EQ(res.data_copies.size(), 1u);
  EXPECT_EQ(res.data_copies[0].copy_of, ckpt);
  EXPECT_EQ(res.data_copies[0].file, res.data_path);
  EXPECT_EQ(res.data_sha256, "");
  EXPECT_EQ(read_bytes(res.data_path), read_bytes(ckpt));
  EXPECT_EQ(res.data_bytes, int64_t(kFileSize));

  auto m = parse_model(res.model_path);
  const auto& gp = m.graph();
  ASSERT_GE(gp.node_size(), 1);  // the stack first: a Concat of the parts' initializers
  EXPECT_EQ(gp.node(0).op_type(), "Concat");
  EXPECT_EQ(std::vector<std::string>(gp.node(0).input().begin(), gp.node(0).input().end()),
            (std::vector<std::string>{"b", "s"}));
  EXPECT_EQ(gp.node(0).output(0), "model.bs");
  std::map<std::string, std::string> offsets;
  for (const auto& t : gp.initializer()) offsets[t.name()] = external(t, "offset");
  EXPECT_EQ(offsets, (std::map<std::string, std::string>{
                         {"model.w", "0"}, {"model.b", "8192"}, {"b", "8192"}, {"s", "10240"}}));

  // Read back, the Concat is one weight again, with the same values.
  ir::Graph r = read_onnx(res.model_path);
  r.validate();
  const ir::WeightRef* back = r.weight(*r.find("model.bs"));
  ASSERT_TRUE(back);
  EXPECT_EQ(bytes_of(back->materialize()), bytes_of(g.weight(*g.find("model.bs"))->materialize()));
  EXPECT_EQ(r.nodes().size(), g.nodes().size());

  // A file's Concat of tensors that differ off the axis ([256, 2] and [4, 1]: shape inference keeps the
  // first's width) is not one weight: it stays a node, never a stack read past its parts' bytes.
  for (auto& t : *m.mutable_graph()->mutable_initializer()) {
    if (t.name() == "b") t.clear_dims(), t.add_dims(256), t.add_dims(2);
    if (t.name() == "s") t.clear_dims(), t.add_dims(4), t.add_dims(1);
  }
  {
    std::ofstream out(res.model_path, std::ios::binary | std::ios::trunc);
    ASSERT_TRUE(m.SerializeToOstream(&out));
  }
  ir::Graph hostile = read_onnx(res.model_path);
  EXPECT_EQ(hostile.weight(*hostile.find("model.bs")), nullptr);
}

// A sharded checkpoint: each file the graph reads becomes a data file of its own, by the files' paths
// (model.onnx_data, model.onnx_data_1), and a stack may take its parts from both.
TEST(OnnxWriter, MirrorsEachShardOfACheckpoint) {
  TempDir dir;
  fs::create_directories(dir.path() / "a");
  fs::create_directories(dir.path() / "b");
  const StoredTensors first = stored_tensors(write_checkpoint(dir.path() / "a"));
  const StoredTensors second = stored_tensors(write_checkpoint(dir.path() / "b"));
  ir::Graph g("shards");
  ir::Builder b(g);
  auto x = g.add_input("x", DType::F32, {Dim::sym("batch_size"), Dim::fixed(4)});
  // Weights in the second shard come first: the data files still follow the checkpoint's file order.
  auto y = b.add1("Add", {b.matmul(x, b.weight("model.w2", second.w)), b.weight("model.b2", second.b)}, {}, "y");
  g.add_output(y);
  g.add_output(b.add1("Add", {b.matmul(x, b.weight("model.w1", first.w)), b.weight("model.b1", first.b)}, {}, "z"));
  g.add_output(b.add1("Identity", {b.weight("model.ss", ir::WeightRef::concat({first.s, second.s}, 0))}, {}, "stacked"));
  auto res = write_onnx(g, dir.path() / "out", OnnxWriteOptions{});
  ASSERT_EQ(res.data_copies.size(), 2u);
  EXPECT_EQ(res.data_copies[0].file, dir.path() / "out" / "model.onnx_data");
  EXPECT_EQ(res.data_copies[0].copy_of, dir.path() / "a" / "weights.bin");
  EXPECT_EQ(res.data_copies[1].file, dir.path() / "out" / "model.onnx_data_1");
  EXPECT_EQ(res.data_copies[1].copy_of, dir.path() / "b" / "weights.bin");
  EXPECT_EQ(res.data_bytes, int64_t(2 * kFileSize));
  std::map<std::string, std::string> where;
  const onnx::ModelProto m = parse_model(res.model_path);
  for (const auto& t : m.graph().initializer())
    where[t.name()] = external(t, "location") + "@" + external(t, "offset");
  EXPECT_EQ(where, (std::map<std::string, std::string>{{"model.w2", "model.onnx_data_1@0"},
                                                       {"model.b2", "model.onnx_data_1@8192"},
                                                       {"model.w1", "model.onnx_data@0"},
                                                       {"model.b1", "model.onnx_data@8192"},
                                                       {"s", "model.onnx_data@10240"},
                                                       {"s.stored", "model.onnx_data_1@10240"}}));
  ir::Graph r = read_onnx(res.model_path);
  ASSERT_TRUE(r.find("model.ss"));
  const ir::WeightRef* stack = r.weight(*r.find("model.ss"));
  ASSERT_TRUE(stack);
  EXPECT_EQ(bytes_of(stack->materialize()), bytes_of(g.weight(*g.find("model.ss"))->materialize()));
}

TEST(OnnxWriter, StreamsTheWeightsWhenTheCheckpointIsNotMirrorable) {
  TempDir dir;
  // A 2 MiB file whose 256 KiB transposed matrix is a computed weight above the inline limit.
  std::vector<float> values((size_t(2) << 20) / 4, 0.5f);
  write_bytes(dir.path() / "big.bin", std::string(reinterpret_cast<const char*>(values.data()), values.size() * 4));
  auto file = MappedFile::open(dir.path() / "big.bin");
  auto graph_with = [&](ir::WeightRef w) {
    ir::Graph g("streamed");
    ir::Builder b(g);
    auto x = g.add_input("x", DType::F32, {Dim::fixed(1), Dim::fixed(256)});
    g.add_output(b.add1("MatMul", {x, b.weight("model.w", std::move(w))}, {}, "y"));
    return g;
  };
  const auto stored = ir::WeightRef::source(file, "w", DType::F32, {256, 256}, 0);
  auto transposed = write_onnx(graph_with(stored.transposed({1, 0})), dir.path() / "t", OnnxWriteOptions{});
  EXPECT_TRUE(transposed.data_copies.empty());
  EXPECT_EQ(transposed.data_sha256.size(), 64u);
  // Stored as it is, but 256 KiB of a 2 MiB file: not a copy of the whole file.
  auto partial = write_onnx(graph_with(stored), dir.path() / "p", OnnxWriteOptions{});
  EXPECT_TRUE(partial.data_copies.empty());
  EXPECT_EQ(fs::file_size(partial.data_path), size_t(256) * 256 * 4);
}

TEST(OnnxWriter, ModelLayout) {
  TempDir dir;
  auto g = make_graph(write_checkpoint(dir.path()));
  int64_t cb_tensors = 0, cb_bytes = 0;
  auto opts = options();
  opts.on_weight_written = [&](int64_t t, int64_t b) { cb_tensors += t; cb_bytes += b; };
  auto res = write_onnx(g, dir.path() / "out", opts);

  EXPECT_EQ(res.model_path, dir.path() / "out" / "model.onnx");
  EXPECT_EQ(res.data_path, dir.path() / "out" / "model.onnx_data");
  EXPECT_EQ(res.num_weights, 5);
  EXPECT_EQ(cb_tensors, 5);
  EXPECT_EQ(cb_bytes, 8192 + 2048 + 8192 + 16 + 4);

  auto m = parse_model(res.model_path);
  EXPECT_EQ(m.ir_version(), 10);
  ASSERT_EQ(m.opset_import_size(), 1);
  EXPECT_EQ(m.opset_import(0).domain(), "");
  EXPECT_EQ(m.opset_import(0).version(), 21);
  EXPECT_EQ(m.producer_name(), "hfx");
  EXPECT_EQ(m.producer_version(), HFX_VERSION);
  ASSERT_EQ(m.metadata_props_size(), 3);
  EXPECT_EQ(m.metadata_props(0).key(), "alpha");
  EXPECT_EQ(m.metadata_props(1).key(), "hfx.task");
  EXPECT_EQ(m.metadata_props(1).value(), "text-generation");
  EXPECT_EQ(m.metadata_props(2).key(), "zeta");

  const auto& gp = m.graph();
  EXPECT_EQ(gp.name(), "tiny");
  ASSERT_EQ(gp.input_size(), 1);
  EXPECT_EQ(gp.input(0).name(), "x");
  const auto& xt = gp.input(0).type().tensor_type();
  EXPECT_EQ(xt.elem_type(), onnx::TensorProto_DataType_FLOAT);
  ASSERT_EQ(xt.shape().dim_size(), 2);
  EXPECT_EQ(xt.shape().dim(0).dim_param(), "batch_size");
  EXPECT_FALSE(xt.shape().dim(0).has_dim_value());
  EXPECT_EQ(xt.shape().dim(1).dim_value(), 4);

  ASSERT_EQ(gp.output_size(), 2);
  EXPECT_EQ(gp.output(0).name(), "probs");
  EXPECT_EQ(gp.output(0).type().tensor_type().elem_type(), onnx::TensorProto_DataType_FLOAT16);
  EXPECT_EQ(gp.output(0).type().tensor_type().shape().dim(0).dim_param(), "batch_size");
  EXPECT_EQ(gp.output(0).type().tensor_type().shape().dim(1).dim_value(), 4);
  EXPECT_EQ(gp.output(1).name(), "batch");
  EXPECT_EQ(gp.output(1).type().tensor_type().elem_type(), onnx::TensorProto_DataType_INT64);
  EXPECT_EQ(gp.output(1).type().tensor_type().shape().dim(0).dim_value(), 1);

  std::vector<std::string> ops;
  for (const auto& n : gp.node()) ops.push_back(n.op_type());
  EXPECT_EQ(ops, (std::vector<std::string>{"MatMul", "Add", "MatMul", "Mul", "Add", "Softmax", "Cast", "Shape"}));
  EXPECT_EQ(gp.node(0).name(), "/model/MatMul");
  EXPECT_EQ(gp.node(2).name(), "/model/MatMul_1");
  EXPECT_EQ(gp.node(0).input(0), "x");
  EXPECT_EQ(gp.node(0).input(1), "model.w");
  const auto& cast = gp.node(6);
  ASSERT_EQ(cast.attribute_size(), 1);
  EXPECT_EQ(cast.attribute(0).name(), "to");
  EXPECT_EQ(cast.attribute(0).type(), onnx::AttributeProto_AttributeType_INT);
  EXPECT_EQ(cast.attribute(0).i(), onnx::TensorProto_DataType_FLOAT16);
  EXPECT_EQ(cast.output(0), "probs");
  const auto& shape = gp.node(7);
  ASSERT_EQ(shape.attribute_size(), 2);
  EXPECT_EQ(shape.attribute(0).name(), "end");
  EXPECT_EQ(shape.attribute(0).i(), 1);
  EXPECT_EQ(shape.attribute(1).name(), "start");
  EXPECT_EQ(shape.attribute(1).i(), 0);
  EXPECT_EQ(gp.node(5).attribute(0).name(), "axis");
  EXPECT_EQ(gp.node(5).attribute(0).i(), -1);

  // Initializers in graph.weights() order; large ones external and 64 KiB aligned.
  ASSERT_EQ(gp.initializer_size(), 5);
  std::vector<std::string> names;
  for (const auto& t : gp.initializer()) names.push_back(t.name());
  EXPECT_EQ(names, (std::vector<std::string>{"model.w", "model.b", "model.w_t", "model.s", "/const/f32"}));
  const std::string data = read_bytes(res.data_path);
  struct Ext {
    int idx;
    size_t offset, length;
    std::string expect;
  };
  const std::vector<Ext> exts = {
      {0, 0, 8192, bytes_of(g.weight(*g.find("model.w"))->materialize())},
      {1, 65536, 2048, bytes_of(g.weight(*g.find("model.b"))->materialize())},
      {2, 131072, 8192, bytes_of(g.weight(*g.find("model.w_t"))->materialize())},
  };
  for (const auto& e : exts) {
    const auto& t = gp.initializer(e.idx);
    SCOPED_TRACE(t.name());
    EXPECT_EQ(t.data_location(), onnx::TensorProto_DataLocation_EXTERNAL);
    EXPECT_FALSE(t.has_raw_data());
    EXPECT_EQ(t.data_type(), onnx::TensorProto_DataType_FLOAT);
    EXPECT_EQ(external(t, "location"), "model.onnx_data");
    EXPECT_EQ(external(t, "offset"), std::to_string(e.offset));
    EXPECT_EQ(external(t, "length"), std::to_string(e.length));
    EXPECT_EQ(std::stoull(external(t, "offset")) % 65536, 0u);
    ASSERT_LE(e.offset + e.length, data.size());
    EXPECT_EQ(data.substr(e.offset, e.length), e.expect);
  }
  EXPECT_EQ(gp.initializer(2).dims(0), 512);
  EXPECT_EQ(gp.initializer(2).dims(1), 4);
  EXPECT_EQ(data.size(), 131072u + 8192u);
  EXPECT_EQ(res.data_bytes, int64_t(data.size()));
  EXPECT_EQ(data.substr(8192, 65536 - 8192), std::string(65536 - 8192, '\0'));  // zero padding

  // Small weights inline as raw_data.
  const auto& s = gp.initializer(3);
  EXPECT_NE(s.data_location(), onnx::TensorProto_DataLocation_EXTERNAL);
  EXPECT_EQ(s.external_data_size(), 0);
  EXPECT_EQ(s.raw_data(), bytes_of(g.weight(*g.find("model.s"))->materialize()));
  const auto& c = gp.initializer(4);
  EXPECT_EQ(c.dims_size(), 0);
  float half = 0;
  ASSERT_EQ(c.raw_data().size(), 4u);
  std::memcpy(&half, c.raw_data().data(), 4);
  EXPECT_EQ(half, 0.5f);
}

TEST(OnnxWriter, Deterministic) {
  TempDir dir;
  auto ckpt = write_checkpoint(dir.path());
  auto r1 = write_onnx(make_graph(ckpt), dir.path() / "a", options());
  auto r2 = write_onnx(make_graph(ckpt), dir.path() / "b", options());
  const std::string m1 = read_bytes(r1.model_path), m2 = read_bytes(r2.model_path);
  EXPECT_FALSE(m1.empty());
  EXPECT_EQ(m1, m2);
  EXPECT_EQ(read_bytes(r1.data_path), read_bytes(r2.data_path));
}

TEST(OnnxWriter, AllInlineWritesNoDataFile) {
  TempDir dir;
  ir::Graph g("small");
  ir::Builder b(g);
  auto x = g.add_input("x", DType::F32, {Dim::sym("n"), Dim::unknown()});
  g.add_output(b.add1("Add", {x, b.f32(1.0f)}, {}, "y"));
  auto res = write_onnx(g, dir.path() / "out", {});
  EXPECT_TRUE(res.data_path.empty());
  EXPECT_EQ(res.data_bytes, 0);
  EXPECT_FALSE(fs::exists(dir.path() / "out" / "model.onnx_data"));
  auto m = parse_model(res.model_path);
  const auto& d1 = m.graph().input(0).type().tensor_type().shape().dim(1);
  EXPECT_FALSE(d1.has_dim_value());
  EXPECT_TRUE(d1.dim_param().empty());
}

TEST(OnnxWriter, CompositeOpHasNoLowering) {
  TempDir dir;
  ir::Graph g("bad");
  auto x = g.add_input("x", DType::F32, {Dim::sym("batch_size"), Dim::fixed(4)});
  ir::Builder b(g);
  auto w = b.constant(Tensor::from_vector<float>(DType::F32, {4}, {1, 1, 1, 1}), "norm");
  ir::Node n{"RMSNorm", "/model/norm/RMSNorm", {x, w}, {}, {{"epsilon", 1e-6}}};
  auto out = g.add_node(n, {ir::Value{"y", DType::F32, g.value(x).shape, -1}}).outputs[0];
  g.add_output(out);
  try {
    write_onnx(g, dir.path() / "out", {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(e.describe().find("onnx backend: op RMSNorm (node /model/norm/RMSNorm) has no lowering"),
              std::string::npos)
        << e.describe();
  }
  EXPECT_FALSE(fs::exists(dir.path() / "out" / "model.onnx"));
  EXPECT_FALSE(fs::exists(dir.path() / "out" / "model.onnx_data"));
}

TEST(OnnxLowering, CoversEveryPrimitiveAndNoComposite) {
  for (const auto& op : ir::all_op_names()) {
    const auto& schema = ir::op_schema(op);
    // Target ops (ONNX Runtime's fused ops) are composites the backend writes as they are.
    const bool written = !schema.composite || schema.target_op;
    EXPECT_EQ(find_onnx_lowering(op) != nullptr, written) << op;
  }
  for (const auto& [op, lowering] : onnx_lowering_table()) EXPECT_TRUE(ir::is_known_op(op)) << op;
}

TEST(OnnxLowering, AttributesRoundTrip) {
  ir::Node n{"Identity", "/n", {}, {}, {}};
  n.attrs = {{"i", int64_t(-3)},
             {"f", 0.25},
             {"s", std::string("abc")},
             {"ints", std::vector<int64_t>{1, -2, 3}},
             {"floats", std::vector<double>{0.5, -1.5}},
             {"empty", std::vector<int64_t>{}}};
  onnx::NodeProto p;
  find_onnx_lowering("Identity")->lower(n, p);
  EXPECT_EQ(p.op_type(), "");  // the writer sets op_type; lower fills attributes
  ASSERT_EQ(p.attribute_size(), 6);
  EXPECT_EQ(find_onnx_lowering("Identity")->raise(p), n.attrs);

  ir::Node cast{"Cast", "/c", {}, {}, {{"to", std::string("bf16")}}};
  onnx::NodeProto cp;
  find_onnx_lowering("Cast")->lower(cast, cp);
  ASSERT_EQ(cp.attribute_size(), 1);
  EXPECT_EQ(cp.attribute(0).i(), onnx::TensorProto_DataType_BFLOAT16);
  EXPECT_EQ(find_onnx_lowering("Cast")->raise(cp), cast.attrs);

  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64, DType::I32, DType::I16,
                  DType::I8, DType::U8, DType::Bool})
    EXPECT_EQ(dtype_from_onnx(onnx_elem_type(t)), t) << dtype_name(t);
  EXPECT_EQ(dtype_from_onnx(onnx::TensorProto_DataType_STRING), std::nullopt);
}

TEST(OnnxReader, RoundTrip) {
  TempDir dir;
  auto g = make_graph(write_checkpoint(dir.path()));
  auto res = write_onnx(g, dir.path() / "out", options());
  ir::Graph r = read_onnx(res.model_path);
  r.validate();

  EXPECT_EQ(r.name(), "tiny");
  ASSERT_EQ(r.inputs().size(), 1u);
  EXPECT_EQ(r.value(r.inputs()[0]).name, "x");
  EXPECT_EQ(r.value(r.inputs()[0]).dtype, DType::F32);
  EXPECT_EQ(r.value(r.inputs()[0]).shape, (Shape{Dim::sym("batch_size"), Dim::fixed(4)}));
  EXPECT_TRUE(r.symbols().has("batch_size"));

  ASSERT_EQ(r.nodes().size(), g.nodes().size());
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const auto& a = g.nodes()[i];
    const auto& b = r.nodes()[i];
    SCOPED_TRACE(a.name);
    EXPECT_EQ(b.op, a.op);
    EXPECT_EQ(b.name, a.name);
    EXPECT_EQ(b.attrs, a.attrs);
    ASSERT_EQ(b.inputs.size(), a.inputs.size());
    for (size_t k = 0; k < a.inputs.size(); ++k) EXPECT_EQ(r.value(b.inputs[k]).name, g.value(a.inputs[k]).name);
    ASSERT_EQ(b.outputs.size(), a.outputs.size());
    for (size_t k = 0; k < a.outputs.size(); ++k) {
      EXPECT_EQ(r.value(b.outputs[k]).name, g.value(a.outputs[k]).name);
      EXPECT_EQ(r.value(b.outputs[k]).dtype, g.value(a.outputs[k]).dtype);
      EXPECT_EQ(r.value(b.outputs[k]).shape, g.value(a.outputs[k]).shape);
    }
  }
  EXPECT_EQ(std::get<std::string>(r.nodes()[6].attrs.at("to")), "f16");

  ASSERT_EQ(r.weights().size(), g.weights().size());
  for (size_t i = 0; i < g.weights().size(); ++i) {
    const auto& name = g.value(g.weights()[i]).name;
    SCOPED_TRACE(name);
    EXPECT_EQ(r.value(r.weights()[i]).name, name);
    const auto* a = g.weight(g.weights()[i]);
    const auto* b = r.weight(r.weights()[i]);
    ASSERT_TRUE(b);
    EXPECT_EQ(b->dtype(), a->dtype());
    EXPECT_EQ(b->shape(), a->shape());
    EXPECT_EQ(bytes_of(b->materialize()), bytes_of(a->materialize()));
    EXPECT_TRUE(b->raw_bytes().has_value());  // external data is mapped, not copied
    EXPECT_EQ(b->is_constant(), a->nbytes() <= 1024 || a->is_constant());
  }
  // Constants stay constants, so shape inference can read them.
  EXPECT_TRUE(r.constant(*r.find("/const/f32")).has_value());

  std::vector<std::string> outs;
  for (auto id : r.outputs()) outs.push_back(r.value(id).name);
  EXPECT_EQ(outs, (std::vector<std::string>{"probs", "batch"}));
}

namespace {

// A hand-made model: y = x + w, with w read from `location`.
void write_hostile_model(const fs::path& path, const std::string& location, const std::string& offset,
                         const std::string& length, const std::string& op = "Add") {
  onnx::ModelProto m;
  m.set_ir_version(10);
  auto* opset = m.add_opset_import();
  opset->set_domain("");
  opset->set_version(21);
  auto* g = m.mutable_graph();
  g->set_name("hostile");
  auto* x = g->add_input();
  x->set_name("x");
  x->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto_DataType_FLOAT);
  x->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(4);
  auto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto_DataType_FLOAT);
  w->add_dims(4);
  w->set_data_location(onnx::TensorProto_DataLocation_EXTERNAL);
  for (auto [k, v] : {std::pair<std::string, std::string>{"location", location}, {"offset", offset}, {"length", length}}) {
    auto* e = w->add_external_data();
    e->set_key(k);
    e->set_value(v);
  }
  auto* n = g->add_node();
  n->set_name("/add");
  n->set_op_type(op);
  n->add_input("x");
  n->add_input("w");
  n->add_output("y");
  auto* y = g->add_output();
  y->set_name("y");
  y->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto_DataType_FLOAT);
  std::string bytes;
  ASSERT_TRUE(m.SerializeToString(&bytes));
  write_bytes(path, bytes);
}

Error read_error(const fs::path& path) {
  try {
    read_onnx(path);
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "read_onnx(" << path << ") did not throw";
  return Error(ErrorKind::Internal, "none");
}

}  // namespace

TEST(OnnxReader, AcceptsHandMadeModel) {
  TempDir dir;
  write_bytes(dir.path() / "data.bin", std::string(32, '\0'));
  write_hostile_model(dir.path() / "m.onnx", "data.bin", "16", "16");
  auto g = read_onnx(dir.path() / "m.onnx");
  ASSERT_EQ(g.nodes().size(), 1u);
  EXPECT_EQ(g.value(g.outputs()[0]).shape, fixed_shape({4}));
}

TEST(OnnxReader, RejectsHostileFiles) {
  TempDir dir;
  write_bytes(dir.path() / "data.bin", std::string(32, '\0'));
  const fs::path model = dir.path() / "m.onnx";
  struct Case {
    std::string location, offset, length, op;
    ErrorKind kind;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"../data.bin", "0", "16", "Add", ErrorKind::BadInput, "leaves the model's folder"},
      {"sub/../../x", "0", "16", "Add", ErrorKind::BadInput, "leaves the model's folder"},
      {"/etc/passwd", "0", "16", "Add", ErrorKind::BadInput, "not a relative path"},
      {"data.bin", "24", "16", "Add", ErrorKind::BadInput, "outside data.bin"},
      {"data.bin", "0", "12", "Add", ErrorKind::BadInput, "length 12"},
      {"data.bin", "-1", "16", "Add", ErrorKind::BadInput, "offset `-1`"},
      {"data.bin", "0", "16", "Conv", ErrorKind::Unsupported, "op Conv (node /add)"},
      {"missing.bin", "0", "16", "Add", ErrorKind::Io, "missing.bin"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.location + " " + c.offset + " " + c.length + " " + c.op);
    write_hostile_model(model, c.location, c.offset, c.length, c.op);
    Error e = read_error(model);
    EXPECT_EQ(e.kind(), c.kind) << e.describe();
    EXPECT_NE(e.describe().find(c.message), std::string::npos) << e.describe();
    EXPECT_NE(e.describe().find(model.string()), std::string::npos) << e.describe();
  }
  write_bytes(model, "this is not a protobuf");
  EXPECT_NE(read_error(model).describe().find(model.string()), std::string::npos);
}

// The ort profile's FusedMatMul (x @ W^T over a [N, K] weight) is written as com.microsoft
// FusedMatMul(transB=1) and read back as the same op; any other FusedMatMul (another transposition, a
// scale, a weight of another rank) is refused as the user's file, never as an internal error.
TEST(OnnxReader, FusedMatMulRoundTripsInItsOneForm) {
  TempDir dir;
  ir::Graph g("fused");
  ir::Builder b(g);
  auto x = g.add_input("x", DType::F32, {Dim::sym("n"), Dim::fixed(4)});
  Tensor w(DType::F32, {3, 4});
  for (int64_t i = 0; i < w.numel(); ++i) w.as<float>()[i] = float(i);
  g.add_output(b.add1("FusedMatMul", {x, b.weight("w", ir::WeightRef::constant(w))}, {}, "y"));
  auto res = write_onnx(g, dir.path() / "out", {});
  onnx::ModelProto m = parse_model(res.model_path);
  ASSERT_EQ(m.graph().node_size(), 1);
  const onnx::NodeProto& node = m.graph().node(0);
  EXPECT_EQ(node.op_type(), "FusedMatMul");
  EXPECT_EQ(node.domain(), "com.microsoft");
  ASSERT_EQ(node.attribute_size(), 1);
  EXPECT_EQ(node.attribute(0).name(), "transB");
  EXPECT_EQ(node.attribute(0).i(), 1);
  ir::Graph r = read_onnx(res.model_path);
  ASSERT_EQ(r.nodes().size(), 1u);
  EXPECT_EQ(r.nodes()[0].op, "FusedMatMul");
  EXPECT_EQ(r.value(r.outputs()[0]).shape, (Shape{Dim::sym("n"), Dim::fixed(3)}));

  struct Case {
    std::string what;
    std::function<void(onnx::ModelProto&)> edit;
    ErrorKind kind;
    std::string message;
  };
  auto attr = [](onnx::ModelProto& p) { return p.mutable_graph()->mutable_node(0)->mutable_attribute(0); };
  const std::vector<Case> cases = {
      {"transB=0", [&](onnx::ModelProto& p) { attr(p)->set_i(0); }, ErrorKind::Unsupported, "transB"},
      {"no transB", [&](onnx::ModelProto& p) { p.mutable_graph()->mutable_node(0)->clear_attribute(); },
       ErrorKind::Unsupported, "without transB=1"},
      {"alpha 2",
       [&](onnx::ModelProto& p) {
         auto* a = p.mutable_graph()->mutable_node(0)->add_attribute();
         a->set_name("alpha");
         a->set_type(onnx::AttributeProto::FLOAT);
         a->set_f(2.0f);
       },
       ErrorKind::Unsupported, "alpha"},
      {"1-D weight",
       [&](onnx::ModelProto& p) {
         auto* t = p.mutable_graph()->mutable_initializer(0);
         t->clear_dims();
         t->add_dims(12);
       },
       ErrorKind::BadInput, "weight of rank 1"},
  };
  const fs::path edited = dir.path() / "out" / "edited.onnx";
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    onnx::ModelProto p = m;
    c.edit(p);
    std::string bytes;
    ASSERT_TRUE(p.SerializeToString(&bytes));
    write_bytes(edited, bytes);
    Error e = read_error(edited);
    EXPECT_EQ(e.kind(), c.kind) << e.describe();
    EXPECT_NE(e.describe().find(c.message), std::string::npos) << e.describe();
  }
}
