// pipeline/runtime_probe: the ONNX Runtime probe runs an interpreter once per process, and a failing
// driver reads as its own last error line. Fake interpreters (shell scripts) stand in for Python.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "pipeline/runtime_probe.h"

namespace fs = std::filesystem;
using namespace hfx;

namespace {

fs::path scratch_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("hfx_probe_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

fs::path script(const fs::path& dir, const std::string& name, const std::string& body) {
  const fs::path p = dir / name;
  std::ofstream(p) << "#!/bin/sh\n" << body;
  ::chmod(p.c_str(), 0755);
  return p;
}

// The error run_ort_driver throws for a job (ErrorKind::Mismatch), or a failed expectation when it
// returns.
std::string driver_error(const fs::path& python, const fs::path& dir, const std::string& result = "result.json") {
  try {
    pipeline::run_ort_driver(python.string(), dir / "job.json", dir / result);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Mismatch);
    return e.message();
  }
  ADD_FAILURE() << "no error";
  return "";
}

size_t lines_in(const fs::path& p) {
  std::ifstream in(p);
  size_t n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

}  // namespace

TEST(RuntimeProbe, ShellQuoteKeepsOneWord) {
  EXPECT_EQ(pipeline::shell_quote("a b"), "'a b'");
  EXPECT_EQ(pipeline::shell_quote("it's"), "'it'\\''s'");
}

TEST(RuntimeProbe, OnnxRuntimeVersionIsProbedOncePerInterpreter) {
  const fs::path d = scratch_dir("once");
  const fs::path calls = d / "calls";
  const fs::path py = script(d, "python", "echo x >> '" + calls.string() + "'\necho 1.31.1\n");
  EXPECT_EQ(pipeline::onnxruntime_version(py.string()).value_or(""), "1.31.1");
  EXPECT_EQ(pipeline::onnxruntime_version(py.string()).value_or(""), "1.31.1");
  EXPECT_EQ(lines_in(calls), 1u);
  fs::remove_all(d);
}

TEST(RuntimeProbe, NoOnnxRuntimeIsNoVersion) {
  const fs::path d = scratch_dir("none");
  const fs::path py = script(d, "python", "echo \"ModuleNotFoundError: No module named 'onnxruntime'\" >&2\nexit 1\n");
  EXPECT_FALSE(pipeline::onnxruntime_version(py.string()).has_value());
  EXPECT_FALSE(pipeline::onnxruntime_version((d / "no-such-python").string()).has_value());
  fs::remove_all(d);
}

TEST(RuntimeProbe, DriverFailureShowsTheRuntimesOwnError) {
  const fs::path d = scratch_dir("driver");
  // The runner caught ORT's exception and wrote it ($3 is the result file).
  const fs::path refused = script(d, "refused",
                                  "echo '{\"error\": \"InvalidArgument: head_size must be a multiple of 8\"}' > \"$3\"\nexit 1\n");
  {
    const std::string message = driver_error(refused, d);
    EXPECT_NE(message.find("head_size must be a multiple of 8"), std::string::npos) << message;
  }
  // It died before writing a result: the last line of its stderr.
  fs::remove(d / "result.json");
  const fs::path died = script(d, "died", "echo 'Traceback ...' >&2\necho \"ModuleNotFoundError: No module named 'numpy'\" >&2\nexit 1\n");
  {
    const std::string message = driver_error(died, d);
    EXPECT_NE(message.find("ModuleNotFoundError: No module named 'numpy'"), std::string::npos) << message;
  }
  fs::remove_all(d);
}

// A fake `hfx_ort_runner.py --serve` ($1 is the script, $2 --serve): its first line, then per request
// line {"job": J, "result": R} it writes `result_json` into R and answers `answer`.
std::string serving(const fs::path& calls, const std::string& result_json, const std::string& answer) {
  return "echo x >> '" + calls.string() + "'\n"
         "[ \"$2\" = --serve ] || exit 3\n"
         "echo '{\"ready\": true, \"ort_version\": \"1.31.1\"}'\n"
         "while read -r line; do\n"
         "  r=$(echo \"$line\" | sed 's/.*\"result\": *\"\\([^\"]*\\)\".*/\\1/')\n"
         "  echo '" + result_json + "' > \"$r\"\n"
         "  echo '" + answer + "'\n"
         "done\n";
}

TEST(RuntimeProbe, StartedDriverAnswersTheProbeAndRunsOneJob) {
  const fs::path d = scratch_dir("warm");
  const fs::path calls = d / "calls";
  const fs::path py = script(d, "python", serving(calls, "{\"ort_version\": \"1.31.1\", \"placements\": {}}", "{\"status\": 0}"));
  pipeline::start_ort_driver(py.string());
  pipeline::start_ort_driver(py.string());  // once per interpreter
  EXPECT_EQ(pipeline::onnxruntime_version(py.string()).value_or(""), "1.31.1");
  EXPECT_EQ(lines_in(calls), 1u);  // the version came from the started driver, not from a second probe
  const auto result = pipeline::run_ort_driver(py.string(), d / "job.json", d / "result.json");
  EXPECT_EQ(result.value("ort_version", ""), "1.31.1");
  EXPECT_EQ(lines_in(calls), 1u);  // the job ran in it
  // The next job starts an interpreter of its own (the started one took a single job and ended).
  EXPECT_EQ(pipeline::onnxruntime_version(py.string()).value_or(""), "1.31.1");
  fs::remove_all(d);
}

TEST(RuntimeProbe, StartedDriverFailureShowsTheRuntimesOwnError) {
  const fs::path d = scratch_dir("warm_refused");
  const fs::path calls = d / "calls";
  const fs::path py = script(d, "python", serving(calls, "{\"error\": \"InvalidArgument: head_size must be a multiple of 8\"}",
                                                  "{\"status\": 1}"));
  pipeline::start_ort_driver(py.string());
  {
    const std::string message = driver_error(py, d);
    EXPECT_NE(message.find("head_size must be a multiple of 8"), std::string::npos) << message;
  }
  // One that dies during its job: the last line of its stderr, which it writes beside the result file.
  const fs::path dies = script(d, "dies",
                               "echo '{\"ready\": true, \"ort_version\": \"1.31.1\"}'\nread -r line\n"
                               "r=$(echo \"$line\" | sed 's/.*\"result\": *\"\\([^\"]*\\)\".*/\\1/')\n"
                               "echo 'Segmentation fault in MlasSgemm' > \"$r.stderr\"\nkill -9 $$\n");
  pipeline::start_ort_driver(dies.string());
  {
    const std::string message = driver_error(dies, d, "result2.json");
    EXPECT_NE(message.find("Segmentation fault in MlasSgemm"), std::string::npos) << message;
  }
  fs::remove_all(d);
}

TEST(RuntimeProbe, DriverMissingAModuleSaysSoInItsFirstLine) {
  // onnxruntime imports, the driver's safetensors does not: ONNX Runtime is there (no second probe),
  // and the job, run by an interpreter of its own, fails naming the missing module.
  const fs::path d = scratch_dir("warm_partial");
  const fs::path calls = d / "calls";
  const fs::path py = script(d, "python",
                             "echo x >> '" + calls.string() + "'\n"
                             "if [ \"$2\" = --serve ]; then\n"
                             "  echo '{\"ready\": false, \"ort_version\": \"1.31.1\", \"error\": \"ModuleNotFoundError: No module named safetensors\"}'\n"
                             "  exit 1\nfi\n"
                             "echo \"ModuleNotFoundError: No module named 'safetensors'\" >&2\nexit 1\n");
  pipeline::start_ort_driver(py.string());
  EXPECT_EQ(pipeline::onnxruntime_version(py.string()).value_or(""), "1.31.1");
  EXPECT_EQ(lines_in(calls), 1u);
  {
    const std::string message = driver_error(py, d);
    EXPECT_NE(message.find("No module named 'safetensors'"), std::string::npos) << message;
  }
  // No onnxruntime at all: no version, and no `python -c` probe after the driver said so.
  const fs::path calls2 = d / "calls2";
  const fs::path none = script(d, "none",
                               "echo x >> '" + calls2.string() + "'\n"
                               "echo '{\"ready\": false, \"ort_version\": null, \"error\": \"ModuleNotFoundError: No module named onnxruntime\"}'\n"
                               "exit 1\n");
  pipeline::start_ort_driver(none.string());
  EXPECT_FALSE(pipeline::onnxruntime_version(none.string()).has_value());
  EXPECT_EQ(lines_in(calls2), 1u);
  fs::remove_all(d);
}

TEST(RuntimeProbe, DriverThatSaysNothingFallsBackToTheProbe) {
  // Not hfx's driver (it prints nothing for --serve): the `python -c` probe decides.
  const fs::path d = scratch_dir("warm_silent");
  const fs::path py = script(d, "python", "if [ \"$1\" = -c ]; then echo 1.31.1; exit 0; fi\nexit 1\n");
  pipeline::start_ort_driver(py.string());
  EXPECT_EQ(pipeline::onnxruntime_version(py.string()).value_or(""), "1.31.1");
  fs::remove_all(d);
}
