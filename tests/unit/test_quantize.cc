// Weight-only quantization: spec parsing, the quantizer's numbers (known values, ONNX Runtime's
// rounding), pack/unpack round trips, the WeightRef parts, and the executor's DequantizeLinear and
// MatMulNBits kernels.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "core/error.h"
#include "ir/builder.h"
#include "ir/graph.h"
#include "ir/weight.h"
#include "quant/quantize.h"
#include "runtime/executor.h"
#include "random_weights.h"

using namespace hfx;
using quant::QuantSpec;

namespace {

std::string error_of(const std::string& spec) {
  try {
    QuantSpec::parse(spec);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

using hfx::testing::random_matrix;

}  // namespace

TEST(QuantSpec, ParsesAndPrintsCanonically) {
  EXPECT_EQ(QuantSpec::parse("int4").str(), "int4:block=32:sym");
  EXPECT_EQ(QuantSpec::parse("int4:asym:block=128").str(), "int4:block=128:asym");
  EXPECT_EQ(QuantSpec::parse("int8").str(), "int8:block=128:sym");
  EXPECT_EQ(QuantSpec::parse("int8:channel").str(), "int8:channel:sym");
  EXPECT_EQ(QuantSpec::parse("int8:channel").block, 0);
  EXPECT_EQ(QuantSpec::parse("int8:block=64:asym").str(), "int8:block=64:asym");
  EXPECT_FALSE(QuantSpec::parse("").enabled());
  EXPECT_FALSE(QuantSpec::parse("none").enabled());
  EXPECT_EQ(QuantSpec::parse("int4:accuracy=4").str(), "int4:block=32:sym:accuracy=4");
  EXPECT_EQ(QuantSpec::parse("int4:accuracy=0").str(), "int4:block=32:sym");  // 0 is the unset default
  for (const auto& s : {"int4", "int4:block=16:asym", "int8", "int8:channel:asym", "int8:block=256", "int8:accuracy=2"})
    EXPECT_EQ(QuantSpec::parse(QuantSpec::parse(s).str()).str(), QuantSpec::parse(s).str());
}

TEST(QuantSpec, RejectsBadSpecsInOneLine) {
  for (const auto& s : {"int3", "int4:block=7", "int4:block=", "int4:block=x", "int4:block=512", "int4:fast",
                        "int4:sym:asym", "int4:block=32:block=64", "INT4", "int4:channel", "int8:channel:block=32",
                        "int4:accuracy=5", "int4:accuracy=", "int4:accuracy=44", "int8:channel:accuracy=4"}) {
    const std::string e = error_of(s);
    EXPECT_NE(e, "") << s;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    EXPECT_NE(e.find(s), std::string::npos) << e;  // names the spec
  }
  EXPECT_NE(error_of("int4:block=7").find("16, 32, 64, 128 or 256"), std::string::npos);
  EXPECT_THROW(quant::parse_dtype("f8"), Error);
  EXPECT_EQ(quant::parse_dtype("bfloat16"), DType::BF16);
}

TEST(Quantize, Int4SymmetricKnownValues) {
  // One block of 16 in one column: -8..7. The value of largest magnitude is -8, so scale = 8 / 8 = 1
  // and q = v + 8: the bytes are (2i) | (2i + 1) << 4.
  std::vector<float> w(16);
  for (int k = 0; k < 16; ++k) w[size_t(k)] = float(k - 8);
  auto q = quant::quantize_blockwise(w.data(), 16, 1, 4, 16, true, DType::F32);
  ASSERT_EQ(q.data.size(), 8u);
  ASSERT_EQ(q.scales.size(), 1u);
  EXPECT_TRUE(q.zero_points.empty());
  EXPECT_EQ(q.scales[0], 1.0f);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(q.data[size_t(i)], uint8_t((2 * i) | ((2 * i + 1) << 4))) << i;
  auto back = quant::dequantize_blockwise(q.data.data(), q.scales.data(), nullptr, 16, 1, 4, 16);
  EXPECT_EQ(back, w);
}

TEST(Quantize, Int4SymmetricScaleSignAndHalfAwayFromZero) {
  // Largest magnitude positive: the scale is negative (ONNX Runtime maps the larger half to [-8, 0]).
  std::vector<float> w(16, 0.f);
  w[0] = 8.f;
  w[1] = -0.5f;  // -0.5 / -1 + 8 = 8.5: roundf gives 9 (half away from zero), rint would give 8
  auto q = quant::quantize_blockwise(w.data(), 16, 1, 4, 16, true, DType::F32);
  EXPECT_EQ(q.scales[0], -1.0f);
  EXPECT_EQ(q.data[0] & 0xF, 0);  // 8 / -1 + 8 = 0
  EXPECT_EQ(q.data[0] >> 4, 9);
  EXPECT_EQ(q.data[1], 0x88);  // zeros sit at the zero point 8
}

TEST(Quantize, Int4AsymmetricKnownValues) {
  // -4..11 in one block: scale = 15 / 15 = 1, zero point 4, q = v + 4 = k.
  std::vector<float> w(16);
  for (int k = 0; k < 16; ++k) w[size_t(k)] = float(k - 4);
  auto q = quant::quantize_blockwise(w.data(), 16, 1, 4, 16, false, DType::F32);
  EXPECT_EQ(q.scales[0], 1.0f);
  ASSERT_EQ(q.zero_points.size(), 1u);
  EXPECT_EQ(q.zero_points[0], 0x84);  // block 0 in the low nibble, the unused high nibble the default 8
  for (int i = 0; i < 8; ++i) EXPECT_EQ(q.data[size_t(i)], uint8_t((2 * i) | ((2 * i + 1) << 4)));
  auto back = quant::dequantize_blockwise(q.data.data(), q.scales.data(), q.zero_points.data(), 16, 1, 4, 16);
  EXPECT_EQ(back, w);
}

TEST(Quantize, LayoutColumnsBlocksAndPartialBlock) {
  // K = 40 with blocks of 16: 3 blocks, the last one 8 long and zero padded; N = 3 columns.
  const int64_t K = 40, N = 3;
  auto w = random_matrix(K, N, 1);
  for (bool sym : {true, false}) {
    auto q = quant::quantize_blockwise(w.data(), K, N, 4, 16, sym, DType::F32);
    EXPECT_EQ(q.data.size(), size_t(N * 3 * 8));
    EXPECT_EQ(q.scales.size(), size_t(N * 3));
    EXPECT_EQ(q.zero_points.size(), sym ? 0u : size_t(N * 2));  // ceil(3 / 2) bytes per column
    for (int64_t n = 0; n < N; ++n) {
      for (int i = 4; i < 8; ++i) EXPECT_EQ(q.data[size_t((n * 3 + 2) * 8 + i)], 0) << "padding";
      if (!sym) {
        EXPECT_EQ(q.zero_points[size_t(n * 2 + 1)] >> 4, 8) << "padding nibble";
      }
    }
    // Column n, block 1 is quantized from w[16..31, n] alone.
    std::vector<float> col(16);
    for (int k = 0; k < 16; ++k) col[size_t(k)] = w[size_t((16 + k) * N + 2)];
    auto one = quant::quantize_blockwise(col.data(), 16, 1, 4, 16, sym, DType::F32);
    EXPECT_EQ(one.scales[0], q.scales[2 * 3 + 1]);
    EXPECT_TRUE(std::equal(one.data.begin(), one.data.end(), q.data.begin() + (2 * 3 + 1) * 8));
  }
}

TEST(Quantize, RoundTripErrorWithinOneStep) {
  for (int bits : {4, 8})
    for (bool sym : {true, false})
      for (int64_t block : {16, 32, 128}) {
        const int64_t K = 200, N = 7;
        auto w = random_matrix(K, N, uint64_t(bits * 1000 + block + sym));
        auto q = quant::quantize_blockwise(w.data(), K, N, bits, block, sym, DType::F32);
        auto back = quant::dequantize_blockwise(q.data.data(), q.scales.data(), sym ? nullptr : q.zero_points.data(), K,
                                                N, bits, block);
        const int64_t kb = quant::k_blocks(K, block);
        for (int64_t k = 0; k < K; ++k)
          for (int64_t n = 0; n < N; ++n) {
            const float step = std::fabs(q.scales[size_t(n * kb + k / block)]);
            ASSERT_LE(std::fabs(back[size_t(k * N + n)] - w[size_t(k * N + n)]), step * 1.0001f)
                << bits << " bits, block " << block << (sym ? " sym" : " asym");
          }
        // Re-quantizing the dequantized matrix reproduces the same bytes (idempotent on the grid).
        auto again = quant::quantize_blockwise(back.data(), K, N, bits, block, sym, DType::F32);
        EXPECT_EQ(again.data, q.data) << bits << " " << block << " " << sym;
      }
}

TEST(Quantize, F16ScalesAreRoundedBeforeUse) {
  auto w = random_matrix(32, 2, 3);
  auto q = quant::quantize_blockwise(w.data(), 32, 2, 4, 32, true, DType::F16);
  for (float s : q.scales) EXPECT_EQ(s, f16_to_f32(f32_to_f16(s)));
}

TEST(Quantize, PerChannelInt8HalfToEven) {
  // Column 0: max |v| = 127, scale 1: 2.5 -> 2 and -3.5 -> -4 (half to even). Column 1: zeros, scale 1.
  std::vector<float> w = {127.f, 0.f, 2.5f, 0.f, -3.5f, 0.f};
  auto q = quant::quantize_per_channel_int8(w.data(), 3, 2, true, DType::F32);
  EXPECT_EQ(q.scales, (std::vector<float>{1.f, 1.f}));
  EXPECT_EQ(int8_t(q.data[0]), 127);
  EXPECT_EQ(int8_t(q.data[2]), 2);
  EXPECT_EQ(int8_t(q.data[4]), -4);
  EXPECT_EQ(q.data[1], 0);
  // Asymmetric: range [-1, 254] -> scale 1, zero point 1.
  std::vector<float> a = {-1.f, 254.f, 0.5f};
  auto qa = quant::quantize_per_channel_int8(a.data(), 3, 1, false, DType::F32);
  EXPECT_EQ(qa.scales[0], 1.f);
  EXPECT_EQ(qa.zero_points[0], 1);
  EXPECT_EQ(qa.data, (std::vector<uint8_t>{0, 255, 1}));  // 0.5 -> 0 (even) + 1
}

TEST(Quantize, WeightRefPartsMatchTheQuantizer) {
  const int64_t K = 64, N = 5;
  auto w = random_matrix(K, N, 4);
  auto ref = ir::WeightRef::constant(Tensor::from_vector<float>(DType::F32, {K, N}, w));
  auto parts = ref.quantized({4, 32, false, DType::F32});
  ASSERT_EQ(parts.size(), 3u);
  auto q = quant::quantize_blockwise(w.data(), K, N, 4, 32, false, DType::F32);
  // Materialise out of order, and twice: each part is the same every time.
  for (int round = 0; round < 2; ++round) {
    Tensor s = parts[1].materialize(), d = parts[0].materialize(), z = parts[2].materialize();
    EXPECT_EQ(d.shape(), (std::vector<int64_t>{N, 2, 16}));
    EXPECT_EQ(d.nbytes(), parts[0].nbytes());
    EXPECT_EQ(std::vector<uint8_t>(d.data(), d.data() + d.nbytes()), q.data);
    EXPECT_EQ(std::vector<float>(s.as<float>(), s.as<float>() + s.numel()), q.scales);
    EXPECT_EQ(std::vector<uint8_t>(z.data(), z.data() + z.nbytes()), q.zero_points);
  }
  auto pc = ref.quantized({8, 0, true, DType::F16});
  ASSERT_EQ(pc.size(), 2u);
  EXPECT_EQ(pc[0].dtype(), DType::I8);
  EXPECT_EQ(pc[0].shape(), (std::vector<int64_t>{K, N}));
  EXPECT_EQ(pc[1].dtype(), DType::F16);
  EXPECT_EQ(pc[1].shape(), (std::vector<int64_t>{N}));
}

// A Linear layer's or a table's [N, K] weight read through its transpose (and a bf16 -> f32 cast) is
// quantized in chunks of rows, 16 MiB of f32 at a time: with more rows than one chunk (65536 rows of
// K = 64) the bytes equal one quantization of the whole.
TEST(Quantize, ChunkedQuantizationOfATallWeightEqualsTheWhole) {
  const int64_t N = 65536 + 1000, K = 64;
  const auto w = random_matrix(N, K, 11);  // [N, K], the checkpoint's layout
  Tensor nk = Tensor::from_vector<float>(DType::F32, {N, K}, w).cast(DType::BF16);
  const Tensor rounded = nk.cast(DType::F32);
  for (bool sym : {true, false}) {
    auto parts = ir::WeightRef::constant(nk).transposed({1, 0}).cast(DType::F32).quantized({4, 32, sym, DType::F32});
    const auto q = quant::quantize_blockwise(rounded.as<float>(), K, N, 4, 32, sym, DType::F32, true);
    const Tensor d = parts[0].materialize(), s = parts[1].materialize();
    EXPECT_EQ(std::vector<uint8_t>(d.data(), d.data() + d.nbytes()), q.data);
    EXPECT_EQ(std::vector<float>(s.as<float>(), s.as<float>() + s.numel()), q.scales);
    if (!sym) {
      const Tensor z = parts[2].materialize();
      EXPECT_EQ(std::vector<uint8_t>(z.data(), z.data() + z.nbytes()), q.zero_points);
    }
  }
}

// The quantizer as written before it ran 16 lanes at a time: one value at a time, in k order.
quant::Quantized scalar_quantize(const std::vector<float>& w, int64_t K, int64_t N, int bits, int64_t block, bool symmetric,
                                 DType scale_dtype) {
  const int64_t kb = quant::k_blocks(K, block), blob = quant::blob_bytes(bits, block);
  const int64_t zb = quant::zero_point_bytes_per_column(bits, K, block);
  const int qmax = (1 << bits) - 1;
  const float qmax_f = float(qmax);
  quant::Quantized out;
  out.data.assign(size_t(N * kb * blob), 0);
  out.scales.assign(size_t(N * kb), 0.f);
  if (!symmetric) out.zero_points.assign(size_t(N * zb), bits == 4 ? 0x88 : 0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t b = 0; b < kb; ++b) {
      const int64_t k0 = b * block, k1 = std::min(K, k0 + block);
      float mn = std::numeric_limits<float>::max(), mx = -mn;
      for (int64_t k = k0; k < k1; ++k) {
        const float v = w[size_t(k * N + n)];
        if (v < mn) mn = v;
        if (v > mx) mx = v;
      }
      // The scale from the range, scalar on both sides (the known-value tests and the ONNX Runtime
      // comparison hold it).
      const auto [scale, zp] = quant::block_scale(mn, mx, bits, symmetric, scale_dtype);
      if (!symmetric) {
        uint8_t& z = out.zero_points[size_t(n * zb + b * bits / 8)];
        z = bits == 8 ? uint8_t(zp) : uint8_t((z & ~(0xF << (4 * (b % 2)))) | (zp << (4 * (b % 2))));
      }
      out.scales[size_t(n * kb + b)] = scale;
      const float rs = scale != 0.0f ? 1.0f / scale : 0.0f;
      uint8_t* dst = out.data.data() + size_t((n * kb + b) * blob);
      for (int64_t k = k0; k < k1; ++k) {
        const float y = w[size_t(k * N + n)] * rs + float(zp);
        const uint8_t q = !(y > 0.0f) ? 0 : y >= qmax_f ? uint8_t(qmax) : uint8_t(int(y + 0.5f));
        if (bits == 8) dst[k - k0] = q;
        else dst[(k - k0) / 2] |= uint8_t(q << (4 * ((k - k0) % 2)));
      }
    }
  return out;
}

// Bytes as floats compare them: -0.0 and NaN too.
std::vector<uint32_t> float_bits(const std::vector<float>& v) {
  std::vector<uint32_t> out(v.size());
  std::memcpy(out.data(), v.data(), v.size() * 4);
  return out;
}

TEST(Quantize, SixteenLanesWriteTheScalarQuantizersBytes) {
  // Blocks the vector path takes whole (16 to 256 values), the tails it leaves to the scalar one (K 40
  // with blocks of 32: 8 values; K 56: 16 then 8), and values that could tell the two apart: zeros of
  // both signs as a block's extremes (scanned in order again), NaN, infinities, huge values, denormals,
  // constant blocks, half-way values; in the checkpoint's [N, K] layout and the strided [K, N] one, and
  // from bf16 [N, K] read as stored.
  std::mt19937 gen(7);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  const float specials[] = {0.0f, -0.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), 1e30f, -1e30f, 1e-40f, -1e-40f, 0.5f, -0.5f};
  for (int64_t K : {16, 40, 56, 256, 264})
    for (int kind = 0; kind < 5; ++kind) {
      const int64_t N = 24;
      std::vector<float> w(size_t(K * N));
      for (size_t i = 0; i < w.size(); ++i) {
        const int64_t n = int64_t(i) % N;
        if (kind == 0) w[i] = normal(gen);
        else if (kind == 1) w[i] = n % 3 == 0 ? 0.25f : gen() % 5 == 0 ? specials[gen() % std::size(specials)] : normal(gen);
        else if (kind == 4)  // a block of zeros after a NaN: only the scan in order says which zero is first
          w[i] = i < size_t(N) ? std::numeric_limits<float>::quiet_NaN() : (int64_t(i) / N) % 16 == 1 ? -0.0f : 0.0f;
        else {  // zeros of both signs as the maxima (2) or the minima (3); odd columns all zeros
          const float zero = gen() % 2 ? 0.0f : -0.0f, x = std::fabs(normal(gen));
          w[i] = n % 2 || gen() % 3 == 0 ? zero : kind == 2 ? -x : x;
        }
      }
      std::vector<float> w_nk(w.size());  // the same W stored [N, K]
      std::vector<uint16_t> w16_nk(w.size());  // and stored [N, K] in bf16 (its high halves)
      std::vector<float> w16_widened(w.size());  // those bf16 values, [K, N] in f32
      for (int64_t k = 0; k < K; ++k)
        for (int64_t n = 0; n < N; ++n) {
          const float x = w[size_t(k * N + n)];
          w_nk[size_t(n * K + k)] = x;
          uint32_t bits;
          std::memcpy(&bits, &x, 4);
          w16_nk[size_t(n * K + k)] = uint16_t(bits >> 16);
          bits &= 0xFFFF0000u;
          std::memcpy(&w16_widened[size_t(k * N + n)], &bits, 4);
        }
      for (int bits : {4, 8})
        for (int64_t block : {16, 32, 64, 128, 256})
          for (bool sym : {true, false})
            for (DType scales : {DType::F32, DType::F16, DType::BF16}) {
              const std::string what = fmt::format("K {}, values {}, int{} block {} {} scales {}", K, kind, bits, block,
                                                   sym ? "sym" : "asym", dtype_name(scales));
              const auto want = scalar_quantize(w, K, N, bits, block, sym, scales);
              for (bool nk : {false, true}) {
                const auto got = quant::quantize_blockwise(nk ? w_nk.data() : w.data(), K, N, bits, block, sym, scales, nk);
                ASSERT_EQ(got.data, want.data) << what << (nk ? " [N, K]" : " [K, N]");
                ASSERT_EQ(float_bits(got.scales), float_bits(want.scales)) << what;
                ASSERT_EQ(got.zero_points, want.zero_points) << what;
              }
              // bf16 stored [N, K], read as stored: the bytes of its values widened to f32.
              const auto want16 = scalar_quantize(w16_widened, K, N, bits, block, sym, scales);
              const auto got16 = quant::quantize_blockwise_bf16_nk(w16_nk.data(), K, N, bits, block, sym, scales);
              ASSERT_EQ(got16.data, want16.data) << what << " bf16";
              ASSERT_EQ(float_bits(got16.scales), float_bits(want16.scales)) << what << " bf16";
              ASSERT_EQ(got16.zero_points, want16.zero_points) << what << " bf16";
            }
    }
}

TEST(Quantize, PerChannelSixteenLanesWriteTheScalarBytes) {
  // int8:channel's values 16 columns at a time against the value-at-a-time quantizer it replaced
  // (rint by libm): half-way values both sides of even integers, NaN, infinities, zeros of both signs,
  // values past the clamp, N not a multiple of 16.
  std::mt19937 gen(5);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  const float specials[] = {0.0f, -0.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), 1e30f, -1e30f, 1e-40f};
  for (int64_t N : {16, 21, 48})
    for (bool sym : {true, false}) {
      const int64_t K = 37;
      std::vector<float> w(size_t(K * N));
      for (size_t i = 0; i < w.size(); ++i) w[i] = normal(gen);
      for (int64_t k = 0; k < K; ++k) w[size_t(k * N)] = float(k - K / 2) * 0.5f * (0.1f / 127.0f);  // exact halves
      for (int64_t n = 1; n < N; n += 7) w[size_t((n % K) * N + n)] = specials[size_t(n) % std::size(specials)];
      const auto got = quant::quantize_per_channel_int8(w.data(), K, N, sym, DType::F32);
      for (int64_t n = 0; n < N; ++n) {
        float mn = 0, mx = 0;
        for (int64_t k = 0; k < K; ++k) {
          mn = std::min(mn, w[size_t(k * N + n)]);
          mx = std::max(mx, w[size_t(k * N + n)]);
        }
        float scale = sym ? std::max(std::fabs(mn), std::fabs(mx)) / 127.0f : (mx - mn) / 255.0f;
        if (!(scale > 0.0f) || !std::isfinite(scale)) scale = 1.0f;
        ASSERT_EQ(float_bits({got.scales[size_t(n)]}), float_bits({scale})) << "column " << n;
        const int zp = sym ? 0 : int(std::clamp(std::nearbyint(0.0f - mn / scale), 0.0f, 255.0f));
        if (!sym) {
          ASSERT_EQ(got.zero_points[size_t(n)], zp) << "column " << n;
        }
        for (int64_t k = 0; k < K; ++k) {
          const float r = std::nearbyint(w[size_t(k * N + n)] / scale);
          const float c = sym ? std::clamp(r, -127.0f, 127.0f) : std::clamp(r + float(zp), 0.0f, 255.0f);
          const uint8_t want = std::isnan(c) ? 0 : sym ? uint8_t(int8_t(c)) : uint8_t(c);
          ASSERT_EQ(got.data[size_t(k * N + n)], want) << (sym ? "sym" : "asym") << " N " << N << " at k " << k << ", n " << n;
        }
      }
    }
}

