// The causal depthwise convolution with carried state (LFM2's short conv; the conv half of Mamba's
// and gated delta-net's mixers), in primitives: no scan is needed, since the conv over a whole prompt
// is the same slices summed as one step's. ONNX's opset-27 CausalConvWithState computes the same.
#pragma once

#include "io/checkpoint.h"
#include "ir/builder.h"
#include "models/blocks.h"
#include "models/model.h"

namespace hfx::models {

struct ConvOut {
  ir::ValueId out = ir::kNone;      // [b, channels, s]
  ir::ValueId present = ir::kNone;  // [b, channels, kernel - 1]: the state the next step reads
};

// x [b, channels, s] (channels first, as torch's conv1d reads it); `past` [b, channels, kernel - 1]
// the carried inputs, or kNone for a step that starts from nothing (zeros, as Transformers' prefill
// pads). `weight` [channels, kernel], `bias` [channels] or kNone. Over full = past ++ x:
// out[:, c, t] = bias[c] + sum_k weight[c, k] * full[:, c, t + k], and present = the last kernel - 1
// columns of full (Transformers' conv cache keeps kernel columns; its first is never read again).
ConvOut causal_depthwise_conv(ir::Builder& b, ir::ValueId x, ir::ValueId past, ir::ValueId weight, ir::ValueId bias,
                              int64_t channels, int64_t kernel);

// A Mamba mixer's conv1d (Mamba-1's over x, Mamba-2's over xBC): `prefix`.weight in torch's depthwise
// layout [channels, 1, kernel] and `prefix`.bias [channels] when `bias`, over x [b, s, channels] from
// `past`, then `act` and the padding mask (when there is one). out [b, s, channels], present as above.
struct MixerConv {
  int64_t channels = 0, kernel = 0;
  bool bias = true;
  Activation act = Activation::Silu;
};
ConvOut mixer_conv1d(ir::Builder& b, const io::Checkpoint& ckpt, ir::ValueId x, const std::string& prefix,
                     const MixerConv& conv, ir::ValueId past, const std::optional<ir::ValueId>& pad_mask,
                     const std::string& why);

// The step's own columns of the 2-D attention mask as f32 [b, s, 1], to zero padded positions before
// a recurrent mixer (Transformers' apply_mask_to_padding_states with create_recurrent_attention_mask):
// the mask's last s columns (a static cache's at cache_position), and all ones for a one-token step,
// which Transformers never masks. nullopt when the graph's step is one token by its shape (decode).
std::optional<ir::ValueId> padding_states_mask(ir::Builder& b, const CausalLmInputs& in);

}  // namespace hfx::models
