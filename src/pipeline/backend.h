// A backend is one output format as one unit: the options it takes, how it writes a component
// (passes + writer), the check an export runs on what it wrote before publishing it, the runtime
// drivers that load it back (`hfx verify --runtime`, `hfx generate --runtime`) and how verify runs
// its work on each of them. The export job, `hfx formats` and `hfx verify` only talk to this
// interface; a format this build cannot also run is not offered.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ir/written_weights.h"
#include "pipeline/artifact.h"
#include "pipeline/export.h"
#include "runtime/generate.h"

namespace hfx::pipeline {

class ManifestBuilder;
class VerifySession;
struct SessionContext;

struct BackendOption {
  std::string flag;          // on `hfx export`
  std::string recipe_field;  // in a recipe / hfx.json ("" when the flag is not recorded)
  std::string help;
};

struct BackendInfo {
  std::string name;     // the --format value
  bool available = true;
  std::string status;   // what this build writes, or why it cannot
  std::string files;    // what lands in OUT/<name>/
  std::vector<BackendOption> options;
  std::vector<std::string> runtimes;  // runtimes that run its files (`hfx verify/generate --runtime`)
  std::string tested;                 // runtime versions the oracle tests run it with
};

// Everything one export job shares with the backends that write it.
struct ExportJob {
  const LoadedModel& model;
  const Recipe& recipe;
  std::filesystem::path staging;  // the export's staging root; a backend writes into staging/<name>
  ManifestBuilder& manifest;
  ExportResult& result;
  // Weights already written by an earlier backend of this job (a later one maps them, not the checkpoint).
  ir::WrittenWeights& written;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual BackendInfo info() const = 0;
  // The passes (names from passes::all_passes()) run on each component before precision and writing.
  virtual std::vector<std::string> passes() const = 0;
  // What this format makes of component `c` under `recipe`, without writing anything: the profile or
  // layout it picks (e.g. "profile ort"), a note for each choice it makes on its own (a fallback, a
  // file it will not write), and, with `contract`, the I/O contract it will write (running the
  // passes that change the I/O). `hfx export` prints the notes before the work; `hfx inspect` shows
  // the contract. The default: the task's contract, no notes.
  struct Plan {
    std::string layout;
    std::vector<std::string> notes;
    std::vector<tasks::IoSpec> inputs, outputs;
  };
  virtual Plan plan(const tasks::Component& c, const LoadedModel& m, const Recipe& recipe, bool contract) const;
  // Writes one component into job.staging/<name>/ and records it in the manifest.
  virtual void write_component(const tasks::Component& c, ExportJob& job) const = 0;
  // The quick check of the staged files against the reference executor before the export is
  // published: returns a one-line summary, fails with ErrorKind::Mismatch.
  virtual std::string check(ExportJob& job, const ExportOptions& options) const = 0;
  // A step runner over one component of an export read back with open_artifact(dir, info().name).
  virtual std::unique_ptr<runtime::StepRunner> make_runner(const ArtifactComponent& c, const std::string& runtime) const = 0;
  // The I/O of a written component, per port (name, "dtype[dims]"); a dimension the format keeps
  // only as dynamic is "?".
  struct Signature {
    std::vector<std::pair<std::string, std::string>> inputs, outputs;
  };
  virtual Signature signature(const ArtifactComponent& c) const = 0;
  // What `runtime` runs a component as: op (or compiled layer) -> where or in what precision -> count.
  using Placement = std::map<std::string, std::map<std::string, int>>;
  virtual Placement placement(const ArtifactComponent& c, const std::string& runtime) const = 0;
  // How `hfx verify` runs its work on the export read back on ctx.runtime (pipeline/verify_session.h).
  // The default: this format's step runners (make_runner) and placement.
  virtual std::unique_ptr<VerifySession> verify_session(const SessionContext& ctx) const;
};

// Every backend of hfx, built or not (unavailable ones say why in info().status), in the order an
// export writes them: ONNX first, so later formats reuse its written weights.
const std::vector<const Backend*>& all_backends();
// The backend named `format`: Unsupported listing the formats when unknown or not in this build.
const Backend& find_backend(const std::string& format);
// The backend whose files `runtime` runs (reference and onnxruntime: onnx; openvino: openvino).
const Backend& backend_for_runtime(const std::string& runtime);

}  // namespace hfx::pipeline
