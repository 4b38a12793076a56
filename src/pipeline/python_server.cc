#include "pipeline/python_server.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

#include "core/error.h"

extern char** environ;

namespace fs = std::filesystem;

namespace hfx::pipeline {

namespace {

// An answer longer than this is not the protocol (something else wrote to the server's stdout).
constexpr size_t kMaxLineBytes = size_t(1) << 20;

std::string how_it_ended(int status) {
  if (WIFEXITED(status)) return fmt::format("exit status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("killed by signal {} ({})", WTERMSIG(status), ::strsignal(WTERMSIG(status)));
  return fmt::format("wait status {}", status);
}

}  // namespace

std::string last_line_of(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size <= 0) return "";
  const std::streamoff from = size > 65536 ? size - 65536 : 0;
  in.seekg(from);
  std::string text(size_t(size - from), '\0');
  in.read(text.data(), std::streamsize(text.size()));
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  const auto nl = text.rfind('\n');
  return nl == std::string::npos ? text : text.substr(nl + 1);
}

PythonServer::PythonServer(std::string python, const std::string& script, const std::vector<std::string>& args,
                           fs::path stderr_log, std::string role)
    : python_(std::move(python)), script_(std::string(HFX_PYTHON_DIR) + "/" + script), role_(std::move(role)),
      stderr_log_(std::move(stderr_log)) {
  std::vector<std::string> all = {python_, script_};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);

  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    fail(ErrorKind::Io, "cannot create a socket pair for {}: {}", role_, std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, sv[1], 0);
  posix_spawn_file_actions_adddup2(&actions, sv[1], 1);
  posix_spawn_file_actions_addopen(&actions, 2, stderr_log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
  const int rc = ::posix_spawnp(&pid_, python_.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(sv[1]);
  if (rc != 0) {
    ::close(sv[0]);
    pid_ = -1;
    unsupported("cannot run {} for {}: {}", python_, role_, std::strerror(rc));
  }
  fd_ = sv[0];
}

PythonServer::~PythonServer() { stop(); }

void PythonServer::stop() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

bool PythonServer::send_line(const std::string& text) {
  const std::string line = text + "\n";
  size_t sent = 0;
  while (sent < line.size()) {
    if (fd_ < 0) return false;
    const ssize_t n = ::send(fd_, line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    sent += size_t(n);
  }
  return true;
}

std::optional<std::string> PythonServer::read_line() {
  for (;;) {
    if (const auto nl = buffered_.find('\n'); nl != std::string::npos) {
      std::string line = buffered_.substr(0, nl);
      buffered_.erase(0, nl + 1);
      return line;
    }
    if (buffered_.size() > kMaxLineBytes)
      fail(ErrorKind::Mismatch, "{} ({}) wrote a line of more than {} bytes, not its protocol", role_, script_, kMaxLineBytes);
    if (fd_ < 0) return std::nullopt;
    char buf[4096];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    buffered_.append(buf, size_t(n));
  }
}

std::pair<std::string, std::string> PythonServer::reap() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (pid_ <= 0) return {last_line_of(stderr_log_), "already stopped"};
  int status = 0;
  for (int waited_ms = 0;; waited_ms += 10) {
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_ || (r < 0 && errno != EINTR)) break;
    if (waited_ms == 5000) ::kill(pid_, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  pid_ = -1;
  return {last_line_of(stderr_log_), how_it_ended(status)};
}

}  // namespace hfx::pipeline
