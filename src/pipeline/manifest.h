// The manifest OUT/hfx.json: what was exported from what (source hashes), how (the recipe, the
// passes), the components with their I/O contract and cache geometry, and the sha256 of every file
// written. It is the unit of release and rollback, and `hfx check` re-verifies it.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/checkpoint.h"
#include "models/model.h"
#include "pipeline/export.h"
#include "tasks/causal_lm.h"

namespace hfx::pipeline {

constexpr int kManifestSchemaVersion = 1;
// `hfx verify` writes its reports here; they describe the artifact and are not part of it.
inline const char* kReportDir = "verify";

class ManifestBuilder {
 public:
  ManifestBuilder(const io::Checkpoint& ckpt, const LoadedModel& model, const Recipe& recipe);
  void add_component(const tasks::Component& c, const std::string& format, const std::string& file,
                     const std::vector<std::string>& passes);
  // Records the onnx profile a component was written with, and why when it is not the requested one.
  void add_onnx_profile(const std::string& role, const std::string& profile, const std::string& note);
  // Hashes every file under `root` and writes root/hfx.json.
  void write(const std::filesystem::path& root);

 private:
  nlohmann::ordered_json json_;
};

// Regular files under root, relative, sorted.
std::vector<std::filesystem::path> list_files(const std::filesystem::path& root);

// Reads and validates OUT/hfx.json: BadInput when missing, not JSON, of another schema version, or
// missing required members.
nlohmann::json read_manifest(const std::filesystem::path& out_dir);

struct CheckReport {
  int64_t files_checked = 0;
  std::vector<std::string> problems;  // empty when the folder is consistent
};
// Re-verifies every checksum and that each component file is present and listed.
CheckReport check_export(const std::filesystem::path& out_dir);

}  // namespace hfx::pipeline
