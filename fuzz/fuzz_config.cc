// config.json interpretation: a model folder holding the fuzzed config.json and a small valid
// model.safetensors (fuzz/data/config/<model_type>.safetensors, chosen by the config's model_type,
// llama's when there is none), opened, bound to its definition, built into the causal-LM task's
// components and run through the ONNX passes and the preflight, as `hfx inspect` does.
#include <nlohmann/json.hpp>

#include "harness.h"
#include "pipeline/inspect.h"

using namespace hfx;
namespace fs = std::filesystem;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fs::path dir = fuzz::scratch() / "model";
  static std::string current;  // the model_type whose weights are in dir
  if (current.empty()) fs::create_directories(dir);

  std::string model_type = "llama";
  auto j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_object()) {
    auto it = j.find("model_type");
    if (it != j.end() && it->is_string() && it->get<std::string>().find_first_of("/.") == std::string::npos &&
        fs::exists(fuzz::data_dir() / "config" / (it->get<std::string>() + ".safetensors")))
      model_type = it->get<std::string>();
  }
  if (model_type != current) {
    fs::copy_file(fuzz::data_dir() / "config" / (model_type + ".safetensors"), dir / "model.safetensors",
                  fs::copy_options::overwrite_existing);
    current = model_type;
  }
  fuzz::write_file(dir / "config.json", data, size);
  fuzz::expect_user_errors([&] { (void)pipeline::inspect_report(dir, /*as_json=*/true); });
  return 0;
}
