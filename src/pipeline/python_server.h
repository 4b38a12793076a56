// A Python script run as a line server beside hfx: spawned with posix_spawn, spoken to over a socket
// pair that is its stdin and stdout (one line per request and answer; a socket, so that writing to a
// server that died is EPIPE, never a SIGPIPE that would end hfx), its stderr kept in a file for the
// error message. Nothing else of hfx's (staging locks, mapped checkpoints) is inherited.
//
// Used by the step servers of the pt2 and executorch runtimes (one per program) and by the ONNX
// Runtime driver an export starts while it writes its files (runtime_probe.h, start_ort_driver).
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace hfx::pipeline {

class PythonServer {
 public:
  // Runs `python HFX_PYTHON_DIR/script args...`, its stderr into `stderr_log` (created, truncated);
  // `role` names it in messages ("the torch driver"). Throws Unsupported when the interpreter cannot
  // be started at all.
  PythonServer(std::string python, const std::string& script, const std::vector<std::string>& args,
               std::filesystem::path stderr_log, std::string role);
  ~PythonServer();  // stop()
  PythonServer(const PythonServer&) = delete;
  PythonServer& operator=(const PythonServer&) = delete;

  // Sends `text` and a newline; false when the server is gone (its end is closed).
  bool send_line(const std::string& text);
  // The next line the server wrote, or nullopt at end of file (it exited or closed its stdout).
  // Throws Mismatch for a line longer than 1 MiB (something else wrote to its stdout).
  std::optional<std::string> read_line();
  // Closes hfx's end and waits for the server to exit, SIGKILLing it after 5 s if it has not; returns
  // its stderr's last line and how it ended ("exit status 1", "killed by signal 9 (Killed)").
  std::pair<std::string, std::string> reap();
  // Ends the server whatever it is doing (SIGKILL) and reaps it.
  void stop();

  bool running() const { return pid_ > 0; }
  const std::string& python() const { return python_; }
  const std::string& script() const { return script_; }  // its full path

 private:
  std::string python_, script_, role_;
  std::filesystem::path stderr_log_;
  pid_t pid_ = -1;
  int fd_ = -1;
  std::string buffered_;
};

// The last non-empty line of a file, read from its last 64 KiB (a server's stderr may hold a long
// history of warnings before the traceback that ended it); "" when it cannot be read.
std::string last_line_of(const std::filesystem::path& file);

}  // namespace hfx::pipeline
