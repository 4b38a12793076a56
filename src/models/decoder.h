// The shared decoder: Transformers' LlamaForCausalLM (modeling_llama.py) and every family that is the
// same network with different table entries (Mistral's sliding window, Qwen2's q/k/v bias, Qwen3's
// q/k norm and explicit head_dim). Differences are DecoderTraits flags, never `if model_type`.
//
//   ids ─ Embedding ─┬─ RMSNorm ─ q,k,v Linear ─ (q/k RMSNorm) ─ rope ─ Attention ─ o Linear ─ + ─┐
//                    └──────────────────────────────────────────────────────────────────────────┘
//                    ┌─ RMSNorm ─ gate,up Linear ─ SwiGLU ─ down Linear ─ + ─ ... ─ RMSNorm ─ lm_head ─ logits
#pragma once

#include <memory>

#include "models/decoder_config.h"
#include "models/model.h"

namespace hfx::models {

std::unique_ptr<CausalLm> make_decoder(const io::Checkpoint& ckpt, const DecoderTraits& traits, std::string hf_class);

}  // namespace hfx::models
