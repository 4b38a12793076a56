"""The malformed-input corpus: each case breaks one thing in a valid tiny checkpoint.

A case is (name, breakage, expected): `breakage(folder)` edits a copy of a valid tiny Llama checkpoint
in place, and `expected` are the words the one-line error must contain (the file at fault, and what
is wrong). The cases are recipes rather than stored files so the corpus stays valid against the
tiny checkpoint of the day (Transformers writes it) and nothing binary is checked in;
tests/oracle/test_malformed.py runs them (`hfx export` must answer each with one stderr line, exit 1,
and no output or staging folder).
"""
from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path
from typing import Callable

ST = "model.safetensors"
INDEX = "model.safetensors.index.json"


# ------------------------------------------------------------------------------------------- helpers

def read_st(path: Path) -> tuple[dict, bytes]:
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + n]), data[8 + n:]


def write_st(path: Path, header: dict | str | bytes, body: bytes) -> None:
    raw = header if isinstance(header, bytes) else (header if isinstance(header, str) else json.dumps(header)).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + body)


def edit_header(f: Callable[[dict], None]) -> Callable[[Path], None]:
    def go(folder: Path) -> None:
        header, body = read_st(folder / ST)
        f(header)
        write_st(folder / ST, header, body)
    return go


def edit_config(**changes) -> Callable[[Path], None]:
    def go(folder: Path) -> None:
        cfg = json.loads((folder / "config.json").read_text())
        cfg.update(changes)
        (folder / "config.json").write_text(json.dumps(cfg))  # NaN / Infinity written as Python does
    return go


def config_text(f: Callable[[str], str | bytes]) -> Callable[[Path], None]:
    def go(folder: Path) -> None:
        out = f((folder / "config.json").read_text())
        (folder / "config.json").write_bytes(out if isinstance(out, bytes) else out.encode())
    return go


def shard(folder: Path) -> dict:
    """Splits model.safetensors into two shards with an index; returns the index (already written)."""
    header, body = read_st(folder / ST)
    names = sorted(k for k in header if k != "__metadata__")
    parts = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
             "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    weight_map = {}
    for file, members in parts.items():
        h, data, off = {}, b"", 0
        for n in members:
            b, e = header[n]["data_offsets"]
            h[n] = {**header[n], "data_offsets": [off, off + e - b]}
            data += body[b:e]
            off += e - b
            weight_map[n] = file
        write_st(folder / file, h, data)
    (folder / ST).unlink()
    index = {"metadata": {"total_size": len(body)}, "weight_map": weight_map}
    (folder / INDEX).write_text(json.dumps(index))
    return index


def edit_index(f: Callable[[dict, Path], None]) -> Callable[[Path], None]:
    def go(folder: Path) -> None:
        index = shard(folder)
        f(index, folder)
        (folder / INDEX).write_text(json.dumps(index))
    return go


def first_tensor(header: dict) -> str:
    return sorted(k for k in header if k != "__metadata__")[0]


def deep(n: int) -> str:
    return "[" * n + "]" * n


def cut_safetensors(keep: Callable[[int], int]) -> Callable[[Path], None]:
    def go(folder: Path) -> None:
        data = (folder / ST).read_bytes()
        (folder / ST).write_bytes(data[:keep(len(data))])
    return go


def set_length(value: Callable[[int], int]) -> Callable[[Path], None]:
    def go(folder: Path) -> None:
        data = bytearray((folder / ST).read_bytes())
        data[:8] = struct.pack("<Q", value(len(data)))
        (folder / ST).write_bytes(bytes(data))
    return go


def overlap(h: dict) -> None:
    a, b = [k for k in sorted(h) if k != "__metadata__" and h[k]["shape"] == [64]][:2]
    h[b]["data_offsets"] = list(h[a]["data_offsets"])


def swap_offsets(h: dict) -> None:
    t = "model.norm.weight"
    b, e = h[t]["data_offsets"]
    h[t]["data_offsets"] = [e, b]


def dup_tensor_header(folder: Path) -> None:
    header, body = read_st(folder / ST)
    name = first_tensor(header)
    text = json.dumps(header)
    text = text[:-1] + ", " + json.dumps(name) + ": " + json.dumps(header[name]) + "}"
    write_st(folder / ST, text, body)


def drop_tensor(name: str) -> Callable[[Path], None]:
    def go(folder: Path) -> None:
        header, body = read_st(folder / ST)
        del header[name]
        write_st(folder / ST, header, body)
    return go


def extra_tensor(folder: Path) -> None:
    header, body = read_st(folder / ST)
    header["model.layers.0.mystery.weight"] = {"dtype": "F32", "shape": [2], "data_offsets": [len(body), len(body) + 8]}
    write_st(folder / ST, header, body + bytes(8))


