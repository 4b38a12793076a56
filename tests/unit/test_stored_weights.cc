// The reference executor reads MatMul, Linear and Gather weights where they lie in the file
// (runtime/kernels_stored.cc): the same numbers as the f32 kernels over the materialised weight, for
// every stored dtype and layout, for a few rows (matrix-vector products) and many (sgemm), held and
// streamed, with the chains of graph Transposes and Casts it folds, and none for a Cast that rounds.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "core/mapped_file.h"
#include "ir/builder.h"
#include "ir/graph.h"
#include "ir/rewrite.h"
#include "passes/pass.h"
#include "runtime/executor.h"

using namespace hfx;
using hfx::ir::ValueId;
using hfx::runtime::ExecOptions;
using hfx::runtime::Executor;
namespace fs = std::filesystem;

namespace {

// K and N not multiples of the kernels' 16 lanes or of any block.
constexpr int64_t K = 37, N = 53;
// Wide enough for every tile of the few-row kernels (kernels_stored.cc): 4-column dot tiles and a
// ragged one, 128- and 64-column axpy tiles and a ragged edge, the columns split over two threads.
constexpr int64_t kWideK = 300, kWideN = 333;

// A file holding one [n, k] weight in each of f32, bf16 and f16 (values exact in all three), after an
// odd byte (a safetensors payload need not be aligned).
struct WeightFile {
  int64_t n, k;
  std::shared_ptr<const MappedFile> file;
  std::vector<float> values;  // [n, k]
  size_t offset(DType dt) const { return dt == DType::F32 ? 1 : dt == DType::BF16 ? 1 + 4 * values.size() : 1 + 6 * values.size(); }

  WeightFile(int64_t n_, int64_t k_) : n(n_), k(k_) {
    std::mt19937 rng(5);
    std::uniform_int_distribution<int> small(-64, 64);
    for (int64_t i = 0; i < n * k; ++i) values.push_back(float(small(rng)) / 64.0f);  // exact in bf16 and f16
    std::vector<uint8_t> bytes(1 + values.size() * 8);
    convert_elements(DType::F32, values.data(), DType::F32, bytes.data() + offset(DType::F32), values.size());
    convert_elements(DType::F32, values.data(), DType::BF16, bytes.data() + offset(DType::BF16), values.size());
    convert_elements(DType::F32, values.data(), DType::F16, bytes.data() + offset(DType::F16), values.size());
    const fs::path path =
        fs::temp_directory_path() / ("hfx_stored_weights_" + std::to_string(::getpid()) + "_" + std::to_string(n));
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    file = MappedFile::open(path);
    fs::remove(path);  // the map keeps it
  }
  ir::WeightRef weight(DType dt) const { return ir::WeightRef::source(file, "w", dt, {n, k}, offset(dt)); }
};

const WeightFile& weights() {
  static const WeightFile w(N, K);
  return w;
}
const WeightFile& wide_weights() {
  static const WeightFile w(kWideN, kWideK);
  return w;
}

Tensor random_input(std::vector<int64_t> shape, unsigned seed) {
  Tensor t(DType::F32, shape);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.as<float>()[i] = u(rng);
  return t;
}

// y = x @ W^T computed here in double.
std::vector<double> expected_product(const Tensor& x, const WeightFile& wf = weights()) {
  const auto& w = wf.values;
  const int64_t K = wf.k, N = wf.n;
  const int64_t rows = x.numel() / K;
  std::vector<double> y(size_t(rows * N));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += double(x.as<float>()[r * K + k]) * double(w[size_t(n * K + k)]);
      y[size_t(r * N + n)] = s;
    }
  return y;
}

void expect_close(const Tensor& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(size_t(got.numel()), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got.as<float>()[i], want[i], 1e-5) << what << " at " << i;
}

