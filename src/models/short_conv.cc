#include "models/short_conv.h"

#include <cstdint>

#include "core/error.h"
#include "models/weights.h"

namespace hfx::models {

ConvOut causal_depthwise_conv(ir::Builder& b, ir::ValueId x, ir::ValueId past, ir::ValueId weight, ir::ValueId bias,
                              int64_t channels, int64_t kernel) {
  HFX_CHECK(kernel >= 2, "a causal conv of kernel {} carries no state", kernel);
  const int64_t width = kernel - 1;
  if (past == ir::kNone) {
    // Zeros [b, channels, kernel - 1]: the batch from x, the rest fixed.
    const Tensor zeros = Tensor::from_vector<float>(DType::F32, {1, channels, width}, std::vector<float>(size_t(channels * width), 0.0f));
    ir::ValueId dims = b.concat({b.shape_of(x, 0, 1), b.i64s({channels, width})}, 0);
    past = b.add1("Expand", {b.constant(zeros, "conv_zero_state"), dims});
  }
  // The composite CausalConv (ir/recurrences.h decomposes it; the onnx ort profile writes it as
  // com.microsoft CausalConvWithState).
  std::vector<ir::ValueId> ins = {x, past, weight};
  if (bias != ir::kNone) ins.push_back(bias);
  auto outs = b.add("CausalConv", ins, {{"channels", channels}, {"kernel", kernel}});
  return {outs[0], outs[1]};
}

ConvOut mixer_conv1d(ir::Builder& b, const io::Checkpoint& ckpt, ir::ValueId x, const std::string& prefix,
                     const MixerConv& conv, ir::ValueId past, const std::optional<ir::ValueId>& pad_mask,
                     const std::string& why) {
  auto s = b.scope("conv1d");
  const int64_t C = conv.channels, K = conv.kernel;
  ir::ValueId w = bind_weight(b, ckpt, prefix + ".weight", {C, 1, K}, why,
                              [&](ir::WeightRef ref) { return ref.reshaped({C, K}); });
  ir::ValueId bias = conv.bias ? bind_weight(b, ckpt, prefix + ".bias", {C}, why) : ir::kNone;
  ConvOut r = causal_depthwise_conv(b, b.transpose(x, {0, 2, 1}), past, w, bias, C, K);
  r.out = activation(b, b.transpose(r.out, {0, 2, 1}), conv.act);  // [b, s, channels]
  if (pad_mask) r.out = b.times(r.out, *pad_mask);
  return r;
}

std::optional<ir::ValueId> padding_states_mask(ir::Builder& b, const CausalLmInputs& in) {
  const Shape ids = b.graph().value(in.input_ids).shape;  // a copy: adding nodes may reallocate
  if (ids.size() == 2 && ids[1].is_fixed() && ids[1].value == 1) return std::nullopt;
  ir::ValueId seq = b.shape_of(in.input_ids, 1, 2);  // [1]
  ir::ValueId cols = in.cache_position != ir::kNone
                         ? b.add1("Gather", {in.attention_mask, in.cache_position}, {{"axis", int64_t(1)}})
                         // from total - s, not -s: a start that is never negative stays a plain size
                         // (torch.export's symbolic slice bounds, for the pt2 and executorch formats)
                         : b.add1("Slice", {in.attention_mask, b.minus(b.shape_of(in.attention_mask, 1, 2), seq),
                                            b.i64s({INT64_MAX}), b.i64s({1})});
  ir::ValueId mask = b.cast(cols, DType::F32);  // [b, s]
  ir::ValueId one_token = b.add1("Equal", {seq, b.i64s({1})});
  mask = b.add1("Where", {one_token, b.f32(1.0f), mask});
  return b.unsqueeze(mask, {2});  // [b, s, 1]
}

}  // namespace hfx::models
