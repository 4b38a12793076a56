// `hfx verify`: proves an export before anyone ships it. Rebuilds the reference from the source
// checkpoint the manifest names, and checks the artifact against it: checksums, source hashes, I/O
// signature, numbers per component over a shape matrix at the contract's bounds, greedy generation,
// where ops ran, latency/memory/size, and that a re-export reproduces the same bytes. When numbers
// diverge it names the first layer whose output diverges. Each of those is a named check
// (pipeline/verify_checks.h); the runtime runs the artifact's side through the session its backend
// hands out (pipeline/verify_session.h).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace hfx::pipeline {


// --reference-weights auto in the export's built-in check holds a graph's weights up to this much (a
// reference graph and an artifact graph together: 1 GiB), and streams them above it, so the check's
// memory stays near the largest weight whatever the model's size (issue #21: peak RSS <= 1 GiB + 2 x
// the largest tensor).
inline constexpr int64_t kHeldWeightLimit = int64_t(512) << 20;

// What `hfx verify` holds per graph under --reference-weights auto: an eighth of the memory available
// (a reference and an artifact graph: a quarter), at least kHeldWeightLimit. Holding is what
// Transformers does, and streaming a model-sized graph costs each run its page faults.
int64_t held_weights_to_spare();

struct VerifyOptions {
  std::string runtime = "reference";  // a runtime of a backend (BackendInfo::runtimes, `hfx formats`)
  int64_t tokens = 64;                // greedy tokens compared
  bool reexport = true;               // re-export into a temporary folder and compare bytes
  bool full_shape_matrix = true;      // false: two shapes only (the check `hfx export` runs)
  // false: the files' and the checkpoint's sha256 are not taken again (the check `hfx export` runs,
  // whose process hashed every file as it wrote it and the checkpoint as it read it); the rows say so.
  bool rehash = true;
  std::optional<double> atol;         // overrides the f32 default
  std::string python;                 // interpreter of the python drivers (default: pipeline/runtime_probe.h's driver_python)
  // How the reference executor treats weights (runtime::ExecOptions::cache_weights): "hold" keeps
  // them between runs (MatMul, Linear and Gather weights as their mapped pages, others converted to
  // f32), "stream" reads each one per run and releases it after use (memory near the largest weight),
  // "auto" holds a graph's weights up to `held_weight_limit` and streams above it.
  std::string reference_weights = "auto";
  // The default keeps the export's built-in check within the issue-#21 bound on its peak RSS whatever
  // the model's size; `hfx verify` raises it to what the machine has to spare (held_weights_to_spare).
  int64_t held_weight_limit = kHeldWeightLimit;
  // What the artifact's numbers and greedy tokens are compared with (pipeline/oracle_transformers.h):
  // reference (hfx's reference executor on its own definition of the checkpoint), transformers
  // (Transformers eager on the checkpoint; an error when `python` cannot run it), auto (transformers
  // when it can run, else reference with a note saying why).
  std::string oracle = "reference";
  // The source checkpoint, when not where the manifest says (the folder moved, another machine).
  std::filesystem::path model_dir;
};

struct CheckResult {
  std::string name;
  bool passed = false;
  std::string detail;     // one line: what was measured, or what went wrong
  std::string tolerance;  // the gate and why it is that number
  nlohmann::ordered_json measured = nlohmann::ordered_json::object();
};

struct VerifyReport {
  std::filesystem::path dir;
  std::string runtime;
  std::string oracle;  // what the numbers were compared with, e.g. "hfx's reference executor"
  std::vector<CheckResult> checks;
  bool passed() const;
  nlohmann::ordered_json to_json() const;
  std::string to_markdown() const;
};

// The default fp32 tolerance and its reason (documented in docs/verify.md).
constexpr double kF32Atol = 1e-4;

VerifyReport verify_export(const std::filesystem::path& out_dir, const VerifyOptions& options);

// Writing the reports: pipeline/report_files.h.

}  // namespace hfx::pipeline
