// The shared decoder: Transformers' LlamaForCausalLM (modeling_llama.py) and every family that is the
// same network with different table entries (registry.cc's trait rows), for example Mistral's sliding
// window, Qwen2's q/k/v bias, Qwen3's q/k norm, Gemma's (1 + w) RMSNorm and scaled embeddings, Gemma 2's
// sandwich norms and soft-capping, Phi-3's fused projections and longrope, OLMo 2's post-norms,
// StableLM's parallel residual, Starcoder2's plain MLP, and the mixture-of-experts families (moe.cc).
// Differences are DecoderTraits flags, never `if model_type`.
//
//   ids ─ Embedding ─┬─ norm ─ q,k,v Linear ─ (q/k norm) ─ rope ─ Attention ─ o Linear ─ + ─┐
//                    └──────────────────────────────────────────────────────────────────────┘
//                    ┌─ norm ─ gate,up Linear ─ act(gate) * up ─ down Linear ─ + ─ ... ─ norm ─ lm_head ─ logits
#pragma once

#include <memory>

#include "models/decoder_config.h"
#include "models/model.h"

namespace hfx::models {

std::unique_ptr<CausalLm> make_decoder(const io::Checkpoint& ckpt, const DecoderTraits& traits, std::string hf_class);

}  // namespace hfx::models
