// The inside of a WeightRef, shared by the files that implement it (weight.cc: building, describing,
// materialising and streaming; weight_views.cc: finding one weight's bytes inside another's). Not for
// other code: WeightRef's interface is weight.h.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ir/weight.h"
#include "quant/quantize.h"

namespace hfx::ir {

// The shared state of the parts of one quantized weight: the result of the last quantization, each
// part handed out once, then dropped.
struct QuantState {
  std::mutex mutex;  // parts may be materialised from different threads
  WeightRef::QuantParams params;
  int64_t K = 0, N = 0;
  std::optional<quant::Quantized> result;
  int taken = 0;  // bit per part handed out from `result`
};

struct WeightRef::Node {
  enum Kind { Source, Constant, Transpose, Cast, Concat, PlusScalar, Reshape, Quantized } kind;
  DType dtype;
  std::vector<int64_t> shape;
  // Source
  std::shared_ptr<const MappedFile> file;
  std::string name;
  size_t offset = 0;
  // Constant
  Tensor value;
  // Transforms
  std::vector<WeightRef> children;
  std::vector<int64_t> perm;
  int64_t axis = 0;
  double scalar = 0;
  // Quantized: which part (0 data, 1 scales, 2 zero points) of the shared quantization
  std::shared_ptr<QuantState> quant;
  int part = 0;
};

// Part `n.part` of the quantization `q.result` (the caller holds q.mutex and has filled it), as the
// part's tensor: the data and zero points are moved out of the result, so each part is handed out once
// per result, which is dropped once every part was. needs_quantizing: there is no result, or this part
// was handed out from it already (the caller makes a new one).
bool needs_quantizing(const WeightRef::Node& n, const QuantState& q);
Tensor take_quantized_part(const WeightRef::Node& n, QuantState& q);

}  // namespace hfx::ir
