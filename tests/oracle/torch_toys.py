"""Tiny decoder-step programs made with torch.export itself, following the contract of hfx's `.pt2`
exports, for testing the torch driver (python/hfx_torch.py, python/hfx_torch_runner.py and the C++
runner src/backends/pt2/pt2_runner.cc) without the hfx writer.

Each program is a one-file component: called positionally with the manifest's inputs, it returns a
dict keyed by output name. Growing cache: {"logits", "present.{i}.key|value"} (the past concatenated
with the new keys). Static cache: {"logits"} only; the past_key_values.* buffers are updated in place
at cache_position (index_copy_, which torch.export records as USER_INPUT_MUTATION). The archives are
saved by torch.export.save and then have their data/sample_inputs entry emptied, as hfx writes them,
with an hfx.json beside them that has what hfx_decode.DecoderFacts and TorchGenerator read.

Command line (for the C++ test):  python torch_toys.py OUT [LAYOUT...]   writes OUT/<layout>/... for
each layout (all by default), and for each a step's inputs and the outputs the program gives on them
(OUT/<layout>/case.inputs.safetensors, case.outputs.safetensors).
"""
from __future__ import annotations

import inspect
import json
import math
import shutil
import sys
import zipfile
from pathlib import Path

import torch

VOCAB, HIDDEN, LAYERS, KV_HEADS, HEAD_DIM, POSITIONS = 29, 8, 2, 2, 4, 64
EOS, PAD = 3, 0
LAYOUTS = ("growing", "static", "split-growing", "split-static")


class ToyDecoder(torch.nn.Module):
    """Embedding + learned positions, LAYERS attention blocks with a residual, an lm_head. Random
    weights from `seed`, scaled so that greedy tokens depend on the context."""

    def __init__(self, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.embed = torch.nn.Parameter(torch.randn(VOCAB, HIDDEN, generator=g))
        self.positions = torch.nn.Parameter(torch.randn(POSITIONS, HIDDEN, generator=g))
        self.qkvo = torch.nn.Parameter(torch.randn(LAYERS, 4, HIDDEN, HIDDEN, generator=g))
        self.head = torch.nn.Parameter(torch.randn(HIDDEN, VOCAB, generator=g))

    def attend(self, layer, x, k, v, allowed):
        """x [B, S, D] attending to k, v [B, H, T, Dh] where allowed [B, 1, S, T]."""
        b, s, _ = x.shape
        q = (x @ self.qkvo[layer, 0]).view(b, s, KV_HEADS, HEAD_DIM).transpose(1, 2)
        scores = q @ k.transpose(-1, -2) / math.sqrt(HEAD_DIM)
        scores = scores.masked_fill(~allowed, torch.finfo(torch.float32).min)
        y = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, s, HIDDEN)
        return x + y @ self.qkvo[layer, 3]

    def new_kv(self, layer, x):
        b, s, _ = x.shape
        k = (x @ self.qkvo[layer, 1]).view(b, s, KV_HEADS, HEAD_DIM).transpose(1, 2)
        v = (x @ self.qkvo[layer, 2]).view(b, s, KV_HEADS, HEAD_DIM).transpose(1, 2)
        return k, v

    def embed_tokens(self, input_ids, position_ids):
        return self.embed[input_ids] + self.positions[position_ids]

    def logits(self, x):
        return x @ self.head


def allowed_keys(attention_mask, query_positions):
    """[B, 1, S, T]: key j is attended by query i when the mask has it and j <= i's cache position."""
    t = attention_mask.shape[1]
    keys = torch.arange(t)[None, :]
    causal = keys <= query_positions[:, None]  # [S, T]
    return (attention_mask[:, None, None, :] == 1) & causal[None, None]


class GrowingStep(torch.nn.Module):
    """(input_ids, attention_mask, position_ids[, past...]) -> {logits, present...}; without past
    (prefill) the cache starts empty."""

    def __init__(self, toy: ToyDecoder, with_past: bool = True):
        super().__init__()
        self.toy, self.with_past = toy, with_past

    def forward(self, input_ids, attention_mask, position_ids, *past):
        x = self.toy.embed_tokens(input_ids, position_ids)
        s, t = input_ids.shape[1], attention_mask.shape[1]
        allowed = allowed_keys(attention_mask, torch.arange(s) + (t - s))
        out = {}
        for i in range(LAYERS):
            k, v = self.toy.new_kv(i, x)
            if self.with_past:
                k, v = torch.cat([past[2 * i], k], dim=2), torch.cat([past[2 * i + 1], v], dim=2)
            out[f"present.{i}.key"], out[f"present.{i}.value"] = k, v
            x = self.toy.attend(i, x, k, v, allowed)
        return {"logits": self.toy.logits(x), **out}


