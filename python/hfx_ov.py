"""Run an hfx OpenVINO export with the OpenVINO runtime: the decode loop of hfx's contract.

    from hfx_ov import OvGenerator
    gen = OvGenerator("out/llama")                      # reads out/llama/hfx.json, the "openvino" components
    rows = gen.generate([[1, 5, 9], [7, 3]], max_new_tokens=32)

Handles both layouts `hfx export --format openvino` writes: stateful (the KV cache is model state,
read through ReadValue and reordered by `beam_idx`; inputs input_ids, attention_mask, position_ids,
beam_idx -> logits) and `--stateless` (past_key_values.* fed back from present.*, as the ONNX graph).
Greedy decoding; left padding and positions as Transformers' generate() computes them. Compiled on
CPU with INFERENCE_PRECISION_HINT=f32 (the CPU plugin would otherwise run bf16 where it can).

Command line:  python python/hfx_ov.py OUT (--prompt TEXT | --prompt-ids 1,2,3 [--prompt-ids ...]) [-n 64]
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import openvino as ov

from hfx_decode import DecoderFacts, left_pad, main as decode_main, next_step, pick_greedy

# The CPU plugin keeps the KV cache of its fused stateful SDPA in f16/u8 unless told otherwise, and
# rounds the activations of FullyConnected layers with compressed (u4/i4/u8/i8) weights to int8 in groups
# unless DYNAMIC_QUANTIZATION_GROUP_SIZE is 0.
F32_CONFIG = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"}


def compile_model(path: str | Path, device: str = "CPU", config: dict | None = None):
    """Compiles an OpenVINO IR for exact fp32 runs (the precision the parity tests hold it to)."""
    return ov.Core().compile_model(str(path), device, {**F32_CONFIG, **(config or {})})


class OvGenerator:
    def __init__(self, export_dir: str | Path, device: str = "CPU"):
        self.dir = Path(export_dir)
        self.facts = DecoderFacts.read(self.dir)
        self.manifest = self.facts.manifest
        comps = {c["role"]: c for c in self.manifest["components"] if c["format"] == "openvino"}
        if "decoder" not in comps:
            # F#16: a --split-prefill export has openvino components, just not one decoder graph.
            found = ", ".join(sorted(comps)) or "none"
            hint = ("this loop runs one decoder graph; `hfx generate --runtime openvino` runs prefill + decode"
                    if comps else "export with --format openvino")
            raise ValueError(f"{self.dir}: no openvino decoder component (openvino components: {found}); {hint}")
        self.component = comps["decoder"]
        self.compiled = compile_model(self.dir / self.component["file"], device)
        inputs = {n for i in self.compiled.inputs for n in i.get_names()}
        self.stateful = "beam_idx" in inputs

    def _cache_names(self):
        return self.facts.cache_names()

    def generate(self, prompts: list[list[int]], max_new_tokens: int = 64) -> list[list[int]]:
        ids, mask, pos, next_pos = left_pad(prompts, self.facts.pad)
        batch = ids.shape[0]

        request = self.compiled.create_infer_request()
        if self.stateful:
            request.reset_state()
        past = self.facts.empty_cache(batch)
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
            feed_ids, feed_pos, next_pos, mask = next_step(tokens, next_pos, mask)
        return out

    def _pick(self, logits, done, out):
        return pick_greedy(logits, done, out, self.facts)


if __name__ == "__main__":
    decode_main(lambda args: OvGenerator(args.export, args.device), __doc__,
                lambda ap: ap.add_argument("--device", default="CPU"))
