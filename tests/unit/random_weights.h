// Seeded random weights and tensors for the unit tests (quantization, the recurrences' kernels).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "core/tensor.h"

namespace hfx::testing {

// K * N values from N(0, 0.3): about the spread of a trained Linear layer's weights.
inline std::vector<float> random_matrix(int64_t K, int64_t N, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 0.3f);
  std::vector<float> w(size_t(K * N));
  for (auto& v : w) v = normal(rng);
  return w;
}

// An f32 tensor of `shape` with values uniform in [lo, hi).
inline Tensor random_f32(std::vector<int64_t> shape, std::mt19937& rng, float lo, float hi) {
  size_t n = 1;
  for (auto d : shape) n *= size_t(d);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return Tensor::from_vector<float>(DType::F32, std::move(shape), v);
}

}  // namespace hfx::testing
