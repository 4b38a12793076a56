#include "core/files.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <cctype>
#include <csignal>
#include <limits>
#include <mutex>
#include <set>
#include <thread>

#include <array>
#include <cstdio>
#include <vector>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/mapped_file.h"
#include "core/sha256.h"

namespace fs = std::filesystem;

namespace hfx {

std::string read_text_file(const fs::path& path, uint64_t max_bytes) { return read_file_capped(path, max_bytes); }

void write_text_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) fail(ErrorKind::Io, "{}: cannot write", path.string());
}

std::string sha256_file(const fs::path& path) { return sha256_file(path, nullptr); }

std::string sha256_file(const fs::path& path, const std::atomic<bool>* cancel) {
  // Read in chunks rather than map: hashing a multi-GB artifact must not count its pages in our RSS.
  // A FIFO or device listed in a manifest must not hang or spin the hasher (open_regular_file).
  std::FILE* f = ::fdopen(open_regular_file(path, nullptr), "rb");
  if (!f) fail(ErrorKind::Io, "{}: cannot open: {}", path.string(), std::strerror(errno));
  Sha256 sha;
  std::vector<uint8_t> buf(size_t(1) << 20);  // small: it runs beside the export, on its own thread
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) {
    if (cancel && cancel->load(std::memory_order_relaxed)) {
      std::fclose(f);
      return {};
    }
    sha.update({buf.data(), n});
  }
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) fail(ErrorKind::Io, "{}: read error", path.string());
  return sha.hex_digest();
}

fs::path normalize_output_path(const fs::path& out) {
  if (out.empty()) bad_input("the output folder is empty");
  fs::path n = out.lexically_normal();                 // "a//b/./" -> "a/b/"
  if (!n.has_filename()) n = n.parent_path();          // "a/b/" -> "a/b"
  if (n.empty() || n.filename() == "." || n.filename() == "..") {
    std::error_code ec;
    n = fs::absolute(n.empty() ? fs::path(".") : n, ec).lexically_normal();
    if (ec) fail(ErrorKind::Io, "{}: cannot resolve the output folder: {}", out.string(), ec.message());
    if (!n.has_filename()) n = n.parent_path();
  }
  if (n == n.root_path()) bad_input("{}: the output folder cannot be the root folder", out.string());
  return n;
}

namespace {

// Every byte of `in` into `out`: in the kernel (copy_file_range: no copy through this process, a
// reflink where the file system shares extents), else by read/write where it cannot (another file
// system on an old kernel, a device). 0 or the errno of the failure.
// Copies in the kernel start the disk's writeback every 64 MiB (sync_file_range, only started,
// like PipelinedFile's), so the commit's fsync of a gigabyte-sized copy finds little left to write.
int copy_bytes(int in, int out) {
  constexpr size_t kChunk = size_t(64) << 20;
  bool kernel = true;
  off_t copied = 0;
  for (;;) {
    const ssize_t n = ::copy_file_range(in, nullptr, out, nullptr, kChunk, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP)) {
      kernel = false;  // nothing was copied yet by this call; the offsets stand where it stopped
      break;
    }
    if (n < 0) return errno;
    if (n == 0) break;
    ::sync_file_range(out, copied, n, SYNC_FILE_RANGE_WRITE);  // a file system without it: no matter
    copied += n;
  }
  if (kernel) return 0;
  std::vector<char> buf(size_t(1) << 20);
  for (;;) {
    const ssize_t n = ::read(in, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return 0;
    for (ssize_t done = 0; done < n;) {
      const ssize_t w = ::write(out, buf.data() + done, size_t(n - done));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return w < 0 ? errno : EIO;
      done += w;
    }
  }
}

// `from` into `to` (created or truncated) through copy_bytes, with `from`'s permission bits when
// `keep_mode`, else the default ones (0666 less the umask).
void copy_regular_file(const fs::path& from, const fs::path& to, bool keep_mode) {
  auto cannot = [&](int err) { fail(ErrorKind::Io, "{}: cannot copy: {}", from.string(), std::strerror(err)); };
  const int in = open_regular_file(from, nullptr);
  struct stat st {};
  if (::fstat(in, &st) != 0) {
    const int err = errno;
    ::close(in);
    cannot(err);
  }
  const int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, keep_mode ? st.st_mode & 07777 : 0666);
  if (out < 0) {
    const int err = errno;
    ::close(in);
    cannot(err);
  }
  int err = copy_bytes(in, out);
  // Like copy_file: the mode of the source (creation applied the umask; an existing file kept its
  // own). Only on a regular file: `to` may be a device (/dev/full in the tests).
  struct stat to_st {};
  if (keep_mode && !err && ::fstat(out, &to_st) == 0 && S_ISREG(to_st.st_mode) && ::fchmod(out, st.st_mode & 07777) != 0)
    err = errno;
  if (::close(out) != 0 && !err) err = errno;  // NFS and some quotas report a full disk only here
  ::close(in);
  if (err) cannot(err);
}

}  // namespace

