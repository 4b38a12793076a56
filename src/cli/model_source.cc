#include "cli/model_source.h"

#include "cli/usage.h"
#include "core/error.h"

namespace fs = std::filesystem;

namespace hfx::cli {

ModelSource resolve_model_source(const std::string& text, const std::optional<std::string>& revision) {
  std::error_code ec;
  const auto st = fs::status(text, ec);
  if (fs::is_directory(st)) {
    if (revision)
      usage_error("--revision {} applies to a Hub id, but --model {} is a local folder (a folder that exists is read "
                  "as it is); drop --revision",
                  *revision, text);
    return {fs::path(text), std::nullopt};
  }
  if (fs::exists(st)) bad_input("--model {}: not a folder (expected a Hugging Face model folder or a Hub id ORG/NAME)", text);
  if (!io::looks_like_hub_id(text))
    bad_input("--model {}: no such folder (nor a Hub id ORG/NAME to look up in the Hugging Face cache)", text);
  const std::string rev = revision.value_or("main");
  const fs::path cache = io::hub_cache_dir();
  if (auto snapshot = io::find_hub_snapshot(cache, text, rev)) return {snapshot->folder, std::move(snapshot)};
  bad_input("--model {}: no such folder, and not in the Hugging Face cache (looked in {}); hfx reads the cache "
            "offline and never downloads: download it with {}",
            text, (cache / io::hub_repo_folder_name(text)).string(), io::hub_download_hint(text, rev));
}

}  // namespace hfx::cli
