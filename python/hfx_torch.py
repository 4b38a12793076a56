"""Run an hfx `.pt2` export with PyTorch: the decode loop of hfx's contract over torch.export programs.

    from hfx_torch import TorchGenerator
    gen = TorchGenerator("out/llama")                   # reads out/llama/hfx.json, the "pt2" components
    rows = gen.generate([[1, 5, 9], [7, 3]], max_new_tokens=32)

Each component is `torch.export.load(file).module()`, called positionally with one tensor per input
of its manifest entry, in that order; it returns a dict keyed by output name. Handles every layout
`hfx export --format pt2` writes: one `decoder` program or `prefill` + `decode`, with a growing cache
(present.* fed back as past_key_values.*) or a static cache, whose past_key_values.* inputs the
program updates in place (torch's USER_INPUT_MUTATION): the loop keeps those tensors and passes the
same objects to the next step, and they are the present.* outputs the manifest lists as shared buffers.
Greedy decoding; left padding and positions as Transformers' generate() computes them. CPU, f32.

hfx never pickles: an archive whose data/sample_inputs/*.pt entry is not empty (torch.export.save
pickles example inputs there) or whose weights say use_pickle is not hfx's, and is refused before
torch reads it.

Command line:  python python/hfx_torch.py OUT (--prompt TEXT | --prompt-ids 1,2,3 [--prompt-ids ...]) [-n 64]
"""
from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import torch

from hfx_decode import DecoderFacts, left_pad, main as decode_main, next_step, pick_greedy

TORCH_DTYPES = {"i64": torch.int64, "i32": torch.int32, "f32": torch.float32, "f16": torch.float16,
                "bf16": torch.bfloat16, "bool": torch.bool}


def check_no_pickle(path: str | Path) -> None:
    """Raises ValueError (one line) unless the archive holds nothing torch.export.load would unpickle:
    every data/sample_inputs/*.pt entry empty, and no weight or constant stored with use_pickle."""
    path = Path(path)
    try:
        archive = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise ValueError(f"{path}: not a readable .pt2 archive ({exc})") from None
    with archive:
        for info in archive.infolist():
            parts = info.filename.split("/")
            if parts[1:3] == ["data", "sample_inputs"] and parts[-1].endswith(".pt") and info.file_size != 0:
                raise ValueError(f"{path}: {info.filename} holds {info.file_size} bytes of pickled sample inputs; "
                                 "hfx writes it empty and never unpickles (this archive is not hfx's)")
            if parts[1:2] == ["data"] and parts[-1] in ("model_weights_config.json", "model_constants_config.json"):
                config = json.loads(archive.read(info)).get("config", {})
                pickled = sorted(k for k, v in config.items() if v.get("use_pickle"))
                if pickled:
                    raise ValueError(f"{path}: {info.filename} stores {pickled[0]} pickled (use_pickle true); "
                                     "hfx stores raw tensors and never unpickles (this archive is not hfx's)")


def load_program(path: str | Path):
    """torch.export.load(path).module(), after check_no_pickle."""
    check_no_pickle(path)
    return torch.export.load(str(path)).module()


class Program:
    """One component: the loaded module and its manifest entry (input order, outputs, shared buffers)."""

    def __init__(self, export_dir: Path, component: dict):
        self.file = export_dir / component["file"]
        self.module = load_program(self.file)
        self.inputs = [(i["name"], TORCH_DTYPES[i["dtype"]]) for i in component["inputs"]]
        self.input_names = {name for name, _ in self.inputs}
        self.shared = {o: i for i, o in component.get("cache", {}).get("shared_buffers", [])}  # output -> input
        # What the program returns: the outputs that are not buffers updated in place.
        self.returned = [o["name"] for o in component["outputs"] if o["name"] not in self.shared]

    def __call__(self, feed: dict) -> dict:
        """Runs one step on `feed` (name -> numpy array or torch tensor; tensors are passed as they are,
        so a buffer the program mutates is the caller's own); returns the program's dict of outputs."""
        args = []
        for name, dtype in self.inputs:
            if name not in feed:
                raise ValueError(f"{self.file}: input {name} is not one the decode loop feeds ({', '.join(sorted(feed))})")
            value = feed[name]
            if not isinstance(value, torch.Tensor):
                value = torch.from_numpy(np.ascontiguousarray(value))
            args.append(value if value.dtype == dtype else value.to(dtype))
        with torch.no_grad():
            out = self.module(*args)
        if not isinstance(out, dict) or sorted(out) != sorted(self.returned):
            got = sorted(out) if isinstance(out, dict) else type(out).__name__
            raise ValueError(f"{self.file}: the program returned {got}, expected a dict of {sorted(self.returned)}")
        return out


class TorchGenerator:
    def __init__(self, export_dir: str | Path):
        self.dir = Path(export_dir)
        self.facts = DecoderFacts.read(self.dir)
        self.manifest = self.facts.manifest
        recipe = self.manifest["recipe"]
        self.static = bool(recipe["static_cache"])
        self.max_cache_len = int(recipe["max_cache_len"])
        self.programs = {c["role"]: Program(self.dir, c) for c in self.manifest["components"] if c["format"] == "pt2"}
        if "decoder" not in self.programs and "prefill" not in self.programs:
            raise ValueError(f"{self.dir}: no pt2 decoder component (export with --format pt2)")
        self.first = self.programs.get("prefill") or self.programs["decoder"]
        self.next = self.programs.get("decode") or self.programs["decoder"]

    def generate(self, prompts: list[list[int]], max_new_tokens: int = 64) -> list[list[int]]:
        ids, mask, pos, next_pos = left_pad(prompts, self.facts.pad)
        batch, length = ids.shape
        if self.static:
            if length + max_new_tokens > self.max_cache_len:
                raise ValueError(f"prompt of {length} + {max_new_tokens} new tokens exceeds max_cache_len {self.max_cache_len}")
            n = self.max_cache_len
            # One tensor per layer and kv, updated in place by every step.
            cache = {p: torch.zeros(batch, self.facts.kv_heads, n, self.facts.head_dim) for p, _ in self.facts.cache_names()}
            self.static_buffers = cache  # kept for inspection (tests check they were written in place)
            full_mask = np.zeros((batch, n), np.int64)
            full_mask[:, :length] = mask
            mask = full_mask
        else:
            cache = {p: torch.from_numpy(t) for p, t in self.facts.empty_cache(batch).items()}
        out, done = [[] for _ in range(batch)], [False] * batch
        feed_ids, feed_pos, cache_pos, total = ids, pos, np.arange(length, dtype=np.int64), length
        for step in range(max_new_tokens):
            program = self.first if step == 0 else self.next
            feed = {"input_ids": feed_ids, "attention_mask": mask, "position_ids": feed_pos, "cache_position": cache_pos,
                    **cache}
            result = program(feed)
            for p, o in self.facts.cache_names():
                if o in result:  # growing: the longer cache; static: the buffer itself, already written
                    cache[p] = result[o]
            tokens = pick_greedy(result["logits"].numpy(), done, out, self.facts)
            if all(done) or step + 1 == max_new_tokens:
                break
            if self.static:
                feed_ids, feed_pos, next_pos, _ = next_step(tokens, next_pos)
                mask[:, total] = 1
                cache_pos = np.array([total], np.int64)
                total += 1
            else:
                feed_ids, feed_pos, next_pos, mask = next_step(tokens, next_pos, mask)
        return out


if __name__ == "__main__":
    decode_main(lambda args: TorchGenerator(args.export), __doc__)
