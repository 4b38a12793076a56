#include "pipeline/runtime_probe.h"

#include <fmt/format.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>

#include "core/error.h"
#include "core/files.h"
#include "core/safe_path.h"

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

// The last non-empty line of a driver's stderr: the Python exception when it died before writing
// its result (an import error, a crash in the interpreter).
std::string last_line(const fs::path& log) {
  std::error_code ec;
  if (!fs::exists(log, ec)) return "";
  std::string text;
  try {
    text = read_text_file(log, kMaxTextBytes);
  } catch (const Error&) {
    return "";
  }
  text = trimmed(text);
  const auto nl = text.rfind('\n');
  return nl == std::string::npos ? text : text.substr(nl + 1);
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

std::optional<std::string> onnxruntime_version(const std::string& python) { return python_module_version(python, "onnxruntime"); }

nlohmann::json run_python_job(const std::string& python, const std::string& script, const fs::path& job,
                              const fs::path& result, const std::string& failure) {
  const fs::path log = result.string() + ".stderr";
  const std::string cmd = fmt::format("{} {} {} {} 2>{}", shell_quote(python),
                                      shell_quote(std::string(HFX_PYTHON_DIR) + "/" + script),
                                      shell_quote(job.string()), shell_quote(result.string()), shell_quote(log.string()));
  const int status = std::system(cmd.c_str());
  std::error_code ec;
  nlohmann::json out;
  if (fs::exists(result, ec)) {
    try {
      out = nlohmann::json::parse(read_text_file(result, kMaxTextBytes));
    } catch (const std::exception&) {
      out = nlohmann::json();
    }
  }
  if (status == 0 && out.is_object() && !out.contains("error")) return out;
  // The driver writes the exception it caught; without a result it died earlier (a missing module):
  // its stderr's last line says why.
  std::string why = out.is_object() && out.contains("error") ? out["error"].get<std::string>() : last_line(log);
  if (why.empty()) why = fmt::format("exit status {}", status);
  fail(ErrorKind::Mismatch, "{}: {}", failure, why);
}

nlohmann::json run_ort_driver(const std::string& python, const fs::path& job, const fs::path& result) {
  return run_python_job(python, "hfx_ort_runner.py", job, result,
                        fmt::format("ONNX Runtime (run by {}) failed on the artifact", python));
}

}  // namespace hfx::pipeline
