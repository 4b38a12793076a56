// The ONNX format's verify session on ONNX Runtime (pipeline/verify_session.h): the python driver.
#pragma once

#include <memory>

#include "pipeline/verify_session.h"

namespace hfx::pipeline {

std::unique_ptr<VerifySession> make_onnxruntime_session(const SessionContext& ctx);

}  // namespace hfx::pipeline
