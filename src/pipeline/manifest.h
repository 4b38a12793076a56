// The manifest OUT/hfx.json: what was exported from what (source hashes), how (the recipe, the
// passes), the components with their I/O contract and cache geometry, and the sha256 of every file
// written. It is the unit of release and rollback, and `hfx check` re-verifies it.
#pragma once

#include <atomic>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/checkpoint.h"
#include "io/hub_cache.h"
#include "models/model.h"
#include "pipeline/export.h"
#include "tasks/causal_lm.h"

namespace hfx::pipeline {

constexpr int kManifestSchemaVersion = 1;
// `hfx verify` writes its reports here; they describe the artifact and are not part of it.
inline const char* kReportDir = "verify";

class ManifestBuilder {
 public:
  // Starts hashing the checkpoint's files on a thread of its own, so it overlaps the writing; write()
  // waits for it.
  ManifestBuilder(const io::Checkpoint& ckpt, const LoadedModel& model, const Recipe& recipe);
  ~ManifestBuilder();  // an export that failed: stops the hashing thread at its next read
  void add_component(const tasks::Component& c, const std::string& format, const std::string& file,
                     const std::vector<std::string>& passes);
  // The checkpoint folder is this snapshot of the Hugging Face cache: source.hub records the Hub id,
  // the revision asked for and the commit it named, which say what was exported on any machine.
  void set_hub_source(const io::HubSnapshot& hub);  // also names the source by its Hub id
  // Records source.path relative to `out_dir`, the export's final folder (until called it is the
  // checkpoint folder as given).
  void set_source_path(const std::filesystem::path& out_dir);
  // Appends `entry` to a format's own list in the manifest (`section`, e.g. onnx's "onnx_profiles").
  void add_format_entry(const std::string& section, nlohmann::ordered_json entry);
  // The sha256 of a file a writer hashed as it wrote it (`rel` under the root given to write(), `size`
  // its length then): write() takes it instead of reading the file again, unless the size changed.
  void add_file_digest(const std::filesystem::path& rel, std::string sha256, uintmax_t size);
  // A file written as a byte copy of the checkpoint's weight file `source` (the mirrored ONNX data
  // file): write() takes the source's sha256, hashed once for source.files, unless the size differs.
  void add_file_copy(const std::filesystem::path& rel, const std::filesystem::path& source, uintmax_t size);
  // Hashes every file under `root` (but those with a digest from add_file_digest) and writes
  // root/hfx.json.
  void write(const std::filesystem::path& root);

 private:
  nlohmann::ordered_json json_;
  std::future<nlohmann::ordered_json> source_files_;  // name -> sha256 of the checkpoint's files
  std::shared_ptr<std::atomic<bool>> cancel_ = std::make_shared<std::atomic<bool>>(false);
  std::map<std::string, std::pair<std::string, uintmax_t>> digests_;  // generic path -> (sha256, size)
  std::map<std::string, std::pair<std::string, uintmax_t>> copies_;   // generic path -> (source name, size)
};

// Regular files under root, relative, sorted.
std::vector<std::filesystem::path> list_files(const std::filesystem::path& root);

// Reads and validates OUT/hfx.json: BadInput when missing, not JSON, of another schema version, or
// when any member hfx reads back fails validate_manifest (pipeline/manifest_schema.h).
nlohmann::json read_manifest(const std::filesystem::path& out_dir);

// The source checkpoint folder an export names: source.path, relative to `out_dir` (the export
// folder), when present, else an older manifest's absolute source.folder. Not checked to exist.
std::filesystem::path manifest_source_folder(const nlohmann::json& manifest, const std::filesystem::path& out_dir);

// Whether OUT is an hfx export at all, which is what `--overwrite` may replace: hfx.json parses, has
// the schema version this hfx writes, a "files" object and a "components" list. Deliberately less
// than read_manifest's full check: a damaged or hand-edited export is still the user's export to
// replace, and the rule protects folders that never were one. BadInput saying why otherwise.
void check_is_hfx_export(const std::filesystem::path& out_dir);

struct CheckReport {
  int64_t files_checked = 0;
  std::vector<std::string> problems;  // empty when the folder is consistent
  std::vector<std::string> extras;    // with allow_extra: files present but not in the manifest
};
// Re-verifies every checksum and that each component file is present and listed. Each listed file
// must be a regular file inside the export after every symlink; a missing, linked-out, non-regular
// or unreadable one is a problem line naming it, never an exception (docs/fuzzing.md, read-back).
// `allow_extra`: a file hfx did not write (a model card, README.md) is listed in `extras`, not a
// problem; a symlink out of the export stays one. `rehash` false: every check but the sha256 (the
// built-in check of an export that hashed each file as it wrote it).
CheckReport check_export(const std::filesystem::path& out_dir, bool allow_extra = false, bool rehash = true);
// The sha256 part of check_export(rehash) alone: a problem line per listed file that check_export
// without rehash finds sound but whose bytes no longer hash as the manifest says. `hfx verify` runs it
// on a thread of its own, beside the runs.
std::vector<std::string> checksum_problems(const std::filesystem::path& out_dir);

// The path of `rel`, a name from the manifest's "files", when it is a regular file inside `out_dir`
// (symlinks followed); nullopt otherwise (check_export says why). Never throws.
std::optional<std::filesystem::path> listed_file(const std::filesystem::path& out_dir, const std::string& rel);

}  // namespace hfx::pipeline
