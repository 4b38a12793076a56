#include "core/files.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
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

int remove_stale_staging(const fs::path& final_path) {
  const std::string prefix = staging_prefix(final_path);
  const fs::path parent = parent_of(final_path);
  int removed = 0;
  std::error_code ec;
  for (fs::directory_iterator it(parent, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with(prefix)) continue;
    // .<name>.hfx-partial-<pid>[.old|.removing]
    const std::string rest = name.substr(prefix.size());
    size_t digits = 0;
    while (digits < rest.size() && std::isdigit(static_cast<unsigned char>(rest[digits]))) ++digits;
    if (digits == 0 || digits > 9) continue;
    const std::string suffix = rest.substr(digits);
    if (!suffix.empty() && suffix != ".old" && suffix != ".removing") continue;
    const long pid = std::stol(rest.substr(0, digits));
    if (pid == long(::getpid()) || pid_alive(pid)) continue;
    std::error_code lec;
    if (it->is_symlink(lec) || locked_by_someone(it->path())) continue;
    std::error_code rec;
    fs::remove_all(it->path(), rec);
    if (!rec) ++removed;
  }
  return removed;
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

StagedDirectory::StagedDirectory(fs::path final_path, bool overwrite) : final_(std::move(final_path)) {
  if (fs::exists(final_) && !overwrite)
    bad_input("{}: output exists (pass --overwrite to replace it)", final_.string());
  fs::path parent = parent_of(final_);
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) fail(ErrorKind::Io, "{}: cannot create: {}", parent.string(), ec.message());
  remove_stale_staging(final_);
  staging_ = parent / (staging_prefix(final_) + std::to_string(::getpid()));
  fs::remove_all(staging_, ec);
  {
    std::lock_guard lock(staging_mutex());
    fs::create_directory(staging_, ec);
    if (ec) fail(ErrorKind::Io, "{}: cannot create: {}", staging_.string(), ec.message());
    live_staging().insert(staging_);
  }
  // The lock marks the folder as being built; the kernel drops it when this process dies.
  lock_fd_ = ::open(staging_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (lock_fd_ >= 0) ::flock(lock_fd_, LOCK_EX | LOCK_NB);
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

void StagedDirectory::commit() {
  std::error_code ec;
  bool had_old = false;
  {
    std::lock_guard lock(staging_mutex());
    had_old = fs::exists(fs::symlink_status(final_, ec));
    bool done = false;
    if (had_old) {
      // One atomic step: final gets the new folder, the staging path gets the previous artifact.
      if (::renameat2(AT_FDCWD, staging_.c_str(), AT_FDCWD, final_.c_str(), RENAME_EXCHANGE) == 0) {
        done = true;
      } else if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP) {
        fail(ErrorKind::Io, "{}: cannot replace: {}", final_.string(), std::strerror(errno));
      }
    }
    if (!done) {
      // No RENAME_EXCHANGE on this file system: move the old artifact aside first so that the final
      // rename is a single atomic step.
      fs::path old = staging_.string() + ".old";
      if (had_old) {
        fs::rename(final_, old, ec);
        if (ec) fail(ErrorKind::Io, "{}: cannot replace: {}", final_.string(), ec.message());
      }
      fs::rename(staging_, final_, ec);
      if (ec) {
        if (had_old) fs::rename(old, final_);
        fail(ErrorKind::Io, "{}: cannot rename into place: {}", final_.string(), ec.message());
      }
      if (had_old) fs::rename(old, staging_, ec);  // dropped below, like the exchanged folder
    }
    committed_ = true;
  }
  if (lock_fd_ >= 0) {
    ::close(lock_fd_);
    lock_fd_ = -1;
  }
  // The previous artifact, now at the staging path: still registered, so a signal during its removal
  // finishes the job.
  if (had_old) fs::remove_all(staging_, ec);
  std::lock_guard lock(staging_mutex());
  live_staging().erase(staging_);
}

}  // namespace hfx
