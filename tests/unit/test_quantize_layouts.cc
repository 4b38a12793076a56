// The standard-op forms of weight-only quantization (docs/quantization.md): 4-bit dtypes (packing,
// sizes), the blocked layouts of the ONNX portable profile ([K, N], blocks along K) and of OpenVINO
// ([N, K/block, block]) against the MatMulNBits numbers they are made from, the executor's blocked
// DequantizeLinear on 4-bit inputs, and apply-precision's three targets computing the same numbers.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ir/builder.h"
#include "ir/graph.h"
#include "ir/weight.h"
#include "passes/pass.h"
#include "passes/precision.h"
#include "quant/quantize.h"
#include "runtime/executor.h"
#include "random_weights.h"

using namespace hfx;

namespace {

using hfx::testing::random_matrix;

int nibble(const std::vector<uint8_t>& v, size_t i) { return (v[i / 2] >> (4 * (i % 2))) & 0xF; }

}  // namespace

TEST(Dtype4Bit, NamesSizesAndPacking) {
  EXPECT_EQ(dtype_name(DType::I4), "i4");
  EXPECT_EQ(dtype_name(DType::U4), "u4");
  EXPECT_EQ(dtype_from_name("u4"), DType::U4);
  EXPECT_EQ(dtype_bits(DType::I4), 4u);
  EXPECT_EQ(dtype_bits(DType::F16), 16u);
  EXPECT_EQ(dtype_nbytes(DType::U4, 5), 3u);  // ceil(5 / 2)
  EXPECT_EQ(dtype_nbytes(DType::I4, 4), 2u);
  EXPECT_EQ(dtype_nbytes(DType::F32, 3), 12u);
  EXPECT_EQ(Tensor(DType::I4, {3, 3}).nbytes(), 5u);

  // Element 2i in the low nibble; signed values in two's complement; an odd count's last high nibble 0.
  const std::vector<int64_t> values = {-8, 7, -1, 0, 3};
  std::vector<uint8_t> packed(3, 0xFF);
  convert_elements(DType::I64, values.data(), DType::I4, packed.data(), values.size());
  EXPECT_EQ(packed, (std::vector<uint8_t>{0x78, 0x0F, 0x03}));
  std::vector<int64_t> back(values.size());
  convert_elements(DType::I4, packed.data(), DType::I64, back.data(), back.size());
  EXPECT_EQ(back, values);
  const std::vector<uint8_t> u = {0x21, 0xF3};
  std::vector<float> f(4);
  convert_elements(DType::U4, u.data(), DType::F32, f.data(), 4);
  EXPECT_EQ(f, (std::vector<float>{1, 2, 3, 15}));
  const std::vector<int64_t> too_big = {16};
  EXPECT_THROW(convert_elements(DType::I64, too_big.data(), DType::U4, packed.data(), 1), Error);
}

