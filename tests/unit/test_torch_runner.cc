// backends/pt2/pt2_runner: the torch step server end to end on toy programs that
// tests/oracle/torch_toys.py exports with torch itself (skipped when the driver's Python has no torch),
// and its failures with fake interpreters (shell scripts) standing in for Python.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"
#include "io/safetensors_write.h"
#include "backends/pt2/pt2_runner.h"
#include "pipeline/runtime_probe.h"

namespace fs = std::filesystem;
using namespace hfx;

namespace {

std::string python() { return pipeline::driver_python(""); }

fs::path scratch_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("hfx_torch_runner_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

fs::path script(const fs::path& dir, const std::string& body) {
  const fs::path p = dir / "python";
  std::ofstream(p) << "#!/bin/sh\n" << body;
  ::chmod(p.c_str(), 0755);
  return p;
}

// The toy exports with one step's inputs and torch's outputs on them, written once for every test
// process (CTest runs each test alone) in a folder named after torch_toys.py's digest; "" without torch.
fs::path toys() {
  static const fs::path dir = []() -> fs::path {
    if (pipeline::torch_version(python()).empty()) return {};
    const fs::path maker = fs::path(HFX_SOURCE_DIR) / "tests" / "oracle" / "torch_toys.py";
    const fs::path done = fs::temp_directory_path() / ("hfx_torch_toys_" + sha256_file(maker).substr(0, 16));
    if (fs::exists(done / "static" / "case.outputs.safetensors")) return done;
    const fs::path mine = done.string() + ".partial-" + std::to_string(::getpid());
    const std::string cmd = pipeline::shell_quote(python()) + " " + pipeline::shell_quote(maker.string()) + " " +
                            pipeline::shell_quote(mine.string()) + " growing static >/dev/null 2>&1";
    if (std::system(cmd.c_str()) != 0) throw Error(ErrorKind::Internal, "cannot write the toys: " + cmd);
    std::error_code ec;
    fs::rename(mine, done, ec);  // another test process may have been first: its copy is the same
    fs::remove_all(mine, ec);
    return done;
  }();
  return dir;
}

struct Toy {
  fs::path pt2;
  std::vector<std::string> inputs;
  std::vector<std::pair<std::string, std::string>> shared;
};

// What the toy's hfx.json says of its decoder (written by torch_toys.component_entry).
Toy toy(const std::string& layout) {
  const fs::path dir = toys() / layout;
  const auto m = nlohmann::json::parse(read_text_file(dir / "hfx.json"));
  const auto& c = m["components"][0];
  Toy t{dir / c["file"].get<std::string>(), {}, {}};
  for (const auto& i : c["inputs"]) t.inputs.push_back(i["name"].get<std::string>());
  for (const auto& p : c["cache"]["shared_buffers"]) t.shared.emplace_back(p[0].get<std::string>(), p[1].get<std::string>());
  return t;
}

void expect_same(const std::map<std::string, Tensor>& got, const std::map<std::string, Tensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, w] : want) {
    ASSERT_TRUE(got.count(name)) << name;
    const Tensor& g = got.at(name);
    ASSERT_EQ(g.dtype(), DType::F32) << name;
    ASSERT_EQ(g.shape(), w.shape()) << name;
    for (int64_t i = 0; i < w.numel(); ++i) ASSERT_NEAR(g.as<float>()[i], w.as<float>()[i], 1e-5) << name << " at " << i;
  }
}

Error error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no hfx::Error";
  return Error(ErrorKind::Internal, "none");
}

}  // namespace

TEST(TorchRunner, GrowingStepIsTorchsOwn) {
  if (toys().empty()) GTEST_SKIP() << python() << " has no torch";
  const Toy t = toy("growing");
  auto runner = pipeline::make_torch_runner(t.pt2, t.inputs, t.shared, python());
  EXPECT_EQ(runner->input_names(), t.inputs);
  const auto inputs = io::load_safetensors(toys() / "growing" / "case.inputs.safetensors");
  const auto want = io::load_safetensors(toys() / "growing" / "case.outputs.safetensors");
  expect_same(runner->run(inputs), want);
  EXPECT_EQ(want.at("present.0.key").dim(2), inputs.at("past_key_values.0.key").dim(2) + inputs.at("input_ids").dim(1));
  expect_same(runner->run(inputs), want);  // the same server, a second request
}