TEST(Quantize, DequantizedColumnsAreTheScalarFormula) {
  // w = float(q - zero point) * scale for every value: blocks of 16 values at a time and the tail
  // (K 41 with blocks of 32: 9 values, an odd last one), odd blocks' zero points in the high nibble.
  std::mt19937 gen(3);
  for (int bits : {4, 8})
    for (int64_t K : {32, 41, 256})
      for (bool sym : {true, false}) {
        const int64_t N = 5, block = 32, kb = quant::k_blocks(K, block), blob = quant::blob_bytes(bits, block);
        const int64_t zb = quant::zero_point_bytes_per_column(bits, K, block);
        std::vector<uint8_t> data(size_t(N * kb * blob)), zp(size_t(N * zb));
        for (auto& b : data) b = uint8_t(gen());
        for (auto& b : zp) b = uint8_t(gen());
        std::vector<float> scales(size_t(N * kb));
        for (auto& s : scales) s = float(int(gen() % 2001) - 1000) / 4096.0f;
        std::vector<float> column(static_cast<size_t>(K));
        for (int64_t n = 0; n < N; ++n) {
          quant::dequantize_column(data.data(), scales.data(), sym ? nullptr : zp.data(), K, n, bits, block, column.data());
          for (int64_t k = 0; k < K; ++k) {
            const int64_t b = k / block, i = k % block;
            const uint8_t byte = data[size_t((n * kb + b) * blob + (bits == 8 ? i : i / 2))];
            const int q = bits == 8 ? byte : (byte >> (4 * (i % 2))) & 0xF;
            const uint8_t z = sym ? 0 : zp[size_t(n * zb + b * bits / 8)];
            const int zero = sym ? 1 << (bits - 1) : bits == 8 ? z : (z >> (4 * (b % 2))) & 0xF;
            ASSERT_EQ(column[size_t(k)], float(q - zero) * scales[size_t(n * kb + b)])
                << bits << " bits, K " << K << (sym ? " sym" : " asym") << ", column " << n << ", k " << k;
          }
        }
      }
}

