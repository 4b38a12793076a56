// One export job: load the checkpoint once, build the task's components, and for each requested
// format run that backend's passes and writer into a staging folder that is renamed into place only
// when everything succeeded. The recipe (everything that decides the output bytes) is written into
// the manifest, so `hfx export --recipe OUT/hfx.json` reproduces an export.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/checkpoint.h"
#include "io/hub_cache.h"
#include "models/model.h"
#include "pipeline/format_options.h"
#include "quant/quantize.h"
#include "tasks/causal_lm.h"
#include "tasks/task.h"

namespace hfx::pipeline {

struct Recipe {
  std::vector<std::string> formats = {"onnx"};
  // The task that runs (tasks/task.h), recorded as "task": empty runs the model's default task
  // (models/registry.h), and run_export fills in the one that ran.
  std::string task_name;
  tasks::CausalLmOptions task;
  // Weight dtype and weight-only quantization (`--dtype`, `--quantize`, `--quantize-lm-head`); recorded
  // only when not the default f32, so f32 recipes keep their bytes.
  quant::PrecisionSpec precision;
  // Each format's own options (`onnx_profile`, `openvino_stateful`, ...), registered by the format
  // (Backend::options, pipeline/format_options.h) and recorded as it says.
  FormatSettings options = FormatSettings::defaults();
  // Verification tolerances by dtype (max abs diff of outputs against the reference executor, which
  // runs the same precision: see tolerance()).
  std::map<std::string, double> tolerances = {{"f32", 1e-4}};
  // The tolerance for this recipe's dtype: tolerances[dtype], else kDefaultTolerances.
  double tolerance() const;

  // Per-component overrides (recipe "components": {"<role>": {...}}): a component may be written with
  // its own precision or onnx profile, e.g. a prefill graph in f16 beside an int4 decode graph.
  struct ComponentOverride {
    std::optional<quant::PrecisionSpec> precision;
    std::map<std::string, nlohmann::json> options;  // format options registered as per_component
  };
  std::map<std::string, ComponentOverride> components;
  const quant::PrecisionSpec& precision_for(const std::string& role) const;
  // A format option's value for the component `role` (its override, else the recipe's).
  const nlohmann::json& option(const std::string& field, const std::string& role = "") const;
  std::string text_option(const std::string& field, const std::string& role = "") const {
    return option(field, role).get<std::string>();
  }
  double tolerance_for(const std::string& role) const;
  // BadInput when an override names a role this export does not have (`roles`: the components built).
  void check_component_roles(const std::vector<std::string>& roles, const std::string& where) const;

  nlohmann::ordered_json to_json() const;
  // Accepts a recipe object or a whole manifest (its "recipe" member). BadInput names the field.
  static Recipe from_json(const nlohmann::json& j, const std::string& where);
};

// What an export will write, known once the model is loaded and before any file is, so `hfx export`
// says it before the work rather than after it (F#19).
struct ExportPlan {
  std::string model_type, task;
  std::vector<std::string> components;  // per format and component: "onnx decoder (profile ort)"
  std::vector<std::string> notes;       // choices made on the user's behalf (a profile fallback), one line each
};

struct ExportOptions {
  std::filesystem::path model_dir;
  std::filesystem::path out_dir;
  Recipe recipe;
  bool overwrite = false;
  bool verify = true;  // check the staged export against the reference executor before committing it
  std::string verify_runtime;                   // run the check's files on this runtime (onnxruntime, reference)
  // What the built-in check compares with (VerifyOptions::oracle): reference (hfx's reference
  // executor), transformers or auto (also against Transformers eager on the checkpoint).
  std::string verify_oracle = "reference";
  std::optional<io::HubSnapshot> hub;           // model_dir is this snapshot of the Hugging Face cache (manifest source.hub)
  std::function<void(const ExportPlan&)> on_plan;  // called before anything is written (may be empty)
};

struct ExportResult {
  std::filesystem::path out_dir;
  std::vector<std::filesystem::path> files;  // relative to out_dir, sorted
  // Bytes of the weights each format wrote (the tensors themselves: no alignment padding, so an int4
  // export shows its size next to an f32 one), in the order written.
  std::vector<std::pair<std::string, int64_t>> weight_bytes;
  void add_weight_bytes(const std::string& format, int64_t bytes);
  // Checkpoint weight bytes the writers read (each format reuses what an earlier one wrote, so with
  // several formats this stays near source_weight_bytes), and the checkpoint's tensor bytes.
  int64_t source_bytes_read = 0;
  int64_t source_weight_bytes = 0;
  double seconds = 0;
  std::string verify_summary;  // empty when not verified
  std::vector<std::string> notes;  // what the writers found on the way (ExportPlan::notes are said before)
  // Weights written with NaN or Inf, one line each (ir::describe_non_finite): also in `notes`, and the
  // diagnosis when the built-in verification then fails on non-finite outputs.
  std::vector<std::string> non_finite_weights;
};

// A checkpoint, its model definition, the task that ran and its components, with strict weight
// accounting.
struct LoadedModel {
  std::unique_ptr<io::Checkpoint> checkpoint;  // heap: the model keeps a reference to it
  models::Model model;
  const tasks::Task* task;  // an entry of the task registry (tasks/task.h)
  std::vector<tasks::Component> components;

  const models::ModelSummary& summary() const { return model.summary(); }
};
// `task`: a task's name, or empty for the model's default task.
LoadedModel load_model(const std::filesystem::path& model_dir, const tasks::CausalLmOptions& options = {},
                       const std::string& task = "");

// Where run_export may write, checked before the model is loaded (nothing is read or written
// before): BadInput when `out_dir` exists and `overwrite` is false; with `overwrite`, when `out_dir`
// is the model folder, holds it or lies inside it (real paths, symlinks followed), or is anything but
// a previous hfx export (check_replaceable_export). Io naming the folder that refuses when the
// output folder cannot be created there.
void check_output_target(const std::filesystem::path& model_dir, const std::filesystem::path& out_dir, bool overwrite);
// BadInput unless `out` (followed if a symlink) is a folder whose hfx.json reads as an hfx manifest:
// the only thing --overwrite replaces.
void check_replaceable_export(const std::filesystem::path& out);

ExportResult run_export(const ExportOptions& options);

// What to do when this hfx was built without the OpenVINO backend (docs/openvino.md).
inline const char* kOpenVinoHint = "hfx built without OpenVINO: pip install openvino==2026.4.1 into .venv and reconfigure";

// The manifest file name inside an export.
inline const char* kManifestName = "hfx.json";

}  // namespace hfx::pipeline
