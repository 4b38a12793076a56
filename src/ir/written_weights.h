// Where one export has already written each weight's bytes. `hfx export --format onnx,openvino`
// writes ONNX first; its writer records every external tensor here (data file, offset, size, keyed
// by the WeightRef's description, which names its source tensors and every transform), and the
// OpenVINO writer maps those bytes (or takes the copy of a small inline one) instead of reading the checkpoint and transforming the tensor a
// second time. So one invocation reads each checkpoint weight once, whatever number of formats it
// writes (ExportResult::source_bytes_read shows it).
#pragma once

#include <cstddef>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "ir/weight.h"

namespace hfx::ir {

class WrittenWeights {
 public:
  // `nbytes` at `offset`, or, for a part of a packed weight (WeightRef::blocks), `runs` runs of
  // `run_bytes` each, `stride` apart.
  struct Location {
    std::filesystem::path file;
    size_t offset = 0, nbytes = 0;
    size_t run_bytes = 0, stride = 0;
    int64_t runs = 1;
    bool contiguous() const { return runs == 1 || run_bytes == stride; }
  };
  // Records that `w`'s bytes are at `file`[offset, offset + w.nbytes()) once the writer closes it,
  // and where each part of a packed `w` is (q^T, k^T and v^T in Transpose(Concat(q, k, v))), so a
  // writer of another format that keeps them apart finds them too.
  void add(const WeightRef& w, std::filesystem::path file, size_t offset);
  // Keeps a copy of a small weight the writer stored inline (ONNX: at most 1 KiB, in the protobuf).
  void add_inline(const WeightRef& w, std::span<const uint8_t> bytes);
  // The writer finished `file`: its weights may be read back from now on (not while it is written, so a
  // writer never reads its own unfinished file).
  void close(const std::filesystem::path& file) { closed_.insert(file); }
  std::optional<Location> find(const WeightRef& w) const;
  // Where `w` lies whole and contiguous in a finished file: a writer of the same folder points at
  // those bytes (ONNX external data of prefill.onnx read by decode.onnx) instead of writing them again.
  std::optional<Location> whole(const WeightRef& w) const;
  // whole(w), when its file lies in `dir`: what a graph written to `dir` may point at.
  std::optional<Location> whole_in(const WeightRef& w, const std::filesystem::path& dir) const;
  // The bytes of an earlier-written weight, mapped read-only (each file mapped once), with the map
  // that keeps them valid; a part stored in runs is gathered into a copy (`map` is then nullptr), and
  // a quantized part whose numbers an earlier writer stored in another layout is relaid into one
  // (WeightRef::quantized_in); nullopt when no earlier writer wrote `w`.
  struct Bytes {
    std::span<const uint8_t> bytes;
    std::shared_ptr<const void> owner;        // keeps `bytes` valid: the map, or the inline copy
    std::shared_ptr<const MappedFile> map;    // the file's map (nullptr for an inline copy)
  };
  std::optional<Bytes> bytes(const WeightRef& w);
  size_t size() const { return locations_.size(); }

 private:
  static std::string key(const WeightRef& w);
  std::optional<Bytes> stored(const WeightRef& w);  // `w` itself, or a part of a packed weight
  std::map<std::string, Location> locations_;
  std::map<std::string, std::shared_ptr<const std::vector<uint8_t>>> inline_;
  std::map<std::filesystem::path, std::shared_ptr<const MappedFile>> maps_;
  std::set<std::filesystem::path> closed_;
};

}  // namespace hfx::ir
