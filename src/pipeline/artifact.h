// An export read back for running: the manifest, and each component's graph read from its file
// with the contract's bounds restored from the manifest.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ir/graph.h"
#include "runtime/generate.h"

namespace hfx::pipeline {

struct ArtifactComponent {
  std::string role;
  std::filesystem::path file;
  ir::Graph graph;  // read back for onnx only (empty for other formats)
};

struct Artifact {
  std::filesystem::path dir;
  nlohmann::json manifest;
  std::vector<ArtifactComponent> components;
  runtime::CacheSpec cache;
  std::vector<int64_t> eos_token_ids;
  int64_t pad_token_id = 0;

  // The component with `role`, or the first when role is empty; BadInput naming the roles otherwise.
  const ArtifactComponent& component(const std::string& role) const;
};

// Reads OUT/hfx.json and the components of `format`; fails on a missing or inconsistent manifest or
// a missing component file.
Artifact open_artifact(const std::filesystem::path& dir, const std::string& format);

}  // namespace hfx::pipeline
