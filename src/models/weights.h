// Binding checkpoint tensors to the IR: by their own names, with the shape the config implies.
#pragma once

#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "ir/builder.h"

namespace hfx::models {

// Adds checkpoint tensor `name` as a weight. Its shape must be `expected` (the error names the
// tensor, both shapes and `why`, e.g. "hidden_size=64, num_attention_heads=4"). Float weights are
// read as f32: hfx's graphs compute in f32 and precision changes are a backend option.
ir::ValueId bind_weight(ir::Builder& b, const io::Checkpoint& ckpt, const std::string& name,
                        const std::vector<int64_t>& expected, const std::string& why);

}  // namespace hfx::models