// How the product's weight reaches the node.
enum class Form {
  LinearOnStored,         // Linear(x, W [N, K] as f32): the reference graph's Linear layers
  MatMulOnFoldedT,        // MatMul(x, W^T folded into the WeightRef): an artifact's [K, N] initializer
  MatMulOnGraphT,         // MatMul(x, Transpose(W)): a tied lm_head read back from a file
  MatMulOnGraphCastT,     // MatMul(x, Transpose(Cast(W, f32))): a half-precision artifact
};

Tensor run_product(Form form, DType dt, const Tensor& x, bool stream, const WeightFile& wf = weights()) {
  ir::Graph g("product");
  ir::Builder b(g);
  const ValueId in = g.add_input("x", DType::F32, fixed_shape(x.shape()));
  ir::WeightRef w = wf.weight(dt);
  ValueId y = ir::kNone;
  switch (form) {
    case Form::LinearOnStored: y = b.add1("Linear", {in, g.add_weight("w", w.cast(DType::F32))}, {}, "y"); break;
    case Form::MatMulOnFoldedT:
      y = b.add1("MatMul", {in, g.add_weight("w", w.cast(DType::F32).transposed({1, 0}))}, {}, "y");
      break;
    case Form::MatMulOnGraphT: {
      const ValueId t = b.add1("Transpose", {g.add_weight("w", w.cast(DType::F32))}, {{"perm", std::vector<int64_t>{1, 0}}});
      y = b.add1("MatMul", {in, t}, {}, "y");
      break;
    }
    case Form::MatMulOnGraphCastT: {
      const ValueId c = b.add1("Cast", {g.add_weight("w", w)}, {{"to", std::string("f32")}});
      y = b.add1("MatMul", {in, b.add1("Transpose", {c}, {{"perm", std::vector<int64_t>{1, 0}}})}, {}, "y");
      break;
    }
  }
  g.add_output(y);
  ExecOptions o;
  o.cache_weights = !stream;
  Executor ex(g, o);
  ex.run({{"x", x}});  // a second run reads the weight again (held: cached state; streamed: released pages)
  return ex.run({{"x", x}}).at("y");
}

}  // namespace

TEST(StoredWeights, ProductsMatchForEveryDtypeLayoutRowCountAndMode) {
  for (const int64_t rows : {1, 3, 9}) {  // matrix-vector products up to 4 rows, sgemm above
    const Tensor x = random_input({rows, K}, unsigned(rows));
    const auto want = expected_product(x);
    for (DType dt : {DType::F32, DType::BF16, DType::F16})
      for (Form form : {Form::LinearOnStored, Form::MatMulOnFoldedT, Form::MatMulOnGraphT, Form::MatMulOnGraphCastT})
        for (bool stream : {false, true})
          expect_close(run_product(form, dt, x, stream), want,
                       fmt::format("{} rows, {}, form {}, {}", rows, dtype_name(dt), int(form), stream ? "streamed" : "held"));
  }
}

TEST(StoredWeights, EveryFewRowTileMatchesOnAWideWeight) {
  // 1 and 2 rows take the 128-column axpy tiles, 3 and 5 a group of 4 and a ragged group, 16 four
  // groups of 4, 17 sgemm; the dot tiles run 4 output columns at a time and then one by one.
  for (const int64_t rows : {1, 2, 3, 5, 16, 17}) {
    const Tensor x = random_input({rows, kWideK}, unsigned(100 + rows));
    const auto want = expected_product(x, wide_weights());
    for (DType dt : {DType::F32, DType::BF16})
      for (Form form : {Form::LinearOnStored, Form::MatMulOnFoldedT})
        for (bool stream : {false, true}) {
          const Tensor got = run_product(form, dt, x, stream, wide_weights());
          ASSERT_EQ(size_t(got.numel()), want.size());
          for (size_t i = 0; i < want.size(); ++i)
            ASSERT_NEAR(got.as<float>()[i], want[i], 1e-4)
                << rows << " rows, " << dtype_name(dt) << ", form " << int(form) << " at " << i;
        }
  }
}