class StaticStep(torch.nn.Module):
    """(input_ids, attention_mask [B, N], position_ids, past [B, H, N, Dh]..., cache_position) ->
    {logits}; writes the new keys and values into the past buffers at cache_position (hfx's input
    order: cache_position last)."""

    def __init__(self, toy: ToyDecoder):
        super().__init__()
        self.toy = toy

    def forward(self, input_ids, attention_mask, position_ids, *past_and_cache_position):
        *past, cache_position = past_and_cache_position
        x = self.toy.embed_tokens(input_ids, position_ids)
        allowed = allowed_keys(attention_mask, cache_position)
        for i in range(LAYERS):
            k, v = self.toy.new_kv(i, x)
            past[2 * i].index_copy_(2, cache_position, k)
            past[2 * i + 1].index_copy_(2, cache_position, v)
            x = self.toy.attend(i, x, past[2 * i], past[2 * i + 1], allowed)
        return {"logits": self.toy.logits(x)}


def cache_names():
    return [(f"past_key_values.{i}.{kv}", f"present.{i}.{kv}") for i in range(LAYERS) for kv in ("key", "value")]


def io(name, dtype, shape):
    return {"name": name, "dtype": dtype, "shape": shape}


def component_entry(role: str, file: str, static: bool, with_past: bool, max_cache_len: int) -> dict:
    """The component's entry of hfx.json, as hfx writes it (inputs in call order)."""
    total = str(max_cache_len) if static else "total_sequence_length"
    inputs = [io("input_ids", "i64", ["batch_size", "sequence_length"]), io("attention_mask", "i64", ["batch_size", total]),
              io("position_ids", "i64", ["batch_size", "sequence_length"])]
    cache_shape = ["batch_size", str(KV_HEADS), str(max_cache_len) if static else "past_sequence_length", str(HEAD_DIM)]
    if with_past:
        inputs += [io(p, "f32", cache_shape) for p, _ in cache_names()]
    if static:
        inputs.append(io("cache_position", "i64", ["sequence_length"]))
    present_shape = cache_shape if static else ["batch_size", str(KV_HEADS), "total_sequence_length", str(HEAD_DIM)]
    outputs = [io("logits", "f32", ["batch_size", "sequence_length", str(VOCAB)])] + [io(o, "f32", present_shape) for _, o in cache_names()]
    shared = [[p, o] for p, o in cache_names()] if static else []
    return {"role": role, "format": "pt2", "file": file, "inputs": inputs, "outputs": outputs,
            "cache": {"layout": "static" if static else "growing", "shared_buffers": shared}}


def example_inputs(static: bool, with_past: bool, batch: int, seq: int, past: int, max_cache_len: int):
    """Inputs of one step: rows of `seq` new tokens after `past` cached ones (random cache values)."""
    g = torch.Generator().manual_seed(batch * 100 + seq * 10 + past)
    total = past + seq
    ids = torch.randint(0, VOCAB, (batch, seq), generator=g)
    positions = (torch.arange(seq) + past).repeat(batch, 1)
    mask = torch.ones(batch, max_cache_len if static else total, dtype=torch.int64)
    if static:
        mask[:, total:] = 0
    args = [ids, mask, positions]
    if with_past:
        n = max_cache_len if static else past
        args += [torch.randn(batch, KV_HEADS, n, HEAD_DIM, generator=g) for _ in cache_names()]
    if static:
        args.append(torch.arange(past, total))
    return tuple(args)


def empty_sample_inputs(path: Path) -> None:
    """Rewrites the archive with its data/sample_inputs/*.pt entries empty (torch.export.save pickles
    the example inputs there; hfx writes them empty), entries stored as hfx stores them."""
    tmp = path.with_suffix(".tmp")
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            parts = info.filename.split("/")
            emptied = parts[1:3] == ["data", "sample_inputs"]
            info.compress_type = zipfile.ZIP_STORED
            dst.writestr(info, b"" if emptied else src.read(info))
    tmp.replace(path)


def export_step(module: torch.nn.Module, args: tuple, path: Path) -> Path:
    """torch.export with every dim dynamic (Dim.AUTO: torch finds total = past + sequence), run to
    core ATen in functional form (as hfx writes: in-place updates become USER_INPUT_MUTATION), saved
    and its sample inputs emptied."""
    dynamic = [{d: torch.export.Dim.AUTO for d in range(a.dim())} for a in args]
    named = sum(p.kind == p.POSITIONAL_OR_KEYWORD for p in inspect.signature(module.forward).parameters.values())
    ep = torch.export.export(module, args, dynamic_shapes=(*dynamic[:named], *([tuple(dynamic[named:])] if len(args) > named else []))).run_decompositions()
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.export.save(ep, str(path))
    empty_sample_inputs(path)
    return path


