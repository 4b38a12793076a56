// Reading files that someone else controls: an export folder read back by verify/check/generate/
// tokenize, or a checkpoint. Three rules, in one place so every reader applies the same ones:
//   - containment: a name taken from a file (a manifest entry, an external-data location) resolves,
//     after every symlink, to a path inside the folder it was read from;
//   - only regular files: FIFOs, devices and sockets are refused before anything reads them (an
//     open() of a FIFO blocks forever; /dev/zero never ends);
//   - bounded whole-file reads: every slurp has a cap, named in the error (docs/fuzzing.md lists them).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace hfx {

// Caps for whole-file reads. Real files are far below them (the largest config.json on the Hub is
// under 1 MiB; the largest tokenizer.json about 35 MiB; a manifest lists one line per file).
inline constexpr uint64_t kMaxConfigBytes = uint64_t(16) << 20;     // config.json, generation_config.json, recipes
inline constexpr uint64_t kMaxManifestBytes = uint64_t(64) << 20;   // hfx.json
inline constexpr uint64_t kMaxTokenizerBytes = uint64_t(512) << 20; // tokenizer.json
inline constexpr uint64_t kMaxTextBytes = uint64_t(64) << 20;       // anything else read whole (reports, results)

// True when `p` (already absolute and normal, or both relative alike) lies inside `root`.
bool path_is_within(const std::filesystem::path& root, const std::filesystem::path& p);

// The one exception to containment, the Hugging Face cache's layout: the files of a snapshot folder
// `<cache>/models--ORG--NAME/snapshots/<commit>` are symlinks into `models--ORG--NAME/blobs/`. True
// when `real_root` (a real path) is such a folder and `real` lies in that same repository's blobs/;
// a link anywhere else (another repository, the cache's parent) is still outside.
bool in_hub_snapshot_blobs(const std::filesystem::path& real_root, const std::filesystem::path& real);

// Resolves `rel`, a name read from a file inside `root`, to `root/rel`. BadInput naming `what` when
// `rel` is empty, absolute or has a `..` component, when it does not exist, when its real location
// (every symlink followed) is outside root's real location (in_hub_snapshot_blobs aside), or when it
// is not a regular file.
std::filesystem::path file_inside(const std::filesystem::path& root, const std::string& rel, std::string_view what);

// The same check for a path already joined: `path` must resolve inside `root` and be a regular file.
void check_file_inside(const std::filesystem::path& root, const std::filesystem::path& path, std::string_view what);

// Opens `path` for reading without blocking on a FIFO and refuses anything but a regular file.
// Returns the descriptor (O_CLOEXEC) and its size; Io error naming the path otherwise.
int open_regular_file(const std::filesystem::path& path, uint64_t* size);

// Reads a whole regular file of at most `max_bytes`; BadInput naming the file and both sizes when it
// is larger, Io when it cannot be read.
std::string read_file_capped(const std::filesystem::path& path, uint64_t max_bytes);

}  // namespace hfx
