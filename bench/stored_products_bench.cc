// The reference executor's products against a stored weight (runtime/kernels_stored.cc), timed alone:
// an ONNX MatMul's f32 [k, n] weight and a checkpoint Linear's bf16 [n, k] one, at 1 to 16 rows (a
// decode step, a check's shape cases), then MatMulNBits over a 4-bit B in blocks of 32 (hfx's int4;
// runtime/kernels_quant.cc) at 1 to 42 rows (the export check's groups). Prints ms per product,
// GFLOP/s and the weight's bytes (or values) per second (the weights, 12 MiB and 6 MiB, partly fit the
// last-level cache: the figures compare kernels, not the machine's memory).
//
//   ninja -C build hfx_products_bench && build/hfx_products_bench [k n]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/kernels.h"

using namespace hfx;

int main(int argc, char** argv) {
  const int64_t k = argc > 2 ? std::atoll(argv[1]) : 1024, n = argc > 2 ? std::atoll(argv[2]) : 3072;
  std::vector<float> f32(size_t(k * n));
  std::vector<uint16_t> bf16(f32.size());
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uniform(-1, 1);
  for (size_t i = 0; i < f32.size(); ++i) {
    f32[i] = uniform(rng);
    uint32_t bits;
    std::memcpy(&bits, &f32[i], 4);
    bf16[i] = uint16_t(bits >> 16);
  }
  std::printf("weight [%lld, %lld]; median of 9 x 20 products\n", (long long)k, (long long)n);
  {  // half a second of products first: the first ones in a process run at a third of the speed
    Tensor x(DType::F32, {1, k});
    ir::Node node;
    node.op = "MatMul";
    const ir::StoredMatrix w{reinterpret_cast<const uint8_t*>(f32.data()), DType::F32, k, n, false};
    const runtime::detail::KernelInputs in{&x, nullptr};
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
    while (std::chrono::steady_clock::now() < until) runtime::detail::run_with_stored_weight(node, {in}, w, false);
  }
  for (int m : {1, 2, 4, 8, 16}) {
    Tensor x(DType::F32, {m, k});
    for (int64_t i = 0; i < m * k; ++i) x.as<float>()[i] = uniform(rng);
    // MatMul over an ONNX [k, n] f32 weight; Linear over a checkpoint's [n, k] bf16 one, and over an f32
    // [n, k] one (a tied f32 lm_head read transposed, MatMulNBits' dequantized blocks).
    for (const char* kind : {"MatMul f32 [k,n]", "Linear bf16 [n,k]", "Linear f32 [n,k]"}) {
      const bool linear = kind[0] == 'L';
      const DType linear_dtype = std::strstr(kind, "bf16") ? DType::BF16 : DType::F32;
      ir::Node node;
      node.op = linear ? "Linear" : "MatMul";
      ir::StoredMatrix w;
      w.data = linear_dtype == DType::BF16 ? reinterpret_cast<const uint8_t*>(bf16.data())
                                           : reinterpret_cast<const uint8_t*>(f32.data());
      w.dtype = linear ? linear_dtype : DType::F32;
      w.rows = linear ? n : k;
      w.cols = linear ? k : n;
      const runtime::detail::KernelInputs in{&x, nullptr};
      std::vector<double> times;
      for (int rep = 0; rep < 10; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 20; ++i) runtime::detail::run_with_stored_weight(node, {in}, w, false);
        const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 20;
        if (rep > 0) times.push_back(dt);  // the first warms the caches and starts the second thread
      }
      std::sort(times.begin(), times.end());
      const double dt = times[times.size() / 2];
      std::printf("%2d rows  %-18s %7.3f ms  %6.1f GFLOP/s  %5.1f GB/s of weight\n", m,
                  kind, dt * 1e3, 2.0 * double(m * k * n) / dt / 1e9, double(k * n) * double(dtype_size(w.dtype)) / dt / 1e9);
    }
  }
  // MatMulNBits: B's packed bytes [n, k / 2] where they lie (the executor's in-place read), f32 scales.
  constexpr int64_t kBlock = 32;
  std::vector<uint8_t> packed(size_t(n * k / 2));
  std::vector<float> scale_values(size_t(n * (k / kBlock)));
  for (auto& b : packed) b = uint8_t(rng());
  for (auto& s : scale_values) s = uniform(rng) / 64;
  const Tensor scales = Tensor::from_vector<float>(DType::F32, {n, k / kBlock}, scale_values);
  ir::Node nbits;
  nbits.op = "MatMulNBits";
  nbits.attrs = {{"K", k}, {"N", n}, {"bits", int64_t(4)}, {"block_size", kBlock}};
  const ir::StoredMatrix b{packed.data(), DType::U8, n, k / 2, false};
  for (int m : {1, 2, 4, 8, 16, 31, 42}) {
    Tensor x(DType::F32, {m, k});
    for (int64_t i = 0; i < m * k; ++i) x.as<float>()[i] = uniform(rng);
    const runtime::detail::KernelInputs in{&x, nullptr, &scales};
    std::vector<double> times;
    for (int rep = 0; rep < 10; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < 20; ++i) runtime::detail::run_with_stored_weight(nbits, {in}, b, false);
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 20;
      if (rep > 0) times.push_back(dt);
    }
    std::sort(times.begin(), times.end());
    const double dt = times[times.size() / 2];
    std::printf("%2d rows  %-18s %7.3f ms  %6.1f GFLOP/s  %5.1f G values/s\n", m, "MatMulNBits int4", dt * 1e3,
                2.0 * double(m * k * n) / dt / 1e9, double(k * n) / dt / 1e9);
  }
}