TEST(StoredWeights, ARowGetsTheSameBitsWhateverRowsItRunsWith) {
  // The few-row kernels fix each output's order of summation whatever the group (docs/verify.md), so
  // a shape case's row and the same row in a greedy step give the same numbers.
  const Tensor x = random_input({16, kWideK}, 7);
  for (DType dt : {DType::F32, DType::BF16})
    for (Form form : {Form::LinearOnStored, Form::MatMulOnFoldedT}) {
      const Tensor all = run_product(form, dt, x, false, wide_weights());
      for (int64_t r : {0, 5, 15}) {
        Tensor one(DType::F32, {1, kWideK});
        std::copy_n(x.as<float>() + r * kWideK, kWideK, one.as<float>());
        const Tensor alone = run_product(form, dt, one, false, wide_weights());
        for (int64_t j = 0; j < kWideN; ++j)
          ASSERT_EQ(alone.as<float>()[j], all.as<float>()[r * kWideN + j])
              << "row " << r << " column " << j << ", " << dtype_name(dt) << ", form " << int(form);
      }
    }
}

TEST(StoredWeights, LinearBiasAndBatchedInputs) {
  ir::Graph g("linear");
  ir::Builder b(g);
  const Tensor x = random_input({2, 3, K}, 7);
  const ValueId in = g.add_input("x", DType::F32, fixed_shape(x.shape()));
  Tensor bias(DType::F32, {N});
  for (int64_t n = 0; n < N; ++n) bias.as<float>()[n] = float(n);
  g.add_output(b.add1("Linear", {in, g.add_weight("w", weights().weight(DType::BF16).cast(DType::F32)), b.constant(bias)}, {}, "y"));
  const Tensor y = Executor(g).run({{"x", x}}).at("y");
  EXPECT_EQ(y.shape(), (std::vector<int64_t>{2, 3, N}));
  auto want = expected_product(x);
  for (size_t i = 0; i < want.size(); ++i) want[i] += double(i % N);
  expect_close(y, want, "linear with bias");
}

TEST(StoredWeights, GatherReadsRowsOfTheStoredTable) {
  for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
    ir::Graph g("gather");
    ir::Builder b(g);
    const ValueId ids = g.add_input("ids", DType::I64, fixed_shape({2, 2}));
    g.add_output(b.add1("Gather", {g.add_weight("table", weights().weight(dt).cast(DType::F32)), ids}, {{"axis", int64_t(0)}}, "y"));
    const Tensor y = Executor(g).run({{"ids", Tensor::from_vector<int64_t>(DType::I64, {2, 2}, {0, N - 1, -1, 5})}}).at("y");
    ASSERT_EQ(y.shape(), (std::vector<int64_t>{2, 2, K}));
    const auto& w = weights().values;
    const int64_t rows[] = {0, N - 1, N - 1, 5};
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t k = 0; k < K; ++k) ASSERT_EQ(y.as<float>()[i * K + k], w[size_t(rows[i] * K + k)]) << dtype_name(dt);
    EXPECT_THROW(Executor(g).run({{"ids", Tensor::from_vector<int64_t>(DType::I64, {2, 2}, {0, N, 0, 0})}}), Error);
  }
}

