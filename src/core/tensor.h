// A dense tensor that owns its bytes: constants in the IR, and values in the reference executor.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace hfx {

class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, std::vector<int64_t> shape);  // zero-filled
  // Takes `bytes` as its contents, no copy (their size must be the shape's).
  Tensor(DType dtype, std::vector<int64_t> shape, std::vector<uint8_t>&& bytes);

  template <typename T>
  static Tensor from_vector(DType dtype, std::vector<int64_t> shape, const std::vector<T>& values) {
    Tensor t(dtype, std::move(shape));
    HFX_CHECK(values.size() == size_t(t.numel()) && sizeof(T) == dtype_size(dtype),
              "from_vector: {} values of {} bytes for {} elements of {}", values.size(), sizeof(T),
              t.numel(), dtype_name(dtype));
    std::memcpy(t.data(), values.data(), t.nbytes());
    return t;
  }
  static Tensor scalar_i64(int64_t v) { return from_vector<int64_t>(DType::I64, {}, {v}); }
  static Tensor scalar_f32(float v) { return from_vector<float>(DType::F32, {}, {v}); }
  static Tensor vector_i64(const std::vector<int64_t>& v) {
    return from_vector<int64_t>(DType::I64, {int64_t(v.size())}, v);
  }

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t rank() const { return int64_t(shape_.size()); }
  int64_t dim(int64_t i) const { return shape_.at(size_t(i < 0 ? i + rank() : i)); }
  int64_t numel() const;
  size_t nbytes() const { return bytes_.size(); }

  uint8_t* data() { return bytes_.data(); }
  const uint8_t* data() const { return bytes_.data(); }
  template <typename T> T* as() { return reinterpret_cast<T*>(bytes_.data()); }
  template <typename T> const T* as() const { return reinterpret_cast<const T*>(bytes_.data()); }
  template <typename T> std::span<const T> values() const { return {as<T>(), size_t(numel())}; }

  // Same bytes, new shape (element counts must agree).
  Tensor reshaped(std::vector<int64_t> shape) const;
  Tensor cast(DType to) const;
  // Integer values widened to int64 (for index and shape tensors of any integer type).
  std::vector<int64_t> to_i64_vector() const;

 private:
  DType dtype_ = DType::F32;
  std::vector<int64_t> shape_;
  std::vector<uint8_t> bytes_;
};

int64_t numel_of(const std::vector<int64_t>& shape);

// While one is alive, constructing a Tensor of more than `max_bytes` on this thread throws BadInput
// naming its dtype and shape, before anything is allocated: the reference executor runs each kernel
// under its ExecOptions::max_tensor_bytes, so a graph read from a file cannot ask for gigabytes
// (an Expand to [10000, 100000]). Scopes nest (the innermost applies); 0 means no limit.
class TensorBudget {
 public:
  explicit TensorBudget(int64_t max_bytes);
  ~TensorBudget();
  TensorBudget(const TensorBudget&) = delete;
  TensorBudget& operator=(const TensorBudget&) = delete;

 private:
  int64_t previous_;
};

}  // namespace hfx
