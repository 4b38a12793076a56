#include "ir/written_weights.h"

#include <fmt/format.h>

#include <cstring>

#include "core/error.h"

namespace hfx::ir {

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
  inline_.insert_or_assign(key(w), std::make_shared<const std::vector<uint8_t>>(bytes.begin(), bytes.end()));
}

std::optional<WrittenWeights::Location> WrittenWeights::find(const WeightRef& w) const {
  if (w.is_constant()) return std::nullopt;
  auto it = locations_.find(key(w));
  if (it == locations_.end()) return std::nullopt;
  return it->second;
}

std::optional<WrittenWeights::Bytes> WrittenWeights::bytes(const WeightRef& w) {
  if (w.is_constant()) return std::nullopt;
  if (auto it = inline_.find(key(w)); it != inline_.end()) return Bytes{{it->second->data(), it->second->size()}, it->second, nullptr};
  auto loc = find(w);
  if (!loc) return std::nullopt;
  auto& map = maps_[loc->file];
  if (!map) map = MappedFile::open(loc->file);
  const size_t extent = loc->contiguous() ? loc->nbytes : size_t(loc->runs - 1) * loc->stride + loc->run_bytes;
  HFX_CHECK(loc->offset + extent <= map->size(), "{}: weight {} at {}+{} is past the end of the file ({} bytes)",
            loc->file.string(), w.describe(), loc->offset, extent, map->size());
  if (loc->contiguous()) return Bytes{{map->data() + loc->offset, loc->nbytes}, map, map};
  HFX_CHECK(size_t(loc->runs) * loc->run_bytes == loc->nbytes, "weight {}: {} runs of {} bytes for {} bytes", w.describe(),
            loc->runs, loc->run_bytes, loc->nbytes);
  auto copy = std::make_shared<std::vector<uint8_t>>(loc->nbytes);
  for (int64_t r = 0; r < loc->runs; ++r)
    std::memcpy(copy->data() + size_t(r) * loc->run_bytes, map->data() + loc->offset + size_t(r) * loc->stride, loc->run_bytes);
  return Bytes{{copy->data(), copy->size()}, copy, nullptr};
}

}  // namespace hfx::ir
