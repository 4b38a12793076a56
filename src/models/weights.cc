#include "models/weights.h"

#include <fmt/format.h>

#include "core/error.h"

namespace hfx::models {

ir::ValueId bind_weight(ir::Builder& b, const io::Checkpoint& ckpt, const std::string& name,
                        const std::vector<int64_t>& expected, const std::string& why) {
  if (auto existing = b.graph().find(name)) return *existing;  // tied weights bind once
  const io::TensorEntry& t = ckpt.get(name);
  if (t.shape != expected)
    bad_input("tensor {} has shape [{}] but config.json implies [{}] ({})", name,
              fmt::join(t.shape, ", "), fmt::join(expected, ", "), why);
  if (!is_float(t.dtype))
    bad_input("tensor {} has dtype {}, expected a float type (F32, F16, BF16)", name,
              dtype_name(t.dtype));
  ckpt.mark_used(name);
  auto ref = ir::WeightRef::source(t.file, name, t.dtype, t.shape, t.offset).cast(DType::F32);
  return b.weight(name, ref);
}

}  // namespace hfx::models
