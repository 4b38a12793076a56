// Seeded random weights for the quantization unit tests (test_quantize.cc, test_quantize_layouts.cc).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace hfx::testing {

// K * N values from N(0, 0.3): about the spread of a trained Linear layer's weights.
inline std::vector<float> random_matrix(int64_t K, int64_t N, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 0.3f);
  std::vector<float> w(size_t(K * N));
  for (auto& v : w) v = normal(rng);
  return w;
}

}  // namespace hfx::testing
