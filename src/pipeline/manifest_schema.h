// The shape of hfx.json as hfx itself reads it back: one check of every member that `hfx check`,
// `hfx generate` and `hfx verify` read (types, required keys, ranges), run once by read_manifest, so
// the readers can index the JSON without a type error or a read of a missing key. A manifest comes
// from whoever shipped the export: nothing in it is trusted before this check.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace hfx::pipeline {

// Limits on the geometry a manifest may declare. They size allocations (the KV cache, per-layer
// tensors, the shape matrix), so a number from the file must not ask for terabytes.
struct ManifestLimits {
  // Ten times the deepest released decoder (about 400 layers at most; common ones have 24 to 128).
  static constexpr int64_t kMaxLayers = 4096;
  // Per-head geometry: real models have up to a few hundred KV heads and head_dim up to 512.
  static constexpr int64_t kMaxHeadsOrDim = 65536;
  // kv_heads x head_dim (the KV width of one layer): real models stay under 2^15; x32 margin.
  static constexpr int64_t kMaxKvWidth = int64_t(1) << 20;
  // A static KV cache of 2^24 positions is 16M tokens, far past any released context window
  // (1M-10M); a longer one is a typo or an attack, and each position costs memory in every layer.
  static constexpr int64_t kMaxCacheLen = int64_t(1) << 24;
  // Symbol bounds (dims min/max) and token ids: ONNX dims and token ids are int32 in practice.
  static constexpr int64_t kMaxDim = int64_t(1) << 31;
  // A lower bound is a size the artifact must serve, and verify runs its shape cases at it (a batch
  // of `min` rows): no contract needs more than 4096 there, and 2^31 rows would be terabytes.
  static constexpr int64_t kMaxDimMin = 4096;
};

// The component roles hfx writes: every task's (tasks/task.h: known_roles).
bool is_known_role(const std::string& role);

// Throws BadInput naming `where` (the manifest's path) and the JSON pointer of the first member that
// is missing, of the wrong type or out of range, e.g.
// "out/hfx.json: /model/num_layers: 1000000000 is above 4096 (...)".
void validate_manifest(const nlohmann::json& manifest, const std::string& where);

}  // namespace hfx::pipeline