TEST(QuantKernels, MatMulNBitsEqualsMatMulOfTheDequantizedWeight) {
  // Rows: read from the packed 4-bit bytes (1, 3, and 6 in two passes), multiplied by tiles against each
  // thread's dequantized chunk (12, 20) and sgemm against blocks of 256 columns (70); N: one thread (6)
  // and columns split between two threads across more than one block of 256 (300); K: whole blocks
  // (48), a partial, odd last block (41), and
  // for the packed reads runs of 128 (lanes across 8, 2 and half a block of 16, 64, 256) with whole
  // blocks past them (400) and a partial one (297).
  for (bool sym : {true, false})
    for (int bits : {4, 8})
      for (int64_t block : {16, 64, 256})
        for (int64_t rows : {1, 3, 6, 12, 20, 70})
          for (int64_t N : {6, 300})
            for (int64_t K : {48, 41, 400, 297}) {
              if (block > 16 && K < 128) continue;
              const std::string what = fmt::format("{} bits, {}, block {}, {} rows, N {}, K {}", bits, sym ? "sym" : "asym",
                                                   block, rows, N, K);
              auto w = random_matrix(K, N, 5);
              auto parts = ir::WeightRef::constant(Tensor::from_vector<float>(DType::F32, {K, N}, w)).quantized({bits, block, sym, DType::F32});
              ir::Graph g;
              ir::Builder b(g);
              auto a = g.add_input("a", DType::F32, fixed_shape({rows, K}));
              std::vector<ir::ValueId> ins = {a, b.weight("B", parts[0]), b.weight("scales", parts[1])};
              if (!sym) ins.push_back(b.weight("zp", parts[2]));
              g.add_output(b.add1("MatMulNBits", ins, {{"K", K}, {"N", N}, {"bits", int64_t(bits)}, {"block_size", block}}, "y"));
              auto x = random_matrix(rows, K, 6);
              auto y = runtime::Executor(g).run({{"a", Tensor::from_vector<float>(DType::F32, {rows, K}, x)}}).at("y");
              ASSERT_EQ(y.shape(), (std::vector<int64_t>{rows, N})) << what;
              auto q = quant::quantize_blockwise(w.data(), K, N, bits, block, sym, DType::F32);
              auto wd = quant::dequantize_blockwise(q.data.data(), q.scales.data(), sym ? nullptr : q.zero_points.data(), K, N, bits, block);
              for (int64_t r = 0; r < rows; ++r)
                for (int64_t n = 0; n < N; ++n) {
                  double want = 0;
                  for (int64_t k = 0; k < K; ++k) want += double(x[size_t(r * K + k)]) * wd[size_t(k * N + n)];
                  ASSERT_NEAR(y.as<float>()[r * N + n], want, 1e-4) << what << " at row " << r << ", column " << n;
                }
            }
}