TEST(TorchRunner, StaticStepReturnsTheBuffersItUpdated) {
  if (toys().empty()) GTEST_SKIP() << python() << " has no torch";
  const Toy t = toy("static");
  ASSERT_EQ(t.shared.size(), 4u);
  auto runner = pipeline::make_torch_runner(t.pt2, t.inputs, t.shared, python());
  auto inputs = io::load_safetensors(toys() / "static" / "case.inputs.safetensors");
  const auto want = io::load_safetensors(toys() / "static" / "case.outputs.safetensors");
  inputs["unused"] = Tensor::scalar_i64(7);  // what the program does not take is not sent
  const auto got = runner->run(inputs);
  expect_same(got, want);
  // present.* are the past buffers written at cache_position, not copies of the inputs.
  const Tensor& before = inputs.at("past_key_values.1.value");
  const Tensor& after = got.at("present.1.value");
  EXPECT_NE(std::memcmp(before.data(), after.data(), before.nbytes()), 0);
}

TEST(TorchRunner, WrongShapeIsTorchsOwnErrorAndTheServerGoesOn) {
  if (toys().empty()) GTEST_SKIP() << python() << " has no torch";
  const Toy t = toy("growing");
  auto runner = pipeline::make_torch_runner(t.pt2, t.inputs, t.shared, python());
  auto inputs = io::load_safetensors(toys() / "growing" / "case.inputs.safetensors");
  auto wrong = inputs;
  wrong["input_ids"] = Tensor(DType::I64, {inputs.at("input_ids").dim(0) + 1, inputs.at("input_ids").dim(1)});
  const Error e = error_of([&] { runner->run(wrong); });
  EXPECT_EQ(e.kind(), ErrorKind::Mismatch);
  EXPECT_NE(e.message().find("torch " + pipeline::torch_version(python())), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("Expected input at"), std::string::npos) << e.message();
  EXPECT_EQ(e.message().find('\n'), std::string::npos);
  expect_same(runner->run(inputs), io::load_safetensors(toys() / "growing" / "case.outputs.safetensors"));
  const Error missing = error_of([&] { runner->run({}); });
  EXPECT_EQ(missing.kind(), ErrorKind::BadInput);
  EXPECT_NE(missing.message().find("no tensor given for the program's input input_ids"), std::string::npos) << missing.message();
}

TEST(TorchRunner, ArchiveThatIsNotHfxsIsRefusedByTheDriver) {
  if (toys().empty()) GTEST_SKIP() << python() << " has no torch";
  const fs::path d = scratch_dir("notpt2");
  std::ofstream(d / "model.pt2") << "not a zip";
  const Error e = error_of([&] { pipeline::make_torch_runner(d / "model.pt2", {"input_ids"}, {}, python()); });
  EXPECT_EQ(e.kind(), ErrorKind::Mismatch);
  EXPECT_NE(e.message().find("refused " + (d / "model.pt2").string() + ": ValueError: "), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("not a readable .pt2 archive"), std::string::npos) << e.message();
  fs::remove_all(d);
}

TEST(TorchRunner, TorchVersionIsEmptyWithoutAnInterpreter) {
  EXPECT_EQ(pipeline::torch_version("/nonexistent/python3"), "");
  const fs::path d = scratch_dir("version");
  EXPECT_EQ(pipeline::torch_version(script(d, "echo 2.13.0+cpu\n").string()), "2.13.0+cpu");
  fs::remove_all(d);
}

