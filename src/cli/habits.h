// What people bring to `hfx export` from optimum-cli and transformers.exporters (field report F#14):
// a positional model path, --task, --opset, fp16 / --fp16 / --dtype fp16, --trust-remote-code,
// --cache_dir. The options are registered hidden, so the parse reaches them instead of blaming OUT,
// and each gets a one-line answer (a UsageError, exit 2) saying what hfx does instead.
#pragma once

#include <CLI/CLI.hpp>

#include <filesystem>
#include <functional>
#include <optional>
#include <string>

namespace hfx::cli {

struct ExportHabits {
  std::string second_positional;  // `hfx export ./model out`: OUT took ./model, this took out
  std::string task, opset, cache_dir;
  bool fp16 = false, trust_remote_code = false;
};

// Adds the hidden options (and a hidden second positional after OUT) to `cmd`.
void add_export_habits(CLI::App& cmd, ExportHabits& habits);

// UsageError answering the first habit found on the parsed `cmd`. `model_given` says whether -m was
// given; `out` is OUT as parsed; `model_folder` resolves -m when it can (nullopt otherwise), for the
// task --task would be answered with.
void answer_export_habits(const CLI::App& cmd, const ExportHabits& habits, bool model_given, const std::string& out,
                          const std::function<std::optional<std::filesystem::path>()>& model_folder);

// The --dtype values of other tools (fp16, fp32, half, F16, ...): UsageError naming hfx's spelling;
// nothing for hfx's own names.
void answer_dtype_spelling(const std::string& dtype);

// "llama: causal-lm with a KV cache (...)", the task hfx infers from `folder`'s config.json; "" when
// that cannot be told cheaply (no config.json, an unknown model_type).
std::string inferred_task(const std::filesystem::path& folder);

}  // namespace hfx::cli
