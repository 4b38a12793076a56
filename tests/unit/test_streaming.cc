// Streaming an export's bytes: the incremental SHA-256, the pipelined output file (order, digest,
// errors, dropped blocks) and WeightRef's row blocks (equal to a naive computation, at any block size).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/error.h"
#include "core/files.h"
#include "core/mapped_file.h"
#include "core/pipelined_file.h"
#include "core/sha256.h"
#include "ir/weight.h"
#include "ir/weight_scan.h"
#include "ir/written_weights.h"

namespace fs = std::filesystem;
using namespace hfx;

namespace {

fs::path temp_path(const std::string& name) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return fs::temp_directory_path() / ("hfx_stream_" + std::to_string(::getpid()) + "_" + info->name() + "_" + name);
}

std::string hex_of(std::span<const uint8_t> bytes) {
  Sha256 sha;
  sha.update(bytes);
  return sha.hex_digest();
}

std::vector<uint8_t> read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST(Sha256, KnownDigests) {
  EXPECT_EQ(hex_of({}), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const std::string abc = "abc";
  EXPECT_EQ(hex_of({reinterpret_cast<const uint8_t*>(abc.data()), abc.size()}),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  std::vector<uint8_t> zeros(100003, 0);
  Sha256 sha;
  sha.update_zeros(zeros.size());
  EXPECT_EQ(sha.hex_digest(), hex_of(zeros));
}

TEST(PipelinedFile, WritesInOrderAndHashesWhatItWrote) {
  const fs::path path = temp_path("out");
  std::vector<uint8_t> expected;
  std::vector<uint8_t> borrowed(300000);
  std::mt19937 rng(7);
  for (auto& b : borrowed) b = uint8_t(rng());
  int done = 0;
  {
    PipelinedFile f(path, 1000);  // a small budget: most blocks wait for the writer
    for (int i = 0; i < 50; ++i) {
      auto b = f.buffer(size_t(1 + i * 97));
      for (size_t k = 0; k < b.size; ++k) b.data[k] = uint8_t(i + k);
      expected.insert(expected.end(), b.data.get(), b.data.get() + b.size);
      f.write(std::move(b));
      if (i % 10 == 0) {
        const size_t aligned = (f.size() + 4095) / 4096 * 4096;
        expected.resize(aligned, 0);
        f.pad_to(aligned);
        f.write(borrowed, [&] { ++done; });  // larger than the budget: admitted alone
        expected.insert(expected.end(), borrowed.begin(), borrowed.end());
      }
    }
    EXPECT_EQ(f.size(), expected.size());
    const std::string digest = f.finish();
    EXPECT_EQ(digest, hex_of(expected));
    EXPECT_EQ(digest, sha256_file(path));
  }
  EXPECT_EQ(done, 5);
  EXPECT_EQ(read_all(path), expected);
  fs::remove(path);
}

TEST(PipelinedFile, FailedWriteIsAnIoError) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  PipelinedFile f("/dev/full", 1 << 20);
  std::vector<uint8_t> bytes(1 << 16, 1);
  try {
    for (int i = 0; i < 64; ++i) f.write(bytes, {});
    f.finish();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Io);
    EXPECT_NE(std::string(e.what()).find("/dev/full"), std::string::npos) << e.what();
  }
}

TEST(PipelinedFile, DroppedWithoutFinishTellsEveryOwner) {
  const fs::path path = temp_path("dropped");
  std::vector<uint8_t> bytes(1 << 16, 3);
  int done = 0;
  {
    PipelinedFile f(path, 1 << 20);
    for (int i = 0; i < 20; ++i) f.write(bytes, [&] { ++done; });
  }  // an error elsewhere: no finish()
  EXPECT_EQ(done, 20);
  fs::remove(path);
}

// --- WeightRef row blocks ------------------------------------------------------------------------

