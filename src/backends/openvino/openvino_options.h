// OpenVINO's format options (FormatOption): also registered by a build without the OpenVINO SDK, which
// still takes and records them.
#pragma once

#include <vector>

#include "pipeline/format_options.h"

namespace hfx::pipeline {

std::vector<FormatOption> openvino_options();

}  // namespace hfx::pipeline