void copy_file_checked(const fs::path& from, const fs::path& to) { copy_regular_file(from, to, true); }

void copy_file_contents(const fs::path& from, const fs::path& to) { copy_regular_file(from, to, false); }

namespace {

// Opens `p` (never following a symlink) and fsyncs it. EINVAL / EROFS / ENOTSUP: the file system has
// nothing to flush (or cannot), which is not an error of the export.
void fsync_path(const fs::path& p, bool dir) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | (dir ? O_DIRECTORY : 0));
  if (fd < 0) fail(ErrorKind::Io, "{}: cannot open to flush it to disk: {}", p.string(), std::strerror(errno));
  int err = 0;
  if (::fsync(fd) != 0 && errno != EINVAL && errno != EROFS && errno != ENOTSUP) err = errno;
  ::close(fd);
  if (err) fail(ErrorKind::Io, "{}: cannot flush to disk: {}", p.string(), std::strerror(err));
}

}  // namespace

int64_t sync_tree(const fs::path& root) {
  int64_t n = 0;
  std::error_code ec;
  fs::recursive_directory_iterator it(root, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    std::error_code sec;
    const auto st = it->symlink_status(sec);
    if (sec) continue;
    if (fs::is_regular_file(st) || fs::is_directory(st)) {
      fsync_path(it->path(), fs::is_directory(st));
      ++n;
    }
  }
  if (ec) fail(ErrorKind::Io, "{}: cannot list to flush it to disk: {}", root.string(), ec.message());
  fsync_path(root, true);
  return n + 1;
}

void sync_folder(const fs::path& dir) { fsync_path(dir, true); }

namespace {

// Live staging folders, for the signal cleanup. Guarded by staging_mutex(); the cleanup thread takes
// the mutex and never releases it (the process dies), so no commit can start after a cleanup.
std::mutex& staging_mutex() {
  static std::mutex m;
  return m;
}
std::set<fs::path>& live_staging() {
  static std::set<fs::path> s;
  return s;
}

std::string staging_prefix(const fs::path& final_path) {
  return "." + final_path.filename().string() + ".hfx-partial-";
}

fs::path parent_of(const fs::path& final_path) {
  return final_path.parent_path().empty() ? fs::path(".") : final_path.parent_path();
}

bool pid_alive(long pid) {
  if (pid <= 0 || pid > std::numeric_limits<pid_t>::max()) return false;
  return ::kill(pid_t(pid), 0) == 0 || errno == EPERM;
}

// True when some process holds the staging folder's lock (it is being built right now).
bool locked_by_someone(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  const bool held = ::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);
  return held;
}