TEST(TorchRunner, MissingInterpreterIsUnsupported) {
  const Error e = error_of([] { pipeline::make_torch_runner("m.pt2", {"input_ids"}, {}, "/nonexistent/python3"); });
  EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
  EXPECT_EQ(e.message(), "cannot run /nonexistent/python3 for the torch driver: No such file or directory");
}

TEST(TorchRunner, NoTorchIsUnsupportedWithPythonsOwnLine) {
  const fs::path d = scratch_dir("notorch");
  const fs::path py = script(d, "echo '{\"error\": \"ModuleNotFoundError: No module named torch\"}'\nexit 1\n");
  const Error e = error_of([&] { pipeline::make_torch_runner("m.pt2", {"input_ids"}, {}, py.string()); });
  EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
  EXPECT_EQ(e.message(), py.string() + " cannot import torch: ModuleNotFoundError: No module named torch");
  fs::remove_all(d);
}

TEST(TorchRunner, InterpreterDyingBeforeReadyIsUnsupportedWithItsLastLine) {
  const fs::path d = scratch_dir("early");
  const fs::path py = script(d, "echo 'Traceback (most recent call last):' >&2\necho 'SyntaxError: invalid syntax' >&2\nexit 2\n");
  const Error e = error_of([&] { pipeline::make_torch_runner("m.pt2", {"input_ids"}, {}, py.string()); });
  EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
  EXPECT_NE(e.message().find(": SyntaxError: invalid syntax"), std::string::npos) << e.message();
  fs::remove_all(d);
}

TEST(TorchRunner, ErrorAnswerThenDeathAreMismatches) {
  const fs::path d = scratch_dir("death");
  // Ready; answers the first request with an error, dies on the second.
  const fs::path py = script(d,
                             "echo '{\"ready\": true, \"torch_version\": \"9.9\", \"load_s\": 0}'\n"
                             "read line\necho '{\"error\": \"RuntimeError: shapes do not match\"}'\n"
                             "read line\necho 'RuntimeError: out of memory' >&2\nexit 3\n");
  auto runner = pipeline::make_torch_runner("m.pt2", {"input_ids"}, {}, py.string());
  const std::map<std::string, Tensor> in = {{"input_ids", Tensor::vector_i64({1, 2})}};
  Error e = error_of([&] { runner->run(in); });
  EXPECT_EQ(e.kind(), ErrorKind::Mismatch);
  EXPECT_EQ(e.message(), "torch 9.9 (run by " + py.string() + ") failed on m.pt2: RuntimeError: shapes do not match");
  e = error_of([&] { runner->run(in); });
  EXPECT_EQ(e.kind(), ErrorKind::Mismatch);
  EXPECT_EQ(e.message(), "torch 9.9 (run by " + py.string() + ") stopped while running m.pt2: RuntimeError: out of memory, exit status 3");
  e = error_of([&] { runner->run(in); });
  EXPECT_NE(e.message().find("the step server stopped earlier: exit status 3"), std::string::npos) << e.message();
  fs::remove_all(d);
}

TEST(TorchRunner, DestructorKillsAndReapsTheServer) {
  const fs::path d = scratch_dir("reap");
  const fs::path pid_file = d / "pid";
  // Ready, then deaf: it would never exit on its own.
  const fs::path py = script(d, "echo $$ > '" + pid_file.string() +
                                    "'\necho '{\"ready\": true, \"torch_version\": \"9.9\"}'\ntrap '' TERM INT HUP\n"
                                    "while :; do sleep 1; done\n");
  pid_t pid = 0;
  {
    auto runner = pipeline::make_torch_runner("m.pt2", {"input_ids"}, {}, py.string());
    std::ifstream(pid_file) >> pid;
    ASSERT_GT(pid, 0);
    EXPECT_EQ(::kill(pid, 0), 0);
  }
  // Gone and reaped: a zombie would still accept kill(pid, 0).
  EXPECT_EQ(::kill(pid, 0), -1);
  EXPECT_EQ(errno, ESRCH);
  fs::remove_all(d);
}
