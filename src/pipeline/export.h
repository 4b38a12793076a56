// One export job: load the checkpoint once, build the step graph, and for each requested format run
// that backend's passes and writer into a staging folder that is renamed into place only when
// everything succeeded.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "ir/graph.h"
#include "models/model.h"

namespace hfx::pipeline {

struct ExportOptions {
  std::filesystem::path model_dir;
  std::filesystem::path out_dir;
  std::vector<std::string> formats = {"onnx"};
  bool overwrite = false;
  bool quiet = false;  // no summary on stdout
};

struct ExportResult {
  std::filesystem::path out_dir;
  std::vector<std::filesystem::path> files;  // relative to out_dir, sorted
  int64_t weight_bytes_written = 0;
  double seconds = 0;
};

// The step graph of the checkpoint's model, checked for strict weight accounting.
struct LoadedModel {
  std::unique_ptr<io::Checkpoint> checkpoint;  // heap: the model keeps a reference to it
  std::unique_ptr<models::CausalLm> model;
  ir::Graph graph;
};
LoadedModel load_model(const std::filesystem::path& model_dir);

// Passes each backend runs before writing (names from passes::all_passes()).
std::vector<std::string> backend_passes(const std::string& format);

ExportResult run_export(const ExportOptions& options);

}  // namespace hfx::pipeline
