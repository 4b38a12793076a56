// File helpers: atomic output folders, scratch folders, whole-file reads and copies, hashing.
#pragma once

#include <atomic>
#include <filesystem>
#include <functional>
#include <string>

#include "core/safe_path.h"

namespace hfx {

// A whole regular file of at most `max_bytes` (core/safe_path.h: no FIFO or device, BadInput past
// the cap naming both sizes).
std::string read_text_file(const std::filesystem::path& path, uint64_t max_bytes = kMaxTextBytes);
void write_text_file(const std::filesystem::path& path, const std::string& text);
std::string sha256_file(const std::filesystem::path& path);  // lower-case hex
// The same, giving up (returning "") as soon as `*cancel` is set: for hashing on a background thread
// that an error must not keep the process waiting for.
std::string sha256_file(const std::filesystem::path& path, const std::atomic<bool>* cancel);

// OUT as the user typed it, made to name the folder itself: "newout/", "newout//" and "./newout/."
// all become "newout" (tab completion adds the slash; a trailing slash once put the staging folder
// inside OUT). "." and ".." become the absolute folder they name. BadInput for "" and for "/".
std::filesystem::path normalize_output_path(const std::filesystem::path& out);

// Io "<folder>: cannot create the output folder here: <reason>" naming the nearest existing folder
// on the way to `final_path`'s parent when `final_path` cannot be created there (not writable, or
// not a folder). Checked before any work; StagedDirectory reports its own failures the same way.
void check_output_creatable(const std::filesystem::path& final_path);

// Copies the regular file `from` to `to` (created or truncated, with `from`'s permission bits) with
// plain read/write, so a failure names the real cause: Io "<from>: cannot copy: No space left on
// device" (std::filesystem::copy_file reported ENOSPC as EIO, and threw a non-hfx error).
void copy_file_checked(const std::filesystem::path& from, const std::filesystem::path& to);
// The same bytes into a new file of the default mode (0666 less the umask), not `from`'s: a checkpoint
// file an export ships as its own (the ONNX data file that mirrors it). Both copy in the kernel
// (copy_file_range) where the file systems allow it.
void copy_file_contents(const std::filesystem::path& from, const std::filesystem::path& to);

// fsync()s every regular file and folder under `root` (root included; symlinks are not followed) so
// that a rename making the tree visible cannot outlive its contents after a power loss. Returns how
// many were flushed; Io naming the path when one cannot be.
int64_t sync_tree(const std::filesystem::path& root);
// fsync() of one folder (after a rename in it, to make the rename itself durable).
void sync_folder(const std::filesystem::path& dir);

// An output folder built next to its final place and renamed into it only on commit(). If the
// object is destroyed without commit() (an error, an exception), the partial folder is removed, so a
// failed export leaves nothing behind and a previous artifact at `final` stays intact until the
// rename.
//
// The staging folder is `.<final name>.hfx-partial-<pid>` beside `final` (`final` is normalised
// first: never inside it). It is removed on SIGINT, SIGTERM and SIGHUP once
// install_cleanup_on_signal() has run. A process killed outright (SIGKILL, a crash, power loss)
// cannot clean up: the next StagedDirectory for the same `final` removes such stale folders,
// recognised by their owner pid no longer running and no process holding the lock each staging
// folder carries (an flock on the folder itself, released by the kernel at death).
//
// commit() first fsyncs the staged tree (sync_tree), then renames:
//   - without `overwrite`: renameat2(RENAME_NOREPLACE), so an OUT that another process created
//     meanwhile is never replaced: Io "OUT appeared while exporting (another export?)";
//   - with `overwrite`: `check_replaceable(final)` runs again right before the swap (it throws when
//     what is at `final` now may not be replaced), then one atomic renameat2(RENAME_EXCHANGE) where
//     the file system has it, so at every instant `final` is either the complete previous artifact
//     or the complete new one;
// and last fsyncs the parent folder, making the rename durable.
class StagedDirectory {
 public:
  // Throws BadInput when `final` exists and `overwrite` is false, or when `check_replaceable`
  // refuses it. Io naming the parent when the parent cannot be created or written to.
  StagedDirectory(std::filesystem::path final_path, bool overwrite,
                  std::function<void(const std::filesystem::path&)> check_replaceable = {});
  ~StagedDirectory();
  StagedDirectory(const StagedDirectory&) = delete;
  StagedDirectory& operator=(const StagedDirectory&) = delete;

  const std::filesystem::path& path() const { return staging_; }
  const std::filesystem::path& final_path() const { return final_; }
  void commit();

 private:
  void rename_into_place(bool had_old);
  std::filesystem::path final_;
  std::filesystem::path staging_;
  bool overwrite_ = false;
  std::function<void(const std::filesystem::path&)> check_replaceable_;
  int lock_fd_ = -1;
  bool committed_ = false;
};

// A private scratch folder `<parent>/<prefix><pid>-XXXXXX` (mkdtemp), removed by the destructor and
// on SIGINT/SIGTERM/SIGHUP. It carries the staging folders' liveness marker (owner pid in the name,
// an flock held on the folder), so the folders a SIGKILL leaves behind are recognised and removed by
// the next ScratchDirectory with the same prefix. An empty `parent` is $TMPDIR (or /tmp).
class ScratchDirectory {
 public:
  ScratchDirectory(std::filesystem::path parent, std::string prefix);
  ~ScratchDirectory();
  ScratchDirectory(const ScratchDirectory&) = delete;
  ScratchDirectory& operator=(const ScratchDirectory&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  int lock_fd_ = -1;
};

// Removes stale scratch folders `<parent>/<prefix><pid>-XXXXXX` (see ScratchDirectory); returns how many.
int remove_stale_scratch(const std::filesystem::path& parent, const std::string& prefix);

// Removes stale staging folders of `final_path` (see StagedDirectory) and returns how many.
int remove_stale_staging(const std::filesystem::path& final_path);

// Makes SIGINT, SIGTERM and SIGHUP remove every live StagedDirectory's folder before the process
// dies of the signal (exit status unchanged: killed by that signal). A handler writes to a pipe; a
// helper thread does the removal, so the work is not limited to async-signal-safe calls. Idempotent.
void install_cleanup_on_signal();

// Once a signal's cleanup has started, never returns (the cleanup thread ends the process with that
// signal); else returns at once. An error that the cleanup itself caused (a folder removed under a
// writer) must not end the process first with another exit status: main() calls this before it
// reports an error.
void wait_for_signal_cleanup();

// Adds / removes another folder for that cleanup (a scratch folder such as hfx verify's).
void remove_on_signal(const std::filesystem::path& dir);
void forget_on_signal(const std::filesystem::path& dir);

}  // namespace hfx
