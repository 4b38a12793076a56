#include "core/tensor.h"

#include <cstdint>
#include <string>

namespace hfx {

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

namespace {

thread_local int64_t t_max_tensor_bytes = 0;  // TensorBudget's limit on this thread; 0: none

// The byte size of a new tensor, refused above the thread's budget (overflow counts as above).
size_t budgeted_nbytes(DType dtype, const std::vector<int64_t>& shape) {
  const int64_t limit = t_max_tensor_bytes;
  if (limit <= 0) return dtype_nbytes(dtype, size_t(numel_of(shape)));
  int64_t n = 1;
  bool over = false;
  for (auto d : shape) over = over || d < 0 || __builtin_mul_overflow(n, d, &n);
  const size_t bytes = over ? SIZE_MAX : dtype_nbytes(dtype, size_t(n));
  if (over || bytes > size_t(limit)) {
    std::string dims;
    for (auto d : shape) dims += (dims.empty() ? "" : ",") + std::to_string(d);
    bad_input("a {}[{}] tensor ({}) is above the budget of {} MiB per tensor for this graph; the graph computes "
              "more than its contract's sizes need",
              dtype_name(dtype), dims, over ? std::string("over 2^63 bytes") : std::to_string(bytes >> 20) + " MiB",
              limit >> 20);
  }
  return bytes;
}

}  // namespace

TensorBudget::TensorBudget(int64_t max_bytes) : previous_(t_max_tensor_bytes) { t_max_tensor_bytes = max_bytes; }
TensorBudget::~TensorBudget() { t_max_tensor_bytes = previous_; }

Tensor::Tensor(DType dtype, std::vector<int64_t> shape)
    : dtype_(dtype), shape_(std::move(shape)), bytes_(budgeted_nbytes(dtype, shape_)) {}

Tensor::Tensor(DType dtype, std::vector<int64_t> shape, std::vector<uint8_t>&& bytes)
    : dtype_(dtype), shape_(std::move(shape)), bytes_(std::move(bytes)) {
  HFX_CHECK(bytes_.size() == dtype_nbytes(dtype_, size_t(numel_of(shape_))), "{} bytes for {} elements of {}",
            bytes_.size(), numel_of(shape_), dtype_name(dtype_));
}

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
