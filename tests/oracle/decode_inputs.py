"""Inputs of a batched decode: a left-padded prompt batch, then single-token steps through the cache.

Position ids follow Transformers' generate(): cumsum(attention_mask) - 1, with pads set to 1.
"""
from __future__ import annotations

import numpy as np

PROMPT_LENGTHS = (10, 7)  # batch 2: the second row is left-padded by 3
DECODE_STEPS = 3


def prompt(vocab: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    batch, seq = len(PROMPT_LENGTHS), max(PROMPT_LENGTHS)
    ids = rng.integers(3, vocab, size=(batch, seq), dtype=np.int64)
    mask = np.zeros((batch, seq), dtype=np.int64)
    for b, n in enumerate(PROMPT_LENGTHS):
        mask[b, seq - n:] = 1
        ids[b, : seq - n] = 0  # pad token
    return ids, mask


def positions(mask: np.ndarray, new_tokens: int) -> np.ndarray:
    pos = np.cumsum(mask, axis=1) - 1
    pos[mask == 0] = 1
    return pos[:, -new_tokens:].astype(np.int64)


def next_tokens(vocab: int, step: int, batch: int) -> np.ndarray:
    rng = np.random.default_rng(100 + step)
    return rng.integers(3, vocab, size=(batch, 1), dtype=np.int64)
