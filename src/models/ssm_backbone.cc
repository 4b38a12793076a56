#include "models/ssm_backbone.h"

#include <fmt/format.h>

#include "models/blocks.h"
#include "models/short_conv.h"
#include "models/weights.h"

namespace hfx::models {

CausalLmOutputs build_ssm_backbone(ir::Builder& b, const io::Checkpoint& ckpt, const CausalLmInputs& in,
                                   const SsmBackbone& c, const SsmMixer& mixer) {
  auto model_scope = b.scope("backbone");
  ir::ValueId embed = bind_weight(b, ckpt, "backbone.embeddings.weight", {c.vocab_size, c.hidden_size},
                                  fmt::format("vocab_size, hidden_size={}", c.hidden_size));
  ir::ValueId h = b.add1("Embedding", {embed, in.input_ids});
  const std::optional<ir::ValueId> pad_mask = padding_states_mask(b, in);
  CausalLmOutputs out;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    auto layer_scope = b.scope(fmt::format("layers.{}", i));
    const std::string p = fmt::format("backbone.layers.{}.", i);
    ir::ValueId x = norm(b, ckpt, h, p + "norm", c.hidden_size, NormKind::Rms, c.eps, false, "norm");
    SsmMixerOut m;
    {
      auto s = b.scope("mixer");
      m = mixer(b, p + "mixer.", x, in.past_conv.empty() ? ir::kNone : in.past_conv[size_t(i)],
                in.past_ssm.empty() ? ir::kNone : in.past_ssm[size_t(i)], pad_mask);
    }
    out.present_key.push_back(ir::kNone);
    out.present_value.push_back(ir::kNone);
    out.present_conv.push_back(m.conv_state);
    out.present_ssm.push_back(m.ssm_state);
    h = b.plus(h, m.out);
    b.graph().rename(h, fmt::format("/model/layers.{}/output", i));  // the name verify localises by
  }
  h = norm(b, ckpt, h, "backbone.norm_f", c.hidden_size, NormKind::Rms, c.eps, false, "norm_f");
  out.logits = lm_head(b, ckpt, h, embed, c.tie_word_embeddings, c.vocab_size, c.hidden_size);
  return out;
}

CacheGeometry ssm_cache_geometry(int64_t num_layers) {
  return {num_layers, 0, 0, std::vector<int64_t>(size_t(num_layers), 0)};
}

}  // namespace hfx::models