def write_toy(out: Path, layout: str, seed: int = 0, max_cache_len: int = 24) -> tuple[Path, ToyDecoder]:
    """Writes an hfx-like export of the toy decoder in `layout` (one of LAYOUTS) to `out`; returns
    the folder and the eager model."""
    toy = ToyDecoder(seed).eval()
    for p in toy.parameters():
        p.requires_grad_(False)
    static, split = layout.endswith("static"), layout.startswith("split")
    n = max_cache_len if static else 0
    components = []
    step = StaticStep(toy) if static else GrowingStep(toy)
    if split:
        # prefill: no past inputs with a growing cache; with a static cache it writes the buffers.
        prefill = step if static else GrowingStep(toy, with_past=False)
        export_step(prefill, example_inputs(static, static, 2, 3, 0, n), out / "pt2" / "prefill.pt2")
        export_step(step, example_inputs(static, True, 2, 1, 3, n), out / "pt2" / "decode.pt2")
        components += [component_entry("prefill", "pt2/prefill.pt2", static, static, n),
                       component_entry("decode", "pt2/decode.pt2", static, True, n)]
    else:
        export_step(step, example_inputs(static, True, 2, 3, 2, n), out / "pt2" / "model.pt2")
        components.append(component_entry("decoder", "pt2/model.pt2", static, True, n))
    manifest = {"model": {"num_layers": LAYERS, "num_kv_heads": KV_HEADS, "head_dim": HEAD_DIM, "eos_token_ids": [EOS],
                          "pad_token_id": PAD, "vocab_size": VOCAB},
                "recipe": {"static_cache": static, "max_cache_len": n}, "components": components}
    (out / "hfx.json").write_text(json.dumps(manifest, indent=1))
    return out, toy


def eager_greedy(toy: ToyDecoder, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
    """Greedy tokens from the eager toy without any cache: each step runs the whole left-padded
    sequence so far (prompt + generated) from scratch, positions cumsum(mask) - 1 (pads at 1)."""
    batch, length = len(prompts), max(len(p) for p in prompts)
    rows = [[PAD] * (length - len(p)) + list(p) for p in prompts]
    mask = [[0] * (length - len(p)) + [1] * len(p) for p in prompts]
    out, done = [[] for _ in prompts], [False] * batch
    step = GrowingStep(toy, with_past=False)
    for _ in range(max_new_tokens):
        m = torch.tensor(mask)
        pos = m.cumsum(1) - 1
        pos[m == 0] = 1
        with torch.no_grad():
            logits = step(torch.tensor(rows), m, pos)["logits"]
        for b in range(batch):
            tok = PAD if done[b] else int(logits[b, -1].argmax())
            out[b].append(tok)
            done[b] = done[b] or tok == EOS
            rows[b].append(tok)
            mask[b].append(1)
        if all(done):
            break
    return out


def write_cases(out: Path, layouts=LAYOUTS) -> None:
    """For the C++ test: each layout's export, plus one step's inputs and the outputs the exported
    program gives on them (present.* of a static step are the updated buffers)."""
    from safetensors.torch import save_file
    for layout in layouts:
        folder, _ = write_toy(out / layout, layout)
        manifest = json.loads((folder / "hfx.json").read_text())
        static = manifest["recipe"]["static_cache"]
        comp = manifest["components"][-1]  # the decoder, or decode
        args = example_inputs(static, True, 3, 2 if comp["role"] == "decoder" else 1, 4, manifest["recipe"]["max_cache_len"])
        names = [i["name"] for i in comp["inputs"]]
        inputs = dict(zip(names, args))
        save_file({k: v.contiguous() for k, v in inputs.items()}, str(folder / "case.inputs.safetensors"))
        mod = torch.export.load(str(folder / comp["file"])).module()
        mutable = [a.clone() for a in args]
        with torch.no_grad():
            result = dict(mod(*mutable))
        for p, o in comp["cache"]["shared_buffers"]:
            result[o] = mutable[names.index(p)]
        save_file({k: v.contiguous() for k, v in result.items()}, str(folder / "case.outputs.safetensors"))


if __name__ == "__main__":
    target = Path(sys.argv[1])
    shutil.rmtree(target, ignore_errors=True)
    write_cases(target, sys.argv[2:] or LAYOUTS)
