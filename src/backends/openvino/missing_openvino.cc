// The openvino format in a build without the OpenVINO SDK (CMakeLists.txt compiles this file instead
// of the real one): listed by `hfx formats`, its options taken, and asking for it says how to get it.
#include <fmt/format.h>

#include "backends/openvino/openvino_options.h"
#include "core/error.h"
#include "pipeline/backend.h"
#include "runtime/tested_runtimes.h"

namespace hfx::pipeline {

namespace {

// This build has no OpenVINO SDK: the format is listed, and asking for it says how to get it.
class MissingOpenVino final : public Backend {
 public:
  BackendInfo info() const override {
    BackendInfo i;
    i.name = "openvino";
    i.available = false;
    i.status = fmt::format("not in this build ({})", kOpenVinoHint);
    i.files = "openvino/openvino_model.xml + openvino_model.bin";
    i.runtimes = {"openvino"};
    i.tested = fmt::format("openvino {}", runtime::kTestedOpenVino);
    return i;
  }
  std::vector<FormatOption> options() const override { return openvino_options(); }
  passes::PrecisionTarget precision_target(const Recipe&, const std::string&) const override { missing(); }
  std::vector<std::string> passes() const override { missing(); }
  void write_component(const tasks::Component&, ExportJob&) const override { missing(); }
  std::string check(ExportJob&, const ExportOptions&) const override { missing(); }
  std::unique_ptr<runtime::StepRunner> make_runner(const ArtifactComponent&, const std::string&) const override { missing(); }
  Signature signature(const ArtifactComponent&) const override { missing(); }
  Placement placement(const ArtifactComponent&, const std::string&) const override { missing(); }

 private:
  [[noreturn]] static void missing() { unsupported("format `openvino`: {}", kOpenVinoHint); }
};

}  // namespace

HFX_REGISTER_BACKEND(MissingOpenVino, 1);

}  // namespace hfx::pipeline
