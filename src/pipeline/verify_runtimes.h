// Which runtimes `hfx verify` runs an export on: the one asked, the one the export's formats imply
// when none is asked (an OpenVINO-only export is verified on openvino, a pt2-only one on torch), or
// with `--runtime all` every runtime of every registered backend whose format the export holds.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace hfx::pipeline {

// The formats of the export's components (hfx.json), in the registry's order (pipeline/backend.h).
std::vector<std::string> export_formats(const std::filesystem::path& out_dir);

// The runtime verify uses without --runtime: reference when the export has onnx files (hfx's own
// executor over them, as before), otherwise the first runtime of the first format present.
// BadInput when no registered backend writes any of the export's formats.
std::string default_runtime(const std::filesystem::path& out_dir);

// Every runtime of every format present (`--runtime all`), e.g. reference, onnxruntime, openvino.
std::vector<std::string> all_runtimes(const std::filesystem::path& out_dir);

}  // namespace hfx::pipeline