// Each layout holds the MatMulNBits numbers: dequantizing it gives dequantize_blockwise's W exactly.
TEST(QuantLayouts, BlockedLayoutsHoldTheMatMulNBitsNumbers) {
  for (int bits : {4, 8})
    for (bool sym : {true, false})
      for (auto [K, N, block] : {std::tuple<int64_t, int64_t, int64_t>{96, 5, 32}, {80, 3, 32}, {64, 7, 128}}) {
        const auto w = random_matrix(K, N, uint64_t(K + N + bits));
        const auto q = quant::quantize_blockwise(w.data(), K, N, bits, block, sym, DType::F32);
        const auto ref = quant::dequantize_blockwise(q.data.data(), q.scales.data(), sym ? nullptr : q.zero_points.data(),
                                                     K, N, bits, block);
        const int64_t kb = quant::k_blocks(K, block);
        for (auto layout : {quant::Layout::BlockedKN, quant::Layout::BlockedNK}) {
          if (layout == quant::Layout::BlockedNK && kb > 1 && K % block) {
            EXPECT_THROW(quant::relayout(q, K, N, bits, block, sym, layout), Error);
            continue;
          }
          const auto r = quant::relayout(q, K, N, bits, block, sym, layout);
          ASSERT_EQ(r.data.size(), size_t(bits == 4 ? (K * N + 1) / 2 : K * N));
          ASSERT_EQ(r.scales.size(), size_t(kb * N));
          ASSERT_EQ(r.zero_points.size(), sym ? 0 : size_t(bits == 4 ? (kb * N + 1) / 2 : kb * N));
          const bool kn = layout == quant::Layout::BlockedKN;
          for (int64_t k = 0; k < K; ++k)
            for (int64_t n = 0; n < N; ++n) {
              const size_t i = size_t(kn ? k * N + n : n * K + k), bi = size_t(kn ? (k / block) * N + n : n * kb + k / block);
              int v = bits == 4 ? nibble(r.data, i) : r.data[i];
              if (sym) v = bits == 4 ? (v >= 8 ? v - 16 : v) : int(int8_t(uint8_t(v)));  // signed, no zero point
              const int zp = sym ? 0 : bits == 4 ? nibble(r.zero_points, bi) : r.zero_points[bi];
              ASSERT_EQ(float(v - zp) * r.scales[bi], ref[size_t(k * N + n)])
                  << bits << " bits sym " << sym << " K " << K << " layout " << int(layout) << " at " << k << "," << n;
            }
        }
      }
}

// `--format onnx,openvino` makes OpenVINO's compressed weights out of ONNX's MatMulNBits or DequantizeLinear
// bytes: relayout_between(from, to) gives what relayout(to) gives from the MatMulNBits numbers.
TEST(QuantLayouts, RelayoutBetweenLayoutsEqualsRelayoutFromMatMulNBits) {
  using quant::Layout;
  for (int bits : {4, 8})
    for (bool sym : {true, false})
      for (auto [K, N, block] : {std::tuple<int64_t, int64_t, int64_t>{96, 5, 32}, {64, 7, 128}, {64, 3, 16}, {48, 4, 0}}) {
        if (block == 0 && bits == 4) continue;  // per channel is int8 only
        const auto w = random_matrix(K, N, uint64_t(3 * K + N + bits));
        const auto q = block ? quant::quantize_blockwise(w.data(), K, N, bits, block, sym, DType::F32)
                             : quant::quantize_per_channel_int8(w.data(), K, N, sym, DType::F32);
        const auto want = quant::relayout(q, K, N, bits, block, sym, Layout::BlockedNK);
        for (Layout from : {Layout::MatMulNBits, Layout::BlockedKN}) {
          const auto got = quant::relayout_between(quant::relayout(q, K, N, bits, block, sym, from), K, N, bits, block, sym,
                                                   from, Layout::BlockedNK);
          EXPECT_EQ(got.data, want.data) << bits << " bits, sym " << sym << ", K " << K << ", block " << block;
          EXPECT_EQ(got.scales, want.scales);
          EXPECT_EQ(got.zero_points, want.zero_points);
        }
        const auto kn = quant::relayout(q, K, N, bits, block, sym, Layout::BlockedKN);
        const auto back = quant::relayout_between(want, K, N, bits, block, sym, Layout::BlockedNK, Layout::BlockedKN);
        EXPECT_EQ(back.data, kn.data) << "NK -> KN, " << bits << " bits, sym " << sym << ", K " << K;
        EXPECT_EQ(back.scales, kn.scales);
        EXPECT_EQ(back.zero_points, kn.zero_points);
      }
}