// Moves `dir` out of the way (so a writer still running cannot add files to it by path) and removes
// it. Used on signals, when the thread that owns the folder may still be writing into it.
void remove_staging_now(const fs::path& dir) {
  std::error_code ec;
  fs::path doomed = dir.string() + ".removing";
  fs::rename(dir, doomed, ec);
  fs::remove_all(ec ? dir : doomed, ec);
  fs::remove_all(dir, ec);  // in case the writer re-created it meanwhile
}

int g_signal_pipe[2] = {-1, -1};
std::atomic<bool> g_cleaning_up{false};

void on_signal(int sig) {
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(sig);
  [[maybe_unused]] ssize_t n = ::write(g_signal_pipe[1], &byte, 1);
  errno = saved;
}

void cleanup_thread() {
  unsigned char sig = 0;
  ssize_t n;
  do {
    n = ::read(g_signal_pipe[0], &sig, 1);
  } while (n < 0 && errno == EINTR);
  if (n != 1) return;  // the pipe broke: no cleanup rather than a spurious exit
  g_cleaning_up = true;
  staging_mutex().lock();  // held until the process is gone
  for (const auto& dir : live_staging()) remove_staging_now(dir);
  ::signal(sig, SIG_DFL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  ::pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  ::raise(sig);
  ::_exit(128 + sig);  // not reached unless the signal is ignored by default
}

}  // namespace

namespace {

// The owner pid in `rest`, the part of a folder name after its prefix: leading digits followed by
// one of `suffixes` (an empty suffix matches nothing else). -1 when the name does not fit.
long owner_pid(const std::string& rest, const std::function<bool(const std::string&)>& suffix_ok) {
  size_t digits = 0;
  while (digits < rest.size() && std::isdigit(static_cast<unsigned char>(rest[digits]))) ++digits;
  if (digits == 0 || digits > 9 || !suffix_ok(rest.substr(digits))) return -1;
  return std::stol(rest.substr(0, digits));
}

// The one liveness rule of staging and scratch folders: stale when its owner pid is not running
// (nor this process) and nobody holds its lock. A symlink is never followed or removed.
bool is_stale(const fs::directory_entry& e, long pid) {
  if (pid == long(::getpid()) || pid_alive(pid)) return false;
  std::error_code ec;
  return !e.is_symlink(ec) && !ec && !locked_by_someone(e.path());
}

// Removes each stale folder `parent/<prefix><pid><suffix>`; returns how many.
int remove_stale(const fs::path& parent, const std::string& prefix, const std::function<bool(const std::string&)>& suffix_ok) {
  int removed = 0;
  std::error_code ec;
  for (fs::directory_iterator it(parent, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with(prefix)) continue;
    const long pid = owner_pid(name.substr(prefix.size()), suffix_ok);
    if (pid < 0 || !is_stale(*it, pid)) continue;
    std::error_code rec;
    fs::remove_all(it->path(), rec);
    if (!rec) ++removed;
  }
  return removed;
}

// Holds an flock on folder `dir` for as long as the returned descriptor is open: the marker that
// the folder is in use, dropped by the kernel when the process dies.
int lock_folder(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) ::flock(fd, LOCK_EX | LOCK_NB);
  return fd;
}

}  // namespace

int remove_stale_staging(const fs::path& final_path) {
  // .<name>.hfx-partial-<pid>[.old|.removing]
  return remove_stale(parent_of(final_path), staging_prefix(final_path),
                      [](const std::string& suffix) { return suffix.empty() || suffix == ".old" || suffix == ".removing"; });
}

int remove_stale_scratch(const fs::path& parent, const std::string& prefix) {
  // <prefix><pid>-XXXXXX (mkdtemp's six characters)
  return remove_stale(parent, prefix, [](const std::string& suffix) { return suffix.size() == 7 && suffix[0] == '-'; });
}

void install_cleanup_on_signal() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (::pipe2(g_signal_pipe, O_CLOEXEC) != 0) return;
    std::thread(cleanup_thread).detach();
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
      struct sigaction old {};
      // A signal ignored at start (nohup, a background job's SIGINT) stays ignored.
      if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
      ::sigaction(sig, &sa, nullptr);
    }
  });
}

