#include "backends/openvino/openvino_options.h"

#include <fmt/format.h>

#include "tasks/state_names.h"

namespace hfx::pipeline {

std::vector<FormatOption> openvino_options() {
  return {{.field = "openvino_stateful",
           .flag = "--stateless",
           .kind = FormatOption::Kind::Negation,
           .default_value = true,
           .recipe_position = 1,
           .shapes_contract = true,
           .help = fmt::format("openvino: explicit {} I/O instead of the stateful KV cache (ReadValue/Assign + "
                               "beam_idx, OpenVINO GenAI's layout); needed with --split-prefill, --static-cache",
                               tasks::state_ports_glob(tasks::state_names(tasks::StateNames::Decoder)))}};
}

}  // namespace hfx::pipeline