TEST(QuantLayouts, WeightRefPartShapesAndTypes) {
  const int64_t K = 64, N = 6;
  auto ref = ir::WeightRef::constant(Tensor::from_vector<float>(DType::F32, {K, N}, random_matrix(K, N, 3)));
  auto parts = ref.quantized({4, 32, false, DType::F32, quant::Layout::BlockedKN});
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].dtype(), DType::U4);
  EXPECT_EQ(parts[0].shape(), (std::vector<int64_t>{K, N}));
  EXPECT_EQ(parts[0].nbytes(), size_t(K * N / 2));
  EXPECT_EQ(parts[0].materialize().nbytes(), size_t(K * N / 2));
  EXPECT_EQ(parts[1].shape(), (std::vector<int64_t>{2, N}));
  EXPECT_EQ(parts[2].dtype(), DType::U4);
  EXPECT_EQ(parts[2].nbytes(), size_t(N));  // 2 x 6 nibbles
  auto ov = ref.quantized({4, 32, true, DType::F32, quant::Layout::BlockedNK});
  ASSERT_EQ(ov.size(), 2u);
  EXPECT_EQ(ov[0].dtype(), DType::I4);
  EXPECT_EQ(ov[0].shape(), (std::vector<int64_t>{N, 2, 32}));
  EXPECT_EQ(ov[1].shape(), (std::vector<int64_t>{N, 2, 1}));
  auto rows = ref.quantized({8, 0, false, DType::F32, quant::Layout::BlockedNK});  // int8:channel
  EXPECT_EQ(rows[0].dtype(), DType::U8);
  EXPECT_EQ(rows[0].shape(), (std::vector<int64_t>{N, K}));
  EXPECT_EQ(rows[2].shape(), (std::vector<int64_t>{N, 1}));
}

TEST(QuantKernels, BlockedDequantizeLinearOf4BitValues) {
  // x [4, 2] u4 in blocks of 2 along axis 0: scales and zero points [2, 2].
  ir::Graph g;
  ir::Builder b(g);
  Tensor x(DType::U4, {4, 2});
  const std::vector<int64_t> xv = {1, 2, 3, 4, 5, 6, 15, 0};
  convert_elements(DType::I64, xv.data(), DType::U4, x.data(), xv.size());
  Tensor zp(DType::U4, {2, 2});
  const std::vector<int64_t> zv = {1, 2, 8, 0};
  convert_elements(DType::I64, zv.data(), DType::U4, zp.data(), zv.size());
  auto s = b.weight("s", ir::WeightRef::constant(Tensor::from_vector<float>(DType::F32, {2, 2}, {1.f, 10.f, 0.5f, 2.f})));
  g.add_output(b.add1("DequantizeLinear", {b.weight("x", ir::WeightRef::constant(x)), s, b.weight("z", ir::WeightRef::constant(zp))},
                      {{"axis", int64_t(0)}, {"block_size", int64_t(2)}}, "y"));
  auto y = runtime::Executor(g).run({}).at("y");
  EXPECT_EQ(std::vector<float>(y.as<float>(), y.as<float>() + 8),
            (std::vector<float>{0.f, 0.f, 2.f, 20.f, -1.5f, 12.f, 3.5f, 0.f}));

  // i4 [2, 2, 2] (OpenVINO groups: axis 2, one block per group), scales [2, 2, 1], no zero point.
  ir::Graph g2;
  ir::Builder b2(g2);
  Tensor xi(DType::I4, {2, 2, 2});
  const std::vector<int64_t> xiv = {-8, 7, -1, 0, 1, 2, 3, -4};
  convert_elements(DType::I64, xiv.data(), DType::I4, xi.data(), xiv.size());
  auto s2 = b2.weight("s", ir::WeightRef::constant(Tensor::from_vector<float>(DType::F32, {2, 2, 1}, {1.f, 2.f, -1.f, 0.5f})));
  g2.add_output(b2.add1("DequantizeLinear", {b2.weight("x", ir::WeightRef::constant(xi)), s2},
                        {{"axis", int64_t(2)}, {"block_size", int64_t(2)}}, "y"));
  auto y2 = runtime::Executor(g2).run({}).at("y");
  EXPECT_EQ(std::vector<float>(y2.as<float>(), y2.as<float>() + 8),
            (std::vector<float>{-8.f, 7.f, -2.f, 0.f, -1.f, -2.f, 1.5f, -2.f}));
}