void wait_for_signal_cleanup() {
  if (!g_cleaning_up) return;
  for (;;) ::pause();  // the cleanup thread raises the signal
}

void remove_on_signal(const fs::path& dir) {
  std::lock_guard lock(staging_mutex());
  live_staging().insert(dir);
}

void forget_on_signal(const fs::path& dir) {
  std::lock_guard lock(staging_mutex());
  live_staging().erase(dir);
}

namespace {

// F#24: name the folder that refused, not the hidden staging folder inside it.
[[noreturn]] void cannot_create_here(const fs::path& where, const std::string& why) {
  fail(ErrorKind::Io, "{}: cannot create the output folder here: {}", where.string(), why);
}

// The deepest existing ancestor of `dir` (`dir` itself when it exists).
fs::path existing_ancestor(fs::path dir) {
  std::error_code ec;
  while (!fs::exists(fs::symlink_status(dir, ec)) && dir.has_relative_path()) {
    dir = dir.parent_path();
    if (dir.empty()) return ".";
  }
  return dir;
}

}  // namespace

void check_output_creatable(const fs::path& final_path) {
  const fs::path where = existing_ancestor(parent_of(final_path));
  std::error_code ec;
  if (!fs::is_directory(where, ec)) cannot_create_here(where, std::strerror(ENOTDIR));
  if (::access(where.c_str(), W_OK | X_OK) != 0) cannot_create_here(where, std::strerror(errno));
}

StagedDirectory::StagedDirectory(fs::path final_path, bool overwrite, std::function<void(const fs::path&)> check_replaceable)
    : final_(normalize_output_path(final_path)), overwrite_(overwrite), check_replaceable_(std::move(check_replaceable)) {
  std::error_code ec;
  if (fs::exists(fs::symlink_status(final_, ec))) {
    if (!overwrite) bad_input("{}: output exists (pass --overwrite to replace it)", final_.string());
    if (check_replaceable_) check_replaceable_(final_);
  }
  fs::path parent = parent_of(final_);
  fs::create_directories(parent, ec);
  if (ec) cannot_create_here(existing_ancestor(parent), ec.message());
  remove_stale_staging(final_);
  staging_ = parent / (staging_prefix(final_) + std::to_string(::getpid()));
  fs::remove_all(staging_, ec);
  {
    std::lock_guard lock(staging_mutex());
    if (!fs::create_directory(staging_, ec) && !ec) ec = std::make_error_code(std::errc::file_exists);
    if (ec) cannot_create_here(parent, ec.message());
    live_staging().insert(staging_);
  }
  // The lock marks the folder as being built; the kernel drops it when this process dies.
  lock_fd_ = lock_folder(staging_);
}