namespace {

struct Checkpoint {
  fs::path path;
  std::shared_ptr<const MappedFile> file;
  std::vector<uint8_t> bytes;
};

// Random bytes at an odd offset (a safetensors payload need not be aligned); bf16/f16 values are
// kept finite so every conversion is exact and comparable bit for bit.
Checkpoint make_checkpoint(size_t size) {
  Checkpoint c;
  c.path = temp_path("ckpt");
  c.bytes.resize(size);
  std::mt19937 rng(11);
  for (size_t i = 0; i < size; i += 2) {
    const uint16_t v = uint16_t(rng() & 0x3fff);  // exponent below the maximum: finite in both
    std::memcpy(&c.bytes[i], &v, std::min<size_t>(2, size - i));
  }
  std::ofstream(c.path, std::ios::binary).write(reinterpret_cast<const char*>(c.bytes.data()), std::streamsize(size));
  c.file = MappedFile::open(c.path);
  return c;
}

// Every block size from 1 row to all rows gives the same bytes as materialize().
void expect_streams_like(const ir::WeightRef& w, const std::vector<uint8_t>& expected) {
  ASSERT_TRUE(w.streamable()) << w.describe();
  ASSERT_EQ(w.nbytes(), expected.size()) << w.describe();
  Tensor t = w.materialize();
  ASSERT_EQ(std::vector<uint8_t>(t.data(), t.data() + t.nbytes()), expected) << w.describe();
  for (int64_t step : {int64_t(1), int64_t(3), int64_t(32), w.rows()}) {
    std::vector<uint8_t> out(w.nbytes() + 1, 0xee);
    for (int64_t r0 = 0; r0 < w.rows(); r0 += step)
      w.write_rows(r0, std::min(w.rows(), r0 + step), out.data() + size_t(r0) * w.row_bytes(), w.row_bytes());
    EXPECT_EQ(out.back(), 0xee);
    out.pop_back();
    EXPECT_EQ(out, expected) << w.describe() << " in blocks of " << step;
  }
}

std::vector<uint8_t> as_f32(DType from, const uint8_t* src, size_t n) {
  std::vector<uint8_t> out(n * 4);
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    const float f = from == DType::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
    std::memcpy(&out[4 * i], &f, 4);
  }
  return out;
}

std::vector<uint8_t> transposed(const std::vector<uint8_t>& in, int64_t rows, int64_t cols, size_t es) {
  std::vector<uint8_t> out(in.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) std::memcpy(&out[size_t(c * rows + r) * es], &in[size_t(r * cols + c) * es], es);
  return out;
}

}  // namespace

