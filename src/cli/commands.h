// Each `hfx` subcommand registers its options and, when parsed, the action to run. main() runs the
// action and turns any hfx::Error into one line on stderr and an exit code.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace hfx::cli {

using Action = std::function<int()>;

void register_export(CLI::App& app, Action& action);
void register_inspect(CLI::App& app, Action& action);
void register_run(CLI::App& app, Action& action);
void register_check(CLI::App& app, Action& action);
void register_generate(CLI::App& app, Action& action);
void register_verify(CLI::App& app, Action& action);
void register_formats(CLI::App& app, Action& action);

// "1,2,3" -> {1, 2, 3}; BadInput naming `what` otherwise.
std::vector<int64_t> parse_id_list(const std::string& text, const std::string& what);
// "a,b" -> {"a", "b"}
std::vector<std::string> split_commas(const std::string& text);

}  // namespace hfx::cli
