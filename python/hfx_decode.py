"""What every runtime's decode loop over an hfx export shares (hfx_ort.py, hfx_ov.py): the model facts
from hfx.json, left padding and positions as Transformers' generate() computes them, greedy picking
with EOS, and the command line.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass
class DecoderFacts:
    """The decoder facts a loop needs, read from the export's manifest."""
    manifest: dict
    layers: int
    kv_heads: int
    head_dim: int
    eos: set
    pad: int

    @classmethod
    def read(cls, export_dir: Path) -> "DecoderFacts":
        manifest = json.loads((Path(export_dir) / "hfx.json").read_text())
        model = manifest["model"]
        pad = model.get("pad_token_id")
        eos = model["eos_token_ids"]
        return cls(manifest, model["num_layers"], model["num_kv_heads"], model["head_dim"], set(eos),
                   pad if pad is not None else (eos[0] if eos else 0))

    def cache_names(self):
        """(past input, present output) name pairs, layer by layer."""
        for i in range(self.layers):
            for kv in ("key", "value"):
                yield f"past_key_values.{i}.{kv}", f"present.{i}.{kv}"

    def empty_cache(self, batch: int) -> dict:
        return {p: np.zeros((batch, self.kv_heads, 0, self.head_dim), np.float32) for p, _ in self.cache_names()}


def left_pad(prompts: list[list[int]], pad: int):
    """input_ids, attention_mask, position_ids of a left-padded batch, and each row's next position."""
    batch, length = len(prompts), max(len(p) for p in prompts)
    ids = np.full((batch, length), pad, np.int64)
    mask = np.zeros((batch, length), np.int64)
    for b, p in enumerate(prompts):
        ids[b, length - len(p):] = p
        mask[b, length - len(p):] = 1
    pos = np.cumsum(mask, axis=1) - 1
    pos[mask == 0] = 1
    return ids, mask, pos, mask.sum(axis=1)


def pick_greedy(logits, done: list[bool], out: list[list[int]], facts: DecoderFacts):
    """Appends each row's argmax of the last position (pad once the row has ended); returns them."""
    tokens = logits[:, -1, :].argmax(axis=-1).astype(np.int64)
    for b in range(len(tokens)):
        if done[b]:
            tokens[b] = facts.pad
        out[b].append(int(tokens[b]))
        if not done[b] and int(tokens[b]) in facts.eos:
            done[b] = True
    return tokens


def next_step(tokens, next_pos, mask=None):
    """The feed of the next decode step after `tokens` [batch]: ids [batch, 1], positions [batch, 1],
    the positions after that, and (for a growing cache) the mask with one more attended column."""
    grown = None if mask is None else np.concatenate([mask, np.ones((mask.shape[0], 1), np.int64)], axis=1)
    return tokens[:, None], next_pos[:, None].astype(np.int64), next_pos + 1, grown


def main(make_generator, doc: str, extra_args=None) -> None:
    """`python <loop>.py OUT --prompt-ids 1,2,3 [--prompt-ids ...] [-n 64]`: prints one row of ids per prompt."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("export")
    ap.add_argument("--prompt-ids", action="append", required=True, help="comma-separated ids; repeat for a batch")
    ap.add_argument("-n", "--max-new-tokens", type=int, default=64)
    if extra_args:
        extra_args(ap)
    args = ap.parse_args()
    gen = make_generator(args)
    for row in gen.generate([[int(x) for x in p.split(",")] for p in args.prompt_ids], args.max_new_tokens):
        print(",".join(map(str, row)))
