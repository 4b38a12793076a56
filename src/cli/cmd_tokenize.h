// `hfx tokenize`: encodes text to token ids and decodes ids to text with a tokenizer.json, natively
// (the ids equal those of the `tokenizers` library). Registered like the other subcommands:
//   cli::register_tokenize(app, action);
#pragma once

#include "cli/commands.h"

namespace hfx::cli {

void register_tokenize(CLI::App& app, Action& action);

}  // namespace hfx::cli
