// An ONNX data file that is the checkpoint's weight file itself, byte for byte.
//
// When a graph's weights are a checkpoint file's tensors as they are stored (a bf16 export of a bf16
// checkpoint, or f32 of f32, with the ort profile's FusedMatMul reading the stored [N, K] Linear
// weights), the data file can be a copy of that file with each initializer pointing at its tensor's
// offset: the copy runs in the kernel (copy_file_range), and the file's sha256 is the checkpoint
// file's, which the manifest already computes (or reads from a Hugging Face cache blob's name), so no
// byte is hashed twice. The packed q|k|v and gate|up weights, stacked from stored tensors on their
// first axis, become an ONNX Concat of those tensors' initializers, which every runtime folds when it
// loads the graph (onnx_reader folds it back into one weight). Weights of neither kind must be small
// enough to go inline in the .onnx file (f32 norm weights of a bf16 model).
#pragma once

#include <cstddef>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "ir/graph.h"
#include "ir/weight.h"
#include "ir/written_weights.h"

namespace hfx::onnx_backend {

// Weights up to this many bytes that are not stored tensors go inline in a mirrored graph's .onnx file.
constexpr size_t kMirrorInlineLimit = size_t(64) << 10;

struct CheckpointMirror {
  std::shared_ptr<const MappedFile> file;
  // One initializer per stored tensor a stacked weight reads, named after its checkpoint tensor.
  struct Part {
    std::string name;
    ir::WeightRef weight;
    size_t offset = 0;
    std::filesystem::path file;  // where it lies when an earlier graph wrote it (empty: this graph's copy)
  };
  std::vector<Part> parts;
  std::map<ir::ValueId, size_t> stored;                // weight value -> its offset in `file`
  std::map<ir::ValueId, std::vector<size_t>> stacked;  // weight value -> indices into `parts`, in order
  size_t tensor_bytes = 0;  // of the stored tensors the graph reads, each once: what the copy reads of them
};

// The mirror layout of `graph`'s weights, or nullopt unless: every weight that is neither a constant
// nor at most kMirrorInlineLimit bytes is stored or stacked; all of them in one checkpoint file; and
// they cover that file but for its header (at most 1 MiB before the first of them) and 1 % of the rest
// (a data file is not a copy of a checkpoint the graph reads a part of, or reads transposed: an
// encoder-decoder's encoder, a model's vision tower, the portable profile's [K, N] weights).
std::optional<CheckpointMirror> plan_checkpoint_mirror(const ir::Graph& graph);

// A later graph of the folder (decode.onnx beside a mirrored prefill.onnx): its stacked weights whose
// parts an earlier graph's data file in `dir` holds whole, as the same Concat over initializers pointing
// into that file (`file` is nullptr, `stored` empty; each part's `file` is set).
CheckpointMirror plan_shared_stacks(const ir::Graph& graph, const ir::WrittenWeights& written,
                                    const std::filesystem::path& dir);

}  // namespace hfx::onnx_backend