TEST(QuantKernels, MatMulNBitsRunInAGroupComputeWhatTheyComputeAlone) {
  // Executor::run_many dequantizes each column of B once for all its runs (the group kernel): each
  // run's numbers are those it gets alone, bit for bit, whether it reads the packed bytes (1, 3 or 6
  // rows), or dequantized columns by tiles (12, 20) or sgemm (70), and whether its group
  // dequantizes a chunk per thread (no run over 64 rows) or blocks of 256 columns for both threads.
  // K: two runs of 128 and a tail; 2100: each thread's 150 columns in chunks of 31.
  const int64_t N = 300;
  for (int64_t K : {304, 2100}) {
    for (bool sym : {true, false}) {
      auto w = random_matrix(K, N, 5);
      auto parts = ir::WeightRef::constant(Tensor::from_vector<float>(DType::F32, {K, N}, w)).quantized({4, 16, sym, DType::F32});
      ir::Graph g;
      ir::Builder b(g);
      auto a = g.add_input("a", DType::F32, {Dim::sym("rows"), Dim::fixed(K)});
      std::vector<ir::ValueId> ins = {a, b.weight("B", parts[0]), b.weight("scales", parts[1])};
      if (!sym) ins.push_back(b.weight("zp", parts[2]));
      g.add_output(b.add1("MatMulNBits", ins, {{"K", K}, {"N", N}, {"bits", int64_t(4)}, {"block_size", int64_t(16)}}, "y"));
      std::vector<std::map<std::string, Tensor>> inputs;
      for (int64_t rows : {1, 3, 6, 12, 20, 70})
        inputs.push_back({{"a", Tensor::from_vector<float>(DType::F32, {rows, K}, random_matrix(rows, K, uint32_t(rows)))}});
      runtime::Executor group(g), alone(g), decode_steps(g), chunked(g);
      const auto together = group.run_many({&inputs[0], &inputs[1], &inputs[2], &inputs[3], &inputs[4], &inputs[5]});
      const auto steps_only = decode_steps.run_many({&inputs[0], &inputs[1], &inputs[2]});  // no column dequantized
      const auto tiled_only = chunked.run_many({&inputs[0], &inputs[2], &inputs[3], &inputs[4]});  // a chunk per thread
      const std::vector<std::pair<size_t, const std::map<std::string, Tensor>*>> also = {
          {0, &steps_only[0]}, {1, &steps_only[1]}, {2, &steps_only[2]},
          {0, &tiled_only[0]}, {2, &tiled_only[1]}, {3, &tiled_only[2]}, {4, &tiled_only[3]}};
      const std::string what = fmt::format("{}, K {}", sym ? "sym" : "asym", K);
      for (size_t r = 0; r < inputs.size(); ++r) {
        const Tensor y = alone.run(inputs[r]).at("y"),& z = together[r].at("y");
        ASSERT_EQ(y.shape(), z.shape());
        ASSERT_EQ(0, std::memcmp(y.data(), z.data(), y.nbytes())) << what << ", run " << r;
        for (const auto& [i, out] : also) {
          if (i != r) continue;
          ASSERT_EQ(0, std::memcmp(y.data(), out->at("y").data(), y.nbytes())) << what << ", run " << r << " in a smaller group";
        }
      }
    }
  }
}

