// The XNNPACK delegate's payload: one XNNGraph (schema/xnnpack.fbs, identifier XN01) behind the
// 32-byte `XH00` header, as ExecuTorch's XnnpackBackend compiles it at load time. hfx delegates each
// f32 linear layer (XNNPACK's FullyConnected, weights [out, in] as the checkpoint stores them, taken
// by name from the program's named data), in f32 or f16 (input, weight and output of one dtype; the
// bias f32 or absent), or with an int8 weight of one scale per output row (XNNPACK's f32 x qc8w
// kernels: weight-only int8); the rest of the step, the cache update included, stays in
// portable kernels.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hfx::executorch_backend {

struct XnnLinear {
  std::vector<int64_t> input_sizes, output_sizes;  // upper bounds ([.., in] and [.., out])
  int64_t out_features = 0, in_features = 0;
  std::string weight_key, bias_key;                // named-data keys; bias_key "" without a bias
  bool f16 = false;                                // input, weight and output in f16 (bias, when present, too)
  std::vector<float> int8_scales;                  // non-empty: the weight is int8 per output row (qcint8), f32 in and out
};

// The processed blob of a one-node XNNPACK graph: external value 0 the input, 1 the output (the
// DelegateCall's args in that order).
std::string xnnpack_linear_payload(const XnnLinear& linear);

}  // namespace hfx::executorch_backend
