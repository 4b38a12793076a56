#include "models/weights.h"

#include <fmt/format.h>

#include "core/error.h"

namespace hfx::models {

ir::WeightRef weight_ref(const io::Checkpoint& ckpt, const std::string& name, const std::vector<int64_t>& expected,
                         const std::string& why) {
  const io::TensorEntry& t = ckpt.get(name);
  if (t.shape != expected)
    bad_input("tensor {} has shape [{}] but config.json implies [{}] ({})", name,
              fmt::join(t.shape, ", "), fmt::join(expected, ", "), why);
  if (!is_float(t.dtype))
    bad_input("tensor {} has dtype {}, expected a float type (F32, F16, BF16)", name,
              dtype_name(t.dtype));
  ckpt.mark_used(name);
  return ir::WeightRef::source(t.file, name, t.dtype, t.shape, t.offset).cast(DType::F32);
}

ir::ValueId bind_weight(ir::Builder& b, const io::Checkpoint& ckpt, const std::string& name,
                        const std::vector<int64_t>& expected, const std::string& why,
                        const std::function<ir::WeightRef(ir::WeightRef)>& transform) {
  if (auto existing = b.graph().find(name)) return *existing;  // tied weights bind once
  ir::WeightRef ref = weight_ref(ckpt, name, expected, why);
  return b.weight(name, transform ? transform(ref) : ref);
}

ir::ValueId bind_weight(ir::Builder& b, const io::Checkpoint& ckpt, const std::string& name,
                        const std::vector<int64_t>& expected, const std::string& why) {
  return bind_weight(b, ckpt, name, expected, why, nullptr);
}

ir::ValueId bind_expert_rows(ir::Builder& b, const io::Checkpoint& ckpt, const std::string& name,
                             const std::vector<int64_t>& expected, int64_t expert, int64_t begin, int64_t end,
                             const std::string& why) {
  HFX_CHECK(expected.size() == 3 && expert >= 0 && expert < expected[0] && 0 <= begin && begin < end &&
                end <= expected[1],
            "expert rows of {}", name);
  const std::string bound = fmt::format("{}[{}, {}:{}]", name, expert, begin, end);
  if (auto existing = b.graph().find(bound)) return *existing;
  weight_ref(ckpt, name, expected, why);  // checks shape and dtype, marks the tensor used
  const io::TensorEntry& t = ckpt.get(name);
  const int64_t cols = expected[2];
  const size_t offset = t.offset + size_t((expert * expected[1] + begin) * cols) * dtype_size(t.dtype);
  // The source is named as bound: weights are matched by their description when written, and every
  // block of the tensor is a different one.
  return b.weight(bound, ir::WeightRef::source(t.file, bound, t.dtype, {end - begin, cols}, offset).cast(DType::F32));
}

}  // namespace hfx::models
