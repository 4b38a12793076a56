#include "models/registry.h"

#include <fmt/format.h>

#include "core/error.h"
#include "models/decoder.h"

namespace hfx::models {

namespace {

ModelEntry decoder_entry(std::string type, std::string hf_class, std::string notes, DecoderTraits traits) {
  auto cls = hf_class;
  return {std::move(type), std::move(hf_class), std::move(notes),
          [traits, cls](const io::Checkpoint& ckpt) { return make_decoder(ckpt, traits, cls); }};
}

}  // namespace

const std::vector<ModelEntry>& model_registry() {
  using W = DecoderTraits::Window;
  static const std::vector<ModelEntry> entries = {
      decoder_entry("llama", "LlamaForCausalLM", "the base decoder; attention_bias/mlp_bias flags", {}),
      decoder_entry("mistral", "MistralForCausalLM", "sliding_window on every layer",
                    {.window = W::AllLayers}),
      decoder_entry("qwen2", "Qwen2ForCausalLM", "q/k/v bias; sliding window per layer_types",
                    {.qkv_bias_always = true, .window = W::LayerTypes}),
      decoder_entry("qwen3", "Qwen3ForCausalLM", "q/k RMSNorm over head_dim; sliding window per layer_types",
                    {.qk_norm = true, .window = W::LayerTypes}),
  };
  return entries;
}

const ModelEntry& find_model(const std::string& model_type) {
  std::vector<std::string> known;
  for (const auto& e : model_registry()) {
    if (e.model_type == model_type) return e;
    known.push_back(e.model_type);
  }
  unsupported("model_type `{}` is not supported (supported: {})", model_type, fmt::join(known, ", "));
}

std::unique_ptr<CausalLm> load_causal_lm(const io::Checkpoint& ckpt) {
  const ModelEntry& e = find_model(ckpt.model_type());
  return with_context(ckpt.config().path.string(), [&] { return e.make(ckpt); });
}

}  // namespace hfx::models
