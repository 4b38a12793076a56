#include "pipeline/verify_runtimes.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "pipeline/backend.h"
#include "pipeline/manifest.h"

namespace fs = std::filesystem;

namespace hfx::pipeline {

namespace {

// The registry's runtimes for `format`, built in this hfx or not (verify then says why not).
std::vector<std::string> runtimes_of(const std::string& format) {
  for (const Backend* b : all_backends())
    if (b->info().name == format) return b->info().runtimes;
  return {};
}

}  // namespace

std::vector<std::string> export_formats(const fs::path& out_dir) {
  const nlohmann::json m = read_manifest(out_dir);
  std::vector<std::string> present;
  for (const auto& c : m["components"])
    if (c.is_object() && c.contains("format") && c["format"].is_string()) present.push_back(c["format"].get<std::string>());
  std::vector<std::string> out;
  for (const Backend* b : all_backends()) {
    const std::string name = b->info().name;
    if (std::find(present.begin(), present.end(), name) != present.end()) out.push_back(name);
  }
  if (out.empty())
    bad_input("{}: no component in a format this hfx knows (components: {}; formats: `hfx formats`)",
              (out_dir / kManifestName).string(), present.empty() ? std::string("none") : fmt::format("{}", fmt::join(present, ", ")));
  return out;
}

std::string default_runtime(const fs::path& out_dir) {
  const auto formats = export_formats(out_dir);
  // The first backend is onnx, whose first runtime is the reference executor: unchanged default.
  return runtimes_of(formats.front()).front();
}

std::vector<std::string> all_runtimes(const fs::path& out_dir) {
  std::vector<std::string> out;
  for (const auto& f : export_formats(out_dir))
    for (const auto& r : runtimes_of(f)) out.push_back(r);
  return out;
}

}  // namespace hfx::pipeline
