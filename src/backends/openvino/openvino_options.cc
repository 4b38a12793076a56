#include "backends/openvino/openvino_options.h"

#include <fmt/format.h>

#include "tasks/state_names.h"

namespace hfx::pipeline {

std::vector<FormatOption> openvino_options() {
  FormatOption stateful;
  stateful.field = "openvino_stateful";
  stateful.flag = "--stateless";
  stateful.kind = FormatOption::Kind::Negation;
  stateful.default_value = true;
  stateful.recipe_position = 1;
  stateful.shapes_contract = true;
  stateful.help = fmt::format("openvino: explicit {} I/O instead of the stateful KV cache (ReadValue/Assign)",
                              tasks::state_ports_glob(tasks::state_names(tasks::StateNames::Decoder)));
  return {stateful};
}

}  // namespace hfx::pipeline
