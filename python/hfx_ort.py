"""Run an hfx export with ONNX Runtime: the decode loop hfx's contract implies, for users and tests.

    from hfx_ort import OrtGenerator
    gen = OrtGenerator("out/llama")                     # reads out/llama/hfx.json
    rows = gen.generate([[1, 5, 9], [7, 3]], max_new_tokens=32)

Handles every component layout hfx writes: one `decoder` graph or `prefill` + `decode`, with a
growing cache (present.* fed back as past_key_values.*) or a static cache whose buffers are bound
with IO binding to the same OrtValue as input and output, so steps update them in place. The carried
states are the graphs' own past_* inputs, each fed back from its present output: a hybrid's
convolution states (past_conv.{i} <- present_conv.{i}, replaced each step, in every layout) too.
Greedy decoding; left padding and positions as Transformers' generate() computes them.

Command line:  python python/hfx_ort.py OUT (--prompt TEXT | --prompt-ids 1,2,3 [--prompt-ids ...]) [-n 64]
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

from hfx_decode import DecoderFacts, left_pad, main as decode_main, next_step, pick_greedy


class OrtGenerator:
    def __init__(self, export_dir: str | Path, providers=("CPUExecutionProvider",), session_config: dict | None = None,
                 sessions: dict | None = None):
        """`sessions`: already open sessions by their file's resolved path (hfx_ort_runner's, shared with
        its shape cases); the other components' are opened here."""
        self.dir = Path(export_dir)
        self.facts = DecoderFacts.read(self.dir)
        self.manifest = self.facts.manifest
        recipe = self.manifest["recipe"]
        self.kv_heads, self.head_dim = self.facts.kv_heads, self.facts.head_dim
        self.static = bool(recipe["static_cache"])
        self.max_cache_len = int(recipe["max_cache_len"])
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        for key, value in (session_config or {}).items():  # e.g. hfx_ort_runner's f32 settings
            opts.add_session_config_entry(key, value)
        self.sessions = {}
        for c in self.manifest["components"]:
            if c["format"] == "onnx":
                path = (self.dir / c["file"]).resolve()
                self.sessions[c["role"]] = (sessions or {}).get(path) or ort.InferenceSession(
                    str(path), opts, providers=list(providers))
        self.first = self.sessions.get("prefill") or self.sessions["decoder"]
        self.next = self.sessions.get("decode") or self.sessions["decoder"]

        # (past input, present output, its shape with the batch and an empty growing axis) of every state
        # the step graph carries; the static layout's buffers written at cache_position are its shared ones.
        self.states = [(i.name, present_of(i.name), i.shape) for i in self.next.get_inputs() if i.name.startswith("past_")]
        shared = [c for c in self.manifest["components"] if c["format"] == "onnx"][-1].get("cache", {}).get("shared_buffers", [])
        self.shared = {p for p, _ in shared}

    def _empty_states(self, batch: int) -> dict:
        """Every state before the first token: zeros, the batch its rows, a growing axis empty; a static
        buffer of max_cache_len slots."""
        def dim(d):
            if d == "batch_size":
                return batch
            return d if isinstance(d, int) else 0
        return {p: np.zeros([dim(d) for d in shape], np.float32) for p, _, shape in self.states}

    def generate(self, prompts: list[list[int]], max_new_tokens: int = 64) -> list[list[int]]:
        ids, mask, pos, next_pos = left_pad(prompts, self.facts.pad)
        length = ids.shape[1]
        if self.static:
            if length + max_new_tokens > self.max_cache_len:
                raise ValueError(f"prompt of {length} + {max_new_tokens} new tokens exceeds max_cache_len {self.max_cache_len}")
            return self._generate_static(ids, mask, pos, next_pos, max_new_tokens)
        return self._generate_growing(ids, mask, pos, next_pos, max_new_tokens)

    def _pick(self, logits, done, out):
        return pick_greedy(logits, done, out, self.facts)

    def _generate_growing(self, ids, mask, pos, next_pos, max_new_tokens):
        batch = ids.shape[0]
        past = self._empty_states(batch)
        out, done = [[] for _ in range(batch)], [False] * batch
        feed_ids, feed_pos = ids, pos
        for step in range(max_new_tokens):
            sess = self.first if step == 0 else self.next
            wanted = {i.name for i in sess.get_inputs()}
            feed = {"input_ids": feed_ids, "attention_mask": mask, "position_ids": feed_pos, **past}
            # The ort profile's graph derives positions from attention_mask (no position_ids input).
            feed = {k: v for k, v in feed.items() if k in wanted}
            names = [o.name for o in sess.get_outputs()]
            result = dict(zip(names, sess.run(None, feed)))
            past = {p: result[o] for p, o, _ in self.states}
            tokens = self._pick(result["logits"], done, out)
            if all(done) or step + 1 == max_new_tokens:
                break
            feed_ids, feed_pos, next_pos, mask = next_step(tokens, next_pos, mask)
        return out

    def _generate_static(self, ids, mask, pos, next_pos, max_new_tokens):
        batch, length = ids.shape
        n = self.max_cache_len
        # One OrtValue per key/value buffer: bound as both the past input and the present output. Other
        # states (a hybrid's conv columns) are fed and taken back each step, as with a growing cache.
        zeros = self._empty_states(batch)
        buffers = {p: ort.OrtValue.ortvalue_from_numpy(zeros[p]) for p, _, _ in self.states if p in self.shared}
        replaced = {p: zeros[p] for p, _, _ in self.states if p not in self.shared}
        self.static_buffers = buffers  # kept for inspection (tests check they were written in place)
        full_mask = np.zeros((batch, n), np.int64)
        full_mask[:, :length] = mask
        out, done = [[] for _ in range(batch)], [False] * batch
        feed_ids, feed_pos, cache_pos, total = ids, pos, np.arange(length, dtype=np.int64), length
        for step in range(max_new_tokens):
            sess = self.first if step == 0 else self.next
            binding = sess.io_binding()
            binding.bind_cpu_input("input_ids", np.ascontiguousarray(feed_ids))
            binding.bind_cpu_input("attention_mask", full_mask.copy())
            if "position_ids" in {i.name for i in sess.get_inputs()}:
                binding.bind_cpu_input("position_ids", np.ascontiguousarray(feed_pos))
            binding.bind_cpu_input("cache_position", cache_pos)
            binding.bind_output("logits")  # first, so it is get_outputs()[0]
            wanted, given = {i.name for i in sess.get_inputs()}, {o.name for o in sess.get_outputs()}
            bound = ["logits"]  # get_outputs() follows the order outputs were bound in
            for p, o, _ in self.states:
                if p in buffers:
                    if p in wanted:
                        binding.bind_ortvalue_input(p, buffers[p])
                    if o in given:
                        binding.bind_ortvalue_output(o, buffers[p])
                        bound.append(o)
                else:
                    if p in wanted:  # a prefill graph starts its replaced states from zeros itself
                        binding.bind_cpu_input(p, replaced[p])
                    if o in given:
                        binding.bind_output(o)
                        bound.append(o)
            sess.run_with_iobinding(binding)
            outputs = dict(zip(bound, binding.get_outputs()))
            logits = outputs["logits"].numpy()
            replaced = {p: outputs[o].numpy() for p, o, _ in self.states if p in replaced and o in outputs}
            tokens = self._pick(logits, done, out)
            if all(done) or step + 1 == max_new_tokens:
                break
            feed_ids, feed_pos, next_pos, _ = next_step(tokens, next_pos)
            full_mask[:, total] = 1
            cache_pos = np.array([total], np.int64)
            total += 1
        return out


def present_of(past: str) -> str:
    """The output a state input is fed back from: past_key_values.{i}.key <- present.{i}.key (every name
    set hfx writes for ONNX Runtime), past_conv.{i} <- present_conv.{i}."""
    return "present." + past[len("past_key_values."):] if past.startswith("past_key_values.") else "present_" + past[len("past_"):]


if __name__ == "__main__":
    decode_main(lambda args: OrtGenerator(args.export), __doc__)