def same_tensor_in_two_shards(index: dict, folder: Path) -> None:
    # The tensor of shard 1 also stored (and mapped) in a third shard.
    name = next(n for n, f in index["weight_map"].items() if f.startswith("model-00001"))
    h, body = read_st(folder / "model-00001-of-00002.safetensors")
    b, e = h[name]["data_offsets"]
    write_st(folder / "model-00003-of-00003.safetensors", {name: {**h[name], "data_offsets": [0, e - b]}}, body[b:e])
    index["weight_map"]["model.extra.weight"] = "model-00003-of-00003.safetensors"


def shard_symlink_outside(index: dict, folder: Path) -> None:
    outside = folder.parent / (folder.name + "-outside.safetensors")
    shutil.move(folder / "model-00002-of-00002.safetensors", outside)
    os.symlink(outside, folder / "model-00002-of-00002.safetensors")


def config_symlink_outside(folder: Path) -> None:
    outside = folder.parent / (folder.name + "-outside-config.json")
    shutil.move(folder / "config.json", outside)
    os.symlink(outside, folder / "config.json")


def pickles_only(folder: Path) -> None:
    (folder / ST).unlink()
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04\x95this would be a pickle that runs code")


def no_weights(folder: Path) -> None:
    (folder / ST).unlink()


def index_field(f: Callable[[dict], None]) -> Callable[[dict, Path], None]:
    def go(index: dict, folder: Path) -> None:
        f(index)
    return go


def first_mapped(index: dict) -> str:
    return sorted(index["weight_map"])[0]


# ------------------------------------------------------------------------------------------- the cases

