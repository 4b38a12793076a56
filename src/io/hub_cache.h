// A Hub id (`ORG/NAME`) found offline in the Hugging Face cache, where `hf download ORG/NAME` (or
// `huggingface-cli download`) put it. hfx never downloads: this only reads the cache's layout,
//   <cache>/models--ORG--NAME/refs/<revision>         a file holding a commit hash
//   <cache>/models--ORG--NAME/snapshots/<commit>/...  the files, usually symlinks into ../../blobs/
// and leaves the files themselves to io::Checkpoint (core/safe_path.h's hub rule lets a snapshot's
// links resolve into its own repository's blobs/, and nowhere else).
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>

namespace hfx::io {

struct HubSnapshot {
  std::string repo_id;           // "ORG/NAME" (or "NAME"), as given
  std::string revision;          // as asked: a name under refs/ ("main", "v1.0", "refs/pr/1") or a commit hash
  std::string commit;            // the snapshot folder's name: the commit the revision points at
  std::filesystem::path folder;  // <cache>/models--ORG--NAME/snapshots/<commit>
};

// Reads an environment variable; unset and empty both read as nullopt.
using EnvLookup = std::function<std::optional<std::string>(const char* name)>;
std::optional<std::string> process_env(const char* name);

// The cache folder, as huggingface_hub finds it: $HF_HUB_CACHE (or its old name
// $HUGGINGFACE_HUB_CACHE), else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
// ~/.cache/huggingface/hub.
std::filesystem::path hub_cache_dir(const EnvLookup& env = process_env);

// Whether `text` has the shape of a Hub model id: NAME or ORG/NAME, each part of letters, digits,
// `-`, `_`, `.`, starting and ending with a letter, digit or `_`, without `--` or `..`, at most 96
// characters (huggingface_hub's validate_repo_id). `./model`, `/abs/path` and `a/b/c` are not.
bool looks_like_hub_id(const std::string& text);

// "ORG/NAME" -> "models--ORG--NAME".
std::string hub_repo_folder_name(const std::string& repo_id);

// The snapshot of `repo_id` at `revision` in `cache`: revision is looked up as refs/<revision>
// first (whose content must be a 40-hex commit), then as a snapshot folder's name. nullopt when the
// repository is not in the cache at all; BadInput naming the folder looked in, what is there and
// the download command when the revision or its snapshot is missing, or the revision is not a
// relative name (`..`, absolute).
std::optional<HubSnapshot> find_hub_snapshot(const std::filesystem::path& cache, const std::string& repo_id,
                                             const std::string& revision);

// The command that puts `repo_id` (at `revision` when not "main") into the cache, for messages:
// "`hf download ORG/NAME` (or `huggingface-cli download ORG/NAME`)".
std::string hub_download_hint(const std::string& repo_id, const std::string& revision = "main");

// The sha256 of a file of a cache snapshot, read from the name of the blob its link resolves to: the
// cache names each LFS file (the weights) by its content's sha256, 64 hex digits; git-tracked files
// (config.json) are named by their 40-hex git hash and get nullopt, as does anything that is not a
// link into a `blobs/` folder. An export records it without reading the file; `hfx verify` re-hashes
// the content, so a blob edited in the cache is still caught there.
std::optional<std::string> hub_blob_sha256(const std::filesystem::path& file);

}  // namespace hfx::io