TEST(WeightStreaming, CastsTransposesAndConcatsMatchANaiveComputation) {
  const int64_t R = 70, C = 45;  // not multiples of the 32-element tiles
  Checkpoint ck = make_checkpoint(size_t(R * C) * 4 * 3 + 1);
  const size_t off = 1;
  const uint8_t* base = ck.bytes.data() + off;
  for (DType half : {DType::BF16, DType::F16}) {
    auto src = ir::WeightRef::source(ck.file, "w", half, {R, C}, off);
    const auto f32 = as_f32(half, base, size_t(R * C));
    expect_streams_like(src.cast(DType::F32), f32);
    expect_streams_like(src.cast(DType::F32).transposed({1, 0}), transposed(f32, R, C, 4));
    // Linear weights as the fold pass leaves them, packed side by side (ort profile qkv) and stacked.
    auto a = src.cast(DType::F32).transposed({1, 0});                                            // [C, R]
    auto b = ir::WeightRef::source(ck.file, "v", half, {R, C}, off + size_t(R * C) * 2).cast(DType::F32).transposed({1, 0});
    const auto ta = transposed(f32, R, C, 4), tb = transposed(as_f32(half, base + R * C * 2, size_t(R * C)), R, C, 4);
    std::vector<uint8_t> side, stacked = ta;
    for (int64_t r = 0; r < C; ++r) {
      side.insert(side.end(), ta.begin() + r * R * 4, ta.begin() + (r + 1) * R * 4);
      side.insert(side.end(), tb.begin() + r * R * 4, tb.begin() + (r + 1) * R * 4);
    }
    stacked.insert(stacked.end(), tb.begin(), tb.end());
    expect_streams_like(ir::WeightRef::concat({a, b}, 1), side);
    expect_streams_like(ir::WeightRef::concat({a, b}, 0), stacked);
    // The ort profile's packed q|k|v as fold-weight-transforms leaves it: Transpose(Concat([N, K] parts, 0)).
    auto v = ir::WeightRef::source(ck.file, "v", half, {R, C}, off + size_t(R * C) * 2).cast(DType::F32);
    expect_streams_like(ir::WeightRef::concat({src.cast(DType::F32), v}, 0).transposed({1, 0}), side);
    // A half-precision export: the transpose with no conversion (the 8 x 8 SSE2 tiles and their edges).
    const std::vector<uint8_t> stored(base, base + R * C * 2);
    expect_streams_like(src.transposed({1, 0}), transposed(stored, R, C, 2));
  }
  // Cast back to the stored half type, the f32 widening is undone rather than computed: the weight
  // streams the stored bytes (transposed), and a packed q|k|v keeps its parts' stored bytes.
  for (DType half : {DType::BF16, DType::F16}) {
    auto src = ir::WeightRef::source(ck.file, "w", half, {R, C}, off);
    auto v = ir::WeightRef::source(ck.file, "v", half, {R, C}, off + size_t(R * C) * 2);
    const std::vector<uint8_t> stored(base, base + R * C * 2);
    EXPECT_TRUE(src.cast(DType::F32).cast(half).raw_bytes()) << "widened and narrowed back: the stored bytes";
    const auto back = src.cast(DType::F32).transposed({1, 0}).cast(half);
    EXPECT_EQ(back.describe(), src.transposed({1, 0}).describe());
    expect_streams_like(back, transposed(stored, R, C, 2));
    const auto packed = ir::WeightRef::concat({src.cast(DType::F32), v.cast(DType::F32)}, 0).transposed({1, 0}).cast(half);
    EXPECT_EQ(packed.describe(), ir::WeightRef::concat({src, v}, 0).transposed({1, 0}).describe());
    // f16 widened is not bf16: that cast converts, still streamed block by block (an f16 export of a
    // bf16 checkpoint), each element rounded as a whole-tensor conversion rounds it.
    const DType other = half == DType::BF16 ? DType::F16 : DType::BF16;
    EXPECT_FALSE(src.cast(DType::F32).cast(other).raw_bytes());
    const auto f32t = transposed(as_f32(half, base, size_t(R * C)), R, C, 4);
    std::vector<uint8_t> narrowed(size_t(R * C) * 2);
    convert_elements(DType::F32, f32t.data(), other, narrowed.data(), size_t(R * C));
    expect_streams_like(src.cast(DType::F32).transposed({1, 0}).cast(other), narrowed);
    std::vector<uint8_t> direct(size_t(R * C) * 2);
    convert_elements(half, base, other, direct.data(), size_t(R * C));
    expect_streams_like(src.cast(other), direct);
  }
  // An f32 checkpoint: the transpose alone, and a reshape of the stored bytes.
  auto f = ir::WeightRef::source(ck.file, "f", DType::F32, {R, C}, off);
  const std::vector<uint8_t> raw(base, base + R * C * 4);
  expect_streams_like(f.transposed({1, 0}), transposed(raw, R, C, 4));
  expect_streams_like(f.reshaped({R * C}), raw);
  EXPECT_FALSE(f.plus_scalar(1.0).streamable());  // materialised whole
  fs::remove(ck.path);
}

