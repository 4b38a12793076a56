// A pure state-space language model's stack, shared by Mamba2ForCausalLM and MambaForCausalLM /
// FalconMambaForCausalLM (their MambaModel): every layer a mixer between an RMSNorm and a residual,
// under the checkpoint's `backbone.` names:
//
//   ids ─ embeddings ─┬─ norm ─ mixer ─ + ─┬─ ... ─ norm_f ─ lm_head ─ logits
//                     └───────────────────┘
#pragma once

#include <functional>
#include <optional>

#include "io/checkpoint.h"
#include "ir/builder.h"
#include "models/model.h"

namespace hfx::models {

struct SsmBackbone {
  int64_t vocab_size = 0, hidden_size = 0, num_layers = 0;
  double eps = 1e-5;  // the RMSNorms'
  bool tie_word_embeddings = false;
};

struct SsmMixerOut {
  ir::ValueId out = ir::kNone;                                // [b, s, hidden]
  ir::ValueId conv_state = ir::kNone, ssm_state = ir::kNone;  // the states the next step reads
};

// One layer's mixer: x [b, s, hidden] (normalized), its weights under `prefix` (backbone.layers.{i}.mixer.),
// the carried states (kNone: zeros) and the step's padding mask (models/short_conv.h).
using SsmMixer = std::function<SsmMixerOut(ir::Builder& b, const std::string& prefix, ir::ValueId x, ir::ValueId past_conv,
                                           ir::ValueId past_ssm, const std::optional<ir::ValueId>& pad_mask)>;

CausalLmOutputs build_ssm_backbone(ir::Builder& b, const io::Checkpoint& ckpt, const CausalLmInputs& in,
                                   const SsmBackbone& c, const SsmMixer& mixer);

// No layer attends: no key/value cache to size.
CacheGeometry ssm_cache_geometry(int64_t num_layers);

}  // namespace hfx::models
