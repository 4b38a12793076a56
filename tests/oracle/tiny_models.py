"""Tiny random checkpoints made with Transformers from configs (seeded), covering the features each
architecture has. Nothing is downloaded: weights are random, the structure is the real one.

Each case is (name, model_type, config overrides). `make(case, folder)` saves a checkpoint with
`save_pretrained` (safetensors) and returns the folder.
"""
from __future__ import annotations

import json
import os
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
    # mistral: a sliding window shorter than the prompt
    "mistral-window": ("mistral", dict(sliding_window=4)),
    # qwen2: q/k/v bias, tied; and sliding-window layers chosen by layer_types
    "qwen2-tied": ("qwen2", dict(tie_word_embeddings=True)),
    "qwen2-window": ("qwen2", dict(use_sliding_window=True, sliding_window=3, max_window_layers=1)),
    # qwen3: q/k norm, explicit head_dim != hidden/heads
    "qwen3": ("qwen3", dict(head_dim=32, tie_word_embeddings=True)),
    "qwen3-gqa4": ("qwen3", dict(head_dim=16, num_attention_heads=8, num_key_value_heads=2)),
}


def make(case: str, folder: str | os.PathLike, dtype: str = "float32", seed: int = 0) -> Path:
    """Saves the tiny checkpoint for `case` into `folder` (created) and returns it."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    model_type, overrides = CASES[case]
    cfg = dict(BASE)
    cfg.update(overrides)
    config = AutoConfig.for_model(model_type, **cfg)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, torch_dtype=getattr(torch, dtype))
    # from_config leaves some weights at their init constants (norms = 1, biases = 0): randomise
    # everything so that a weight read from the wrong place can't hide.
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            p.copy_(torch.randn(p.shape, dtype=torch.float32).to(p.dtype) * (0.25 if p.dim() > 1 else 0.2)
                    + (1.0 if "norm" in name else 0.0))
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    (out / "hfx_case.json").write_text(json.dumps({"case": case, "model_type": model_type, "seed": seed}))
    return out


def load_reference(folder: str | os.PathLike):
    """The Transformers eager model for a saved checkpoint, in f32."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32, attn_implementation="eager")
    model.eval()
    return model


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("case", choices=sorted(CASES))
    ap.add_argument("folder")
    ap.add_argument("--dtype", default="float32")
    args = ap.parse_args()
    print(make(args.case, args.folder, args.dtype))
