// The `hfx` command: parses the subcommand, runs it, and is the one place where an hfx::Error becomes
// a line on stderr and an exit code (1 bad input / unsupported / i/o, 2 usage, 70 internal).
#include <fmt/format.h>

#include <algorithm>

#include "cli/cmd_tokenize.h"
#include "cli/commands.h"
#include "cli/usage.h"
#include "core/error.h"
#include "core/files.h"

namespace {

const char* kDescription =
    "hfx turns a Hugging Face checkpoint folder (config.json + *.safetensors) into deployable,\n"
    "checked artifacts, natively in C++. It never runs code from the model folder and never\n"
    "unpickles .bin files.\n\n"
    "Examples:\n"
    "  hfx inspect ./tiny-llama                             # architecture, I/O contract, preflight\n"
    "  hfx export --model ./tiny-llama out/llama            # ONNX, one decoder graph, growing cache\n"
    "  hfx export -m ./tiny-llama --static-cache --max-cache-len 256 out/llama-static\n"
    "  hfx check out/llama                                  # re-verify every checksum\n"
    "  hfx generate out/llama --prompt-ids 1,5,9 --max-new-tokens 16\n";

// CLI11's parse errors in one line like every other hfx error, naming the subcommand's --help.
std::string one_line_failure(const CLI::App* app, const CLI::Error& e) {
  std::string command = "hfx";
  for (const CLI::App* sub = app; !sub->get_subcommands().empty();) {
    sub = sub->get_subcommands().front();
    command += " " + sub->get_name();
  }
  std::string what = e.what();
  std::replace(what.begin(), what.end(), '\n', ' ');
  return fmt::format("hfx: usage: {} (`{} --help` lists the options)\n", what, command);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace hfx;
  CLI::App app{kDescription, "hfx"};
  app.set_version_flag("--version", std::string("hfx ") + HFX_VERSION);
  app.require_subcommand(1);
  app.failure_message(one_line_failure);
  cli::Action action;
  cli::register_export(app, action);
  cli::register_inspect(app, action);
  cli::register_check(app, action);
  cli::register_verify(app, action);
  cli::register_generate(app, action);
  cli::register_run(app, action);
  cli::register_tokenize(app, action);
  cli::register_formats(app, action);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  // Ctrl-C, kill and a closed terminal remove staging and scratch folders before the process dies.
  install_cleanup_on_signal();
  try {
    return action ? action() : 0;
  } catch (const cli::UsageError& e) {
    fmt::print(stderr, "hfx: usage: {}\n", e.what());
    return 2;
  } catch (const Error& e) {
    wait_for_signal_cleanup();  // an error caused by a signal's cleanup: die of the signal instead
    fmt::print(stderr, "hfx: {}: {}\n", error_kind_name(e.kind()), e.describe());
    return e.kind() == ErrorKind::Internal ? 70 : 1;
  } catch (const std::exception& e) {
    wait_for_signal_cleanup();
    fmt::print(stderr, "hfx: internal error: {}\n", e.what());
    return 70;
  }
}
