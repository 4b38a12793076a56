// Each format's own options (pipeline/format_options.h) as flags of `hfx export` and `hfx inspect`:
// registered from the formats' table, so no command names a format's option.
#pragma once

#include <CLI/CLI.hpp>

#include <map>
#include <string>
#include <vector>

#include "pipeline/format_options.h"

namespace hfx::cli {

// The flags as given, per recipe field.
struct FormatFlags {
  std::map<std::string, std::string> text;  // Choice and Integer options
  std::map<std::string, bool> set;          // Negation options: true when the flag was given
};

// Adds every format's option as a flag of `cmd` (with `contract_only`, those that change the I/O
// contract: `hfx inspect`'s).
void add_format_flags(CLI::App& cmd, FormatFlags& flags, bool contract_only = false);
// The format options the flags give, defaults for the rest; a value an option does not take is a
// usage error naming the flag.
pipeline::FormatSettings format_settings(const CLI::App& cmd, const FormatFlags& flags);
// The format option flags given on `cmd`.
std::vector<const pipeline::FormatOption*> format_flags_given(const CLI::App& cmd);
// F#13: "hfx: note: --stateless only applies to --format openvino; ignored" for each given flag of a
// format not in `formats`.
void note_format_flags_not_applying(const CLI::App& cmd, const std::vector<std::string>& formats);

}  // namespace hfx::cli