TEST(StoredWeights, ARoundingCastIsComputedNotReadInPlace) {
  // Cast(f32 W, bf16) rounds: the product must see the rounded values, not the stored f32 ones.
  ir::Graph g("rounded");
  ir::Builder b(g);
  const Tensor x = random_input({1, K}, 3);
  const ValueId in = g.add_input("x", DType::F32, fixed_shape(x.shape()));
  std::vector<float> thirds(size_t(N * K), 1.0f / 3.0f);
  const fs::path path = fs::temp_directory_path() / ("hfx_stored_thirds_" + std::to_string(::getpid()));
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(thirds.data()), std::streamsize(thirds.size() * 4));
  auto file = MappedFile::open(path);
  fs::remove(path);
  const ValueId w = g.add_weight("w", ir::WeightRef::source(file, "w", DType::F32, {N, K}, 0));
  const ValueId rounded = b.add1("Cast", {w}, {{"to", std::string("bf16")}});
  g.add_output(b.add1("Linear", {in, rounded}, {}, "y"));
  const Tensor y = Executor(g).run({{"x", x}}).at("y");
  double sum = 0;
  for (int64_t k = 0; k < K; ++k) sum += double(x.as<float>()[k]);
  const double bf16_third = 0.333984375;  // 1/3 rounded to bf16
  EXPECT_NEAR(y.as<float>()[0], sum * bf16_third, 1e-5);
  EXPECT_GT(std::abs(y.as<float>()[0] - sum / 3.0), 1e-5);
}

TEST(StoredWeights, ATransposedTableIsGatheredFromItsMaterialisedForm) {
  // Gather over Transpose(W): rows of W^T are columns of the stored matrix, so the lookup cannot read
  // stored rows; the executor materialises the transpose instead.
  ir::Graph g("gather_t");
  ir::Builder b(g);
  const ValueId ids = g.add_input("ids", DType::I64, fixed_shape({1}));
  const ValueId t = b.add1("Transpose", {g.add_weight("w", weights().weight(DType::BF16).cast(DType::F32))},
                           {{"perm", std::vector<int64_t>{1, 0}}});
  g.add_output(b.add1("Gather", {t, ids}, {{"axis", int64_t(0)}}, "y"));
  const Tensor y = Executor(g).run({{"ids", Tensor::from_vector<int64_t>(DType::I64, {1}, {2})}}).at("y");
  ASSERT_EQ(y.shape(), (std::vector<int64_t>{1, N}));
  for (int64_t n = 0; n < N; ++n) ASSERT_EQ(y.as<float>()[n], weights().values[size_t(n * K + 2)]);
}

TEST(StoredWeights, RunsInLockstepMatchRunsInTurn) {
  // y = Linear(x, W) + bias, z = Transpose(Cast(W))-MatMul of y's first K columns: two stored weights,
  // a value (y) read by two nodes, runs of different row counts through a symbolic dim. Each block of a
  // weight serves every run of the group (gemm_stored): read as stored for a few rows, widened once
  // for the runs sgemm takes (20 rows).
  ir::Graph g("lockstep");
  ir::Builder b(g);
  const ValueId in = g.add_input("x", DType::F32, {Dim::sym("rows"), Dim::fixed(K)});
  Tensor bias(DType::F32, {N});
  for (int64_t n = 0; n < N; ++n) bias.as<float>()[n] = float(n) / 8;
  const ValueId y = b.add1("Linear", {in, g.add_weight("w", weights().weight(DType::BF16).cast(DType::F32)), b.constant(bias)}, {}, "y");
  const ValueId cut = b.add1("Slice", {y, b.constant(Tensor::from_vector<int64_t>(DType::I64, {1}, {0})),
                                       b.constant(Tensor::from_vector<int64_t>(DType::I64, {1}, {K})),
                                       b.constant(Tensor::from_vector<int64_t>(DType::I64, {1}, {1}))});
  const ValueId w16 = b.add1("Cast", {g.add_weight("w16", weights().weight(DType::F16))}, {{"to", std::string("f32")}});
  g.add_output(y);
  g.add_output(b.add1("MatMul", {cut, b.add1("Transpose", {w16}, {{"perm", std::vector<int64_t>{1, 0}}})}, {}, "z"));
  const std::vector<std::map<std::string, Tensor>> inputs{
      {{"x", random_input({1, K}, 11)}}, {{"x", random_input({6, K}, 12)}}, {{"x", random_input({2, K}, 13)}},
      {{"x", random_input({20, K}, 14)}}};
  for (bool stream : {false, true}) {
    ExecOptions o;
    o.cache_weights = !stream;
    Executor one_by_one(g, o), lockstep(g, o);
    const auto together = lockstep.run_many({&inputs[0], &inputs[1], &inputs[2], &inputs[3]});
    ASSERT_EQ(together.size(), inputs.size());
    for (size_t r = 0; r < inputs.size(); ++r) {
      const auto alone = one_by_one.run(inputs[r]);
      for (const char* name : {"y", "z"}) {
        const Tensor &a = alone.at(name), &t = together[r].at(name);
        ASSERT_EQ(a.shape(), t.shape()) << name << " of run " << r << (stream ? ", streamed" : ", held");
        for (int64_t i = 0; i < a.numel(); ++i)
          ASSERT_EQ(a.as<float>()[i], t.as<float>()[i]) << name << " of run " << r << " at " << i;
      }
      EXPECT_EQ(together[r].at("y").shape()[0], inputs[r].at("x").shape()[0]);
    }
  }
}

