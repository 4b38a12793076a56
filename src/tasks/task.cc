#include "tasks/task.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "tasks/feature_extraction.h"
#include "tasks/seq2seq.h"

namespace hfx::tasks {

const std::vector<const Task*>& all_tasks() {
  static const std::vector<const Task*> tasks = {&causal_lm_task(), &feature_extraction_task(), &seq2seq_task()};
  return tasks;
}

const Task* find_task(const std::string& name) {
  for (const Task* t : all_tasks())
    if (t->name() == name) return t;
  return nullptr;
}

std::string task_names() {
  std::vector<std::string> names;
  for (const Task* t : all_tasks()) names.push_back(t->name());
  return fmt::format("{}", fmt::join(names, ", "));
}

const std::vector<std::string>& known_roles() {
  static const std::vector<std::string> roles = [] {
    std::vector<std::string> all;
    for (const Task* t : all_tasks())
      for (const auto& r : t->roles())
        if (std::find(all.begin(), all.end(), r) == all.end()) all.push_back(r);
    return all;
  }();
  return roles;
}

const Task& task_for(const models::Model& model, const std::string& name, const std::string& default_task) {
  const std::string& wanted = name.empty() ? default_task : name;
  const Task* task = find_task(wanted);
  if (!task) unsupported("task `{}` is not supported (supported: {})", wanted, task_names());
  for (models::ModuleKind need : task->needs())
    if (!model.exposes(need))
      bad_input("task {} needs {}, which {} does not have (its task: {})", task->name(), models::module_name(need),
                model.summary().model_type, default_task);
  return *task;
}

}  // namespace hfx::tasks
