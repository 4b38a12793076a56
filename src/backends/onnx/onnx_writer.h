// The ONNX backend's writer: lowers an IR graph of primitive ops one to one to ONNX (ai.onnx opset
// 21, IR version 10) and streams its weights into one external data file, one tensor in memory at a
// time, so models far above protobuf's 2 GB limit export with a small .onnx file.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "ir/graph.h"
#include "ir/written_weights.h"

namespace onnx {
class NodeProto;
class GraphProto;
}

namespace hfx::onnx_backend {

struct OnnxWriteOptions {
  int64_t opset = 21;        // ai.onnx opset; the model's ir_version is 10 (11 from opset 23)
  size_t alignment = 65536;  // every external tensor starts at a multiple of this (zero padding)
  std::string model_file = "model.onnx";
  std::string data_file = "model.onnx_data";  // plain file name, next to the model
  std::map<std::string, std::string> metadata;  // ModelProto.metadata_props, sorted by key
  std::string producer = "hfx";
  // Progress: called after each weight with increments (1, bytes of that tensor), so it can feed
  // Progress::advance directly. May be empty.
  std::function<void(int64_t tensors, int64_t bytes)> on_weight_written;
  // When set, every external weight's location is recorded there (a later writer of the same export
  // maps those bytes instead of reading the checkpoint again).
  ir::WrittenWeights* written = nullptr;
  // A weight an earlier graph of this folder wrote is read from that graph's data file (prefill and
  // decode share one copy); false: every graph writes its own `data_file` (the layout clients that
  // fetch each graph's `<model_file>_data` by name need: Optimum's and transformers.js's encoder-decoders).
  bool share_data_files = true;
  // The data file may be a copy of the checkpoint's weight file when the graph's weights are its
  // tensors as stored (checkpoint_mirror.h): the first graph of a folder only.
  bool mirror_checkpoint = true;
};

struct OnnxWriteResult {
  std::filesystem::path model_path;
  std::filesystem::path data_path;  // empty when every weight was small enough to go inline
  int64_t num_weights = 0;          // initializers written (inline + external)
  int64_t data_bytes = 0;           // size of the external data file, padding included (of all copies)
  int64_t source_bytes_read = 0;    // checkpoint bytes read to write the weights
  int64_t shared_bytes = 0;         // weight bytes read from another graph's data file in this folder, not written
  // sha256 (hex) of the files as written, hashed on the way out so the manifest need not re-read them.
  // data_sha256 is empty when the data files are copies of the checkpoint's files (checkpoint_mirror.h),
  // whose sha256 the manifest has.
  std::string model_sha256, data_sha256;
  struct DataCopy {
    std::filesystem::path file, copy_of;  // the data file written, and the checkpoint file it copies
    uintmax_t size = 0;
  };
  std::vector<DataCopy> data_copies;  // data_path is the first one's file
  // One line per weight holding NaN or Inf (ir::describe_non_finite), in write order.
  std::vector<std::string> non_finite;
};

// Bytes the external-data writer keeps queued for its writer thread (a weight is converted in blocks
// of about kOnnxChunkBytes while the previous blocks are written); what streaming adds to peak memory.
constexpr size_t kOnnxChunkBytes = size_t(1) << 20;
constexpr size_t kOnnxInFlightBytes = size_t(4) << 20;
// Rows per block of a streamed weight: about kOnnxChunkBytes, but at least 32 rows, so a transposed
// block reads whole cache lines of its source.
inline int64_t onnx_block_rows(int64_t rows, size_t row_bytes) {
  const int64_t want = std::max<int64_t>(32, int64_t(kOnnxChunkBytes / std::max<size_t>(row_bytes, 1)));
  return std::max<int64_t>(1, std::min(rows, want));
}

// Writes `out_dir`/model_file (and `out_dir`/data_file when any weight is external); `out_dir` is
// created if needed. Weights (graph.weights(), in order) go inline as raw_data when they are
// constants or at most 1 KiB, else external. The output is byte-for-byte deterministic.
// Throws Unsupported for an op without a lowering (a composite op that was not decomposed), Io
// when a file cannot be written.
OnnxWriteResult write_onnx(const ir::Graph& graph, const std::filesystem::path& out_dir,
                           const OnnxWriteOptions& opts);

// `graph` as a subgraph (a Scan's body) into `g`: its inputs, nodes (through the lowering table),
// outputs and constants (inline), every node and value name after `prefix` (a subgraph's names must
// not meet its outer graph's). Deterministic like write_onnx.
void write_subgraph(const ir::Graph& graph, const std::string& prefix, onnx::GraphProto& g);

// ONNX TensorProto.DataType of an hfx dtype, and back (nullopt for types hfx does not have).
int32_t onnx_elem_type(DType t);
std::optional<DType> dtype_from_onnx(int32_t elem_type);

// The lowering table: the one place that says how each IR primitive becomes an ONNX node (default
// domain) and, for the reader, how such a node's attributes come back. Keyed by IR op name.
struct OpLowering {
  std::string onnx_op;
  // Fills op_type and attributes (inputs, outputs and name are set by the writer).
  std::function<void(const ir::Node&, onnx::NodeProto&)> lower;
  // The IR attributes of a node of this op read from a file. Throws BadInput/Unsupported for
  // attributes of other types.
  std::function<ir::Attrs(const onnx::NodeProto&)> raise;
  std::string domain;  // "" = ai.onnx; "com.microsoft" for ORT contrib ops (imported at version 1)
  // Where the IR node's outputs go among the ONNX node's outputs (empty: in order); the other slots
  // are written as absent optional outputs ("").
  std::vector<int> output_slots;
};
const std::map<std::string, OpLowering>& onnx_lowering_table();
// nullptr when the op has no lowering.
const OpLowering* find_onnx_lowering(const std::string& ir_op);

}  // namespace hfx::onnx_backend