// The onnx `ort` profile's last pass turns products over a transposed weight into FusedMatMul over the
// stored [N, K] matrix (com.microsoft FusedMatMul(transB=1) in the file): the same numbers, the weight
// read in place untransposed, nothing else left of the transpose; a weight stored [K, N] stays a MatMul.
TEST(StoredWeights, OrtFusedMatMulReadsTheStoredLayout) {
  const Tensor x = random_input({3, K}, 21);
  const auto want = expected_product(x);
  auto ops = [](const ir::Graph& g) {
    std::map<std::string, int> n;
    for (const auto& node : g.nodes()) ++n[node.op];
    return n;
  };
  for (DType dt : {DType::F32, DType::BF16}) {
    // Every form the pass rewrites: the ones run_product builds plus a weight widened at use after its
    // folded transpose (a bf16 export's MatMul(x, Cast(W^T))) and a widened tied table.
    for (int form = 0; form < 4; ++form) {
      if (dt == DType::F32 && form >= 2) continue;  // no widening of an f32 weight
      ir::Graph g("product");
      ir::Builder b(g);
      const ValueId in = g.add_input("x", DType::F32, fixed_shape(x.shape()));
      const ir::WeightRef w = weights().weight(dt);
      const auto perm = ir::Attrs{{"perm", std::vector<int64_t>{1, 0}}};
      const auto to_f32 = ir::Attrs{{"to", std::string("f32")}};
      ValueId operand = ir::kNone;
      if (form == 0) operand = g.add_weight("w", w.cast(DType::F32).transposed({1, 0}));
      if (form == 1) operand = b.add1("Transpose", {g.add_weight("w", w.cast(DType::F32))}, perm);
      if (form == 2) operand = b.add1("Cast", {g.add_weight("w", w.transposed({1, 0}))}, to_f32);
      if (form == 3) operand = b.add1("Cast", {b.add1("Transpose", {g.add_weight("w", w)}, perm)}, to_f32);
      g.add_output(b.add1("MatMul", {in, operand}, {}, "y"));
      const ir::Graph fused = passes::ort_fused_matmul(g);
      const std::string what = fmt::format("{}, form {}", dtype_name(dt), form);
      auto n = ops(fused);
      EXPECT_EQ(n["FusedMatMul"], 1) << what;
      EXPECT_EQ(n["MatMul"] + n["Transpose"], 0) << what;
      // The product's weight, or the weight its operand widens.
      ValueId stored = fused.nodes().back().inputs[1];
      if (const ir::Node* cast = ir::producer(fused, stored)) stored = cast->inputs[0];
      const ir::WeightRef* sw = fused.weight(stored);
      ASSERT_TRUE(sw) << what;
      ASSERT_TRUE(sw->stored_matrix()) << what;
      EXPECT_FALSE(sw->stored_matrix()->transposed) << what << ": " << sw->describe();
      EXPECT_EQ(sw->shape(), (std::vector<int64_t>{N, K})) << what;
      for (bool stream : {false, true}) {
        ExecOptions o;
        o.cache_weights = !stream;
        expect_close(Executor(fused, o).run({{"x", x}}).at("y"), want, what);
      }
    }
  }
  // Stored [K, N] already (GPT-2's Conv1D): MatMul reads it in place.
  ir::Graph g("product");
  ir::Builder b(g);
  const ValueId in = g.add_input("x", DType::F32, {Dim::fixed(3), Dim::fixed(N)});
  g.add_output(b.add1("MatMul", {in, g.add_weight("w", weights().weight(DType::F32))}, {}, "y"));
  EXPECT_EQ(ops(passes::ort_fused_matmul(g))["MatMul"], 1);
}