// `--format onnx,openvino` under the ort profile: ONNX writes the packed Transpose(Concat(q, k, v)); the
// OpenVINO writer asks for q^T, k^T and v^T (and the stacked biases' parts) and gets the same bytes
// their materialisation gives, gathered out of the written file.
TEST(WrittenWeights, PartsOfAPackedWeightAreFoundWhereItWasWritten) {
  const int64_t K = 37, Nq = 20, Nk = 8, Nv = 8;
  Checkpoint ck = make_checkpoint(size_t((Nq + Nk + Nv) * K) * 2 + 1);
  std::vector<ir::WeightRef> parts;
  size_t at = 1;
  for (auto [name, n] : {std::pair{"q", Nq}, {"k", Nk}, {"v", Nv}}) {
    parts.push_back(ir::WeightRef::source(ck.file, name, DType::BF16, {n, K}, at).cast(DType::F32));
    at += size_t(n * K) * 2;
  }
  const auto packed = ir::WeightRef::concat(parts, 0).transposed({1, 0});  // [K, Nq + Nk + Nv]
  const auto stacked = ir::WeightRef::concat(parts, 0).cast(DType::F16);     // one run per part
  const fs::path out = temp_path("written");
  {
    std::ofstream f(out, std::ios::binary);
    f.write("xyz", 3);  // the weights sit at an offset in the data file
    for (const auto* w : {&packed, &stacked}) {
      Tensor t = w->materialize();
      f.write(reinterpret_cast<const char*>(t.data()), std::streamsize(t.nbytes()));
    }
  }
  ir::WrittenWeights written;
  written.add(packed, out, 3);
  written.add(stacked, out, 3 + packed.nbytes());
  EXPECT_FALSE(written.bytes(parts[0].transposed({1, 0}))) << "read back before its writer closed the file";
  written.close(out);
  for (const ir::WeightRef& p : parts)
    for (const ir::WeightRef& view : {p.transposed({1, 0}), p.cast(DType::F16)}) {
      auto got = written.bytes(view);
      ASSERT_TRUE(got) << view.describe();
      Tensor want = view.materialize();
      EXPECT_EQ(std::vector<uint8_t>(got->bytes.begin(), got->bytes.end()),
                std::vector<uint8_t>(want.data(), want.data() + want.nbytes()))
          << view.describe();
    }
  EXPECT_FALSE(written.bytes(parts[0])) << "an untransposed part is not stored anywhere";
  // A small packed tensor the ONNX writer keeps inline in the protobuf (packed q|k|v biases).
  ir::WrittenWeights inline_written;
  Tensor whole = packed.materialize();
  inline_written.add_inline(packed, {whole.data(), whole.nbytes()});
  for (const ir::WeightRef& p : parts) {
    auto got = inline_written.bytes(p.transposed({1, 0}));
    ASSERT_TRUE(got) << p.describe();
    Tensor want = p.transposed({1, 0}).materialize();
    EXPECT_EQ(std::vector<uint8_t>(got->bytes.begin(), got->bytes.end()),
              std::vector<uint8_t>(want.data(), want.data() + want.nbytes()));
  }
  fs::remove(out);
  fs::remove(ck.path);
}

// The scan counts every NaN and Inf and the first one's index, wherever they fall among the blocks
// it counts without a branch (one at the very end, two in one block, none in most).
TEST(WeightScan, CountsNanAndInfAndFindsTheFirst) {
  struct Case { DType dtype; uint32_t nan, inf; };
  for (const Case c : {Case{DType::F32, 0x7fc00000u, 0x7f800000u}, Case{DType::F16, 0x7e00u, 0x7c00u},
                       Case{DType::BF16, 0x7fc0u, 0xff80u}}) {
    const size_t es = dtype_size(c.dtype), n = 1000;
    std::vector<uint8_t> bytes(n * es, 0x11);
    auto put = [&](size_t i, uint32_t v) { std::memcpy(&bytes[i * es], &v, es); };
    put(300, c.inf);
    put(301, c.nan);
    put(n - 1, c.nan);
    ir::NonFiniteCount count;
    ir::count_non_finite(bytes, c.dtype, 5000, count);
    EXPECT_EQ(count.nan, 2) << dtype_name(c.dtype);
    EXPECT_EQ(count.inf, 1) << dtype_name(c.dtype);
    EXPECT_EQ(count.first, 5300) << dtype_name(c.dtype);
  }
}
