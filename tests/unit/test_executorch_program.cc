// The executorch lowering: kernel calls with every schema argument then out and the return, the
// static cache as a mutable buffer in a region of the arena nothing else reuses, activations that
// never share bytes while both are live, DYNAMIC_BOUND sizes at the upper bound, and a .pte that reads
// back with its ports.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include "backends/executorch/et_ops.h"
#include "backends/executorch/et_program.h"
#include "backends/executorch/et_reader.h"
#include "backends/executorch/et_writer.h"
#include "backends/pt2/pt2_program.h"
#include "core/error.h"
#include "ir/builder.h"

using namespace hfx;
using namespace hfx::ir;
using namespace hfx::executorch_backend;

namespace {

Dim n(int64_t v) { return Dim::fixed(v); }

// A cache update and a use of it: present = scatter(past, index, new); logits = present + present,
// with the query length symbolic in [1, 8].
Graph cache_step() {
  Graph g;
  Builder b{g};
  g.symbols().declare("sequence_length", SymbolBounds{1, 8});
  auto buf = g.add_input("past_key_values.0.key", DType::F32, {n(1), n(2), n(8), n(4)});
  auto upd = g.add_input("new", DType::F32, {n(1), n(2), Dim::sym("sequence_length"), n(4)});
  auto idx = g.add_input("index", DType::I64, {n(1), n(2), Dim::sym("sequence_length"), n(4)});
  auto written = b.add1("ScatterElements", {buf, idx, upd}, {{"axis", int64_t(2)}});
  g.rename(written, "present.0.key");
  auto logits = b.plus(b.plus(upd, upd), upd);
  g.rename(logits, "logits");
  g.add_output(logits);
  g.add_output(written);
  return g;
}

EtProgram lower(const Graph& g) {
  const std::vector<std::pair<std::string, std::string>> shared = {{"past_key_values.0.key", "present.0.key"}};
  EtLowerOptions o;
  o.shared_buffers = shared;
  o.metadata = {{"get_max_seq_len", 8, false}, {"use_kv_cache", 1, true}};
  o.eos_ids = {2};
  return lower_to_executorch(pt2_backend::lower_to_pt2(g, {shared}), o);
}

}  // namespace

TEST(ExecuTorchProgram, KernelCallsPassEveryArgumentThenOutThenTheReturn) {
  const EtProgram p = lower(cache_step());
  const EtMethod& m = p.methods.at(0);
  ASSERT_EQ(m.name, "forward");
  for (const auto& call : m.calls) {
    const auto& [name, overload] = m.operators.at(size_t(call.op));
    if (name == "aten::add") {
      ASSERT_EQ(call.args.size(), 5u);  // self, other, alpha, out, return
      EXPECT_EQ(m.values.at(size_t(call.args[2])).kind, EtValue::Kind::Int);
      EXPECT_EQ(call.args[3], call.args[4]);
    }
    if (name == "aten::copy_") {
      EXPECT_EQ(overload, "");
      EXPECT_EQ(call.args.front(), call.args.back());  // in place: the return is self
    }
  }
  EXPECT_NE(std::find(p.kernels.begin(), p.kernels.end(), "aten::scatter.src_out"), p.kernels.end());
  EXPECT_NE(std::find(p.kernels.begin(), p.kernels.end(), "aten::copy_"), p.kernels.end());
  ASSERT_EQ(m.inputs.size(), 2u);  // new, index: the buffer is not an input
  ASSERT_EQ(m.outputs.size(), 1u);
  const EtTensor& logits = m.values.at(size_t(m.outputs[0])).tensor;
  EXPECT_TRUE(logits.dynamic);
  EXPECT_EQ(logits.sizes, (std::vector<int64_t>{1, 2, 8, 4}));  // planned at the bound
  EXPECT_EQ(p.methods.size(), 4u);  // forward, two constants, get_eos_ids
}

TEST(ExecuTorchProgram, TheCacheHasItsOwnRegionAndLiveTensorsNeverOverlap) {
  const EtProgram p = lower(cache_step());
  const EtMethod& m = p.methods.at(0);
  int64_t buffer_end = -1;
  for (const auto& v : m.values)
    if (v.kind == EtValue::Kind::Tensor && !v.tensor.fqn.empty()) {
      EXPECT_EQ(v.tensor.fqn, "past_key_values.0.key");
      EXPECT_EQ(v.tensor.offset, 0);
      buffer_end = v.tensor.nbytes();
    }
  ASSERT_EQ(buffer_end, 1 * 2 * 8 * 4 * 4);
  EXPECT_EQ(p.buffer_bytes, buffer_end);
  // Lifetimes by call index, then every pair of overlapping lifetimes in disjoint bytes.
  std::map<int, std::pair<int, int>> life;
  for (int c = 0; c < int(m.calls.size()); ++c)
    for (int a : m.calls[size_t(c)].args)
      if (m.values[size_t(a)].kind == EtValue::Kind::Tensor && m.values[size_t(a)].tensor.constant == 0) {
        auto [it, fresh] = life.try_emplace(a, c, c);
        if (!fresh) it->second.second = c;
      }
  for (int v : m.inputs) life[v].first = -1;
  for (const auto& [a, la] : life)
    for (const auto& [b, lb] : life) {
      if (a >= b || la.second < lb.first || lb.second < la.first) continue;
      const auto& ta = m.values[size_t(a)].tensor;
      const auto& tb = m.values[size_t(b)].tensor;
      const bool disjoint = ta.offset + ta.nbytes() <= tb.offset || tb.offset + tb.nbytes() <= ta.offset;
      EXPECT_TRUE(disjoint) << "values " << a << " and " << b << " share bytes while both are live";
    }
  for (const auto& [a, la] : life) {
    if (m.values[size_t(a)].tensor.fqn.empty()) {
      EXPECT_GE(m.values[size_t(a)].tensor.offset, buffer_end);
    }
  }
  EXPECT_GE(p.arena_bytes, buffer_end);
}

