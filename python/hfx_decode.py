"""What every runtime's decode loop over an hfx export shares (hfx_ort.py, hfx_ov.py): the model facts
from hfx.json, left padding and positions as Transformers' generate() computes them, greedy picking
with EOS, and the command line (no abbreviations, a text --prompt, one-line errors).
"""
from __future__ import annotations

import argparse
import json
import sys
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


class OneLineParser(argparse.ArgumentParser):
    """argparse with hfx's habits: no abbreviations (`--prompt` is never taken for `--prompt-ids`), and a
    usage error on one line naming `--help`, instead of the usage block and the error."""

    def __init__(self, **kwargs):
        super().__init__(allow_abbrev=False, **kwargs)

    def error(self, message):
        fail(f"usage: {message} (`{self.prog} --help` lists the options)", code=2)


def fail(message: str, code: int = 1):
    """One line on stderr and exit `code`: how the helpers report bad input (no traceback)."""
    prog = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "hfx"
    print(f"{prog}: {' '.join(str(message).split())}", file=sys.stderr)
    raise SystemExit(code)


def load_tokenizer(export_dir: Path):
    """The export's tokenizer.json through the `tokenizers` package; a one-line error without either."""
    path = Path(export_dir) / "tokenizer.json"
    if not path.is_file():
        fail(f"--prompt: {path} not found (an export without a tokenizer); give --prompt-ids 1,2,3")
    try:
        from tokenizers import Tokenizer
    except ImportError:
        fail("--prompt needs the `tokenizers` package (pip install tokenizers); or give --prompt-ids 1,2,3")
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # noqa: BLE001 - a tokenizer.json `tokenizers` cannot read
        fail(f"{path}: not a tokenizer `tokenizers` can read ({exc})")


def parse_ids(text: str, vocab: int | None) -> list[int]:
    """"1,2,3" -> [1, 2, 3], each a token id of the vocabulary."""
    try:
        ids = [int(x) for x in text.split(",")]
    except ValueError:
        fail(f"--prompt-ids {text!r}: expected comma-separated token ids such as 1,2,3 (text goes in --prompt)")
    for i in ids:
        if i < 0 or (vocab is not None and i >= vocab):
            fail(f"--prompt-ids: token {i} is outside the vocabulary [0, {vocab})" if vocab is not None
                 else f"--prompt-ids: token {i} is negative")
    return ids


def main(make_generator, doc: str, extra_args=None) -> None:
    """`python <loop>.py OUT (--prompt TEXT | --prompt-ids 1,2,3 [--prompt-ids ...]) [-n 64]`: prints one row
    of new ids per prompt, or with --prompt the new text (--print-ids: the ids). Bad input: one line."""
    ap = OneLineParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("export")
    prompt = ap.add_mutually_exclusive_group(required=True)
    prompt.add_argument("--prompt", help="prompt text, encoded with the export's tokenizer.json (needs `tokenizers`)")
    prompt.add_argument("--prompt-ids", action="append", help="comma-separated ids; repeat for a batch")
    ap.add_argument("-n", "--max-new-tokens", type=int, default=64)
    ap.add_argument("--print-ids", action="store_true", help="with --prompt: print the new ids, not the text")
    if extra_args:
        extra_args(ap)
    args = ap.parse_args()
    if args.max_new_tokens < 1:
        fail(f"--max-new-tokens {args.max_new_tokens}: expected at least 1", code=2)
    export = Path(args.export)
    if not (export / "hfx.json").is_file():
        fail(f"{export}: no hfx.json (not an hfx export folder)")
    try:
        vocab = json.loads((export / "hfx.json").read_text())["model"].get("vocab_size")
    except Exception as exc:  # noqa: BLE001 - an unreadable manifest
        fail(f"{export / 'hfx.json'}: not an hfx manifest ({exc})")
    tokenizer = None
    if args.prompt is not None:
        if not args.prompt:
            fail("--prompt is empty: give some text (or --prompt-ids 1,2,3)", code=2)
        tokenizer = load_tokenizer(export)
        prompts = [tokenizer.encode(args.prompt).ids]
        if not prompts[0]:
            fail(f"--prompt {args.prompt!r}: the tokenizer made no tokens of it")
    else:
        prompts = [parse_ids(p, vocab) for p in args.prompt_ids]
    try:
        gen = make_generator(args)
        rows = gen.generate(prompts, args.max_new_tokens)
    except SystemExit:
        raise
    except Exception as exc:  # noqa: BLE001 - a runtime's refusal, said on one line with its own text
        fail(f"{type(exc).__name__}: {exc}")
    for row in rows:
        print(tokenizer.decode(row) if tokenizer is not None and not args.print_ids else ",".join(map(str, row)))
