// A backend is one output format as one unit: the options it takes, how it writes a component
// (passes + writer), the check an export runs on what it wrote before publishing it, the runtime
// drivers that load it back (`hfx verify --runtime`, `hfx generate --runtime`) and how verify runs
// its work on each of them. The export job, `hfx formats` and `hfx verify` only talk to this
// interface; a format this build cannot also run is not offered.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ir/written_weights.h"
#include "passes/precision.h"
#include "pipeline/artifact.h"
#include "pipeline/export.h"
#include "pipeline/inspect.h"
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
  // The options every format shares (--dtype, --split-prefill, ...) as this format reads them; its own
  // options are Backend::options(), which `hfx formats` lists first.
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
  // The options this format takes (recipe fields and `hfx export` flags, pipeline/format_options.h).
  virtual std::vector<FormatOption> options() const { return {}; }
  // Fills in the defaults of this format's options that follow other options (ONNX's profile follows
  // its opset), after a recipe or the command line set what it names.
  virtual void complete_options(FormatSettings&) const {}
  // What this format's options make of the task's components, when it is written (ONNX's
  // `onnx_layout` picks an encoder-decoder's graphs): sets the fields of `task` they decide.
  virtual void shape_task(const FormatSettings&, tasks::CausalLmOptions&) const {}
  // The precision forms (passes/precision.h) this format writes component `role` in under `recipe`:
  // what `hfx verify` rounds its reference to.
  virtual passes::PrecisionTarget precision_target(const Recipe&, const std::string& role) const = 0;
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
    // False when the format writes no file for the component (another component's graph runs its
    // steps: OpenVINO's stateful encoder-decoder decoder); `layout` says which.
    bool written = true;
  };
  virtual Plan plan(const tasks::Component& c, const LoadedModel& m, const Recipe& recipe, bool contract) const;
  // Writes one component into job.staging/<name>/ and records it in the manifest.
  virtual void write_component(const tasks::Component& c, ExportJob& job) const = 0;
  // What an export in this format writes and holds in memory (`hfx inspect`'s preflight), or nothing
  // when the format has no measured model of it.
  virtual std::optional<Preflight> preflight(const LoadedModel&) const { return std::nullopt; }
  // A written component's graph read back into IR for the reference executor (`hfx verify --runtime
  // reference`), or nothing when the format is run only by its own runtime.
  virtual std::optional<ir::Graph> read_graph(const std::filesystem::path&) const { return std::nullopt; }
  // The quick check of the staged files against the reference executor before the export is
  // published: returns a one-line summary, fails with ErrorKind::Mismatch.
  virtual std::string check(ExportJob& job, const ExportOptions& options) const = 0;
  // What check() can do before the files exist (probing its runtime: a Python start and an import),
  // run by run_export beside the writing, which leaves a core idle while it waits on the disk; nothing
  // by default.
  virtual std::function<void()> check_prelude(const ExportOptions&) const { return {}; }
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

// Formats register themselves from their own folder (src/backends/<format>/):
//   HFX_REGISTER_BACKEND(OnnxBackend, 0);
// `rank` orders them: an export writes them in this order (ONNX first, so later formats reuse the
// weights it wrote) and `hfx formats` lists them so. The backends layer is linked whole
// (CMakeLists.txt), so a registration is never dropped by the linker.
struct BackendRegistration {
  BackendRegistration(int rank, const Backend& backend);
};
#define HFX_REGISTER_BACKEND(TYPE, RANK)      \
  static const TYPE hfx_registered_backend_; \
  static const ::hfx::pipeline::BackendRegistration hfx_backend_registration_(RANK, hfx_registered_backend_)

// The task options an export of `formats` with `settings` builds its components with: `task` as
// given, with what each written format's options decide (Backend::shape_task).
tasks::CausalLmOptions task_options(const tasks::CausalLmOptions& task, const FormatSettings& settings,
                                    const std::vector<std::string>& formats);

// Every registered backend, built or not (unavailable ones say why in info().status), by rank.
const std::vector<const Backend*>& all_backends();
// The backend named `format`: Unsupported listing the formats when unknown or not in this build.
const Backend& find_backend(const std::string& format);
// The backend whose files `runtime` runs (reference and onnxruntime: onnx; openvino: openvino).
const Backend& backend_for_runtime(const std::string& runtime);

}  // namespace hfx::pipeline