StagedDirectory::~StagedDirectory() {
  std::error_code ec;
  {
    std::lock_guard lock(staging_mutex());
    if (!committed_) fs::remove_all(staging_, ec);
    live_staging().erase(staging_);
  }
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

namespace {

[[noreturn]] void appeared(const fs::path& final_path) {
  fail(ErrorKind::Io,
       "{}: the output folder appeared while exporting (another export?); it was left as it is and this export "
       "was discarded",
       final_path.string());
}

bool no_such_rename_flag(int err) { return err == EINVAL || err == ENOSYS || err == EOPNOTSUPP; }

}  // namespace

// Called with staging_mutex() held. Either `final_` becomes the staged folder (and, when there was
// one, the previous artifact is at `staging_`), or it throws with `final_` untouched.
void StagedDirectory::rename_into_place(bool had_old) {
  const char* from = staging_.c_str();
  const char* to = final_.c_str();
  if (!had_old) {
    // Never replaces what another process put at `final_` since the check above.
    if (::renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0) return;
    const int err = errno;
    if (err == EEXIST || err == ENOTEMPTY) appeared(final_);
    if (!no_such_rename_flag(err)) fail(ErrorKind::Io, "{}: cannot rename into place: {}", final_.string(), std::strerror(err));
    // No RENAME_NOREPLACE on this file system: rename(2) still refuses a non-empty folder.
    std::error_code ec;
    if (fs::exists(fs::symlink_status(final_, ec))) appeared(final_);
    if (::rename(from, to) == 0) return;
    if (errno == EEXIST || errno == ENOTEMPTY) appeared(final_);
    fail(ErrorKind::Io, "{}: cannot rename into place: {}", final_.string(), std::strerror(errno));
  }
  // One atomic step: final gets the new folder, the staging path gets the previous artifact.
  if (::renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_EXCHANGE) == 0) return;
  if (!no_such_rename_flag(errno)) fail(ErrorKind::Io, "{}: cannot replace: {}", final_.string(), std::strerror(errno));
  // No RENAME_EXCHANGE on this file system: move the old artifact aside first so that the final
  // rename is a single atomic step.
  const std::string old = staging_.string() + ".old";
  if (::rename(to, old.c_str()) != 0) fail(ErrorKind::Io, "{}: cannot replace: {}", final_.string(), std::strerror(errno));
  if (::rename(from, to) != 0) {
    const int err = errno;
    [[maybe_unused]] int restored = ::rename(old.c_str(), to);
    fail(ErrorKind::Io, "{}: cannot rename into place: {}", final_.string(), std::strerror(err));
  }
  // Dropped by commit(), like an exchanged folder.
  [[maybe_unused]] int moved = ::rename(old.c_str(), from);
}

void StagedDirectory::commit() {
  // D22: the contents reach the disk before the rename that publishes them can.
  sync_tree(staging_);
  std::error_code ec;
  bool had_old = false;
  {
    std::lock_guard lock(staging_mutex());
    had_old = fs::exists(fs::symlink_status(final_, ec));
    if (had_old && !overwrite_) appeared(final_);
    // What is at `final_` may have changed since the constructor looked (another export, a user).
    if (had_old && check_replaceable_) check_replaceable_(final_);
    rename_into_place(had_old);
    committed_ = true;
  }
  if (lock_fd_ >= 0) {
    ::close(lock_fd_);
    lock_fd_ = -1;
  }
  // The previous artifact, now at the staging path: still registered, so a signal during its removal
  // finishes the job.
  if (had_old) fs::remove_all(staging_, ec);
  {
    std::lock_guard lock(staging_mutex());
    live_staging().erase(staging_);
  }
  // The rename itself, durable (either state before this is a complete artifact). A failure is
  // reported; the new artifact is in place and nothing is left beside it.
  sync_folder(parent_of(final_));
}

ScratchDirectory::ScratchDirectory(fs::path parent, std::string prefix) {
  std::error_code ec;
  if (parent.empty()) parent = fs::temp_directory_path(ec);
  if (ec) fail(ErrorKind::Io, "cannot find a folder for scratch files ($TMPDIR): {}", ec.message());
  remove_stale_scratch(parent, prefix);
  // mkdtemp, and the pid: pids are reused, so the name alone is not the liveness marker (the lock is).
  std::string name = (parent / (prefix + std::to_string(::getpid()) + "-XXXXXX")).string();
  {
    // Until the lock below is taken the folder is protected by the live pid in its name.
    std::lock_guard lock(staging_mutex());
    if (::mkdtemp(name.data()) == nullptr)
      fail(ErrorKind::Io, "cannot create a scratch folder in {}: {}", parent.string(), std::strerror(errno));
    path_ = name;
    live_staging().insert(path_);  // a killed process leaves no scratch folder behind either
  }
  lock_fd_ = lock_folder(path_);
}

ScratchDirectory::~ScratchDirectory() {
  std::error_code ec;
  {
    std::lock_guard lock(staging_mutex());
    fs::remove_all(path_, ec);
    live_staging().erase(path_);
  }
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

}  // namespace hfx