TEST(QuantKernels, DequantizeLinearPerAxisAndBlocked) {
  {  // per axis 1 of [2, 3], int8 with zero points
    ir::Graph g;
    ir::Builder b(g);
    auto x = b.weight("x", ir::WeightRef::constant(Tensor::from_vector<int8_t>(DType::I8, {2, 3}, {1, -2, 3, 4, 5, -6})));
    auto s = b.weight("s", ir::WeightRef::constant(Tensor::from_vector<float>(DType::F32, {3}, {0.5f, 2.f, 1.f})));
    auto z = b.weight("z", ir::WeightRef::constant(Tensor::from_vector<int8_t>(DType::I8, {3}, {0, 1, -1})));
    g.add_output(b.add1("DequantizeLinear", {x, s, z}, {{"axis", int64_t(1)}}, "y"));
    auto y = runtime::Executor(g).run({}).at("y");
    EXPECT_EQ(std::vector<float>(y.as<float>(), y.as<float>() + 6), (std::vector<float>{0.5f, -6.f, 4.f, 2.f, 8.f, -5.f}));
  }
  {  // blocks of 2 along axis 0 of [3, 2]: scales [2, 2], the last block 1 long
    ir::Graph g;
    ir::Builder b(g);
    auto x = b.weight("x", ir::WeightRef::constant(Tensor::from_vector<uint8_t>(DType::U8, {3, 2}, {1, 2, 3, 4, 5, 6})));
    auto s = b.weight("s", ir::WeightRef::constant(Tensor::from_vector<float>(DType::F32, {2, 2}, {1.f, 10.f, 100.f, 1000.f})));
    g.add_output(b.add1("DequantizeLinear", {x, s}, {{"axis", int64_t(0)}, {"block_size", int64_t(2)}}, "y"));
    auto y = runtime::Executor(g).run({}).at("y");
    EXPECT_EQ(std::vector<float>(y.as<float>(), y.as<float>() + 6),
              (std::vector<float>{1.f, 20.f, 3.f, 40.f, 500.f, 6000.f}));
  }
}

