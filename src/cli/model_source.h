// What `-m/--model` names: a local checkpoint folder, or a Hub id (ORG/NAME) read offline from the
// Hugging Face cache (io/hub_cache.h). A folder that exists always wins: `Qwen/Qwen3-0.6B` made by
// `hf download --local-dir Qwen/Qwen3-0.6B` is that folder.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "io/hub_cache.h"

namespace hfx::cli {

struct ModelSource {
  std::filesystem::path folder;         // the checkpoint folder to read
  std::optional<io::HubSnapshot> hub;   // set when the folder is a snapshot found by Hub id
};

// `text` as given to --model, `revision` as given to --revision (nullopt: not given, main for a Hub
// id). BadInput (exit 1) for a path that is neither a folder nor a cached Hub id, saying where the
// cache was looked in and how to download the model; UsageError for --revision with a local folder.
ModelSource resolve_model_source(const std::string& text, const std::optional<std::string>& revision);

}  // namespace hfx::cli
