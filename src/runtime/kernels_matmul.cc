// MatMul: numpy matmul with batch broadcasting, one cblas_sgemm per batch, or one sgemm over all rows
// when the right operand has no batch (the [b, s, k] x [k, n] weight case).
#include <algorithm>

#include "runtime/kernels.h"

namespace hfx::runtime::detail {

namespace {

std::vector<Tensor> matmul_kernel(const ir::Node& node, const KernelInputs& in) {
  const Tensor& a0 = arg(node, in, 0);
  const Tensor& b0 = arg(node, in, 1);
  expect_dtype(node, a0, DType::F32, "input 0");
  expect_dtype(node, b0, DType::F32, "input 1");
  if (a0.rank() == 0 || b0.rank() == 0) bad_input("MatMul of a scalar");
  // Numpy promotion of 1-D operands: [k] -> [1, k] on the left, [k] -> [k, 1] on the right, and the
  // added dim is removed from the result.
  std::vector<int64_t> as = a0.shape(), bs = b0.shape();
  const bool a_vec = as.size() == 1, b_vec = bs.size() == 1;
  if (a_vec) as.insert(as.begin(), 1);
  if (b_vec) bs.push_back(1);
  const int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  if (bs[bs.size() - 2] != k)
    bad_input("MatMul: inner dims differ: {} x {}", shape_string(a0.shape()), shape_string(b0.shape()));
  const std::vector<int64_t> ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  const auto batch = broadcast_shape(node, {ab, bb});
  std::vector<int64_t> out_shape = batch;
  if (!a_vec) out_shape.push_back(m);
  if (!b_vec) out_shape.push_back(n);
  Tensor out(DType::F32, out_shape);
  const float* pa = a0.as<float>();
  const float* pb = b0.as<float>();
  float* pc = out.as<float>();
  const int64_t a_batch = numel_of(ab), b_batch = numel_of(bb), out_batch = numel_of(batch);
  if (out.numel() == 0) return {std::move(out)};
  if (b_batch == 1) {
    // All of a's rows against one matrix: a single sgemm over out_batch * m rows (a's batch equals the
    // output batch here, a being contiguous).
    HFX_CHECK(a_batch == out_batch, "matmul batch");
    gemm(false, false, out_batch * m, n, k, 1.0f, pa, k, pb, n, pc, n);
    return {std::move(out)};
  }
  // One sgemm per output batch; operand batch offsets follow the broadcast strides.
  auto plan = make_plan<3>(batch, {contiguous_strides(batch), broadcast_strides(ab, batch), broadcast_strides(bb, batch)});
  const int64_t sa = m * k, sb = k * n, sc = m * n;
  for_each_run(plan, [&](const std::array<int64_t, 3>& off, int64_t cnt, const std::array<int64_t, 3>& st) {
    for (int64_t i = 0; i < cnt; ++i)
      gemm(false, false, m, n, k, 1.0f, pa + (off[1] + i * st[1]) * sa, k, pb + (off[2] + i * st[2]) * sb, n,
           pc + (off[0] + i * st[0]) * sc, n);
  });
  return {std::move(out)};
}

}  // namespace

void register_matmul_kernels(KernelTable& t) { t["MatMul"] = matmul_kernel; }

}  // namespace hfx::runtime::detail
