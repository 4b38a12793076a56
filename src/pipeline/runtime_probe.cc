#include "pipeline/runtime_probe.h"

#include <fmt/format.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>

#include "core/error.h"
#include "core/files.h"
#include "core/safe_path.h"
#include "pipeline/python_server.h"

namespace fs = std::filesystem;

namespace hfx::pipeline {

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string driver_python(const std::string& chosen) {
  if (!chosen.empty()) return chosen;
  if (const char* p = std::getenv("HFX_PYTHON"); p && *p) return p;
  const fs::path venv = fs::path(HFX_SOURCE_DIR) / ".venv" / "bin" / "python";
  std::error_code ec;
  return fs::exists(venv, ec) ? venv.string() : "python3";
}

// Not the source tree's .venv: by default an export probes the Python its user would run, and a
// test suite's hundreds of exports do not each pay for an ONNX Runtime session unless asked.
std::string export_check_python() {
  if (const char* p = std::getenv("HFX_PYTHON"); p && *p) return p;
  return "python3";
}

namespace {

// Everything `cmd` prints on stdout (stderr discarded) and whether it exited 0.
std::pair<std::string, bool> capture(const std::string& cmd) {
  std::FILE* pipe = ::popen((cmd + " 2>/dev/null").c_str(), "r");
  if (!pipe) return {"", false};
  std::string out;
  char buf[256];
  while (size_t n = std::fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  const int status = ::pclose(pipe);
  return {out, status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0};
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

std::optional<std::string> python_module_version(const std::string& python, const std::string& module) {
  static std::mutex mu;
  static std::map<std::pair<std::string, std::string>, std::optional<std::string>> probed;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = probed.find({python, module}); it != probed.end()) return it->second;
  auto [out, ok] = capture(shell_quote(python) + " -c " + shell_quote(fmt::format("import {0}; print({0}.__version__)", module)));
  std::optional<std::string> version;
  out = trimmed(out);
  if (ok && !out.empty() && out.find('\n') == std::string::npos) version = out;
  probed[{python, module}] = version;
  return version;
}

namespace {

// An ONNX Runtime driver started ahead of its job (start_ort_driver). `answered`: it wrote its first
// line, whose `version` is ONNX Runtime's (empty: none); its server runs on only when it is ready. Its
// stderr goes to /dev/null until a job names its result file: then to `<result>.stderr`, as a driver
// of its own writes it. (No scratch folder of its own: the registry is a static whose destructor may
// run after the scratch folders' registry's.)
struct WarmDriver {
  std::unique_ptr<PythonServer> server;
  bool answered = false, ready = false;
  std::optional<std::string> version;
};

std::mutex warm_mutex;
// Per interpreter; the map's destructor stops the drivers no job took when hfx exits.
std::map<std::string, WarmDriver>& warm_drivers() {
  static std::map<std::string, WarmDriver> drivers;
  return drivers;
}

// The driver's first line: {"ready": true, "ort_version": "1.31.1"}, or when an import failed
// {"ready": false, "ort_version": "1.31.1" | null, "error": ...}.
void read_first_line(WarmDriver& d) {
  const auto line = d.server->read_line();
  if (!line) return;
  try {
    const auto j = nlohmann::json::parse(*line);
    if (!j.is_object()) return;
    d.answered = true;
    d.ready = j.value("ready", false);
    if (j.contains("ort_version") && j["ort_version"].is_string()) d.version = j["ort_version"].get<std::string>();
  } catch (const nlohmann::json::exception&) {
  }
}

// The started driver for `python`, taken out of the registry (one job each), or nullptr.
std::unique_ptr<WarmDriver> take_warm_driver(const std::string& python) {
  std::lock_guard<std::mutex> lock(warm_mutex);
  auto& drivers = warm_drivers();
  auto it = drivers.find(python);
  if (it == drivers.end() || !it->second.ready || !it->second.server || !it->second.server->running()) return nullptr;
  auto taken = std::make_unique<WarmDriver>(std::move(it->second));
  // The entry stays, without its server: onnxruntime_version still answers from it (its flags were
  // copied by the move; its version string was emptied, so it is copied back).
  it->second.version = taken->version;
  return taken;
}

// Where a job's driver writes its stderr.
fs::path stderr_log(const fs::path& result) { return result.string() + ".stderr"; }

// A batch driver's result file, or the error it failed with: what it wrote as {"error": ...}, else its
// stderr's last line, else how it ended.
nlohmann::json job_result(const fs::path& result, bool exited_ok, const std::string& stderr_line,
                          const std::string& ended, const std::string& failure) {
  std::error_code ec;
  nlohmann::json out;
  if (fs::exists(result, ec)) {
    try {
      out = nlohmann::json::parse(read_text_file(result, kMaxTextBytes));
    } catch (const std::exception&) {
      out = nlohmann::json();
    }
  }
  if (exited_ok && out.is_object() && !out.contains("error")) return out;
  // The driver writes the exception it caught; without a result it died earlier (a missing module):
  // its stderr's last line says why.
  std::string why = out.is_object() && out.contains("error") ? out["error"].get<std::string>() : stderr_line;
  if (why.empty()) why = ended;
  fail(ErrorKind::Mismatch, "{}: {}", failure, why);
}

}  // namespace

std::optional<std::string> onnxruntime_version(const std::string& python) {
  {
    std::lock_guard<std::mutex> lock(warm_mutex);
    // An interpreter without one of the driver's other imports still has ONNX Runtime (its version
    // here): its job then runs in an interpreter of its own and fails naming the missing module.
    if (auto it = warm_drivers().find(python); it != warm_drivers().end() && it->second.answered) return it->second.version;
  }
  // No driver started, or it said nothing (not hfx's driver, or it crashed): the `python -c` probe.
  return python_module_version(python, "onnxruntime");
}

void start_ort_driver(const std::string& python) {
  std::lock_guard<std::mutex> lock(warm_mutex);  // held while it starts: onnxruntime_version waits for it
  auto [it, fresh] = warm_drivers().try_emplace(python);
  if (!fresh) return;
  WarmDriver& d = it->second;
  try {
    d.server = std::make_unique<PythonServer>(python, "hfx_ort_runner.py", std::vector<std::string>{"--serve"}, "/dev/null",
                                              "the ONNX Runtime driver");
    read_first_line(d);
  } catch (const Error&) {
    d.ready = false;
  }
  if (!d.ready && d.server) d.server->stop();
}

nlohmann::json run_python_job(const std::string& python, const std::string& script, const fs::path& job,
                              const fs::path& result, const std::string& failure) {
  const fs::path log = stderr_log(result);
  const std::string cmd = fmt::format("{} {} {} {} 2>{}", shell_quote(python),
                                      shell_quote(std::string(HFX_PYTHON_DIR) + "/" + script),
                                      shell_quote(job.string()), shell_quote(result.string()), shell_quote(log.string()));
  const int status = std::system(cmd.c_str());
  return job_result(result, status == 0, last_line_of(log), fmt::format("exit status {}", status), failure);
}

nlohmann::json run_ort_driver(const std::string& python, const fs::path& job, const fs::path& result) {
  const std::string failure = fmt::format("ONNX Runtime (run by {}) failed on the artifact", python);
  if (auto warm = take_warm_driver(python)) {
    // One job, answered by {"status": 0|1}; closing hfx's end then ends the driver.
    std::optional<std::string> answer;
    if (warm->server->send_line(nlohmann::json{{"job", job.string()}, {"result", result.string()}}.dump()))
      answer = warm->server->read_line();
    bool ok = false;
    try {
      ok = answer && nlohmann::json::parse(*answer).value("status", 1) == 0;
    } catch (const nlohmann::json::exception&) {
    }
    const auto ended = warm->server->reap().second;
    return job_result(result, ok, last_line_of(stderr_log(result)), ended, failure);
  }
  return run_python_job(python, "hfx_ort_runner.py", job, result, failure);
}

}  // namespace hfx::pipeline
