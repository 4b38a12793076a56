// Reads an ONNX file written by the ONNX backend back into IR, for read-back verification and for
// running exported artifacts with hfx's own executor (`hfx generate`).
#pragma once

#include <filesystem>

#include "ir/graph.h"

namespace hfx::onnx_backend {

// An IR graph mirroring the file: inputs with dtypes and symbolic shapes (dim_param -> Dim::sym,
// empty dims -> unknown), initializers as weights (inline -> WeightRef::constant, external data ->
// WeightRef::source over a memory map of the data file, one map per file), nodes in file order with
// their attributes converted back (Cast's `to` becomes an hfx dtype name) and their outputs typed by
// IR shape inference, and the graph outputs.
// Only the default ONNX domain at opset >= 18 and ops in the backend's lowering table are accepted
// (Unsupported otherwise). External data locations must be relative paths without "..", and every
// tensor must lie inside its file with length == numel * dtype size (BadInput otherwise). Errors
// name the file.
ir::Graph read_onnx(const std::filesystem::path& model_path);

}  // namespace hfx::onnx_backend