TEST(ExecuTorchProgram, AFileReadsBackWithItsPorts) {
  const EtProgram p = lower(cache_step());
  const auto dir = std::filesystem::temp_directory_path() / ("hfx-et-unit-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto written = write_pte(p, dir / "model.pte", {});
  const EtMethodInfo info = read_pte_forward(written.file);
  ASSERT_EQ(info.inputs.size(), 2u);
  EXPECT_EQ(info.inputs[0].dtype, "f32");
  EXPECT_EQ(info.inputs[1].dtype, "i64");
  EXPECT_TRUE(info.inputs[0].dynamic);
  ASSERT_EQ(info.outputs.size(), 1u);
  EXPECT_EQ(info.kernels.at("aten::copy_"), 1);
  EXPECT_EQ(info.methods.size(), 4u);
  // A byte flipped in the identifier: refused naming the file.
  {
    std::fstream f(written.file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4);
    f.put('X');
  }
  try {
    read_pte_forward(written.file);
    FAIL() << "expected BadInput";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_NE(std::string(e.what()).find("ET12"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

TEST(ExecuTorchProgram, ADimWithoutUpperBoundIsRefused) {
  Graph g;
  Builder b{g};
  auto x = g.add_input("x", DType::F32, {n(1), Dim::sym("sequence_length")});
  auto y = b.plus(x, x);
  g.rename(y, "logits");
  g.add_output(y);
  try {
    lower_to_executorch(pt2_backend::lower_to_pt2(g, {}), {});
    FAIL() << "expected Unsupported";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("--dim sequence_length=MIN:MAX"), std::string::npos) << e.what();
  }
}

namespace {

// scores = q @ k^T, [b, 2, s, 4] x [b, 2, 4, s] -> [b, 2, s, s], with s in [1, 8] and b in `batch`.
struct MatmulCounts {
  size_t sym_sizes = 0, pt2_sym_sizes = 0, views = 0;
  int most_inferred = 0;  // the largest number of -1 sizes in one view_copy
};

MatmulCounts scores(SymbolBounds batch) {
  Graph g;
  Builder b{g};
  g.symbols().declare("batch_size", batch);
  g.symbols().declare("sequence_length", SymbolBounds{1, 8});
  const Dim bd = batch.min == batch.max ? n(*batch.max) : Dim::sym("batch_size"), s = Dim::sym("sequence_length");
  auto q = g.add_input("q", DType::F32, {bd, n(2), s, n(4)});
  auto k = g.add_input("k", DType::F32, {bd, n(2), n(4), s});
  auto y = b.add1("MatMul", {q, k});
  g.rename(y, "scores");
  g.add_output(y);
  const auto pt2 = pt2_backend::lower_to_pt2(g, {});
  MatmulCounts c;
  for (const auto& node : pt2.model.at("graph_module").at("graph").at("nodes"))
    c.pt2_sym_sizes += node.at("target") == "torch.ops.aten.sym_size.int";
  const EtProgram p = lower_to_executorch(pt2, {});
  const EtMethod& m = p.methods.at(0);
  for (const auto& call : m.calls) {
    const auto& name = m.operators.at(size_t(call.op)).first;
    c.sym_sizes += name == "aten::sym_size";
    if (name != "aten::view_copy") continue;
    ++c.views;
    int inferred = 0;
    for (auto i : m.values.at(size_t(call.args.at(1))).items) {
      const auto& v = m.values.at(size_t(i));
      inferred += v.kind == EtValue::Kind::Int && v.i == -1;
    }
    c.most_inferred = std::max(c.most_inferred, inferred);
  }
  return c;
}

}  // namespace

TEST(ExecuTorchProgram, AMatmulOverAFixedBatchInfersOneDimAndReadsTheScoresDims) {
  const MatmulCounts c = scores(SymbolBounds{1, 1});
  EXPECT_EQ(c.views, 3u);  // q and k flattened to [2, ., .], the bmm's [2, s, s] back to [1, 2, s, s]
  EXPECT_EQ(c.most_inferred, 1);
  // The scores' view has two varying dims (s, s): they are read from the bmm's output.
  EXPECT_EQ(c.sym_sizes, c.pt2_sym_sizes + 2);
}

TEST(ExecuTorchProgram, AMatmulViewWithTwoVaryingDimsReadsTheKeptOnesFromItsSource) {
  const MatmulCounts c = scores(SymbolBounds{1, 4});
  EXPECT_EQ(c.views, 3u);
  EXPECT_EQ(c.most_inferred, 1);  // only the batch (b * 2, or b) is inferred
  // q's and k's views keep s (1 each), the scores' keeps s and s (2).
  EXPECT_EQ(c.sym_sizes, c.pt2_sym_sizes + 4);
}

// --executorch-backend xnnpack: the two adds of cache_step are one run of calls XNNPACK covers, so one
// delegate call of one two-node graph (external input `new`, external output the logits; the value
// between the adds is XNNPACK's own, Null in the method), while the scatter and copy_ stay portable.
TEST(ExecuTorchProgram, ARunOfXnnpackOpsIsOneDelegateCallOfOneGraph) {
  const std::vector<std::pair<std::string, std::string>> shared = {{"past_key_values.0.key", "present.0.key"}};
  EtLowerOptions o;
  o.shared_buffers = shared;
  o.xnnpack = true;
  const EtProgram p = lower_to_executorch(pt2_backend::lower_to_pt2(cache_step(), {shared}), o);
  const EtMethod& m = p.methods.at(0);
  ASSERT_EQ(p.delegate_blobs.size(), 1u);
  ASSERT_EQ(m.delegates.size(), 1u);
  int delegate_calls = 0;
  for (const auto& call : m.calls) {
    if (!call.delegate) {
      EXPECT_NE(m.operators.at(size_t(call.op)).first, "aten::add");
      continue;
    }
    ++delegate_calls;
    ASSERT_EQ(call.args.size(), 2u);  // new, logits
    EXPECT_EQ(call.args[0], m.inputs.at(0));
    EXPECT_EQ(call.args[1], m.outputs.at(0));
  }
  EXPECT_EQ(delegate_calls, 1);
  EXPECT_NE(std::find(p.kernels.begin(), p.kernels.end(), "XnnpackBackend (XNNAdd)"), p.kernels.end());
  EXPECT_EQ(std::find(p.kernels.begin(), p.kernels.end(), "aten::add.out"), p.kernels.end());
  EXPECT_EQ(p.delegate_blobs[0].substr(4, 4), "XH00");
  for (const auto& [name, overload] : m.operators) EXPECT_NE(name, "aten::add");  // the table keeps only what is called
}

// A program op no ExecuTorch kernel implements (a target the out-variant table lacks) is refused in
// one line naming the node and the op, before anything is written.
TEST(ExecuTorchProgram, AnOpWithoutAKernelIsRefusedNamingIt) {
  auto pt2 = pt2_backend::lower_to_pt2(cache_step(), {{{"past_key_values.0.key", "present.0.key"}}});
  bool renamed = false;
  for (auto& node : pt2.model.at("graph_module").at("graph").at("nodes"))
    if (!renamed && node.at("target") == "torch.ops.aten.add.Tensor") {
      node["target"] = "torch.ops.aten.fancy_op.default";
      renamed = true;
    }
  ASSERT_TRUE(renamed);
  EtLowerOptions o;
  o.shared_buffers = {{"past_key_values.0.key", "present.0.key"}};
  try {
    lower_to_executorch(pt2, o);
    FAIL() << "expected Unsupported";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    const std::string what = e.what();
    EXPECT_NE(what.find("no ExecuTorch kernel for torch.ops.aten.fancy_op.default"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

// The task's static cache update, scatter(buffer, expand(reshape(cache_position)), new), is one
// index_put_ at cache_position: the broadcast index it no longer reads is not computed at all, and
// nothing copies the buffer back.
TEST(ExecuTorchProgram, TheCacheIsWrittenInPlaceWithoutItsBroadcastIndex) {
  Graph g;
  Builder b{g};
  g.symbols().declare("sequence_length", SymbolBounds{1, 8});
  const Dim s = Dim::sym("sequence_length");
  auto buf = g.add_input("past_key_values.0.key", DType::F32, {n(1), n(2), n(8), n(4)});
  auto upd = g.add_input("new", DType::F32, {n(1), n(2), s, n(4)});
  auto slots = g.add_input("cache_position", DType::I64, {s});
  auto index = b.add1("Expand", {b.reshape(slots, {1, 1, -1, 1}), b.i64s({1, 2, 1, 4})});
  auto written = b.add1("ScatterElements", {buf, index, upd}, {{"axis", int64_t(2)}});
  g.rename(written, "present.0.key");
  auto logits = b.plus(written, written);
  g.rename(logits, "logits");
  g.add_output(logits);
  g.add_output(written);
  const EtMethod m = lower(g).methods.at(0);
  std::map<std::string, int> calls;
  for (const auto& call : m.calls) ++calls[m.operators.at(size_t(call.op)).first];
  EXPECT_EQ(calls["aten::index_put_"], 1);
  EXPECT_EQ(calls["aten::scatter"], 0);
  EXPECT_EQ(calls["aten::expand_copy"], 0);
  EXPECT_EQ(calls["aten::view_copy"], 0);
  EXPECT_EQ(calls["aten::copy_"], 0);
}
