// Zamba2: Transformers' Zamba2ForCausalLM (modeling_zamba2.py). A Mamba-2 backbone; the layers
// layers_block_type names "hybrid" first run one of num_mem_blocks *shared* transformer blocks
// (cycling over the hybrid layers) on [hidden, the original embeddings], project its output with the
// layer's own `linear`, and add that to the mamba layer's input (not to its residual):
//
//   ids ─ embed_tokens = e ─┬─ [hybrid] concat(h, e) ─ input_layernorm (2 hidden) ─ attention ─ pre_ff_layernorm ─ MLP ─ linear = t
//                           └─ h ─ (h + t) ─ input_layernorm ─ Mamba-2 mixer ─ + h ─ ... ─ final_layernorm ─ lm_head
//
// The shared block's attention reads 2 * hidden wide, heads of 2 * hidden / num_attention_heads,
// scores scaled by (head_dim / 2)^-0.5, rope only with use_mem_rope; its MLP is
// down(act(gate) * up) from one gate_up_proj. Each invocation (hybrid layer k in order) adds its own
// low-rank adapters: adapter k on gate_up_proj always, and on q, k and v with
// use_shared_attention_adapter. The block's weights are bound once, under the first hybrid layer
// using it, when Transformers ties them (tie_word_embeddings: Transformers 5.23 ties nothing
// otherwise, and then every hybrid layer reads its own saved copy).
//
// The mixer is models/mamba2_mixer.h's with Zamba2's fixed choices: conv biased whatever
// use_conv_bias says, the gated norm's eps 1e-5, dt clamped below at time_step_min. A hybrid layer
// carries past_conv.{i}, past_ssm.{i} and its own past_key_values.{i}.key|value (Transformers' cache
// holds both in layer i), a mamba layer the first two.
#pragma once

#include <memory>

#include "models/model.h"

namespace hfx::models {

std::unique_ptr<CausalLm> make_zamba2(const io::Checkpoint& ckpt);

}  // namespace hfx::models