// apply-precision rewrites the model's composite graph (hfx verify's reference) and the backend's
// decomposed, folded graph (what is written) to the same numbers, and follows the lm_head policy.
#include "passes/pass.h"
#include "passes/precision.h"

namespace {

struct TinyModel {
  ir::Graph g;
  TinyModel() {
    ir::Builder b(g);
    const int64_t K = 64, N = 48, V = 40;
    auto w = [&](const std::string& name, std::vector<int64_t> shape, uint64_t seed) {
      auto v = random_matrix(shape[0], shape.size() > 1 ? shape[1] : 1, seed);
      // plus_scalar(0): a lazy weight, as a checkpoint weight is (constants are never rewritten)
      return b.weight(name, ir::WeightRef::constant(Tensor::from_vector<float>(DType::F32, shape, v)).plus_scalar(0));
    };
    auto ids = g.add_input("ids", DType::I64, fixed_shape({1, 3}));
    auto emb = b.add1("Embedding", {w("embed", {V, K}, 1), ids});
    ir::ValueId h;
    {
      auto s = b.scope("model");
      auto s2 = b.scope("proj");
      h = b.add1("Linear", {emb, w("proj.weight", {N, K}, 2), w("proj.bias", {N}, 3)});
    }
    ir::ValueId logits;
    {
      auto s = b.scope("lm_head");
      logits = b.add1("Linear", {h, w("lm_head.weight", {V, N}, 4)}, {}, "logits");
    }
    g.add_output(logits);
  }
};

}  // namespace