# (name, how to break the checkpoint, substrings the one error line must contain)
CASES: list[tuple[str, Callable[[Path], None], list[str]]] = [
    # truncated files
    ("truncated-data", cut_safetensors(lambda n: n // 2), [ST]),
    ("truncated-header", cut_safetensors(lambda n: 40), [ST, "header"]),
    ("shorter-than-length", cut_safetensors(lambda n: 5), [ST, "too short"]),
    ("empty-safetensors", cut_safetensors(lambda n: 0), [ST]),
    ("truncated-config", config_text(lambda t: t[: len(t) // 2]), ["config.json", "not valid JSON"]),
    # header length past the end of the file, absurd
    ("header-length-past-end", set_length(lambda n: n * 4), [ST, "past the end"]),
    ("header-length-2^63", set_length(lambda n: 2**63), [ST, "header length"]),
    ("header-not-json", lambda f: write_st(f / ST, b"\x00garbage{", b""), [ST, "not valid JSON"]),
    ("header-not-object", lambda f: write_st(f / ST, "[1, 2]", b""), [ST, "object"]),
    # offsets
    ("offsets-out-of-range", edit_header(lambda h: h["model.norm.weight"].update(
        data_offsets=[x + 10**9 for x in h["model.norm.weight"]["data_offsets"]])), [ST, "model.norm.weight"]),
    ("offsets-overlap", edit_header(overlap), [ST, "overlap"]),
    ("offsets-begin-after-end", edit_header(swap_offsets), [ST, "model.norm.weight"]),
    ("offsets-negative", edit_header(lambda h: h["model.norm.weight"].update(data_offsets=[-4, 252])),
     [ST, "model.norm.weight", "data_offsets"]),
    # dtype x shape != byte length
    ("shape-vs-bytes", edit_header(lambda h: h["model.norm.weight"].update(shape=[65])), [ST, "model.norm.weight"]),
    ("dtype-vs-bytes", edit_header(lambda h: h["model.norm.weight"].update(dtype="F16")), [ST, "model.norm.weight"]),
    # dims: negative, zero, absurd; vocab sizes
    ("dim-negative", edit_header(lambda h: h["model.norm.weight"].update(shape=[-64])), [ST, "model.norm.weight", "shape"]),
    ("dim-absurd", edit_header(lambda h: h["model.norm.weight"].update(shape=[2**40, 2**40])), [ST, "model.norm.weight"]),
    ("dim-zero", edit_header(lambda h: h["model.norm.weight"].update(shape=[0], data_offsets=[0, 0])),
     ["model.norm.weight"]),
    ("vocab-zero", edit_config(vocab_size=0), ["config.json", "vocab_size"]),
    ("vocab-negative", edit_config(vocab_size=-128), ["config.json", "vocab_size"]),
    ("vocab-10^12", edit_config(vocab_size=10**12), ["vocab_size"]),
    ("hidden-10^9", edit_config(hidden_size=10**9), ["hidden_size"]),
    ("layers-absurd", edit_config(num_hidden_layers=10**15), ["num_hidden_layers"]),
    ("heads-zero", edit_config(num_attention_heads=0), ["config.json", "num_attention_heads"]),
    # NaN / Inf / strings where numbers belong
    ("hidden-nan", edit_config(hidden_size=float("nan")), ["config.json", "hidden_size"]),
    ("hidden-inf", edit_config(hidden_size=float("inf")), ["config.json", "hidden_size"]),
    ("eps-nan", edit_config(rms_norm_eps=float("nan")), ["config.json", "rms_norm_eps"]),
    ("theta-inf", edit_config(rope_parameters={"rope_type": "default", "rope_theta": float("inf")}),
     ["config.json", "rope_theta"]),
    ("heads-string", edit_config(num_attention_heads="four"), ["config.json", "num_attention_heads"]),
    ("layers-float", edit_config(num_hidden_layers=2.5), ["config.json", "num_hidden_layers"]),
    ("layers-bool", edit_config(num_hidden_layers=True), ["config.json", "num_hidden_layers"]),
    # missing and duplicate tensors
    ("tensor-missing", drop_tensor("model.norm.weight"), ["model.norm.weight"]),
    ("tensor-extra", extra_tensor, ["model.layers.0.mystery.weight"]),
    ("tensor-duplicate", dup_tensor_header, [ST, "twice"]),
    ("tensor-in-two-shards", edit_index(same_tensor_in_two_shards), ["model-0000"]),
    # shard names with .., absolute paths, symlinks out of the folder
    ("shard-dotdot", edit_index(index_field(lambda i: i["weight_map"].__setitem__(
        first_mapped(i), "../model-00001-of-00002.safetensors"))), [INDEX, ".."]),
    ("shard-absolute", edit_index(index_field(lambda i: i["weight_map"].__setitem__(first_mapped(i), "/etc/passwd"))),
     [INDEX, "/etc/passwd"]),
    ("shard-symlink-outside", edit_index(shard_symlink_outside), ["model-00002-of-00002.safetensors", "outside"]),
    ("shard-missing", edit_index(index_field(lambda i: i["weight_map"].__setitem__(
        first_mapped(i), "model-00009-of-00009.safetensors"))), ["model-00009-of-00009.safetensors"]),
    ("index-not-json", lambda f: (shard(f), (f / INDEX).write_text("{\"weight_map\": ")), [INDEX]),
    ("config-symlink-outside", config_symlink_outside, ["config.json", "outside"]),
    # unknown dtypes
    ("dtype-unknown", edit_header(lambda h: h["model.norm.weight"].update(dtype="F33")), [ST, "F33"]),
    ("dtype-unsupported", edit_header(lambda h: h["model.norm.weight"].update(dtype="F8_E4M3", shape=[256])),
     [ST, "F8_E4M3"]),
    ("dtype-number", edit_header(lambda h: h["model.norm.weight"].update(dtype=4)), [ST, "dtype"]),
    # non-UTF-8 JSON
    ("config-latin1", config_text(lambda t: t.replace('"llama"', '"llama"').encode()[:-1] + b', "name": "caf\xe9"}'),
     ["config.json"]),
    ("header-latin1", lambda f: write_st(f / ST, b'{"caf\xe9": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]}}',
                                         bytes(4)), [ST]),
    ("config-utf16", config_text(lambda t: t.encode("utf-16")), ["config.json"]),
    # deeply nested JSON (the parser and every printer of values must not recurse 100000 deep)
    ("config-deep-used", config_text(lambda t: t.replace('"hidden_size": 64', '"hidden_size": ' + deep(100000))),
     ["config.json"]),
    ("config-deep-unused", config_text(lambda t: t[:-1] + ', "extra": ' + deep(100000) + "}"), ["config.json"]),
    ("header-deep", lambda f: write_st(f / ST, deep(100000), b""), [ST]),
    ("index-deep", lambda f: (shard(f), (f / INDEX).write_text('{"weight_map": ' + deep(100000) + "}")), [INDEX]),
    ("generation-config-deep", lambda f: (f / "generation_config.json").write_text(deep(100000)),
     ["generation_config.json"]),
    # config shape
    ("config-not-object", config_text(lambda t: "[" + t + "]"), ["config.json", "object"]),
    ("config-missing", lambda f: (f / "config.json").unlink(), ["config.json"]),
    ("model-type-unknown", edit_config(model_type="not_a_model"), ["not_a_model"]),
    # weights that hfx never reads
    ("pickles-only", pickles_only, ["pytorch_model.bin", "never unpickles"]),
    ("no-weights", no_weights, ["no weights"]),
]