namespace {

// Resident kB of the mapping that holds `p` (/proc/self/smaps' Rss of its range).
int64_t resident_kb_of_mapping(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in_range = false;
  const auto at = reinterpret_cast<uintptr_t>(p);
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    // A range line ("lo-hi perms ..."), not a field ("Rss:   12 kB").
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
      in_range = at >= lo && at < hi;
      continue;
    }
    if (in_range && line.rfind("Rss:", 0) == 0) return std::atoll(line.c_str() + 4);
  }
  return -1;
}

}  // namespace

TEST(StoredWeights, AStreamedRunKeepsPackedPagesMappedWithinItsBudget) {
  // MatMulNBits' B read in place from a mapped file, streamed: released after the node (RSS of the
  // mapping back to nothing), or kept mapped between runs when ExecOptions::kept_packed_bytes allows it
  // (the check of an int4 export: its quantized weights are mapped again every decode step otherwise).
  // The numbers are the same either way.
  constexpr int64_t kK = 1024, kN = 512, kBlock = 32, kBytes = kN * kK / 2;  // 64 pages of packed bytes
  std::vector<uint8_t> bytes(static_cast<size_t>(kBytes));
  std::mt19937 rng(3);
  for (auto& b : bytes) b = uint8_t(rng());
  const fs::path path = fs::temp_directory_path() / ("hfx_kept_packed_" + std::to_string(::getpid()));
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  const auto file = MappedFile::open(path);
  fs::remove(path);
  std::vector<float> scales(size_t(kN * kK / kBlock), 0.01f);
  ir::Graph g("nbits");
  ir::Builder b(g);
  const ValueId x = g.add_input("x", DType::F32, fixed_shape({2, kK}));
  const ValueId w = g.add_weight("B", ir::WeightRef::source(file, "B", DType::U8, {kN, kK / 2}, 0));
  const ValueId s = g.add_weight("scales", ir::WeightRef::constant(Tensor::from_vector<float>(DType::F32, {kN * kK / kBlock}, scales)));
  g.add_output(b.add1("MatMulNBits", {x, w, s}, {{"K", kK}, {"N", kN}, {"bits", int64_t(4)}, {"block_size", kBlock}}, "y"));
  const Tensor in = random_input({2, kK}, 7);
  std::vector<std::vector<float>> results;
  for (const int64_t budget : {int64_t(0), kBytes - 1, kBytes}) {
    ExecOptions o;
    o.cache_weights = false;
    o.kept_packed_bytes = budget;
    Executor ex(g, o);
    ex.run({{"x", in}});
    const Tensor y = ex.run({{"x", in}}).at("y");
    results.emplace_back(y.as<float>(), y.as<float>() + y.numel());
    const int64_t resident = resident_kb_of_mapping(file->data());
    ASSERT_GE(resident, 0) << "no mapping found for the weight file";
    if (budget >= kBytes) EXPECT_GE(resident, kBytes / 1024) << "kept within a budget of " << budget;
    else EXPECT_EQ(resident, 0) << "released with a budget of " << budget;
  }
  EXPECT_EQ(results[0], results[1]);
  EXPECT_EQ(results[0], results[2]);
}
