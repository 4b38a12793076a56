#include "core/tensor.h"

namespace hfx {

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

Tensor::Tensor(DType dtype, std::vector<int64_t> shape)
    : dtype_(dtype), shape_(std::move(shape)), bytes_(dtype_nbytes(dtype, size_t(numel_of(shape_)))) {}

int64_t Tensor::numel() const { return numel_of(shape_); }

Tensor Tensor::reshaped(std::vector<int64_t> shape) const {
  HFX_CHECK(numel_of(shape) == numel(), "reshape of {} elements to {}", numel(), numel_of(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::cast(DType to) const {
  if (to == dtype_) return *this;
  Tensor t(to, shape_);
  convert_elements(dtype_, data(), to, t.data(), size_t(numel()));
  return t;
}

std::vector<int64_t> Tensor::to_i64_vector() const {
  std::vector<int64_t> out(static_cast<size_t>(numel()));
  convert_elements(dtype_, data(), DType::I64, out.data(), out.size());
  return out;
}

}  // namespace hfx
