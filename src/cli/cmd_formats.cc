// `hfx formats`: the backends this build can write, their options, and the runtime versions the
// oracle tests (tests/oracle) run their output on.
#include <fmt/format.h>

#include "cli/commands.h"
#include "pipeline/export.h"
#include "runtime/tested_runtimes.h"
#ifdef HFX_HAVE_OPENVINO
#include "backends/openvino/ov_writer.h"
#endif

namespace hfx::cli {

namespace {

struct FormatRow {
  const char* name;
  std::string status;
  const char* files;
  const char* options;
  std::string tested;
};

std::vector<FormatRow> format_rows() {
  std::vector<FormatRow> rows;
  rows.push_back({"onnx", "available (ai.onnx opset 21, IR 10)",
                  "onnx/model.onnx + model.onnx_data (or prefill.onnx + decode.onnx), genai_config.json with --onnx-profile ort",
                  "--onnx-profile ort|portable, --split-prefill, --static-cache --max-cache-len N, --dtype, --quantize, --dim, --dynamic",
                  fmt::format("onnxruntime {} (CPU), hfx's reference executor", runtime::kTestedOnnxRuntime)});
#ifdef HFX_HAVE_OPENVINO
  std::string ov_status = fmt::format("available (OpenVINO {}, ov::serialize, ops up to opset 16)", openvino_backend::openvino_version());
#else
  std::string ov_status = fmt::format("not in this build ({})", pipeline::kOpenVinoHint);
#endif
  rows.push_back({"openvino", ov_status,
                  "openvino/openvino_model.xml + openvino_model.bin (openvino_<prefill|decode>_model.xml with --split-prefill)",
                  "stateful KV cache (ReadValue/Assign + beam_idx, OpenVINO GenAI's layout) by default; --stateless for "
                  "explicit past_key_values.*/present.* I/O (needed with --split-prefill, --static-cache)",
                  fmt::format("openvino {0} (CPU, INFERENCE_PRECISION_HINT=f32, KV_CACHE_PRECISION=f32), openvino-genai {0} "
                              "LLMPipeline (PA and SDPA attention backends)", runtime::kTestedOpenVino)});
  return rows;
}

}  // namespace

void register_formats(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("formats", "List the export formats of this build, their options and tested runtimes.");
  cmd->callback([&action] {
    action = [] {
      for (const auto& r : format_rows())
        fmt::print("{}\n  status:  {}\n  files:   {}\n  options: {}\n  tested:  {}\n", r.name, r.status, r.files,
                   r.options, r.tested);
      return 0;
    };
  });
}

}  // namespace hfx::cli
