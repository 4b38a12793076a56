#include "pipeline/backends/pt2_runner.h"
#include "core/error.h"
namespace hfx::pipeline {
std::unique_ptr<runtime::StepRunner> make_torch_runner(const std::filesystem::path&, const std::vector<std::string>&,
                                                       const std::vector<std::pair<std::string, std::string>>&, const std::string&) {
  unsupported("the torch runtime driver is not in this build yet");
}
std::string torch_version(const std::string&) { return ""; }
}  // namespace hfx::pipeline
