// A task turns a model's modules into components with roles and fixes their I/O contract:
// causal-lm (tasks/causal_lm.h) and feature-extraction (tasks/feature_extraction.h; sequence
// classification when the checkpoint has the head) today, seq2seq and vision-language next. The
// registry (models/registry.h) names each model_type's default task; a recipe may name another, and
// records the task that ran. The layers above ask the task, not the model's shape, what to do.
#pragma once

#include <string>
#include <vector>

#include "models/model.h"
#include "tasks/causal_lm.h"
#include "tasks/component.h"

namespace hfx::tasks {

class Task {
 public:
  virtual ~Task() = default;
  // As recipes, manifests and ONNX metadata record it: "causal-lm".
  virtual const std::string& name() const = 0;
  // The modules of the model its components are built from.
  virtual std::vector<models::ModuleKind> needs() const = 0;
  // The roles of the components it can build, in the order it builds them.
  virtual std::vector<std::string> roles() const = 0;
  // Its components are the steps of a decode loop, carrying state from one to the next: what the
  // decode loop, `hfx generate`, the greedy checks, the context bounds and genai_config.json are for.
  virtual bool generative() const = 0;
  // How `hfx inspect` names the contract it prints: "decoder step, symbolic query axis".
  virtual std::string contract_summary() const = 0;
  // A checkpoint tensor its components leave unused on purpose (weight accounting stays strict for
  // every other).
  virtual bool ignores_weight(const std::string& /*name*/) const { return false; }
  // The components, built from the modules needs() names (the model exposes them: task_for).
  // Every task reads the causal-LM options today; one with no use for an option refuses it.
  virtual std::vector<Component> components(const models::Model& model, const CausalLmOptions& options) const = 0;
};

// Every task, in the order `supported:` lists them.
const std::vector<const Task*>& all_tasks();
// nullptr when no task has this name.
const Task* find_task(const std::string& name);
// "causal-lm, feature-extraction": for messages.
std::string task_names();
// Every task's roles, in task order: "decoder", "prefill", "decode", "encoder".
const std::vector<std::string>& known_roles();
// The task named `name` (its default task, `default_task`, when empty) for `model`: Unsupported when
// no task has the name, BadInput when the model does not expose a module the task needs.
const Task& task_for(const models::Model& model, const std::string& name, const std::string& default_task);

}  // namespace hfx::tasks
