"""Run an hfx OpenVINO export with the OpenVINO runtime: the decode loop of hfx's contract.

    from hfx_ov import OvGenerator
    gen = OvGenerator("out/llama")                      # reads out/llama/hfx.json, the "openvino" components
    rows = gen.generate([[1, 5, 9], [7, 3]], max_new_tokens=32)

Handles both layouts `hfx export --format openvino` writes: stateful (the KV cache is model state,
read through ReadValue and reordered by `beam_idx`; inputs input_ids, attention_mask, position_ids,
beam_idx -> logits) and `--stateless` (past_key_values.* fed back from present.*, as the ONNX graph).
Greedy decoding; left padding and positions as Transformers' generate() computes them. Compiled on
CPU with INFERENCE_PRECISION_HINT=f32 (the CPU plugin would otherwise run bf16 where it can).

Command line:  python python/hfx_ov.py OUT --prompt-ids 1,2,3 [--prompt-ids ...] [-n 64]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import openvino as ov

# The CPU plugin keeps the KV cache of its fused stateful SDPA in f16/u8 unless told otherwise.
F32_CONFIG = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}


def compile_model(path: str | Path, device: str = "CPU", config: dict | None = None):
    """Compiles an OpenVINO IR for exact fp32 runs (the precision the parity tests hold it to)."""
    return ov.Core().compile_model(str(path), device, {**F32_CONFIG, **(config or {})})


class OvGenerator:
    def __init__(self, export_dir: str | Path, device: str = "CPU"):
        self.dir = Path(export_dir)
        self.manifest = json.loads((self.dir / "hfx.json").read_text())
        model = self.manifest["model"]
        self.layers = model["num_layers"]
        self.kv_heads = model["num_kv_heads"]
        self.head_dim = model["head_dim"]
        self.eos = set(model["eos_token_ids"])
        pad = model.get("pad_token_id")
        self.pad = pad if pad is not None else (model["eos_token_ids"][0] if model["eos_token_ids"] else 0)
        comps = {c["role"]: c for c in self.manifest["components"] if c["format"] == "openvino"}
        if "decoder" not in comps:
            raise ValueError(f"{self.dir}: no openvino decoder component (export with --format openvino)")
        self.component = comps["decoder"]
        self.compiled = compile_model(self.dir / self.component["file"], device)
        inputs = {n for i in self.compiled.inputs for n in i.get_names()}
        self.stateful = "beam_idx" in inputs

    def _cache_names(self):
        for i in range(self.layers):
            for kv in ("key", "value"):
                yield f"past_key_values.{i}.{kv}", f"present.{i}.{kv}"

    def generate(self, prompts: list[list[int]], max_new_tokens: int = 64) -> list[list[int]]:
        batch, length = len(prompts), max(len(p) for p in prompts)
        ids = np.full((batch, length), self.pad, np.int64)
        mask = np.zeros((batch, length), np.int64)
        for b, p in enumerate(prompts):
            ids[b, length - len(p):] = p
            mask[b, length - len(p):] = 1
        pos = np.cumsum(mask, axis=1) - 1
        pos[mask == 0] = 1
        next_pos = mask.sum(axis=1)

        request = self.compiled.create_infer_request()
        if self.stateful:
            request.reset_state()
        past = {p: np.zeros((batch, self.kv_heads, 0, self.head_dim), np.float32) for p, _ in self._cache_names()}
        out, done = [[] for _ in range(batch)], [False] * batch
        feed_ids, feed_pos = ids, pos
        for step in range(max_new_tokens):
            feed = {"input_ids": feed_ids, "attention_mask": mask, "position_ids": feed_pos}
            if self.stateful:
                feed["beam_idx"] = np.arange(batch, dtype=np.int32)
            else:
                feed.update(past)
            result = request.infer(feed)
            logits = result["logits"]
            if not self.stateful:
                past = {p: result[o].copy() for p, o in self._cache_names()}
            tokens = self._pick(logits, done, out)
            if all(done) or step + 1 == max_new_tokens:
                break
            feed_ids = tokens[:, None]
            feed_pos = next_pos[:, None].astype(np.int64)
            next_pos = next_pos + 1
            mask = np.concatenate([mask, np.ones((batch, 1), np.int64)], axis=1)
        return out

    def _pick(self, logits, done, out):
        tokens = logits[:, -1, :].argmax(axis=-1).astype(np.int64)
        for b in range(len(tokens)):
            if done[b]:
                tokens[b] = self.pad
            out[b].append(int(tokens[b]))
            if not done[b] and int(tokens[b]) in self.eos:
                done[b] = True
        return tokens


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("export")
    ap.add_argument("--prompt-ids", action="append", required=True, help="comma-separated ids; repeat for a batch")
    ap.add_argument("-n", "--max-new-tokens", type=int, default=64)
    ap.add_argument("--device", default="CPU")
    args = ap.parse_args()
    gen = OvGenerator(args.export, args.device)
    for row in gen.generate([[int(x) for x in p.split(",")] for p in args.prompt_ids], args.max_new_tokens):
        print(",".join(map(str, row)))


if __name__ == "__main__":
    main()