TEST(ApplyPrecision, CompositeAndDecomposedGraphsAgree) {
  TinyModel m;
  ir::Graph g = m.g;
  const Tensor ids = Tensor::from_vector<int64_t>(DType::I64, {1, 3}, {1, 7, 39});
  for (const char* spec : {"", "int4", "int4:asym", "int8", "int8:channel:asym"})
    for (DType dt : {DType::F32, DType::F16, DType::BF16})
      for (bool lm : {false, true}) {
        quant::PrecisionSpec p{dt, QuantSpec::parse(spec), lm && std::string(spec).size()};
        ir::Graph composite = passes::apply_precision(g, p);
        ir::Graph written = passes::apply_precision(
            passes::run_pipeline(g, {"decompose-composites", "fold-weight-transforms"}), p);
        auto a = runtime::Executor(composite).run({{"ids", ids}}).at("logits");
        auto b = runtime::Executor(written).run({{"ids", ids}}).at("logits");
        ASSERT_EQ(a.shape(), b.shape());
        for (int64_t i = 0; i < a.numel(); ++i)
          ASSERT_NEAR(a.as<float>()[i], b.as<float>()[i], dt == DType::F16 ? 2e-2 : 1e-4) << spec << " " << dtype_name(dt);
        int nbits = 0, dq = 0;
        for (const auto& n : written.nodes()) {
          nbits += n.op == "MatMulNBits";
          dq += n.op == "DequantizeLinear";
        }
        const int quantized = p.quant.enabled() ? (lm ? 2 : 1) : 0;
        EXPECT_EQ(nbits + dq, quantized) << spec << " lm_head " << lm;
      }
}

