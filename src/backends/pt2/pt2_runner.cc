// One python/hfx_torch_runner.py (or hfx_executorch_runner.py) step server per program, a PythonServer
// (pipeline/python_server.h): one JSON line per request and answer, tensors passed through safetensors
// files in a private scratch folder, its stderr (torch's warnings, a traceback) kept in a file there
// for the error message.
#include "backends/pt2/pt2_runner.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"
#include "io/safetensors_write.h"
#include "pipeline/python_server.h"
#include "pipeline/runtime_probe.h"

namespace fs = std::filesystem;

namespace hfx::pipeline {

namespace {

// Which Python step server: the runtime's name in messages, its script in python/, and the key of its
// version in the server's first line.
struct ServerKind {
  std::string runtime, script, version_key, scratch_prefix;
};
const ServerKind kTorch{"torch", "hfx_torch_runner.py", "torch_version", "hfx-torch-"};
const ServerKind kExecuTorch{"executorch", "hfx_executorch_runner.py", "executorch_version", "hfx-et-"};

class PythonStepRunner final : public runtime::StepRunner {
 public:
  // `outputs`: the names the server gives the program's outputs (`--output`), when it takes them.
  PythonStepRunner(const ServerKind& kind, fs::path pt2, std::vector<std::string> names,
                   const std::vector<std::pair<std::string, std::string>>& shared, std::string python,
                   const std::vector<std::string>& outputs = {})
      : kind_(kind), scratch_({}, kind.scratch_prefix), pt2_(std::move(pt2)), names_(std::move(names)),
        server_(std::move(python), kind.script, server_args(shared, outputs), scratch_.path() / "stderr.log",
                fmt::format("the {} driver", kind.runtime)) {
    wait_until_ready();  // on a throw the server's destructor stops it
  }

  std::vector<std::string> input_names() const override { return names_; }

  std::map<std::string, Tensor> run(const std::map<std::string, Tensor>& inputs) override {
    if (!server_.running())
      fail(ErrorKind::Mismatch, "{} (run by {}) on {}: the step server stopped earlier: {}", kind_.runtime, server_.python(),
           pt2_.string(), ended_);
    const fs::path in = scratch_.path() / "inputs.safetensors", out = scratch_.path() / "outputs.safetensors";
    std::map<std::string, Tensor> only;  // the program's inputs, when the caller gave more
    for (const auto& name : names_)
      if (!inputs.count(name)) bad_input("{}: no tensor given for the program's input {}", pt2_.string(), name);
    if (inputs.size() != names_.size())
      for (const auto& name : names_) only.emplace(name, inputs.at(name));
    io::write_safetensors(in, only.empty() ? inputs : only);
    std::error_code ec;
    fs::remove(out, ec);
    if (!server_.send_line(nlohmann::json{{"inputs", in.string()}, {"outputs", out.string()}}.dump())) died();
    const auto line = server_.read_line();
    if (!line) died();
    const nlohmann::json answer = parse(*line);
    if (answer.contains("error")) {
      const std::string why = answer["error"].is_string() ? answer["error"].get<std::string>() : answer["error"].dump();
      fail(ErrorKind::Mismatch, "{} {} (run by {}) failed on {}: {}", kind_.runtime, version_, server_.python(), pt2_.string(), why);
    }
    if (!answer.value("ok", false))
      fail(ErrorKind::Mismatch, "{}: unexpected answer from {}: {}", pt2_.string(), server_.script(), *line);
    return io::load_safetensors(out);
  }

 private:
  std::vector<std::string> server_args(const std::vector<std::pair<std::string, std::string>>& shared,
                                       const std::vector<std::string>& outputs) const {
    std::vector<std::string> args = {"--serve", pt2_.string()};
    for (const auto& name : names_) args.insert(args.end(), {"--input", name});
    for (const auto& [in, out] : shared) args.insert(args.end(), {"--shared", in, out});
    for (const auto& name : outputs) args.insert(args.end(), {"--output", name});
    return args;
  }

  // The server's first line: loaded, or why not.
  void wait_until_ready() {
    const auto line = server_.read_line();
    if (!line) {
      const auto [why, ended] = server_.reap();
      unsupported("{} cannot run the {} driver {}: {}", server_.python(), kind_.runtime, server_.script(), why.empty() ? ended : why);
    }
    const nlohmann::json ready = parse(*line);
    if (ready.contains("error")) {
      const std::string why = ready["error"].is_string() ? ready["error"].get<std::string>() : ready["error"].dump();
      if (!ready.contains(kind_.version_key)) unsupported("{} cannot import {}: {}", server_.python(), kind_.runtime, why);
      const auto& v = ready[kind_.version_key];
      fail(ErrorKind::Mismatch, "{} {} (run by {}) refused {}: {}", kind_.runtime, v.is_string() ? v.get<std::string>() : v.dump(),
           server_.python(), pt2_.string(), why);
    }
    if (!ready.value("ready", false))
      fail(ErrorKind::Mismatch, "{}: unexpected first line from {}: {}", pt2_.string(), server_.script(), line->substr(0, 200));
    version_ = ready.contains(kind_.version_key) && ready[kind_.version_key].is_string() ? ready[kind_.version_key].get<std::string>() : "?";
  }

  nlohmann::json parse(const std::string& line) const {
    try {
      auto j = nlohmann::json::parse(line);
      if (j.is_object()) return j;
    } catch (const nlohmann::json::exception&) {
    }
    fail(ErrorKind::Mismatch, "{}: {} answered something that is not its protocol: {}", pt2_.string(), server_.script(),
         line.substr(0, 200));
  }

  [[noreturn]] void died() {
    const auto [why, ended] = server_.reap();
    ended_ = ended;
    fail(ErrorKind::Mismatch, "{} {} (run by {}) stopped while running {}: {}{}", kind_.runtime, version_, server_.python(),
         pt2_.string(), why.empty() ? "" : why + ", ", ended);
  }

  const ServerKind& kind_;
  ScratchDirectory scratch_;  // removed after the server is gone (declared before it: destroyed after)
  fs::path pt2_;
  std::vector<std::string> names_;
  PythonServer server_;
  std::string version_ = "?";
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
