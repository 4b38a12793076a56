// `hfx run`: one step on the reference executor, from the checkpoint ("eager") or an exported component.
#include "cli/commands.h"
#include "core/error.h"
#include "io/safetensors_write.h"
#include "pipeline/artifact.h"
#include "pipeline/export.h"
#include "runtime/executor.h"
#include "tasks/state_names.h"

namespace fs = std::filesystem;

namespace hfx::cli {

void register_run(CLI::App& app, Action& action) {
  struct State {
    fs::path model_dir, artifact, inputs, output;
    std::string role;
    bool decomposed = false;
    std::vector<std::string> keep;
  };
  auto s = std::make_shared<State>();
  auto* cmd = app.add_subcommand("run", "Run one step on hfx's CPU reference executor (checkpoint or export).");
  auto* model = cmd->add_option("--model,-m", s->model_dir, "Checkpoint folder: computes eager outputs natively")
                    ->check(CLI::ExistingDirectory);
  cmd->add_option("--artifact", s->artifact, "Export folder: runs the component read back from its ONNX file")
      ->check(CLI::ExistingDirectory)
      ->excludes(model);
  cmd->add_option("--role", s->role, "Component to run (decoder, prefill, decode); default: the first");
  const auto& cache = tasks::state_pattern(tasks::state_names(tasks::StateNames::Decoder), tasks::StateKind::SelfAttentionKey);
  cmd->add_option("--inputs", s->inputs,
                  fmt::format("safetensors file: input_ids, attention_mask, position_ids, {}", tasks::name_glob(cache.past)))
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--output,-o", s->output, fmt::format("safetensors file to write logits and {} to", tasks::name_glob(cache.present)))->required();
  cmd->add_flag("--decomposed", s->decomposed, "Run composite ops through their primitive decompositions");
  cmd->add_option("--keep", s->keep, "Also return these intermediate values (by IR value name); repeatable")
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->callback([s, &action] {
    action = [s] {
      auto inputs = io::load_safetensors(s->inputs);
      runtime::ExecOptions eo;
      eo.use_composite_kernels = !s->decomposed;
      eo.keep_values = s->keep;
      std::map<std::string, Tensor> outputs;
      if (!s->model_dir.empty()) {
        auto m = pipeline::load_model(s->model_dir);
        const auto& comps = m.components;
        auto it = std::find_if(comps.begin(), comps.end(), [&](const auto& c) { return s->role.empty() || c.role == s->role; });
        if (it == comps.end()) bad_input("--role {}: no such component", s->role);
        outputs = runtime::Executor(it->graph, eo).run(inputs);
      } else if (!s->artifact.empty()) {
        auto art = pipeline::open_artifact(s->artifact, "onnx");
        outputs = runtime::Executor(art.component(s->role).graph, eo).run(inputs);
      } else {
        bad_input("give --model DIR (eager) or --artifact OUT (an export)");
      }
      io::write_safetensors(s->output, outputs);
      return 0;
    };
  });
}

}  // namespace hfx::cli
