// The real runtimes behind hfx's Python drivers: whether an interpreter can run ONNX Runtime or torch
// (probed once per process), and running python/hfx_ort_runner.py so that a failure reads as the runtime's
// own error, not as a guess about the installation.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace hfx::pipeline {

// The interpreter python/hfx_ort_runner.py runs with for `hfx verify --runtime onnxruntime` and
// `--verify-runtime onnxruntime`: `chosen` (VerifyOptions::python) when given, else $HFX_PYTHON,
// else this source tree's .venv/bin/python (a developer build), else python3.
std::string driver_python(const std::string& chosen);

// The interpreter the built-in check of `hfx export` probes for ONNX Runtime: $HFX_PYTHON, else
// python3 as the caller's PATH resolves it (what the user's own shell would run).
std::string export_check_python();

// `module`.__version__ as `python` imports it, or nullopt when it cannot (no such interpreter, no
// such module). One `python -c` per interpreter and module per process; later calls are answered
// from the first.
std::optional<std::string> python_module_version(const std::string& python, const std::string& module);

// onnxruntime.__version__ as `python` imports it: the first line of the driver start_ort_driver(python)
// started, when it did, else python_module_version(python, "onnxruntime").
std::optional<std::string> onnxruntime_version(const std::string& python);

// Starts `python hfx_ort_runner.py --serve` (once per interpreter per process) so that the next
// run_ort_driver(python, ...) finds ONNX Runtime already imported: an export calls it while it writes
// its files, and its check then skips the interpreter's start and imports (0.15-0.25 s, most of the
// check's ONNX Runtime part on a small model). Returns when the driver has answered (ONNX Runtime's
// version) or failed to start; a driver no job took is stopped at exit.
void start_ort_driver(const std::string& python);

// Runs `python hfx_ort_runner.py job result` (the driver start_ort_driver started, when there is one)
// and returns the result file. When the driver fails it
// throws ErrorKind::Mismatch with the Python exception's last line (ONNX Runtime's refusal of a node,
// "Got invalid dimensions ...", or "No module named 'onnxruntime'"), whitespace collapsed.
nlohmann::json run_ort_driver(const std::string& python, const std::filesystem::path& job,
                              const std::filesystem::path& result);

// Runs `python HFX_PYTHON_DIR/script job result` (a batch driver: one JSON job in, one JSON result
// out) and returns the result. When the driver fails it throws ErrorKind::Mismatch, "<failure>: <the
// Python exception's last line>" (what the driver wrote as {"error": ...}, else its stderr's last line).
nlohmann::json run_python_job(const std::string& python, const std::string& script, const std::filesystem::path& job,
                              const std::filesystem::path& result, const std::string& failure);

// `s` as one single-quoted shell word.
std::string shell_quote(const std::string& s);

}  // namespace hfx::pipeline