// The three targets write different ops over the same quantized numbers: the logits agree to f32
// rounding. Portable writes no contrib op; OpenVINO computes f16 layers in f32.
TEST(ApplyPrecision, TargetsComputeTheSameNumbers) {
  ir::Graph g;
  {
    ir::Builder b(g);
    const int64_t K = 64, N = 48;
    auto x = g.add_input("x", DType::F32, fixed_shape({2, 3, K}));
    auto w = b.weight("proj.weight", ir::WeightRef::constant(Tensor::from_vector<float>(DType::F32, {N, K}, random_matrix(N, K, 7)))
                                         .plus_scalar(0));
    auto s = b.scope("model");
    g.add_output(b.add1("Linear", {x, w}, {}, "y"));
  }
  const ir::Graph folded = passes::run_pipeline(g, {"decompose-composites", "fold-weight-transforms"});
  const auto xv = random_matrix(6, 64, 8);
  const Tensor x = Tensor::from_vector<float>(DType::F32, {2, 3, 64}, xv);
  using passes::PrecisionTarget;
  for (const char* spec : {"int4", "int4:asym", "int8", "int8:asym", "int8:channel", "int8:channel:asym", "int4:block=16"}) {
    const quant::PrecisionSpec p{DType::F32, quant::QuantSpec::parse(spec), false};
    auto run = [&](const ir::Graph& graph) { return runtime::Executor(graph).run({{"x", x}}).at("y"); };
    const Tensor want = run(passes::apply_precision(folded, p, PrecisionTarget::OrtContrib));
    for (auto target : {PrecisionTarget::Portable, PrecisionTarget::OpenVino}) {
      for (const ir::Graph& src : {g, folded}) {
        const ir::Graph out = passes::apply_precision(src, p, target);
        for (const auto& n : out.nodes()) EXPECT_NE(n.op, "MatMulNBits") << spec;
        const Tensor got = run(out);
        for (int64_t i = 0; i < want.numel(); ++i)
          ASSERT_NEAR(got.as<float>()[i], want.as<float>()[i], 1e-5) << spec << " target " << int(target);
      }
    }
  }
  // f16 on OpenVINO: f16 weights, f32 compute (no Cast of the activations to f16).
  const quant::PrecisionSpec f16{DType::F16, {}, false};
  const ir::Graph ov = passes::apply_precision(folded, f16, PrecisionTarget::OpenVino);
  int casts_to_f16 = 0;
  for (const auto& n : ov.nodes()) casts_to_f16 += n.op == "Cast" && n.attr_str("to") == "f16";
  EXPECT_EQ(casts_to_f16, 0);
  bool f16_weight = false;
  for (auto id : ov.weights()) f16_weight |= ov.weight(id)->dtype() == DType::F16;
  EXPECT_TRUE(f16_weight);
}

// OpenVINO takes whole groups: K = 96 at blocks of 64 becomes groups of 48 (the largest multiple of 8
// dividing K below the block), where ONNX keeps 64 with a partial last block.
TEST(ApplyPrecision, OpenVinoAdjustsPartialGroups) {
  const auto block_of_dequantize = [](passes::PrecisionTarget target) {
    ir::Graph g;
    ir::Builder b(g);
    auto x = g.add_input("x", DType::F32, fixed_shape({1, 96}));
    auto w = b.weight("w", ir::WeightRef::constant(Tensor::from_vector<float>(DType::F32, {96, 4}, random_matrix(96, 4, 9))).plus_scalar(0));
    g.add_output(b.add1("MatMul", {x, w}, {}, "y"));
    const ir::Graph out = passes::apply_precision(g, {DType::F32, quant::QuantSpec::parse("int8:block=64"), false}, target);
    for (const auto& node : out.nodes())
      if (node.op == "DequantizeLinear") return node.attr_int("block_size");
    return int64_t(-1);
  };
  EXPECT_EQ(block_of_dequantize(passes::PrecisionTarget::OpenVino), 48);
  EXPECT_EQ(block_of_dequantize(passes::PrecisionTarget::Portable), 64);
}