// A product under ir::Builder::kKeepF32Scope (a sigmoid MoE router) is never quantized and computes in
// f32 from its weight stored in the dtype, on every target and on both graphs; the others follow the spec.
TEST(ApplyPrecision, KeepF32ScopeStaysF32) {
  ir::Graph g;
  {
    ir::Builder b(g);
    const int64_t K = 64, N = 48;
    auto w = [&](const std::string& name, uint64_t seed) {
      return b.weight(name, ir::WeightRef::constant(Tensor::from_vector<float>(DType::F32, {N, K}, random_matrix(N, K, seed)))
                                .plus_scalar(0));
    };
    auto x = g.add_input("x", DType::F32, fixed_shape({1, 3, K}));
    auto s = b.scope("model");
    ir::ValueId kept;
    {
      auto r = b.scope("router");
      auto f = b.scope(ir::Builder::kKeepF32Scope);
      kept = b.add1("Linear", {x, w("router.weight", 1)});
    }
    auto expert = b.add1("Linear", {x, w("expert.weight", 2)});
    g.add_output(b.plus(kept, expert));
  }
  using passes::PrecisionTarget;
  for (const char* spec : {"", "int4", "int8:channel"})
    for (DType dt : {DType::F16, DType::BF16})
      for (PrecisionTarget t : {PrecisionTarget::OrtContrib, PrecisionTarget::Portable, PrecisionTarget::OpenVino,
                                PrecisionTarget::ExecuTorch}) {
        if (t == PrecisionTarget::ExecuTorch && std::string(spec) == "int4") continue;  // refused for ExecuTorch
        quant::PrecisionSpec p{dt, QuantSpec::parse(spec), false};
        const std::vector<std::string> pipeline =
            t == PrecisionTarget::ExecuTorch ? std::vector<std::string>{"decompose-composites-keep-linear-embedding"}
                                             : std::vector<std::string>{"decompose-composites", "fold-weight-transforms"};
        for (const ir::Graph& before : {g, passes::run_pipeline(g, pipeline)}) {
          ir::Graph after = passes::apply_precision(before, p, t);
          int quantized = 0;
          for (const auto& n : after.nodes()) {
            const bool kept = n.name.find("/keep_f32/") != std::string::npos;
            const bool q = n.op == "MatMulNBits" || n.op == "DequantizeLinear";
            EXPECT_FALSE(kept && q) << spec << " " << n.name;
            quantized += q;
            if (kept && (n.op == "MatMul" || n.op == "Linear")) {
              for (ir::ValueId v : n.inputs) EXPECT_EQ(after.value(v).dtype, DType::F32) << spec << " " << n.name;
            }
          }
          EXPECT_EQ(quantized, p.quant.enabled() ? 1 : 0) << spec << " " << dtype_name(dt);
        }
      }
}
