#include "pipeline/backend.h"

#include <fmt/format.h>

#include "core/error.h"
#include "pipeline/backends/common.h"
#include "runtime/tested_runtimes.h"

namespace hfx::pipeline {

std::map<std::string, std::string> component_metadata(const LoadedModel& m, const tasks::Component& c, const ir::Graph& g) {
  std::map<std::string, std::string> md;
  md["hfx.version"] = HFX_VERSION;
  md["hfx.model_type"] = m.summary().model_type;
  md["hfx.task"] = m.task();
  md["hfx.role"] = c.role;
  // The shape contract: each symbol's bounds and relations, readable by any consumer of the file.
  for (const auto& [name, bounds] : g.symbols().all()) md["hfx.dim." + name] = bounds.str();
  for (const auto& r : g.symbols().relations()) md["hfx.relation." + r.sum] = r.a + " + " + r.b;
  for (const auto& [in, out] : c.shared_buffers) md["hfx.shared_buffer." + in] = out;
  return md;
}

std::unique_ptr<Progress> weight_progress(const std::string& what, const ir::Graph& g) {
  int64_t total = 0;
  for (auto id : g.weights()) total += int64_t(g.weight(id)->nbytes());
  return std::make_unique<Progress>(what, int64_t(g.weights().size()), total);
}

namespace {

#ifndef HFX_HAVE_OPENVINO
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
  std::vector<std::string> passes() const override { missing(); }
  void write_component(const tasks::Component&, ExportJob&) const override { missing(); }
  std::string check(ExportJob&, const ExportOptions&) const override { missing(); }
  std::unique_ptr<runtime::StepRunner> make_runner(const ArtifactComponent&, const std::string&) const override { missing(); }
  Signature signature(const ArtifactComponent&) const override { missing(); }
  Placement placement(const ArtifactComponent&, const std::string&) const override { missing(); }

 private:
  [[noreturn]] static void missing() { unsupported("format `openvino`: {}", kOpenVinoHint); }
};
#endif

}  // namespace

const std::vector<const Backend*>& all_backends() {
#ifdef HFX_HAVE_OPENVINO
  static const std::vector<const Backend*> backends = {&onnx_format(), &openvino_format(), &pt2_format()};
#else
  static const MissingOpenVino missing_openvino;
  static const std::vector<const Backend*> backends = {&onnx_format(), &missing_openvino, &pt2_format()};
#endif
  return backends;
}

const Backend& find_backend(const std::string& format) {
  std::vector<std::string> names;
  for (const Backend* b : all_backends()) {
    const BackendInfo info = b->info();
    if (info.name == format) {
      if (!info.available) unsupported("format `{}`: {}", format, info.status);
      return *b;
    }
    names.push_back(info.name);
  }
  unsupported("unknown format `{}` (supported: {})", format, fmt::join(names, ", "));
}

const Backend& backend_for_runtime(const std::string& runtime) {
  std::vector<std::string> names;
  for (const Backend* b : all_backends()) {
    const BackendInfo info = b->info();
    for (const auto& r : info.runtimes) {
      if (r == runtime) {
        if (!info.available) unsupported("--runtime {}: {}", runtime, info.status);
        return *b;
      }
      names.push_back(r);
    }
  }
  bad_input("--runtime {}: unknown runtime ({})", runtime, fmt::join(names, ", "));
}

}  // namespace hfx::pipeline
