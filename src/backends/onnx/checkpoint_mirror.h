// ONNX data files that are the checkpoint's weight files themselves, byte for byte.
//
// When a graph's weights are checkpoint tensors as they are stored (a bf16 export of a bf16 checkpoint,
// or f32 of f32, with the ort profile's FusedMatMul reading the stored [N, K] Linear weights), each data
// file can be a copy of one checkpoint file, each initializer pointing at its tensor's offset: the copy
// runs in the kernel (copy_file_range), and the file's sha256 is the checkpoint file's, which the
// manifest already computes (or reads from a Hugging Face cache blob's name), so no byte is hashed
// twice. The packed q|k|v and gate|up weights, stacked from stored tensors on their first axis, become
// an ONNX Concat of those tensors' initializers, which ONNX Runtime folds when it loads the graph
// (onnx_reader folds it back into one weight). Weights of neither kind must be small enough to go
// inline in the .onnx file (f32 norm weights of a bf16 model).
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
  // The checkpoint files the graph reads, by path: file i is copied to data file mirror_file_name(i)
  // (a sharded checkpoint's model-00001-of-00002.safetensors to model.onnx_data, the next to
  // model.onnx_data_1, the names transformers.js loads external data chunks by).
  std::vector<std::shared_ptr<const MappedFile>> files;
  // A stored tensor: which file, and where in it.
  struct At {
    size_t file = 0;
    size_t offset = 0;
  };
  // One initializer per stored tensor a stacked weight reads, named after its checkpoint tensor.
  struct Part {
    std::string name;
    ir::WeightRef weight;
    At at;
    std::filesystem::path earlier_file;  // plan_shared_stacks: the earlier graph's file it lies in
  };
  std::vector<Part> parts;
  std::map<ir::ValueId, At> stored;                    // weight value -> where it lies
  std::map<ir::ValueId, std::vector<size_t>> stacked;  // weight value -> indices into `parts`, in order
  size_t tensor_bytes = 0;  // of the stored tensors the graph reads, each once: what the copies read of them
};

// The data file that mirrors checkpoint file `i`: `data_file`, then `data_file`_1, _2, ...
std::string mirror_file_name(const std::string& data_file, size_t i);

// The mirror layout of `graph`'s weights, or nullopt unless: every weight that is neither a constant
// nor at most kMirrorInlineLimit bytes is stored or stacked, and they cover each checkpoint file they lie
// in but for its header (at most 1 MiB before the first of them) and 1 % of the rest
// (a data file is not a copy of a checkpoint the graph reads a part of, or reads transposed: an
// encoder-decoder's encoder, a model's vision tower, the portable profile's [K, N] weights).
std::optional<CheckpointMirror> plan_checkpoint_mirror(const ir::Graph& graph);

// A later graph of the folder (decode.onnx beside a mirrored prefill.onnx): its stacked weights whose
// parts an earlier graph's data file in `dir` holds whole, as the same Concat over initializers pointing
// into that file (`files` and `stored` empty; each part's `earlier_file` is set).
CheckpointMirror plan_shared_stacks(const ir::Graph& graph, const ir::WrittenWeights& written,
                                    const std::filesystem::path& dir);

}  // namespace hfx::onnx_backend
