// One python/hfx_torch_runner.py step server per program: spawned with posix_spawn, spoken to over a
// socket pair that is its stdin and stdout (one JSON line per request and answer; a socket, so that
// writing to a server that died is EPIPE, never a SIGPIPE that would end hfx), tensors passed through
// safetensors files in a private scratch folder, its stderr (torch's warnings, a traceback) kept in a
// file there for the error message.
#include "backends/pt2/pt2_runner.h"

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
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"
#include "io/safetensors_write.h"
#include "pipeline/runtime_probe.h"

extern char** environ;

namespace fs = std::filesystem;

namespace hfx::pipeline {

namespace {

// An answer longer than this is not the protocol (something else wrote to the server's stdout).
constexpr size_t kMaxAnswerBytes = size_t(1) << 20;

// Which Python step server: the runtime's name in messages, its script in python/, and the key of its
// version in the server's first line.
struct ServerKind {
  std::string runtime, script, version_key, scratch_prefix;
};
const ServerKind kTorch{"torch", "hfx_torch_runner.py", "torch_version", "hfx-torch-"};
const ServerKind kExecuTorch{"executorch", "hfx_executorch_runner.py", "executorch_version", "hfx-et-"};

// The last non-empty line of a file, read from its last 64 KiB (a server's stderr may hold a long
// history of warnings before the traceback that ended it).
std::string last_line_of(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff from = size > 65536 ? size - 65536 : 0;
  in.seekg(from);
  std::string text(size_t(size - from), '\0');
  in.read(text.data(), std::streamsize(text.size()));
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  const auto nl = text.rfind('\n');
  return nl == std::string::npos ? text : text.substr(nl + 1);
}

std::string how_it_ended(int status) {
  if (WIFEXITED(status)) return fmt::format("exit status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("killed by signal {} ({})", WTERMSIG(status), ::strsignal(WTERMSIG(status)));
  return fmt::format("wait status {}", status);
}

class PythonStepRunner final : public runtime::StepRunner {
 public:
  // `outputs`: the names the server gives the program's outputs (`--output`), when it takes them.
  PythonStepRunner(const ServerKind& kind, fs::path pt2, std::vector<std::string> names,
                   const std::vector<std::pair<std::string, std::string>>& shared, std::string python,
                   const std::vector<std::string>& outputs = {})
      : kind_(kind), scratch_({}, kind.scratch_prefix), pt2_(std::move(pt2)), names_(std::move(names)), python_(std::move(python)) {
    spawn(shared, outputs);
    try {
      wait_until_ready();
    } catch (...) {
      stop();
      throw;
    }
  }

  ~PythonStepRunner() override { stop(); }

  std::vector<std::string> input_names() const override { return names_; }

  std::map<std::string, Tensor> run(const std::map<std::string, Tensor>& inputs) override {
    if (pid_ <= 0) fail(ErrorKind::Mismatch, "{} (run by {}) on {}: the step server stopped earlier: {}", kind_.runtime, python_, pt2_.string(), ended_);
    const fs::path in = scratch_.path() / "inputs.safetensors", out = scratch_.path() / "outputs.safetensors";
    std::map<std::string, Tensor> only;  // the program's inputs, when the caller gave more
    for (const auto& name : names_)
      if (!inputs.count(name)) bad_input("{}: no tensor given for the program's input {}", pt2_.string(), name);
    if (inputs.size() != names_.size())
      for (const auto& name : names_) only.emplace(name, inputs.at(name));
    io::write_safetensors(in, only.empty() ? inputs : only);
    std::error_code ec;
    fs::remove(out, ec);
    send_line(nlohmann::json{{"inputs", in.string()}, {"outputs", out.string()}}.dump());
    const auto line = read_line();
    if (!line) died();
    const nlohmann::json answer = parse(*line);
    if (answer.contains("error")) {
      const std::string why = answer["error"].is_string() ? answer["error"].get<std::string>() : answer["error"].dump();
      fail(ErrorKind::Mismatch, "{} {} (run by {}) failed on {}: {}", kind_.runtime, version_, python_, pt2_.string(), why);
    }
    if (!answer.value("ok", false)) fail(ErrorKind::Mismatch, "{}: unexpected answer from {}: {}", pt2_.string(), server_script_, *line);
    return io::load_safetensors(out);
  }

 private:
  void spawn(const std::vector<std::pair<std::string, std::string>>& shared, const std::vector<std::string>& outputs) {
    server_script_ = std::string(HFX_PYTHON_DIR) + "/" + kind_.script;
    std::vector<std::string> args = {python_, server_script_, "--serve", pt2_.string()};
    for (const auto& name : names_) args.insert(args.end(), {"--input", name});
    for (const auto& [in, out] : shared) args.insert(args.end(), {"--shared", in, out});
    for (const auto& name : outputs) args.insert(args.end(), {"--output", name});
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);

    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
      fail(ErrorKind::Io, "cannot create a socket pair for the {} driver: {}", kind_.runtime, std::strerror(errno));
    stderr_log_ = scratch_.path() / "stderr.log";
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, sv[1], 0);
    posix_spawn_file_actions_adddup2(&actions, sv[1], 1);
    posix_spawn_file_actions_addopen(&actions, 2, stderr_log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    // Nothing else of hfx's (staging locks, mapped checkpoints) is inherited.
    posix_spawn_file_actions_addclosefrom_np(&actions, 3);
    const int rc = ::posix_spawnp(&pid_, python_.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(sv[1]);
    if (rc != 0) {
      ::close(sv[0]);
      pid_ = -1;
      unsupported("cannot run {} for the {} driver: {}", python_, kind_.runtime, std::strerror(rc));
    }
    fd_ = sv[0];
  }

  // The server's first line: loaded, or why not.
  void wait_until_ready() {
    const auto line = read_line();
    if (!line) {
      const auto [why, ended] = reap();
      unsupported("{} cannot run the {} driver {}: {}", python_, kind_.runtime, server_script_, why.empty() ? ended : why);
    }
    const nlohmann::json ready = parse(*line);
    if (ready.contains("error")) {
      const std::string why = ready["error"].is_string() ? ready["error"].get<std::string>() : ready["error"].dump();
      if (!ready.contains(kind_.version_key)) unsupported("{} cannot import {}: {}", python_, kind_.runtime, why);
      const auto& v = ready[kind_.version_key];
      fail(ErrorKind::Mismatch, "{} {} (run by {}) refused {}: {}", kind_.runtime, v.is_string() ? v.get<std::string>() : v.dump(), python_,
           pt2_.string(), why);
    }
    if (!ready.value("ready", false))
      fail(ErrorKind::Mismatch, "{}: unexpected first line from {}: {}", pt2_.string(), server_script_, line->substr(0, 200));
    version_ = ready.contains(kind_.version_key) && ready[kind_.version_key].is_string() ? ready[kind_.version_key].get<std::string>() : "?";
  }

  // Ends the server, whatever it is doing, and reaps it.
  void stop() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }

  void send_line(const std::string& text) {
    const std::string line = text + "\n";
    size_t sent = 0;
    while (sent < line.size()) {
      const ssize_t n = ::send(fd_, line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) died();
      sent += size_t(n);
    }
  }

  // The next line the server wrote, or nullopt at end of file (it exited or closed its stdout).
  std::optional<std::string> read_line() {
    for (;;) {
      if (const auto nl = buffered_.find('\n'); nl != std::string::npos) {
        std::string line = buffered_.substr(0, nl);
        buffered_.erase(0, nl + 1);
        return line;
      }
      if (buffered_.size() > kMaxAnswerBytes)
        fail(ErrorKind::Mismatch, "{}: {} wrote a line of more than {} bytes, not its protocol", pt2_.string(), server_script_,
             kMaxAnswerBytes);
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return std::nullopt;
      buffered_.append(buf, size_t(n));
    }
  }

  nlohmann::json parse(const std::string& line) const {
    try {
      auto j = nlohmann::json::parse(line);
      if (j.is_object()) return j;
    } catch (const nlohmann::json::exception&) {
    }
    fail(ErrorKind::Mismatch, "{}: {} answered something that is not its protocol: {}", pt2_.string(), server_script_,
         line.substr(0, 200));
  }

  // Waits for the server (which closed its end: it is exiting), SIGKILLing it after 5 s if it has not;
  // returns its stderr's last line and how it ended.
  std::pair<std::string, std::string> reap() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    int status = 0;
    for (int waited_ms = 0;; waited_ms += 10) {
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_ || (r < 0 && errno != EINTR)) break;
      if (waited_ms == 5000) ::kill(pid_, SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    pid_ = -1;
    ended_ = how_it_ended(status);
    return {last_line_of(stderr_log_), ended_};
  }

  [[noreturn]] void died() {
    const auto [why, ended] = reap();
    fail(ErrorKind::Mismatch, "{} {} (run by {}) stopped while running {}: {}{}", kind_.runtime, version_, python_, pt2_.string(),
         why.empty() ? "" : why + ", ", ended);
  }

  const ServerKind& kind_;
  std::string server_script_;
  ScratchDirectory scratch_;  // removed after the server is gone
  fs::path pt2_;
  std::vector<std::string> names_;
  std::string python_;
  std::string version_ = "?";
  fs::path stderr_log_;
  pid_t pid_ = -1;
  int fd_ = -1;
  std::string buffered_;
  std::string ended_;
};

}  // namespace

std::unique_ptr<runtime::StepRunner> make_torch_runner(const fs::path& pt2, const std::vector<std::string>& input_names,
                                                       const std::vector<std::pair<std::string, std::string>>& shared_buffers,
                                                       const std::string& python) {
  return std::make_unique<PythonStepRunner>(kTorch, pt2, input_names, shared_buffers, python);
}

std::unique_ptr<runtime::StepRunner> make_executorch_runner(const fs::path& pte, const std::vector<std::string>& input_names,
                                                            const std::vector<std::string>& output_names, const std::string& python) {
  return std::make_unique<PythonStepRunner>(kExecuTorch, pte, input_names, std::vector<std::pair<std::string, std::string>>{}, python,
                                            output_names);
}

// executorch keeps its version in a submodule: executorch.version.__version__ ("1.5.1+cpu").
std::string executorch_version(const std::string& python) { return python_module_version(python, "executorch.version").value_or(""); }

std::string torch_version(const std::string& python) { return python_module_version(python, "torch").value_or(""); }

}  // namespace hfx::pipeline