#ifdef HFX_HAVE_OPENVINO
#include <unistd.h>

#include <filesystem>
#include <openvino/op/constant.hpp>
#include <openvino/openvino.hpp>

#include "backends/openvino/ov_writer.h"

// The openvino target's quantized and f16 Linear layers, written as IR and run on the CPU plugin, give
// the reference executor's numbers; the weight Constants keep their compressed element types.
TEST(OpenVinoQuantized, CompressedLinearMatchesTheReferenceExecutor) {
  namespace fs = std::filesystem;
  const int64_t K = 64, N = 24;
  for (const char* spec : {"int4", "int4:asym", "int8", "int8:channel:asym", "f16"}) {
    ir::Graph g("q");
    {
      ir::Builder b(g);
      auto x = g.add_input("x", DType::F32, {Dim::sym("batch_size"), Dim::fixed(K)});
      auto w = b.weight("w", ir::WeightRef::constant(Tensor::from_vector<float>(DType::F32, {K, N}, random_matrix(K, N, 11)))
                                 .plus_scalar(0));
      g.add_output(b.add1("MatMul", {x, w}, {}, "y"));
    }
    const bool f16 = std::string(spec) == "f16";
    const quant::PrecisionSpec p{f16 ? DType::F16 : DType::F32, quant::QuantSpec::parse(f16 ? "" : spec), false};
    const ir::Graph q = passes::apply_precision(g, p, passes::PrecisionTarget::OpenVino);
    const fs::path dir = fs::temp_directory_path() / ("hfx-ovq-test-" + std::to_string(::getpid()));
    auto written = openvino_backend::write_openvino(q, dir, {});
    const Tensor x = Tensor::from_vector<float>(DType::F32, {3, K}, random_matrix(3, K, 12));
    const Tensor want = runtime::Executor(q).run({{"x", x}}).at("y");
    ov::Core core;
    auto model = core.read_model(written.xml_path.string());
    std::set<std::string> weight_types;
    for (const auto& op : model->get_ordered_ops())
      if (auto c = ov::as_type_ptr<ov::op::v0::Constant>(op); c && ov::shape_size(c->get_shape()) >= size_t(K * N))
        weight_types.insert(c->get_element_type().get_type_name());
    const std::string expect = f16 ? "f16" : std::string(spec) == "int4" ? "i4" : std::string(spec) == "int4:asym" ? "u4"
                               : std::string(spec) == "int8" ? "i8" : "u8";
    EXPECT_EQ(weight_types, std::set<std::string>{expect}) << spec;
    // Dynamic quantization off: the CPU plugin otherwise rounds the activations of compressed-weight
    // FullyConnected layers to int8 in groups (its default for u4/i4/u8/i8 weights), which the f32
    // reference does not model.
    auto compiled = core.compile_model(model, "CPU", ov::hint::inference_precision(ov::element::f32),
                                       ov::hint::dynamic_quantization_group_size(0));
    auto req = compiled.create_infer_request();
    req.set_tensor("x", ov::Tensor(ov::element::f32, ov::Shape{3, size_t(K)}, const_cast<uint8_t*>(x.data())));
    req.infer();
    const ov::Tensor got = req.get_tensor("y");
    ASSERT_EQ(got.get_size(), size_t(want.numel()));
    for (int64_t i = 0; i < want.numel(); ++i) EXPECT_NEAR(got.data<float>()[i], want.as<float>()[i], 1e-4) << spec << " " << i;
    fs::remove_all(dir);
  }
}
#endif
