"""Tiny random checkpoints made with Transformers from configs (seeded), covering the features each
architecture has. Nothing is downloaded: weights are random, the structure is the real one.

Each case is (name, model_type, config overrides). `make(case, folder)` saves a checkpoint with
`save_pretrained` (safetensors) and returns the folder.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

# Base sizes: small enough for CI, large enough that GQA ratios, head_dim != hidden/heads and
# several layers are real.
BASE = dict(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    rms_norm_eps=1e-6,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)

LONGROPE = dict(rope_type="longrope", rope_theta=10000.0, partial_rotary_factor=0.5,
                short_factor=[1.0, 1.3, 1.9, 2.6], long_factor=[1.5, 3.0, 7.0, 11.0])
LONGROPE_FULL = dict(LONGROPE, partial_rotary_factor=1.0, short_factor=[1.0, 1.1, 1.3, 1.6, 1.9, 2.2, 2.6, 3.0],
                     long_factor=[1.5, 2.2, 3.0, 4.5, 7.0, 9.0, 11.0, 14.0])

CASES: dict[str, tuple[str, dict]] = {
    # llama: GQA 2, untied; then each rope type and the remaining flags
    "llama": ("llama", dict(tie_word_embeddings=False)),
    "llama-mha-tied": ("llama", dict(num_key_value_heads=4, tie_word_embeddings=True)),
    "llama-headdim-bias": ("llama", dict(head_dim=24, attention_bias=True, mlp_bias=True, num_key_value_heads=1)),
    "llama-rope-linear": ("llama", dict(rope_parameters=dict(rope_type="linear", factor=2.0, rope_theta=10000.0))),
    # max_position_embeddings below the prompt + decode length, so dynamic NTK really rescales
    "llama-rope-dynamic": ("llama", dict(max_position_embeddings=8,
                                        rope_parameters=dict(rope_type="dynamic", factor=2.0, rope_theta=10000.0))),
    "llama-rope-llama3": ("llama", dict(rope_parameters=dict(
        rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
        original_max_position_embeddings=16, rope_theta=500000.0))),
    "llama-rope-yarn": ("llama", dict(rope_parameters=dict(
        rope_type="yarn", factor=4.0, original_max_position_embeddings=16, rope_theta=10000.0))),
    # smollm3: layer 1 without rope (NoPE) and sliding (use_sliding_window: the NoPE layers), tied by default
    "smollm3": ("smollm3", dict(no_rope_layers=[1, 0], use_sliding_window=True, sliding_window=4)),
    # helium: interleaved (GPT-J style) rotary, q/k/v bias without o_proj's (Helium's o_proj is
    # hidden x hidden, so head_dim stays hidden / heads)
    "helium": ("helium", dict(head_dim=16, attention_bias=True)),
    # glm: fused gate_up_proj, q/k/v bias, partial (8 of 16) interleaved rotary
    "glm": ("glm", dict(head_dim=16)),
    # glm4: glm + sandwich norms; 32-dim heads (rotary 16 of 32: fused by the ort profile)
    "glm4": ("glm4", dict(head_dim=32, num_attention_heads=2, num_key_value_heads=1)),
    # cohere: bias-free LayerNorm, parallel layer, interleaved rotary, logit_scale, tied (the default)
    "cohere": ("cohere", dict(logit_scale=0.5)),
    # cohere2: cohere + a sliding layer with rope and a full one without
    "cohere2": ("cohere2", dict(sliding_window=4, layer_types=["sliding_attention", "full_attention"], logit_scale=0.25)),
    # arcee: non-gated up/down MLP with relu2, attention and MLP biases
    "arcee": ("arcee", dict(attention_bias=True, mlp_bias=True)),
    # nemotron: (1 + w) LayerNorm with bias, relu2 MLP, partial rotary 16 of 32 (fused by the ort profile)
    "nemotron": ("nemotron", dict(head_dim=32, num_attention_heads=2, num_key_value_heads=1)),
    # mixtral: 4 experts, top 2 (renormalised) on every layer
    "mixtral": ("mixtral", dict(num_local_experts=4, num_experts_per_tok=2)),
    # qwen3_moe: 4 experts, top 2 renormalised on layer 0; layer 1 dense (mlp_only_layers)
    "qwen3-moe": ("qwen3_moe", dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=48, norm_topk_prob=True,
                                    mlp_only_layers=[1], head_dim=16)),
    # qwen2_moe: top 2 of 4 experts plus the gated shared expert, q/k/v bias
    "qwen2-moe": ("qwen2_moe", dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=48,
                                    shared_expert_intermediate_size=80)),
    # qwen3_moe without renormalisation, top 3 of 4, every layer
    "qwen3-moe-raw": ("qwen3_moe", dict(num_experts=4, num_experts_per_tok=3, moe_intermediate_size=48,
                                        norm_topk_prob=False, head_dim=16)),
    # mistral: a sliding window shorter than the prompt
    "mistral-window": ("mistral", dict(sliding_window=4)),
    # ministral: the window on the layers layer_types names (a sliding one and a full one)
    # (Transformers' Ministral reads head_dim without a fallback: real configs set it)
    "ministral": ("ministral", dict(head_dim=16, sliding_window=4, layer_types=["sliding_attention", "full_attention"])),
    # qwen2: q/k/v bias, tied; and sliding-window layers chosen by layer_types
    "qwen2-tied": ("qwen2", dict(tie_word_embeddings=True)),
    "qwen2-window": ("qwen2", dict(use_sliding_window=True, sliding_window=3, max_window_layers=1)),
    # qwen3: q/k norm, explicit head_dim != hidden/heads
    "qwen3": ("qwen3", dict(head_dim=32, tie_word_embeddings=True)),
    "qwen3-gqa4": ("qwen3", dict(head_dim=16, num_attention_heads=8, num_key_value_heads=2)),
    # gemma: (1 + w) RMSNorm, GeGLU (tanh gelu), sqrt(hidden) embedding scale, tied, head_dim != hidden/heads
    "gemma": ("gemma", dict(head_dim=24)),
    # gemma2: sandwich norms, small soft-caps so tanh really bends, query_pre_attn_scalar != head_dim,
    # alternating sliding (window shorter than the prompt) / full layers
    "gemma2": ("gemma2", dict(head_dim=16, num_hidden_layers=3, sliding_window=4, query_pre_attn_scalar=24,
                              attn_logit_softcapping=2.0, final_logit_softcapping=5.0)),
    # gemma3: (1 + w) q/k norm, linear-scaled global rope and a local base for sliding layers, final soft-cap
    "gemma3": ("gemma3_text", dict(head_dim=16, num_hidden_layers=3, sliding_window=4, query_pre_attn_scalar=20,
                                   layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                                   final_logit_softcapping=5.0,
                                   rope_parameters={"full_attention": dict(rope_type="linear", factor=4.0, rope_theta=1e6),
                                                    "sliding_attention": dict(rope_type="default", rope_theta=1e4)})),
    # gpt2: learned positions, Conv1D weights, fused c_attn, gelu_new, tied; n_inner set (BASE's
    # intermediate_size is not a GPT-2 field); MHA, so num_key_value_heads (read by the tests) = heads.
    # n_positions covers the longest generation (prompt + 64 new tokens).
    "gpt2": ("gpt2", dict(num_key_value_heads=4, n_inner=80, max_position_embeddings=128)),
    "gpt2-untied-scaled": ("gpt2", dict(num_key_value_heads=4, max_position_embeddings=128, tie_word_embeddings=False,
                                        activation_function="gelu", scale_attn_by_inverse_layer_idx=True)),
    # gpt_bigcode (StarCoder 1, SantaCoder): multi-query attention (one kv head), tied; and the per-head
    # q|k|v layout without multi_query
    "gpt-bigcode": ("gpt_bigcode", dict(n_inner=80, max_position_embeddings=128, num_key_value_heads=1)),
    "gpt-bigcode-mha": ("gpt_bigcode", dict(n_inner=80, max_position_embeddings=128, multi_query=False,
                                            num_key_value_heads=4)),
    # phi3: fused qkv_proj / gate_up_proj, sliding window on every layer
    "phi3": ("phi3", dict(sliding_window=5)),
    # phi3 longrope with partial rotary: every step past the original context (long factors), and every
    # step within it (short factors). Crossing it mid-generation is PARITY_CASES' phi3-longrope-switch:
    # Transformers' Phi-3 generate() then re-encodes the whole sequence, which a decode loop must mirror.
    "phi3-longrope": ("phi3", dict(original_max_position_embeddings=4, rope_parameters=dict(LONGROPE))),
    "phi3-longrope-short": ("phi3", dict(original_max_position_embeddings=96, max_position_embeddings=128,
                                         rope_parameters=dict(LONGROPE))),
    # gpt_neox: parallel residual, partial rotary 0.25, biases; and the sequential variant
    "gpt-neox": ("gpt_neox", dict(num_key_value_heads=4)),
    "gpt-neox-sequential": ("gpt_neox", dict(num_key_value_heads=4, use_parallel_residual=False, hidden_act="gelu_new",
                                             rope_parameters=dict(rope_type="default", rope_theta=500.0,
                                                                  partial_rotary_factor=0.5))),
    # gpt_neox with partial rotary over 16 of 32 dims: the width ORT's GroupQueryAttention rotates
    # (cos/sin caches of a multiple of 8 columns), so the ort profile fuses it
    "gpt-neox-rotary16": ("gpt_neox", dict(num_attention_heads=2, num_key_value_heads=2,
                                           rope_parameters=dict(rope_type="default", rope_theta=10000.0,
                                                                partial_rotary_factor=0.5))),
    # seed_oss: q/k/v bias and o_proj bias from their own flags, head_dim != hidden/heads
    "seed-oss": ("seed_oss", dict(head_dim=32, attention_bias=True, attention_out_bias=True)),
    # exaone4: post-norms, q/k RMSNorm per head, a sliding layer with rope and a full one without (NoPE)
    "exaone4": ("exaone4", dict(sliding_window=4, layer_types=["sliding_attention", "full_attention"])),
    # olmo2: post-norms, q/k RMSNorm over the whole projection
    "olmo2": ("olmo2", dict()),
    # olmo3: OLMo 2 + a sliding layer (window shorter than the prompt) and a full one, each with its own
    # rope (linear-scaled for full attention, another base for sliding)
    "olmo3": ("olmo3", dict(sliding_window=4, layer_types=["sliding_attention", "full_attention"],
                            rope_parameters={"full_attention": dict(rope_type="linear", factor=2.0, rope_theta=10000.0),
                                             "sliding_attention": dict(rope_type="default", rope_theta=5000.0)})),
    # granite: every multiplier away from 1
    "granite": ("granite", dict(embedding_multiplier=6.0, residual_multiplier=0.3, attention_multiplier=0.09,
                                logits_scaling=3.0)),
    # stablelm: LayerNorm, partial rotary, q/k/v bias, per-head q/k LayerNorm; then the parallel residual
    "stablelm": ("stablelm", dict(use_qkv_bias=True, qk_layernorm=True)),
    "stablelm-parallel": ("stablelm", dict(use_parallel_residual=True, partial_rotary_factor=0.5)),
    # stablelm with partial rotary over 16 of 32 dims (StableLM 2's width), per-head q/k LayerNorm: fused
    # by the ort profile
    "stablelm-rotary16": ("stablelm", dict(num_attention_heads=2, num_key_value_heads=2, use_qkv_bias=True,
                                           qk_layernorm=True, partial_rotary_factor=0.5)),
    # starcoder2: biased LayerNorm, c_fc/c_proj MLP, use_bias, sliding window
    "starcoder2": ("starcoder2", dict(sliding_window=5)),
    # phi (Phi-1/1.5/2): biased LayerNorm, attention and fc1/fc2 MLP in parallel on one norm, partial
    # rotary 0.5 (8 of 16 dims: the ort profile falls back), biases everywhere including lm_head, GQA 2
    "phi": ("phi", dict()),
    # phi over 32-dim heads (rotary 16 of 32: fused by the ort profile), tied embedding + lm_head bias
    "phi-rotary16-tied": ("phi", dict(num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=True)),
}


# Checkpoints for forward-parity tests only (tests/oracle/test_families_*.py), not in the generation matrix.
PARITY_CASES: dict[str, tuple[str, dict]] = {
    # the prompt (10 tokens) is within the original context (11), decode steps cross it: the step that
    # reaches position 11 switches from the short to the long factors, the cached keys keep theirs
    "phi3-longrope-switch": ("phi3", dict(original_max_position_embeddings=11, rope_parameters=dict(LONGROPE))),
    # longrope over whole 16-dim heads (8 factors: cos/sin caches 8 wide, what GroupQueryAttention's
    # rotary takes; Phi-3's own heads are whole too): the ort profile's long/short cache switch, past the
    # original context from the prompt on, and crossing it mid-decode
    "phi3-longrope-full": ("phi3", dict(original_max_position_embeddings=4, rope_parameters=dict(LONGROPE_FULL))),
    "phi3-longrope-full-switch": ("phi3", dict(original_max_position_embeddings=11,
                                               rope_parameters=dict(LONGROPE_FULL))),
}

# Hybrids: per-layer state beyond the key/value cache, with their own parity test
# (test_hybrid_lfm2.py, test_ssm_mamba2.py); kept out of CASES, whose tests thread a key/value cache only.
HYBRID_CASES: dict[str, tuple[str, dict]] = {
    # conv layer first (the state ports do not start with a key), attention in the middle, kernel 3;
    # Lfm2MLP's auto-adjusted feed-forward size (int(2 * 96 / 3) = 64, rounded up to block_multiple_of)
    "lfm2": ("lfm2", dict(num_hidden_layers=4, layer_types=["conv", "full_attention", "conv", "full_attention"],
                          conv_L_cache=3, norm_eps=1e-5, block_multiple_of=32)),
    # conv biases, a longer kernel than the decode steps, untied head, the feed-forward size as given
    "lfm2-bias-k4": ("lfm2", dict(num_hidden_layers=3, layer_types=["full_attention", "conv", "conv"],
                                  conv_L_cache=4, conv_bias=True, block_auto_adjust_ff_dim=False,
                                  tie_word_embeddings=False, norm_eps=1e-5)),
    # Mamba-2 (test_ssm_mamba2.py): chunk 4 (the 10-token prompt spans 3 chunks, the last padded),
    # 2 groups over 8 heads, conv biases, kernel 4 (longer than the 3 decode steps), untied head
    "mamba2": ("mamba2", dict(num_heads=8, head_dim=16, expand=2, state_size=16, n_groups=2, conv_kernel=4,
                              chunk_size=4, layer_norm_epsilon=1e-5)),
    # one group, biased projections, tied head, a time_step_limit that clamps, kernel 2
    "mamba2-g1-tied": ("mamba2", dict(num_heads=4, head_dim=32, expand=2, state_size=8, n_groups=1, conv_kernel=2,
                                      chunk_size=3, use_bias=True, tie_word_embeddings=True,
                                      time_step_limit=(0.2, 1.0), layer_norm_epsilon=1e-5)),
    # Granite 4.0-H dense: mamba first, attention in the middle (rope), every multiplier away from 1,
    # chunk 4, 2 groups
    "granitemoehybrid": ("granitemoehybrid", dict(
        num_hidden_layers=3, layer_types=["linear_attention", "full_attention", "linear_attention"],
        num_local_experts=0, shared_intermediate_size=96, position_embedding_type="rope",
        embedding_multiplier=2.0, residual_multiplier=0.5, attention_multiplier=0.2, logits_scaling=4.0,
        mamba_n_heads=8, mamba_d_head=16, mamba_d_state=16, mamba_n_groups=2, mamba_d_conv=4, mamba_chunk_size=4,
        rms_norm_eps=1e-5)),
    # no rope, attention first, biased attention and mamba projections, no conv bias, one group, tied
    "granitemoehybrid-nope-tied": ("granitemoehybrid", dict(
        num_hidden_layers=3, layer_types=["full_attention", "linear_attention", "linear_attention"],
        num_local_experts=0, shared_intermediate_size=48, position_embedding_type=None, attention_bias=True,
        mamba_proj_bias=True, mamba_conv_bias=False, mamba_n_heads=4, mamba_d_head="auto", mamba_d_state=8,
        mamba_n_groups=1, mamba_d_conv=3, mamba_chunk_size=3, tie_word_embeddings=True, attention_multiplier=0.25,
        rms_norm_eps=1e-5)),
    # Granite 4.0-H's sparse MoE (GraniteMoeHybridMoE): 2 of 4 experts (softmax over the top-k logits)
    # of intermediate_size 32 beside the shared_mlp (96) on every layer; attention first with rope, chunk 4
    "granitemoehybrid-moe": ("granitemoehybrid", dict(
        num_hidden_layers=3, layer_types=["full_attention", "linear_attention", "linear_attention"],
        num_local_experts=4, num_experts_per_tok=2, intermediate_size=32, shared_intermediate_size=96,
        position_embedding_type="rope", residual_multiplier=0.5, attention_multiplier=0.2, logits_scaling=2.0,
        mamba_n_heads=8, mamba_d_head=16, mamba_d_state=16, mamba_n_groups=2, mamba_d_conv=4, mamba_chunk_size=4,
        rms_norm_eps=1e-5)),
    # Bamba: attention in the middle (partial rotary 0.5 by default), a Llama MLP, chunk 4, 2 groups
    "bamba": ("bamba", dict(num_hidden_layers=3, attn_layer_indices=[1], mamba_n_heads=8, mamba_d_head=16,
                            mamba_d_state=16, mamba_n_groups=2, mamba_d_conv=4, mamba_chunk_size=4,
                            rms_norm_eps=1e-5)),
    # attention first and last, full rotary, biased MLP and attention, tied, one group
    "bamba-rotary-tied": ("bamba", dict(num_hidden_layers=3, attn_layer_indices=[0, 2], mamba_n_heads=4,
                                        mamba_d_head="auto", mamba_d_state=8, mamba_n_groups=1, mamba_d_conv=3,
                                        mamba_chunk_size=3, mlp_bias=True, attention_bias=True,
                                        tie_word_embeddings=True, rope_parameters=dict(rope_type="default",
                                        rope_theta=500.0, partial_rotary_factor=1.0), rms_norm_eps=1e-5)),
    # Nemotron-H: one block per layer (mamba, mlp, attention, mamba, mlp: attention in the middle, an
    # MLP layer between), attention head_dim 24 (not hidden / heads) with no rope, a relu2 up/down MLP,
    # chunk 4, 2 groups, kernel 4
    "nemotron_h": ("nemotron_h", dict(
        layers_block_type=["linear_attention", "mlp", "full_attention", "linear_attention", "mlp"], head_dim=24,
        mamba_num_heads=8, mamba_head_dim=16, ssm_state_size=16, n_groups=2, conv_kernel=4, chunk_size=4,
        layer_norm_epsilon=1e-5)),
    # an MLP layer first, one kv head; biased mamba projections and MLP, no conv bias, one group, kernel 3,
    # chunk 3, mamba wider than 2 * hidden (6 x 32: NemotronH reads no expand), a time_step_min that
    # clamps; tie_word_embeddings and attention_bias, both of which NemotronH ignores (its lm_head and
    # attention projections are its own, unbiased)
    "nemotron_h-bias-tied": ("nemotron_h", dict(
        layers_block_type=["mlp", "linear_attention", "full_attention", "linear_attention"], num_key_value_heads=1,
        head_dim=16, mamba_num_heads=6, mamba_head_dim=32, ssm_state_size=8, n_groups=1, conv_kernel=3,
        chunk_size=3, use_bias=True, use_conv_bias=False, mlp_bias=True, time_step_min=0.5,
        tie_word_embeddings=True, attention_bias=True, layer_norm_epsilon=1e-5)),
    # Nemotron 3 Nano's MoE layers (first and last) around a mamba and an attention layer: 3 of 6 un-gated
    # relu2 experts behind the sigmoid router (its score-correction bias randomised in make()), a latent
    # projection (32 of 64), routed_scaling_factor 2.5, biased shared expert and latent projections
    "nemotron_h-moe-latent": ("nemotron_h", dict(
        layers_block_type=["moe", "linear_attention", "full_attention", "moe"], head_dim=16, mamba_num_heads=8,
        mamba_head_dim=16, ssm_state_size=16, n_groups=2, conv_kernel=4, chunk_size=4, n_routed_experts=6,
        num_experts_per_tok=3, moe_intermediate_size=32, moe_shared_expert_intermediate_size=64,
        moe_latent_size=32, routed_scaling_factor=2.5, mlp_bias=True, layer_norm_epsilon=1e-5)),
    # 2 of 4 experts reading hidden directly (no latent), weights not normalized (norm_topk_prob false),
    # beside an MLP layer
    "nemotron_h-moe": ("nemotron_h", dict(
        layers_block_type=["linear_attention", "moe", "mlp", "full_attention", "moe"], head_dim=16,
        mamba_num_heads=8, mamba_head_dim=16, ssm_state_size=16, n_groups=2, conv_kernel=4, chunk_size=4,
        n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, moe_shared_expert_intermediate_size=40,
        norm_topk_prob=False, layer_norm_epsilon=1e-5)),
    # group-limited routing (NemotronHTopkRouter, DeepSeek-V3's): 3 of 8 experts chosen within the 2 of
    # 4 groups (2 experts each) whose two best biased scores sum highest; norm_topk_prob, scaling 1.5.
    # The group limit changes the choice: on the parity tests' decode feeds, 31 of the 52 tokens
    # the two MoE layers route (prompt and steps) pick another set than top-3 over all 8 (counted by
    # test_ssm_hybrids.py's test_nemotron_h_group_limit_changes_the_choice)
    "nemotron_h-moe-groups": ("nemotron_h", dict(
        layers_block_type=["moe", "linear_attention", "full_attention", "moe"], head_dim=16, mamba_num_heads=8,
        mamba_head_dim=16, ssm_state_size=16, n_groups=2, conv_kernel=4, chunk_size=4, n_routed_experts=8,
        num_experts_per_tok=3, n_group=4, topk_group=2, moe_intermediate_size=16,
        moe_shared_expert_intermediate_size=32, routed_scaling_factor=1.5, layer_norm_epsilon=1e-5)),
    # Falcon-H1: a Mamba-2 mixer and rope attention in parallel in every layer, then a SwiGLU MLP. The
    # mixer's gated RMSNorm before the gate (mamba_norm_before_gate, the default), mamba_d_ssm 96 (not
    # mamba_expand * hidden = 128: 6 heads x 16), 2 groups, chunk 4; tied; muP multipliers far from 1 as
    # in the released configs (Falcon-H1-0.5B's, its rope_theta 1e11 too; attention_in changed from its 1.0)
    "falcon_h1": ("falcon_h1", dict(
        mamba_rms_norm=True, mamba_d_ssm=96, mamba_n_heads=6, mamba_d_state=16, mamba_n_groups=2, mamba_d_conv=4,
        mamba_chunk_size=4, tie_word_embeddings=True, rope_parameters=dict(rope_type="default", rope_theta=1e11),
        embedding_multiplier=5.656854249492381, lm_head_multiplier=0.0390625, key_multiplier=0.390625,
        attention_in_multiplier=0.75, attention_out_multiplier=0.9375, ssm_in_multiplier=1.25,
        ssm_out_multiplier=0.23570226039551587, ssm_multipliers=[0.3535533905932738, 0.25, 0.3535533905932738, 0.5,
                                                                 0.3535533905932738],
        mlp_multipliers=[0.8838834764831844, 0.5859375], rms_norm_eps=1e-5)),
    # no mixer norm (y * silu(gate)); mamba_d_ssm null (mamba_expand 2 * hidden: 4 heads x 32), mamba_d_head
    # given, one group, kernel 3, chunk 3, a time_step_limit that clamps; every projection biased (mamba
    # in_proj, out_proj by projectors_bias, attention, MLP), no conv bias; attention head_dim 24 (not
    # hidden / heads), one kv head, 3 layers, untied; other multipliers
    "falcon_h1-nonorm-bias": ("falcon_h1", dict(
        num_hidden_layers=3, mamba_rms_norm=False, mamba_d_ssm=None, mamba_expand=2, mamba_n_heads=4, mamba_d_head=32,
        mamba_d_state=8, mamba_n_groups=1, mamba_d_conv=3, mamba_chunk_size=3, time_step_limit=(0.05, 2.0),
        mamba_proj_bias=True, projectors_bias=True, mamba_conv_bias=False, attention_bias=True, mlp_bias=True,
        head_dim=24, num_key_value_heads=1, tie_word_embeddings=False, embedding_multiplier=3.0,
        lm_head_multiplier=0.125, key_multiplier=0.5, attention_in_multiplier=1.5, attention_out_multiplier=0.625,
        ssm_in_multiplier=0.8, ssm_out_multiplier=0.4, ssm_multipliers=[0.5, 1.5, 0.25, 2.0, 0.75],
        mlp_multipliers=[1.25, 0.375], rms_norm_eps=1e-5)),
    # Qwen3.5 text (test_gated_deltanet.py): delta-net layers first and last, gated attention in the
    # middle (partial rotary 0.25 of head_dim 16), 2 key heads over 4 value heads (key head dim 16, value
    # head dim 8), kernel 4 (longer than the 3 decode steps); positions for the 300-token prompt, which
    # spans 5 of the delta rule's chunks of 64 (the last padded)
    "qwen3_5_text": ("qwen3_5_text", dict(
        num_hidden_layers=3, layer_types=["linear_attention", "full_attention", "linear_attention"], head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=8,
        linear_conv_kernel_dim=4, max_position_embeddings=512, rms_norm_eps=1e-5)),
    # Qwen3-Next (test_gated_deltanet.py): qwen3_5_text's geometry with the fused delta-net projections;
    # sparse-MoE MLPs (top 2 of 4 experts, renormalised, plus the gated shared expert) on the delta-net
    # layer 0 and the attention layer 1, a dense MLP on layer 2 (mlp_only_layers)
    "qwen3_next": ("qwen3_next", dict(
        num_hidden_layers=3, layer_types=["linear_attention", "full_attention", "linear_attention"], head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=8,
        linear_conv_kernel_dim=4, num_experts=4, num_experts_per_tok=2, norm_topk_prob=True, moe_intermediate_size=48,
        shared_expert_intermediate_size=80, decoder_sparse_step=1, mlp_only_layers=[2], max_position_embeddings=512,
        rms_norm_eps=1e-5)),
    # Qwen3.5-MoE text (test_gated_deltanet.py): qwen3_5_text's geometry (split delta-net projections)
    # with Qwen3_5MoeSparseMoeBlock on every layer: top 2 of 4 experts of 32 (always renormalised), plus
    # the sigmoid-gated shared expert of 96 (sizes OpenVINO's int4 blocks of 32 divide)
    "qwen3_5_moe_text": ("qwen3_5_moe_text", dict(
        num_hidden_layers=3, layer_types=["linear_attention", "full_attention", "linear_attention"], head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=8,
        linear_conv_kernel_dim=4, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
        shared_expert_intermediate_size=96, max_position_embeddings=512, rms_norm_eps=1e-5)),
    # Mamba-1 (test_ssm_hybrids.py): the scan's chunks are floor(sqrt(s)) (the 10-token prompt spans 4 of
    # 3, the last padded); conv biases, kernel 4 (longer than the 3 decode steps), time_step_rank "auto"
    # (ceil(64 / 16) = 4), untied head
    "mamba": ("mamba", dict(state_size=16, expand=2, conv_kernel=4, time_step_rank="auto", use_conv_bias=True,
                            use_bias=False, tie_word_embeddings=False, layer_norm_epsilon=1e-5)),
    # biased in_proj / out_proj, no conv bias, an explicit time_step_rank, kernel 2, tied head
    "mamba-bias-tied": ("mamba", dict(num_hidden_layers=3, state_size=8, expand=2, conv_kernel=2, time_step_rank=6,
                                      use_conv_bias=False, use_bias=True, tie_word_embeddings=True,
                                      layer_norm_epsilon=1e-5)),
    # Jamba (test_ssm_hybrids.py): Mamba-1 mixers with weighted dt/B/C norms around an attention layer
    # without positions (layer 1 of 3: attn period 3, offset 1), sparse MoE (4 experts, top 2, not
    # renormalised) on layers 0 and 2 and a Llama MLP on 1; kernel 4, time_step_rank auto (4), untied
    "jamba": ("jamba", dict(num_hidden_layers=3, attn_layer_period=3, attn_layer_offset=1, expert_layer_period=2,
                            expert_layer_offset=0, num_experts=4, num_experts_per_tok=2, mamba_d_state=16,
                            mamba_d_conv=4, mamba_expand=2, mamba_dt_rank="auto", use_mamba_kernels=False,
                            rms_norm_eps=1e-5)),
    # attention first, experts on the attention layer (top 1), biased mamba projections, no conv bias,
    # an explicit dt rank, kernel 3, tied head
    "jamba-moe-attn-tied": ("jamba", dict(num_hidden_layers=3, attn_layer_period=3, attn_layer_offset=0,
                                          expert_layer_period=3, expert_layer_offset=0, num_experts=3,
                                          num_experts_per_tok=1, mamba_d_state=8, mamba_d_conv=3, mamba_expand=2,
                                          mamba_dt_rank=6, mamba_conv_bias=False, mamba_proj_bias=True,
                                          tie_word_embeddings=True, use_mamba_kernels=False, rms_norm_eps=1e-5)),
    # Zamba2 (test_ssm_hybrids.py): Mamba-2 layers, three of five preceded by a shared transformer
    # block over [hidden, embeddings]; two blocks alternating (layers 1 and 4 run block 0, bound once,
    # layer 3 block 1), each invocation with its own q/k/v and MLP LoRA adapters (rank 8), rope, biased
    # mamba projections and MLP, 2 groups, chunk 4, tied head (Transformers ties the blocks only then)
    "zamba2": ("zamba2", dict(num_hidden_layers=5, layers_block_type=["mamba", "hybrid", "mamba", "hybrid", "hybrid"],
                              num_mem_blocks=2, use_shared_attention_adapter=True, adapter_rank=8, use_mem_rope=True,
                              num_key_value_heads=4, n_mamba_heads=8, mamba_d_state=16, mamba_ngroups=2,
                              mamba_d_conv=4, mamba_expand=2, chunk_size=4, add_bias_linear=True,
                              tie_word_embeddings=True, rms_norm_eps=1e-5)),
    # one block id for every hybrid layer, but an untied head, so Transformers 5.23 ties nothing: each
    # hybrid layer (0 and 2) runs its own saved copy; no q/k/v adapters (the MLP's stay), no rope, GQA
    # (4 heads, 2 kv heads), 1 group, kernel 3, chunk 3, use_conv_bias false (Zamba2's conv is biased
    # whatever it says), time_step_min 0.5 clamping dt, silu MLP
    "zamba2-untied": ("zamba2", dict(num_hidden_layers=3, layers_block_type=["hybrid", "mamba", "hybrid"],
                                     num_mem_blocks=1, use_shared_attention_adapter=False, adapter_rank=4,
                                     use_mem_rope=False, num_key_value_heads=2, n_mamba_heads=4, mamba_d_state=8,
                                     mamba_ngroups=1, mamba_d_conv=3, mamba_expand=2, chunk_size=3,
                                     use_conv_bias=False, time_step_min=0.5, hidden_act="silu",
                                     tie_word_embeddings=False, rms_norm_eps=1e-5)),
    # FalconMamba: weightless RMS norms on dt, B and C (mixer_rms_eps), untied head, conv biases
    "falcon_mamba": ("falcon_mamba", dict(state_size=16, expand=2, conv_kernel=4, time_step_rank="auto",
                                          tie_word_embeddings=False, mixer_rms_eps=1e-6, layer_norm_epsilon=1e-5)),
    # a coarser mixer eps, biased projections, no conv bias, kernel 3, tied head
    "falcon_mamba-bias-tied": ("falcon_mamba", dict(num_hidden_layers=3, state_size=8, expand=2, conv_kernel=3,
                                                    time_step_rank=5, use_conv_bias=False, use_bias=True,
                                                    tie_word_embeddings=True, mixer_rms_eps=1e-3,
                                                    layer_norm_epsilon=1e-5)),
}


# Weights scaled after the randomisation, per case. qwen3_5_text: over its 330-token prompt Transformers'
# own fp32 logits (up to 10 wide) are 1.4e-4 from its fp64 ones and the attention layer's values (up to
# 8.9) 6.5e-5, too near the 1e-4 gate for two runtimes' roundings however exact; with lm_head a quarter
# as large (logits up to 2.4) and v_proj half (values up to 4.5) they are 3.5e-5 and ~3e-5 apart.
# qwen3_next likewise: unscaled, its fp32 logits (up to 8) are 1.4e-4 from fp64 at the real positions;
# scaled, 1.2e-5 (attention values 9.7e-6). Its `a` rows share in_proj_ba with `b`, so the quarter
# scales both (beta = sigmoid(b) then stays nearer 0.5, still different per head and position). Its
# routers' closest call between the second and third expert is 9e-6 apart in probability (fp64) at a
# real position, above what fp32 rounds the router's probabilities by here. qwen3_5_moe_text is scaled
# as qwen3_5_text, and its routers doubled: their closest call between the 2nd and 3rd expert at a real
# position is then 3.3e-3 apart in logits (7.8e-5 at one position unscaled, near what hfx's and
# Transformers' fp32 hidden states differ by).
WEIGHT_SCALES: dict[str, dict[str, float]] = {
    "qwen3_5_text": {"lm_head.weight": 0.25, "model.layers.1.self_attn.v_proj.weight": 0.5,
                     **{f"model.layers.{i}.linear_attn.in_proj_a.weight": 0.25 for i in (0, 2)}},
    "qwen3_next": {"lm_head.weight": 0.25, "model.layers.1.self_attn.v_proj.weight": 0.5,
                   **{f"model.layers.{i}.linear_attn.in_proj_ba.weight": 0.25 for i in (0, 2)}},
    "qwen3_5_moe_text": {"lm_head.weight": 0.25, "model.layers.1.self_attn.v_proj.weight": 0.5,
                         **{f"model.layers.{i}.linear_attn.in_proj_a.weight": 0.25 for i in (0, 2)},
                         **{f"model.layers.{i}.mlp.gate.weight": 2.0 for i in (0, 1, 2)}},
}
# Weights scaled by name pattern (each distinct parameter once: a tied shared block is scaled once), per case.
# Zamba2: the shared block reads a 128-wide [hidden, embeddings], so with every weight ~N(0, 0.25) its q and k
# (plus their adapters) make scores so sharp and its gate_up_proj and the mixers' in_proj values so large that
# Transformers' own fp32 logits were 4.6e-3 from its fp64 ones; scaled, 1.7e-5 (zamba2-untied: 2.5e-5).
ZAMBA2_SCALES = [(r"self_attn\.q_proj\.weight$", 0.25), (r"self_attn\.k_proj\.weight$", 0.5),
                 (r"feed_forward\.gate_up_proj\.(weight|bias)$", 0.25), (r"adapter_list\.\d+\.1\.weight$", 0.25),
                 (r"mamba\.in_proj\.weight$", 0.5)]
WEIGHT_SCALE_PATTERNS: dict[str, list[tuple[str, float]]] = {"zamba2": ZAMBA2_SCALES, "zamba2-untied": ZAMBA2_SCALES}
# Weights shifted after the scaling, per case. qwen3_5_text: the delta-net's decay exp(g) per position,
# g = -exp(A_log) * softplus(a + dt_bias), is ~0.5 with A_log and dt_bias near 0, which forgets a
# chunk of 64 positions entirely (exp(-32)), so no state would cross more than one chunk boundary and
# the chunk scan's longer compositions would go untested; with A ~ exp(-5) and dt_bias ~ -1 a chunk
# keeps most of its start state (g ~ -2e-3 per position). Decays this near 1 also make the chunk's UT
# system hard to invert: without the refinement step in models/delta_rule.cc hfx's inverse rounded
# 1.1e-4 from Transformers' forward substitution (OpenVINO), with it 1.1e-5 (Transformers' own fp32 is
# 7e-6 from its fp64). qwen3_next's and qwen3_5_moe_text's delta-net layers are shifted the same way.
WEIGHT_SHIFTS: dict[str, dict[str, float]] = {
    "qwen3_5_text": {**{f"model.layers.{i}.linear_attn.A_log": -5.0 for i in (0, 2)},
                     **{f"model.layers.{i}.linear_attn.dt_bias": -1.0 for i in (0, 2)}},
    "qwen3_next": {**{f"model.layers.{i}.linear_attn.A_log": -5.0 for i in (0, 2)},
                   **{f"model.layers.{i}.linear_attn.dt_bias": -1.0 for i in (0, 2)}},
    "qwen3_5_moe_text": {**{f"model.layers.{i}.linear_attn.A_log": -5.0 for i in (0, 2)},
                         **{f"model.layers.{i}.linear_attn.dt_bias": -1.0 for i in (0, 2)}},
}


# Encoder-decoders (test_seq2seq_t5.py): the full config (BASE's decoder-only keys are not theirs), saved
# by AutoModelForSeq2SeqLM; kept out of CASES, whose tests run one causal decoder graph.
T5_BASE = dict(vocab_size=128, d_model=64, d_kv=16, num_heads=4, d_ff=96, decoder_start_token_id=0, pad_token_id=0,
               eos_token_id=1)
# The BART family (bart, mbart, marian): 4 heads of 16, 2 + 2 layers, positions for a 12-token prompt and
# 1 + 64 decoded tokens. forced_eos_token_id (2 in BartConfig and MBartConfig, 0 in MarianConfig) is unset:
# generate() would force EOS at max_length, a logits processor hfx's greedy loop does not run.
BART_BASE = dict(vocab_size=128, d_model=64, encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=96,
                 decoder_ffn_dim=96, encoder_layers=2, decoder_layers=2, max_position_embeddings=128, pad_token_id=1,
                 bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=None)
WHISPER_BASE = dict(vocab_size=128, num_mel_bins=16, d_model=64, encoder_layers=2, decoder_layers=2,
                    encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=96, decoder_ffn_dim=96,
                    max_source_positions=12, max_target_positions=96, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                    decoder_start_token_id=3, begin_suppress_tokens=None, suppress_tokens=None)
SPEECH_TYPES = {"whisper"}
SEQ2SEQ_CASES: dict[str, tuple[str, dict]] = {
    # T5 1.0's relu MLP with T5 1.1's untied lm_head (no d_model**-0.5 on the decoder output), a decoder
    # deeper than the encoder, 8 buckets up to distance 20: a 12-token prompt reaches the log-spaced
    # buckets (from distance 2 each way in the encoder; from 4 in the causal decoder) and the last
    # bucket (from distance 7 in the encoder), 64 generated tokens pass max_distance
    "t5": ("t5", dict(T5_BASE, feed_forward_proj="relu", tie_word_embeddings=False, num_layers=2, num_decoder_layers=3,
                      relative_attention_num_buckets=8, relative_attention_max_distance=20)),
    # gated-gelu (gelu_new) MLP, tied: the decoder output scaled by d_model**-0.5 before the shared lm_head
    "t5-gated-tied": ("t5", dict(T5_BASE, feed_forward_proj="gated-gelu", tie_word_embeddings=True, num_layers=2,
                                 num_decoder_layers=2, relative_attention_num_buckets=16,
                                 relative_attention_max_distance=32, layer_norm_epsilon=1e-5)),
    # mT5: T5 1.1's layers under their own model_type; untied, never scaled
    "mt5": ("mt5", dict(T5_BASE, feed_forward_proj="gated-gelu", tie_word_embeddings=False, num_layers=2,
                        num_decoder_layers=2)),
    # "t5" as Transformers 5 itself saves an untied T5 (a fine-tune saved today): config.json says
    # tie_word_embeddings true (T5Config forces it) with scale_decoder_outputs false, and the checkpoint
    # has its own lm_head.weight, which from_pretrained keeps because it differs from shared.weight
    "t5-v5-config": ("t5", dict(T5_BASE, feed_forward_proj="relu", tie_word_embeddings=False, num_layers=2,
                                num_decoder_layers=3, relative_attention_num_buckets=8,
                                relative_attention_max_distance=20)),
    # BART: post-norm LayerNorm layers, gelu, learned positions (offset 2), layernorm_embedding, no embedding
    # scale; untied (Transformers 5 then saves shared, each stack's embed_tokens and lm_head, all distinct,
    # and reads each stack's own), a decoder deeper than the encoder with fewer (wider) heads and a
    # narrower feed-forward. BART's special ids (bos 0, pad 1, eos = decoder start 2)
    "bart": ("bart", dict(BART_BASE, tie_word_embeddings=False, encoder_layers=2, decoder_layers=3,
                          encoder_attention_heads=8, decoder_ffn_dim=80)),
    # tied head and embeddings (shared.weight only), embeddings scaled by sqrt(d_model), relu
    "bart-tied-scaled": ("bart", dict(BART_BASE, scale_embedding=True, activation_function="relu")),
    # mBART: pre-norm layers with a final layer_norm per stack, scaled embeddings, tied; no
    # decoder_start_token_id (MBartConfig's default): generate() starts from bos_token_id
    "mbart": ("mbart", dict(BART_BASE, scale_embedding=True, decoder_start_token_id=None)),
    # Marian: sinusoidal positions (computed; save_pretrained drops the table), no layernorm_embedding,
    # swish (opus-mt's), scaled embeddings, tied; opus-mt's special ids (pad = decoder start = the last
    # id, eos 0, no bos)
    "marian": ("marian", dict(BART_BASE, activation_function="swish", scale_embedding=True, pad_token_id=127,
                              decoder_start_token_id=127, eos_token_id=0, bos_token_id=None)),
    # Marian with separate vocabularies (share_encoder_decoder_embeddings false): the encoder's 128 ids,
    # the decoder's and the head's 100 (decoder.embed_tokens, the head tied to it), gelu
    "marian-vocabs": ("marian", dict(BART_BASE, share_encoder_decoder_embeddings=False, decoder_vocab_size=100,
                                     scale_embedding=True, pad_token_id=99, decoder_start_token_id=99,
                                     eos_token_id=0, bos_token_id=None)),
    # Whisper: 16 mel bins x 24 frames (max_source_positions 12, the one length its encoder takes),
    # conv stem, pre-norm, no k_proj bias, tied proj_out; decoder positions for a prompt + 64 tokens.
    # No begin_suppress_tokens (WhisperConfig's default (220, 50256) is outside this vocabulary)
    "whisper": ("whisper", dict(WHISPER_BASE)),
    # deeper decoder than encoder, wider heads in the encoder, relu, a different start token
    "whisper-shapes": ("whisper", dict(WHISPER_BASE, encoder_layers=1, decoder_layers=3, encoder_attention_heads=8,
                                       decoder_attention_heads=2, activation_function="relu", num_mel_bins=20,
                                       max_source_positions=10, decoder_start_token_id=5)),
    # For `hfx generate --audio`: whisper-tiny's input (80 mel bins x 3000 frames, the 30 s window its
    # feature extractor makes; preprocessor_config.json saved beside it) into the tiny network
    "whisper-audio": ("whisper", dict(WHISPER_BASE, num_mel_bins=80, max_source_positions=1500)),
    # whisper-shapes' geometry (a deeper decoder, other head counts, relu, another start token) at the
    # 80 x 3000 input onnxruntime-genai feeds (its runtime sizes its caches by the decoder's heads)
    "whisper-audio-shapes": ("whisper", dict(WHISPER_BASE, encoder_layers=1, decoder_layers=3, encoder_attention_heads=8,
                                             decoder_attention_heads=2, activation_function="relu", num_mel_bins=80,
                                             max_source_positions=1500, decoder_start_token_id=5)),
    # ... with a multilingual generation_config.json (WHISPER_GENERATION): language and task tokens,
    # <|notimestamps|>, suppressed tokens and tokens suppressed at the first position
    "whisper-multilingual": ("whisper", dict(WHISPER_BASE, num_mel_bins=80, max_source_positions=1500)),
}
# generation_config.json fields a case adds (Whisper's prompt tokens; ids of this tiny vocabulary)
WHISPER_GENERATION = {"whisper-multilingual": dict(
    lang_to_id={"<|en|>": 120, "<|de|>": 121}, task_to_id={"translate": 122, "transcribe": 123},
    no_timestamps_token_id=124, is_multilingual=True, suppress_tokens=[5, 7, 9], begin_suppress_tokens=[2, 11])}
# The seq2seq cases whose config.json is left as Transformers 5 writes it; the others are rewritten the
# way the hub's T5 / flan-t5 / mT5 configs read (see make()).
SEQ2SEQ_AS_SAVED = {"t5-v5-config"}


def make(case: str, folder: str | os.PathLike, dtype: str = "float32", seed: int = 0) -> Path:
    """Saves the tiny checkpoint for `case` into `folder` (created) and returns it."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoModelForSpeechSeq2Seq

    seq2seq = case in SEQ2SEQ_CASES
    model_type, overrides = {**CASES, **PARITY_CASES, **HYBRID_CASES, **SEQ2SEQ_CASES}[case]
    cfg = {} if seq2seq else dict(BASE)
    cfg.update(overrides)
    config = AutoConfig.for_model(model_type, **cfg)
    torch.manual_seed(seed)
    model = (AutoModelForSpeechSeq2Seq if model_type in SPEECH_TYPES else AutoModelForSeq2SeqLM if seq2seq
             else AutoModelForCausalLM).from_config(config, torch_dtype=getattr(torch, dtype))
    untied = seq2seq and cfg.get("tie_word_embeddings") is False
    if untied:
        # Transformers 5's T5Config / MT5Config force tie_word_embeddings true, so from_config shares
        # lm_head with the embedding whatever the config says: give lm_head its own weight (randomised
        # below, saved as lm_head.weight) like a T5 1.1 / flan-t5 / mT5 checkpoint's
        # (BART's from_config unties them itself; this is then a no-op before the randomisation)
        model.lm_head.weight = torch.nn.Parameter(model.get_input_embeddings().weight.detach().clone())
        model.all_tied_weights_keys.pop("lm_head.weight", None)
    # from_config leaves some weights at their init constants (norms = 1, biases = 0): randomise
    # everything so that a weight read from the wrong place can't hide. Norm scales stay centred on
    # their init: 1 for w-scaled norms, 0 for Gemma's (1 + w) norms (whose effective scale is then ~1).
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            centre = 1.0 if "norm" in name and bool((p == 1).all()) else 0.0
            p.copy_(torch.randn(p.shape, dtype=torch.float32).to(p.dtype) * (0.25 if p.dim() > 1 else 0.2) + centre)
        # DeepseekV3TopkRouter's e_score_correction_bias (Nemotron-H's MoE router) is a buffer, zeros from
        # from_config: randomised too, so that the experts chosen (by score + bias) are not simply those
        # with the largest weights (the scores)
        for name, buf in sorted(model.named_buffers()):
            if name.endswith("e_score_correction_bias"):
                buf.copy_(torch.randn(buf.shape, dtype=torch.float32).to(buf.dtype) * 0.2)
        if seq2seq:
            # T5 attention has no 1 / sqrt(d_kv) (its init folds it into q: std (d_model * d_kv)^-0.5 against
            # k's d_model^-0.5): without it the scores of these weights are ~16 wide and softmax so sharp
            # that Transformers' own fp32 drifts 7.6e-4 from its fp64 over 40 decoder steps (1.5e-5 with it),
            # below which no runtime can be gated, and greedy tokens settle on one token within 5 steps
            # (T5's q only: BART, mBART and Marian scale their scores by head_dim^-0.5 themselves)
            for name, p in model.named_parameters():
                if name.endswith(".q.weight"):
                    p.mul_(config.d_kv ** -0.5)
            # BART's final_logits_bias: a buffer (zeros from from_config, saved), randomised like the rest
            if getattr(model, "final_logits_bias", None) is not None:
                model.final_logits_bias.copy_(torch.randn(model.final_logits_bias.shape) * 0.2)
        for name, factor in WEIGHT_SCALES.get(case, {}).items():
            model.get_parameter(name).mul_(factor)
        for pattern, factor in WEIGHT_SCALE_PATTERNS.get(case, []):
            for name, p in model.named_parameters():
                if re.search(pattern, name):
                    p.mul_(factor)
        for name, shift in WEIGHT_SHIFTS.get(case, {}).items():
            model.get_parameter(name).add_(shift)
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    if seq2seq and case not in SEQ2SEQ_AS_SAVED:
        # The hub's configs (written by Transformers 4) carry the tie as asked and no
        # scale_decoder_outputs (Transformers 5 derives it from tie_word_embeddings when absent, the
        # same meaning); Transformers 5 writes tie_word_embeddings true and scale_decoder_outputs
        # instead, which t5-v5-config keeps
        path = out / "config.json"
        saved = json.loads(path.read_text())
        saved.pop("scale_decoder_outputs", None)
        saved["tie_word_embeddings"] = not untied
        path.write_text(json.dumps(saved, indent=2) + "\n")
    if model_type in SPEECH_TYPES and config.max_source_positions == 1500:
        from transformers import WhisperFeatureExtractor
        WhisperFeatureExtractor(feature_size=config.num_mel_bins).save_pretrained(out)
    if case in WHISPER_GENERATION:
        path = out / "generation_config.json"
        # (without _from_model_config, which makes from_pretrained rebuild it from config.json)
        saved = {k: v for k, v in json.loads(path.read_text()).items() if k != "_from_model_config"}
        path.write_text(json.dumps({**saved, **WHISPER_GENERATION[case]}, indent=2) + "\n")
    (out / "hfx_case.json").write_text(json.dumps({"case": case, "model_type": model_type, "seed": seed}))
    return out


def load_reference(folder: str | os.PathLike):
    """The Transformers eager model for a saved checkpoint, in f32 (AutoModelForSeq2SeqLM for an
    encoder-decoder config)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoModelForSpeechSeq2Seq

    config = json.loads((Path(folder) / "config.json").read_text())
    seq2seq = bool(config.get("is_encoder_decoder"))
    cls = (AutoModelForSpeechSeq2Seq if config.get("model_type") in SPEECH_TYPES else AutoModelForSeq2SeqLM if seq2seq
           else AutoModelForCausalLM)
    model = cls.from_pretrained(
        folder, torch_dtype=torch.float32, attn_implementation="eager")
    model.eval()
    return model


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("case", choices=sorted({**CASES, **PARITY_CASES, **HYBRID_CASES, **SEQ2SEQ_CASES}))
    ap.add_argument("folder")
    ap.add_argument("--dtype", default="float32")
    args = ap.parse_args()
    print(make(args.case, args.folder, args.dtype))
