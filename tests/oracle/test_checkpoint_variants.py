"""Checkpoint layouts hfx must read: F16 and BF16 weights, sharded safetensors with an index, and
tokenizer files carried into the export. Transformers loads the same files in f32 as the oracle
(the upcast is exact, so the fp32 gate of 1e-4 holds)."""
from __future__ import annotations

import json
import shutil

import numpy as np
import onnxruntime as ort
import pytest
import torch
from transformers import AutoModelForCausalLM

import tiny_models
from conftest import run_hfx
from test_decoder_parity import ATOL, decode_feeds, geometry, run_steps, transformers_steps, assert_close


def save_variant(tmp_path, dtype: str, shard: bool):
    src = tiny_models.make("qwen2-tied", tmp_path / "src", dtype=dtype)
    if not shard:
        return src
    model = AutoModelForCausalLM.from_pretrained(src, torch_dtype=getattr(torch, dtype))
    out = tmp_path / "sharded"
    model.save_pretrained(out, safe_serialization=True, max_shard_size="20KB")
    assert (out / "model.safetensors.index.json").exists(), "expected a sharded checkpoint"
    return out


@pytest.mark.parametrize("dtype,shard", [("float16", False), ("bfloat16", False), ("float32", True),
                                         ("bfloat16", True)])
def test_dtypes_and_shards_export_and_match(dtype, shard, tmp_path):
    folder = save_variant(tmp_path, dtype, shard)
    out = tmp_path / "out"
    # The portable contract: decode_feeds' left-padded rows are compared at every position, pads included
    # (the ort profile's rolled rows match at real positions only: test_ort_profile.py).
    run_hfx("export", "--model", folder, "--format", "onnx", "--onnx-profile", "portable", "--quiet", out)
    model = tiny_models.load_reference(folder)
    steps = decode_feeds(model.config.vocab_size)
    ref = transformers_steps(model, steps)
    sess = ort.InferenceSession(str(out / "onnx" / "model.onnx"), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    ours = run_steps(lambda f: dict(zip(names, sess.run(None, f))), steps, *geometry(model))
    for step, ((logits, _), (ref_logits, _)) in enumerate(zip(ours, ref)):
        assert_close(f"{dtype} shard={shard} step {step}", logits, ref_logits)


def test_side_files_are_carried(tmp_path):
    folder = tiny_models.make("llama", tmp_path / "m")
    tok = {"version": "1.0", "model": {"type": "BPE", "vocab": {}, "merges": []}}
    (folder / "tokenizer.json").write_text(json.dumps(tok))
    (folder / "tokenizer_config.json").write_text("{}")
    out = tmp_path / "out"
    run_hfx("export", "--model", folder, "--quiet", out)
    for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        assert (out / name).read_bytes() == (folder / name).read_bytes()
        assert (out / "onnx" / name).read_bytes() == (folder / name).read_bytes()
    # External data, at relative locations. The ort profile reads the tiny llama's f32 tensors as they are
    # stored, so the data file is the checkpoint's model.safetensors itself, each initializer at its
    # tensor's offset there (docs/architecture.md, "A mirrored data file"); the portable profile's
    # transposed weights are streamed into a data file of its own, each tensor 64 KiB aligned.
    import onnx
    ckpt = (folder / "model.safetensors").read_bytes()
    header_len = int.from_bytes(ckpt[:8], "little")
    stored = {name: 8 + header_len + t["data_offsets"][0]
              for name, t in json.loads(ckpt[8:8 + header_len]).items() if name != "__metadata__"}
    assert (out / "onnx" / "model.onnx_data").read_bytes() == ckpt
    run_hfx("export", "--model", folder, "--quiet", "--onnx-profile", "portable", tmp_path / "portable")
    for export, mirrored in ((out, True), (tmp_path / "portable", False)):
        m = onnx.load(str(export / "onnx" / "model.onnx"), load_external_data=False)
        externals = [t for t in m.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
        assert externals
        for t in externals:
            kv = {e.key: e.value for e in t.external_data}
            assert kv["location"] == "model.onnx_data"
            if mirrored:
                assert int(kv["offset"]) == stored[t.name], t.name
            else:
                assert int(kv.get("offset", 0)) % 65536 == 0, t.name


def test_export_is_deterministic(tmp_path):
    folder = tiny_models.make("qwen3", tmp_path / "m")
    a, b = tmp_path / "a", tmp_path / "b"
    run_hfx("export", "--model", folder, "--quiet", a)
    shutil.copytree(folder, tmp_path / "moved")
    run_hfx("export", "--model", tmp_path / "moved", "--quiet", b)
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    for f in files:
        if f.name == "hfx.json":
            # The manifest names the source folder it was exported from; everything else must agree.
            ma, mb = json.loads((a / f).read_text()), json.loads((b / f).read_text())
            assert (a / ma["source"].pop("path")).resolve() != (b / mb["source"].pop("path")).resolve()
            ma["source"].pop("name"), mb["source"].pop("name")
            assert ma == mb
            continue
        assert (a / f).read_bytes() == (b / f).read_bytes(), f"{f} differs between two exports"


@pytest.mark.parametrize("case,drop,changes", [
    ("ministral", ["layer_types"], {}),                        # every layer slides
    ("ministral", ["layer_types"], {"sliding_window": None}),  # none does
    ("olmo3", ["layer_types"], {"num_hidden_layers": 8}),       # every 4th layer is full
    ("smollm3", ["layer_types"], {}),                            # the NoPE layer slides
    ("smollm3", ["layer_types", "no_rope_layers"], {"num_hidden_layers": 8}),  # every 4th layer NoPE, sliding
    ("exaone4", ["layer_types"], {"num_hidden_layers": 8}),     # every 4th layer full, and without rope
    ("exaone4", [], {"sliding_window": None, "layer_types": ["full_attention"] * 2}),  # no window: rope everywhere
    ("cohere2", ["layer_types"], {"num_hidden_layers": 8}),     # every 4th layer full, and without rope
])
def test_window_defaults_follow_the_config_class(case, drop, changes, tmp_path):
    """Configs without layer_types: hfx derives the sliding layers the way Transformers' config class
    fills layer_types in."""
    from transformers import AutoConfig
    from test_atomic import save_random_checkpoint
    model_type, overrides = tiny_models.CASES[case]
    config = {**tiny_models.BASE, **overrides, **changes}
    for key in drop:
        config.pop(key, None)
    src = save_random_checkpoint(tmp_path / "model", model_type, config)
    saved = json.loads((src / "config.json").read_text())  # save_pretrained writes the derived layer_types
    for key in drop:
        saved.pop(key, None)
    saved.update(changes)
    (src / "config.json").write_text(json.dumps(saved))
    ref = AutoConfig.from_pretrained(src)
    sliding = sum(t == "sliding_attention" for t in ref.layer_types)
    want = f"{ref.sliding_window} on {sliding} of {ref.num_hidden_layers} layers" if sliding else "none"
    features = json.loads(run_hfx("inspect", "--json", src).stdout)["features"]
    assert features["sliding_window"] == want, (ref.layer_types, features)
    nope = {"smollm3": lambda: ref.no_rope_layers.count(0),  # Exaone4Attention: rope when no window or sliding
            "exaone4": lambda: sum(ref.sliding_window is not None and t != "sliding_attention" for t in ref.layer_types),
            "cohere2": lambda: sum(t != "sliding_attention" for t in ref.layer_types)}  # rope on sliding layers only
    if model_type in nope:
        n = nope[model_type]()
        assert features.get("no_rope_layers") == (f"{n} of {ref.num_hidden_layers} layers without rope" if n else None), features
