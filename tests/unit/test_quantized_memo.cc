// The quantization memo an export keeps for its check (ir/quantized_memo.h): a weight the writers
// quantized is handed to the reference, opened from another map of the same file, as the bytes the
// quantizer gives it; a packed q|k|v serves its three tensors apart and three kept tensors serve their
// packing; nothing is kept past the budget; an entry is handed out once.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/mapped_file.h"
#include "ir/quantized_memo.h"
#include "ir/weight.h"
#include "quant/quantize.h"
#include "random_weights.h"

using namespace hfx;
namespace fs = std::filesystem;

namespace {

// K = 80 in blocks of 32: three blocks a column, the last partial, and an odd count of 4-bit zero
// points (a padding nibble in each column's last byte).
constexpr int64_t K = 80, kBlock = 32;
constexpr int64_t kRows[3] = {48, 16, 16};  // q, k, v of a grouped-query layer
const ir::WeightRef::QuantParams kParams{4, kBlock, /*symmetric=*/false, DType::F32};

// A bf16 checkpoint file of q, k and v back to back, and the f32 values they widen to.
struct Checkpoint {
  fs::path path = fs::temp_directory_path() / ("hfx_quantized_memo_" + std::to_string(::getpid()));
  std::vector<float> values;  // q, k, v rows, [sum rows, K]
  Checkpoint() {
    int64_t rows = 0;
    for (int64_t r : kRows) rows += r;
    const auto raw = hfx::testing::random_matrix(rows, K, 7);
    std::vector<uint16_t> bf16(raw.size());
    convert_elements(DType::F32, raw.data(), DType::BF16, bf16.data(), raw.size());
    values.resize(raw.size());
    convert_elements(DType::BF16, bf16.data(), DType::F32, values.data(), raw.size());
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bf16.data()), std::streamsize(bf16.size() * 2));
  }
  ~Checkpoint() { fs::remove(path); }
  // The tensors of one map of the file (the export and its check each open the checkpoint).
  std::vector<ir::WeightRef> tensors() const {
    auto file = MappedFile::open(path);
    std::vector<ir::WeightRef> out;
    size_t offset = 0;
    for (int i = 0; i < 3; ++i) {
      out.push_back(ir::WeightRef::source(file, "t" + std::to_string(i), DType::BF16, {kRows[i], K}, offset));
      offset += size_t(kRows[i] * K) * 2;
    }
    return out;
  }
  // What the quantizer gives rows [r0, r0 + rows) of the values, as W^T [rows, K].
  quant::Quantized expected(int64_t r0, int64_t rows) const {
    return quant::quantize_blockwise(values.data() + r0 * K, K, rows, 4, kBlock, false, DType::F32, true);
  }
};

// A Linear weight's chain as the precision pass builds it: [N, K] widened, transposed to W [K, N].
quant::Quantized quantized_linear(const ir::WeightRef& nk) {
  const auto parts = nk.cast(DType::F32).transposed({1, 0}).quantized(kParams);
  quant::Quantized q;
  const Tensor d = parts[0].materialize(), s = parts[1].materialize(), z = parts[2].materialize();
  q.data.assign(d.data(), d.data() + d.nbytes());
  q.scales.assign(s.as<float>(), s.as<float>() + s.numel());
  q.zero_points.assign(z.data(), z.data() + z.nbytes());
  return q;
}

void expect_same(const quant::Quantized& a, const quant::Quantized& b) {
  EXPECT_EQ(a.data, b.data);
  EXPECT_EQ(a.scales, b.scales);
  EXPECT_EQ(a.zero_points, b.zero_points);
}

}  // namespace

TEST(QuantizedMemo, APackedWeightServesItsTensorsApartFromAnotherMap) {
  const Checkpoint ckpt;
  ir::QuantizedMemo memo(size_t(1) << 30);
  ir::QuantizedMemo::Scope scope(memo);
  const auto writer = ckpt.tensors();
  expect_same(quantized_linear(ir::WeightRef::concat(writer, 0)), ckpt.expected(0, 80));
  const size_t kept = memo.kept_bytes();
  EXPECT_GT(kept, 0u);
  const auto reference = ckpt.tensors();  // the check's own map of the file
  int64_t r0 = 0;
  for (int i = 0; i < 3; ++i) {
    expect_same(quantized_linear(reference[size_t(i)]), ckpt.expected(r0, kRows[i]));
    r0 += kRows[i];
  }
  EXPECT_EQ(memo.kept_bytes(), 0u) << "each tensor handed out once, and gone from the memo";
}

TEST(QuantizedMemo, KeptTensorsServeTheirPacking) {
  const Checkpoint ckpt;
  ir::QuantizedMemo memo(size_t(1) << 30);
  ir::QuantizedMemo::Scope scope(memo);
  const auto writer = ckpt.tensors();
  for (const auto& t : writer) quantized_linear(t);
  EXPECT_GT(memo.kept_bytes(), 0u);
  expect_same(quantized_linear(ir::WeightRef::concat(ckpt.tensors(), 0)), ckpt.expected(0, 80));
  EXPECT_EQ(memo.kept_bytes(), 0u);
}

TEST(QuantizedMemo, NothingPastTheBudgetAndTheNumbersRegardless) {
  const Checkpoint ckpt;
  // Room for k (16 columns: 3 x 16 data bytes, 3 scales, 2 zero-point bytes each) but not q (48).
  ir::QuantizedMemo memo(16 * (3 * 16 + 3 * 4 + 2));
  ir::QuantizedMemo::Scope scope(memo);
  const auto writer = ckpt.tensors();
  quantized_linear(writer[0]);
  EXPECT_EQ(memo.kept_bytes(), 0u);
  quantized_linear(writer[1]);
  EXPECT_EQ(memo.kept_bytes(), size_t(16 * (3 * 16 + 3 * 4 + 2)));
  expect_same(quantized_linear(ckpt.tensors()[0]), ckpt.expected(0, 48));  // quantized again
  expect_same(quantized_linear(ckpt.tensors()[1]), ckpt.expected(48, 16));
  EXPECT_EQ(memo.kept_bytes(), 0u);
}

TEST(QuantizedMemo, OneActiveMemoAndNoneOutsideItsScope) {
  const Checkpoint ckpt;
  ir::QuantizedMemo memo(size_t(1) << 30);
  {
    ir::QuantizedMemo::Scope scope(memo);
    EXPECT_EQ(ir::QuantizedMemo::active(), &memo);
    ir::QuantizedMemo other(size_t(1) << 30);
    {
      ir::QuantizedMemo::Scope inner(other);  // another export's, say: the active one stays
      EXPECT_EQ(ir::QuantizedMemo::active(), &memo);
    }
    EXPECT_EQ(ir::QuantizedMemo::active(), &memo);
  }
  EXPECT_EQ(ir::QuantizedMemo::active(), nullptr);
  expect_same(quantized_linear(ckpt.tensors()[2]), ckpt.expected(64, 16));
  EXPECT_EQ(memo.kept_bytes(), 0u);
}
