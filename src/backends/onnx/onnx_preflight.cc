#include "backends/onnx/onnx_preflight.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>

#include "backends/onnx/checkpoint_mirror.h"
#include "backends/onnx/onnx_writer.h"
#include "backends/onnx/ort_profile.h"
#include "core/error.h"
#include "passes/pass.h"
#include "pipeline/verify.h"
#include "pipeline/verify_session.h"

namespace fs = std::filesystem;

namespace hfx::pipeline {

namespace {

// What an ONNX export writes and holds in memory, measured against real exports by
// tests/oracle/test_resources.py (within 15 % + 8 MiB on f32 and bf16
// checkpoints of 25-300 MB; the 8 MiB is the shared libraries' resident pages, which move with the page
// cache, not with hfx).
//
// Writing streams one weight at a time: the peak is the process baseline plus the costliest weight,
// which is its mapped source pages (resident until released after the write) plus what the writer
// holds besides. A weight it streams in blocks (WeightRef::streamable: casts and transposes of the
// stored bytes) adds one block and the writer thread's queue; any other weight adds the tensors its
// materialisation holds at once (WeightRef::materialize_peak_bytes). The queue (at most
// kOnnxInFlightBytes) is full only while writing is the slower stage (bf16 -> f32 casts) and near
// empty while converting is (f32 transposes): it counts at half. A weight written whole (straight
// from the map, or materialised) may still be queued while the next one is computed, so it counts
// against its successor instead.
//
// The built-in verification of `hfx export` runs the reference executor over the checkpoint and over
// the artifact (see the end of onnx_preflight).
//
// The default (ort) profile of a decoder adds GroupQueryAttention's cos/sin caches: weights computed
// whole before writing (held until the export ends) and written like the others; above
// passes::kMaxRopeCacheRows rows they are computed in the graph and add nothing.
int64_t ort_rope_cache_bytes(const LoadedModel& m) {
  const ir::Graph& g = m.components.at(0).graph;
  if (!m.task->generative() || !passes::ort_profile_blockers(g).empty()) return 0;
  try {
    return passes::ort_rope_cache_bytes(g, onnx_backend::ort_context_length(*m.checkpoint, g));
  } catch (const Error&) {
    return 0;  // no context length: the ort export itself says so; the preflight reports the rest
  }
}

// A config.json is held parsed for the whole export (nlohmann::json over libstdc++ containers), and
// the built-in verification parses it a second time while the first is held. Small for real configs;
// a 12 MB one of 6 M numbers takes ~130 MB parsed and ~210 MB while parsing. Per node, in glibc
// malloc chunks: an object's std::map (48 B) and per member a tree node (80 B: links, key, value) plus
// a key past the 15-character small-string buffer; an array's std::vector (24 B) and its buffer of
// 16-byte values, grown by doubling while parsing (capacity: the next power of two; the old buffer
// is live during the last copy); a string's std::string (32 B) plus its characters past 15.
struct JsonMemory {
  int64_t held = 0;           // bytes the parsed document keeps
  int64_t largest_array = 0;  // the largest array buffer, for the parse's transient
};

int64_t malloc_chunk(int64_t n) { return (n + 8 + 15) / 16 * 16; }

void json_memory(const nlohmann::json& j, JsonMemory& m) {
  if (j.is_object()) {
    m.held += malloc_chunk(48);
    for (auto it = j.begin(); it != j.end(); ++it) {
      m.held += malloc_chunk(80) + (it.key().size() > 15 ? malloc_chunk(int64_t(it.key().size()) + 1) : 0);
      json_memory(*it, m);
    }
  } else if (j.is_array()) {
    int64_t capacity = j.empty() ? 0 : 1;
    while (capacity < int64_t(j.size())) capacity *= 2;
    m.held += malloc_chunk(24) + (capacity ? malloc_chunk(capacity * 16) : 0);
    m.largest_array = std::max(m.largest_array, capacity * 16);
    for (const auto& v : j) json_memory(v, m);
  } else if (j.is_string()) {
    const auto n = int64_t(j.get_ref<const std::string&>().size());
    m.held += malloc_chunk(32) + (n > 15 ? malloc_chunk(n + 1) : 0);
  }
}

// (held, peak while parsing: the document, the old buffer of its last array doubling, the file's text)
std::pair<int64_t, int64_t> config_memory(const LoadedModel& m) {
  JsonMemory mem;
  const auto& config = m.checkpoint->config();
  json_memory(config.json, mem);
  std::error_code ec;
  const auto text = fs::file_size(config.path, ec);
  return {mem.held, mem.held + mem.largest_array / 2 + (ec ? 0 : int64_t(text))};
}

}  // namespace

Preflight onnx_preflight(const LoadedModel& m, const std::vector<std::string>& passes) {
  Preflight p;
  ir::Graph g = passes::run_pipeline(m.components.at(0).graph, passes);
  constexpr int64_t kAlign = 65536;
  int64_t worst_transient = 0, f32_weights = 0, source = 0;
  int64_t queued_before = 0;  // the previous weight, when it may still be queued whole
  for (auto id : g.weights()) {
    const auto* w = g.weight(id);
    const auto bytes = int64_t(w->nbytes());
    f32_weights += bytes;
    source += int64_t(w->source_bytes());
    if (bytes > 1024) p.disk_bytes += (bytes + kAlign - 1) / kAlign * kAlign;
    const bool raw = w->raw_bytes().has_value(), streamed = !raw && w->streamable();
    const int64_t block = streamed ? onnx_backend::onnx_block_rows(w->rows(), w->row_bytes()) * int64_t(w->row_bytes()) : 0;
    const int64_t held = streamed ? block : int64_t(w->materialize_peak_bytes());
    const int64_t transient =
        int64_t(w->source_bytes()) + held + std::max(int64_t(onnx_backend::kOnnxInFlightBytes / 2), queued_before);
    queued_before = streamed ? 0 : bytes;
    if (transient > worst_transient) worst_transient = transient;
    if (bytes > p.largest_tensor_bytes) {
      p.largest_tensor_bytes = bytes;
      p.largest_tensor = g.value(id).name;
    }
  }
  // A mirrored data file (checkpoint_mirror.h) is the checkpoint file, copied in the kernel: no queue of
  // converted blocks, whose buffers the allocator otherwise keeps through the check (kCheckScratch).
  const bool mirrored = [&] {
    const auto mirror = onnx_backend::plan_checkpoint_mirror(passes::ort_fused_matmul(g));  // the default profile's
    if (mirror) {
      p.disk_bytes = 0;
      for (const auto& file : mirror->files) p.disk_bytes += int64_t(file->size());
    }
    return mirror.has_value();
  }();
  for (const auto& f : m.checkpoint->side_files()) p.disk_bytes += 2 * int64_t(fs::file_size(f));
  p.disk_bytes += int64_t(g.nodes().size()) * 256;  // model.onnx: a few hundred bytes a node
  constexpr int64_t kBaseline = 28ll << 20;         // binary, libraries, allocator, checkpoint index
  const int64_t caches = ort_rope_cache_bytes(m);
  p.disk_bytes += caches;
  const int64_t baseline = kBaseline + int64_t(g.nodes().size()) * 1024 + caches;  // + IR and protobuf per node
  const auto [config_held, config_parse] = config_memory(m);
  p.peak_memory_no_verify_bytes = baseline + std::max(config_held + worst_transient, config_parse);
  // The check runs the reference executor over the checkpoint's graph and the artifact's, one after
  // the other, reading MatMul and Gather weights in place (verify_session.h): held, each keeps its
  // mapped weights (the checkpoint's stored bytes, the artifact's f32 data, but not the embedding tables
  // a prompt reads a few rows of); streamed, past
  // kHeldWeightLimit, one weight's pages at a time. Beside them: OpenBLAS's packing buffers, the
  // widened block of a half-precision weight and the runs' activations (kCheckScratch, measured on the
  // tiny and medium llamas of test_resources.py), less the converted blocks a mirrored export never queued.
  constexpr int64_t kCheckScratch = 32ll << 20;
  const int64_t check_scratch =
      kCheckScratch - (mirrored ? int64_t(onnx_backend::kOnnxInFlightBytes + onnx_backend::kOnnxChunkBytes) : 0);
  const int64_t reference_held = held_weight_bytes(m.components.at(0).graph);
  const int64_t artifact_held = f32_weights - looked_up_weight_bytes(g);
  const bool held = reference_held <= kHeldWeightLimit && artifact_held <= kHeldWeightLimit;
  const int64_t check_weights = held ? reference_held + artifact_held : 2 * p.largest_tensor_bytes;
  p.peak_memory_bytes = std::max({p.peak_memory_no_verify_bytes, baseline + config_held + config_parse,
                                  baseline + 2 * config_held + check_scratch + check_weights});
  return p;
}

}  // namespace hfx::pipeline
