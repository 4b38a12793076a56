// File helpers: atomic output folders, whole-file reads, hashing.
#pragma once

#include <atomic>
#include <filesystem>
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

// An output folder built next to its final place and renamed into it only on commit(). If the
// object is destroyed without commit() (an error, an exception), the partial folder is removed, so a
// failed export leaves nothing behind and a previous artifact at `final` stays intact until the
// rename.
//
// The staging folder is `.<final name>.hfx-partial-<pid>` beside `final`. It is removed on SIGINT,
// SIGTERM and SIGHUP once install_cleanup_on_signal() has run. A process killed outright (SIGKILL,
// a crash, power loss) cannot clean up: the next StagedDirectory for the same `final` removes such
// stale folders, recognised by their owner pid no longer running and no process holding the lock
// each staging folder carries (an flock on the folder itself, released by the kernel at death).
// commit() swaps the folders with one atomic renameat2(RENAME_EXCHANGE) where the file system has
// it, so at every instant `final` is either the complete previous artifact or the complete new one.
class StagedDirectory {
 public:
  explicit StagedDirectory(std::filesystem::path final_path, bool overwrite);
  ~StagedDirectory();
  StagedDirectory(const StagedDirectory&) = delete;
  StagedDirectory& operator=(const StagedDirectory&) = delete;

  const std::filesystem::path& path() const { return staging_; }
  const std::filesystem::path& final_path() const { return final_; }
  void commit();

 private:
  std::filesystem::path final_;
  std::filesystem::path staging_;
  int lock_fd_ = -1;
  bool committed_ = false;
};

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
