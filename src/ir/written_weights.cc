#include "ir/written_weights.h"

#include <fmt/format.h>

#include <cstring>

#include "core/error.h"
#include "ir/weight_kernels.h"

namespace hfx::ir {

namespace {

// `runs` runs of `run_bytes`, `stride` apart from `base`, side by side (a part of a packed weight).
std::vector<uint8_t> gather_runs(const uint8_t* base, int64_t runs, size_t run_bytes, size_t stride) {
  std::vector<uint8_t> out(size_t(runs) * run_bytes);
  for (int64_t r = 0; r < runs; ++r) std::memcpy(out.data() + size_t(r) * run_bytes, base + size_t(r) * stride, run_bytes);
  return out;
}

// Bytes that own their copy (no map behind them).
WrittenWeights::Bytes owned(std::vector<uint8_t> bytes) {
  auto copy = std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
  return {{copy->data(), copy->size()}, copy, nullptr};
}

}  // namespace

// The description names the source tensors and each transform in order; dtype and shape make equal
// keys mean equal bytes even for transforms whose description is terse (reshape, quantized parts).
std::string WrittenWeights::key(const WeightRef& w) {
  return fmt::format("{}|{}|{}", w.describe(), dtype_name(w.dtype()), fmt::join(w.shape(), "x"));
}

void WrittenWeights::add(const WeightRef& w, std::filesystem::path file, size_t offset) {
  if (w.is_constant()) return;  // constants are small and held in memory anyway
  for (const WeightBlock& b : w.blocks())
    if (!b.part.is_constant())  // a whole weight of its own, when there is one, stays the better source
      locations_.try_emplace(key(b.part), Location{file, offset + b.offset, b.part.nbytes(), b.run_bytes, b.stride, b.runs});
  locations_.insert_or_assign(key(w), Location{std::move(file), offset, w.nbytes()});
}

void WrittenWeights::add_inline(const WeightRef& w, std::span<const uint8_t> bytes) {
  if (w.is_constant()) return;
  for (const WeightBlock& b : w.blocks())
    if (!b.part.is_constant() && !inline_.count(key(b.part)))
      inline_.emplace(key(b.part), std::make_shared<const std::vector<uint8_t>>(
                                       gather_runs(bytes.data() + b.offset, b.runs, b.run_bytes, b.stride)));
  inline_.insert_or_assign(key(w), std::make_shared<const std::vector<uint8_t>>(bytes.begin(), bytes.end()));
}

std::optional<WrittenWeights::Location> WrittenWeights::find(const WeightRef& w) const {
  if (w.is_constant()) return std::nullopt;
  auto it = locations_.find(key(w));
  if (it == locations_.end()) return std::nullopt;
  return it->second;
}

std::optional<WrittenWeights::Location> WrittenWeights::whole(const WeightRef& w) const {
  auto loc = find(w);
  if (!loc || !closed_.count(loc->file) || !loc->contiguous() || loc->nbytes != w.nbytes()) return std::nullopt;
  return loc;
}

std::optional<WrittenWeights::Location> WrittenWeights::whole_in(const WeightRef& w, const std::filesystem::path& dir) const {
  auto loc = whole(w);
  if (!loc || loc->file.parent_path().lexically_normal() != dir.lexically_normal()) return std::nullopt;
  return loc;
}

std::optional<WrittenWeights::Bytes> WrittenWeights::bytes(const WeightRef& w) {
  if (auto b = stored(w)) return b;
  // A [N, K] weight whose [K, N] transpose an earlier format wrote (OpenVINO's f16 weights, ONNX's).
  // (Whole-byte elements only: a 4-bit tensor's transpose is not a byte shuffle.)
  if (auto t = w.transposed_under_casts(); t && !t->is_constant() && dtype_bits(w.dtype()) >= 8 && w.nbytes() > 0) {
    if (auto b = stored(*t)) {
      const int64_t rows = w.shape()[0], cols = w.shape()[1];
      std::vector<uint8_t> copy(w.nbytes());
      transpose_block(w.dtype(), b->bytes.data(), cols, rows, w.dtype(), 0, rows, copy.data(), w.nbytes() / size_t(rows));
      return owned(std::move(copy));
    }
  }
  // A quantized part in another layout: relaid from the parts an earlier format wrote (ONNX's MatMulNBits
  // or DequantizeLinear bytes become OpenVINO's compressed weights).
  for (quant::Layout from : {quant::Layout::MatMulNBits, quant::Layout::BlockedKN}) {
    const std::vector<WeightRef> siblings = w.quantized_in(from);
    std::vector<Bytes> found;
    for (const WeightRef& s : siblings)
      if (auto b = stored(s)) found.push_back(std::move(*b));
    if (siblings.empty() || found.size() != siblings.size()) continue;
    std::vector<std::span<const uint8_t>> spans;
    for (const Bytes& b : found) spans.push_back(b.bytes);
    const Tensor t = w.relaid_from(from, spans);
    return owned(std::vector<uint8_t>(t.data(), t.data() + t.nbytes()));
  }
  return std::nullopt;
}

std::optional<WrittenWeights::Bytes> WrittenWeights::stored(const WeightRef& w) {
  if (w.is_constant()) return std::nullopt;
  if (auto it = inline_.find(key(w)); it != inline_.end()) return Bytes{{it->second->data(), it->second->size()}, it->second, nullptr};
  auto loc = find(w);
  if (!loc || !closed_.count(loc->file)) return std::nullopt;
  auto& map = maps_[loc->file];
  if (!map) map = MappedFile::open(loc->file);
  const size_t extent = loc->contiguous() ? loc->nbytes : size_t(loc->runs - 1) * loc->stride + loc->run_bytes;
  HFX_CHECK(loc->offset + extent <= map->size(), "{}: weight {} at {}+{} is past the end of the file ({} bytes)",
            loc->file.string(), w.describe(), loc->offset, extent, map->size());
  if (loc->contiguous()) return Bytes{{map->data() + loc->offset, loc->nbytes}, map, map};
  HFX_CHECK(size_t(loc->runs) * loc->run_bytes == loc->nbytes, "weight {}: {} runs of {} bytes for {} bytes", w.describe(),
            loc->runs, loc->run_bytes, loc->nbytes);
  return owned(gather_runs(map->data() + loc->offset, loc->runs, loc->run_bytes, loc->stride));
}

}  // namespace hfx::ir
