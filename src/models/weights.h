// Binding checkpoint tensors to the IR: by their own names, with the shape the config implies.
#pragma once

#include <functional>
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

// The same with a transform of the f32 reference applied lazily at write time: Gemma's (1 + w) norm
// weights (`plus_scalar(1.0)`), GPT-2's [in, out] Conv1D weights (`transposed({1, 0})`). The value
// keeps the tensor's name, so bind one tensor one way only.
ir::ValueId bind_weight(ir::Builder& b, const io::Checkpoint& ckpt, const std::string& name,
                        const std::vector<int64_t>& expected, const std::string& why,
                        const std::function<ir::WeightRef(ir::WeightRef)>& transform);

// The checked, f32 reference to one tensor (marked used), for weights combined from several tensors.
ir::WeightRef weight_ref(const io::Checkpoint& ckpt, const std::string& name, const std::vector<int64_t>& expected,
                         const std::string& why);

// Rows [begin, end) of expert `expert`'s matrix in a checkpoint tensor stacking every expert's
// [rows, cols] matrix as [experts, rows, cols] (`expected`): Transformers 5's fused experts.gate_up_proj /
// down_proj, Granite's input_linear / output_linear. The block is contiguous in the file, so it is
// read in place (no copy, streamable) like a tensor of its own; it is bound as
// "<name>[<expert>, <begin>:<end>]".
ir::ValueId bind_expert_rows(ir::Builder& b, const io::Checkpoint& ckpt, const std::string& name,
                             const std::vector<int64_t>& expected, int64_t expert, int64_t begin, int64_t end,
                             const std::string& why);

}  // namespace hfx::models
