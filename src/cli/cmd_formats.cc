// `hfx formats`: the backends of this build (pipeline/backend.h), their options, the runtimes that
// run what they write, and the runtime versions the oracle tests (tests/oracle) run their output on.
#include <fmt/format.h>

#include "cli/commands.h"
#include "pipeline/backend.h"

namespace hfx::cli {

void register_formats(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("formats", "List the export formats of this build, their options and tested runtimes.");
  cmd->footer("A runtime version other than the tested one gives a warning when hfx runs it, not an error.");
  cmd->callback([&action] {
    action = [] {
      for (const pipeline::Backend* b : pipeline::all_backends()) {
        const auto info = b->info();
        fmt::print("{}\n  status:   {}\n  files:    {}\n", info.name, info.status, info.files);
        const auto own = b->options();  // the format's own options (pipeline/format_options.h), then the shared ones it takes
        if (!own.empty() || !info.options.empty()) fmt::print("  options:\n");
        for (const auto& o : own) {
          const std::string values = o.values.empty() ? "" : " " + fmt::format("{}", fmt::join(o.values, "|"));
          const std::string prefix = info.name + ": ";  // the help's "onnx: ", said by the heading here
          const std::string help = o.help.starts_with(prefix) ? o.help.substr(prefix.size()) : o.help;
          fmt::print("    {}{} (recipe: {}): {}\n", o.flag, values, o.field, help);
        }
        if (!info.options.empty()) {
          for (const auto& o : info.options)
            fmt::print("    {}{}: {}\n", o.flag, o.recipe_field.empty() ? "" : fmt::format(" (recipe: {})", o.recipe_field),
                       o.help);
        }
        fmt::print("  runtimes: {} (hfx verify/generate --runtime)\n  tested:   {}\n", fmt::join(info.runtimes, ", "), info.tested);
      }
      return 0;
    };
  });
}

}  // namespace hfx::cli
