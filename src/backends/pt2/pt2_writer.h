// Writes one graph as a `.pt2` archive that torch.export.load reads with no pickle: models/model.json
// (pt2_program), each parameter and lifted constant as a raw little-endian file with its TensorMeta in
// the weights / constants config (`use_pickle: false`), an empty data/sample_inputs/model.pt (the
// loader reads the entry and, empty, unpickles nothing) and the version files torch checks.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "backends/pt2/pt2_program.h"
#include "ir/graph.h"

namespace hfx::pt2_backend {

struct Pt2WriteOptions {
  std::string file_name = "model.pt2";
  Pt2LowerOptions lowering;
  std::function<void(int64_t n, int64_t bytes)> on_weight_written;
};

struct Pt2Written {
  std::filesystem::path file;
  int64_t weight_bytes = 0;        // parameter + constant bytes in the archive
  int64_t source_bytes_read = 0;   // checkpoint bytes read for them
  std::vector<std::string> ops;    // ATen targets the program calls
};

// Lowers `graph` (every op before any byte is written) and writes dir/file_name.
Pt2Written write_pt2(const ir::Graph& graph, const std::filesystem::path& dir, const Pt2WriteOptions& options);

}  // namespace hfx::pt2_backend
