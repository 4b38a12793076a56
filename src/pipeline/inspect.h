// `hfx inspect`: what an export of a checkpoint would be, without writing anything.
#pragma once

#include <filesystem>
#include <string>

#include "pipeline/format_options.h"
#include "tasks/causal_lm.h"

namespace hfx::pipeline {

struct Preflight {
  int64_t disk_bytes = 0;         // files an ONNX export writes
  int64_t peak_memory_bytes = 0;  // predicted peak resident memory of `hfx export` (default options)
  int64_t peak_memory_no_verify_bytes = 0;  // ... of `hfx export --no-verify` (writing only)
  int64_t largest_tensor_bytes = 0;
  std::string largest_tensor;
};

// The export whose I/O contract inspect shows: a format and its options, as `hfx export` takes them
// (F#7: the contract of what will be written, e.g. the default ort profile has no position_ids).
struct InspectOptions {
  std::string format = "onnx";
  FormatSettings options = FormatSettings::defaults();  // the formats' own options (--onnx-profile, --stateless)
  // The task options the export would run with (--static-cache --max-cache-len N: the static
  // contract, which the executorch format requires).
  tasks::CausalLmOptions task;
};

// Human-readable report (or JSON with `as_json`) on stdout's behalf.
std::string inspect_report(const std::filesystem::path& model_dir, bool as_json, const InspectOptions& options = {});

}  // namespace hfx::pipeline
