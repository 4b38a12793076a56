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

}  // namespace hfx::models
