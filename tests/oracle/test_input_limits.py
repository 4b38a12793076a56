"""Checkpoint-side limits and resource bombs (issue #14; hostile-input report D9, D10, D11, D18, D20).

- D10: a config's max_position_embeddings (16 777 216 here; Llama 4 Scout's is 10 485 760) does not size
  what an export writes or holds: the ort profile computes its rotary caches per step in the graph
  above passes::kMaxRopeCacheRows rows instead of writing a table, the logits still match
  Transformers, and `hfx inspect` predicts the files written.
- D11: --max-cache-len past 2^24 is refused as a --max-cache-len error, from the command line and
  from a recipe, before anything is allocated.
- D20: an over-cap config.json is one bad-input line; a large one under the cap stays in bounded memory.
- D18: NaN / Inf weights are named at export (tensor, count, first index); when they make the
  built-in verification fail, the failure names them instead of blaming the exporter; a negative
  norm epsilon is a config error naming the field.
(D9, the tokenizer.json bounds, is tests/unit/test_tokenizer.cc: TokenizerTest.*Bounded, *Linear.)
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import hfx_binary, run_hfx

HUGE_CONTEXT = 16777216  # 2^24 positions: a 1 GiB cos/sin table for this model's 8 rotary frequencies
ATOL = 1e-4

MEASURE = """
import resource, subprocess, sys
rc = subprocess.run(sys.argv[1:], capture_output=True, text=True)
sys.stderr.write(rc.stderr)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)
sys.exit(rc.returncode)
"""


def measured(*args) -> tuple[subprocess.CompletedProcess, int]:
    """(the finished hfx run, its peak RSS in bytes), measured in a fresh process of its own."""
    proc = subprocess.run([sys.executable, "-c", MEASURE, str(hfx_binary()), *map(str, args)],
                          capture_output=True, text=True, timeout=600)
    return proc, int(proc.stdout.split()[-1])


def edit_config(folder: Path, **changes) -> None:
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(changes)
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))


def copy_of(tiny_checkpoint, case: str, dest: Path) -> Path:
    shutil.copytree(tiny_checkpoint(case), dest)
    return dest


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def disk_of(out: Path) -> int:
    return sum(p.stat().st_size for p in out.rglob("*") if p.is_file())


# ---- D10: max_position_embeddings does not size the export

@pytest.fixture(scope="module")
def huge_context(tiny_checkpoint, tmp_path_factory):
    base = tmp_path_factory.mktemp("huge_context")
    model = copy_of(tiny_checkpoint, "llama", base / "model")
    edit_config(model, max_position_embeddings=HUGE_CONTEXT)
    return model


def test_huge_context_exports_small_in_bounded_memory(huge_context, tmp_path):
    import onnx

    out = tmp_path / "out"
    proc, rss = measured("export", "--model", huge_context, "--quiet", out)  # default: ort profile, verified
    assert proc.returncode == 0, proc.stderr
    assert rss < 1 << 30, f"peak RSS {rss / 2**20:.0f} MiB"
    files = disk_of(out)
    assert files < 4 << 20, f"{files} bytes written"  # was a 1.07 GB model.onnx
    model = onnx.load(str(out / "onnx" / "model.onnx"), load_external_data=False)
    ops = {n.op_type for n in model.graph.node}
    assert "GroupQueryAttention" in ops, ops  # still the ort profile, its caches computed per step
    assert not [i.name for i in model.graph.initializer if "cos_cache" in i.name or "sin_cache" in i.name]
    genai = json.loads((out / "onnx" / "genai_config.json").read_text())
    assert genai["search"]["max_length"] == HUGE_CONTEXT

    # The preflight predicts what was written (within test_resources.py's accuracy: 15 % + 8 MiB).
    info = json.loads(run_hfx("inspect", "--json", huge_context).stdout)
    predicted = info["preflight"]["disk_bytes"]
    assert abs(predicted - files) <= 0.15 * files + (8 << 20), (predicted, files)


def test_small_context_keeps_its_cos_sin_table(tiny_checkpoint, tmp_path):
    """Below the threshold nothing changes: the ort profile writes the precomputed caches, and inspect
    counts them."""
    import onnx

    model = copy_of(tiny_checkpoint, "llama", tmp_path / "model")
    edit_config(model, max_position_embeddings=65536)  # a 4 MiB table: visible in the preflight
    out = tmp_path / "out"
    run_hfx("export", "--model", model, "--quiet", "--no-verify", out)
    m = onnx.load(str(out / "onnx" / "model.onnx"), load_external_data=False)
    caches = {i.name: list(i.dims) for i in m.graph.initializer if "cos_cache" in i.name or "sin_cache" in i.name}
    assert sorted(caches.values()) == [[65536, 8], [65536, 8]], caches
    files = disk_of(out)
    predicted = json.loads(run_hfx("inspect", "--json", model).stdout)["preflight"]["disk_bytes"]
    assert abs(predicted - files) <= 0.15 * files, (predicted, files)  # the table dominates: no slack needed


def transformers_logits(model_dir: Path, ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
    import torch

    import tiny_models

    model = tiny_models.load_reference(model_dir)
    with torch.no_grad():
        return model(input_ids=torch.from_numpy(ids), position_ids=torch.from_numpy(positions)).logits.numpy()


def test_huge_context_logits_match_transformers(huge_context, tmp_path):
    """ORT on the ort-profile export (positions from 0: the profile derives them from the mask) and on the
    portable export at positions past 1 M (it reads position_ids) against Transformers eager."""
    import onnxruntime as ort

    from conftest import empty_cache_feed

    rng = np.random.default_rng(0)
    ids = rng.integers(3, 128, size=(1, 7), dtype=np.int64)
    for profile, start in (("ort", 0), ("portable", 1_500_000), ("portable", HUGE_CONTEXT - 7)):
        out = tmp_path / f"{profile}-{start}"
        if not out.exists():
            run_hfx("export", "--model", huge_context, "--onnx-profile", profile, "--quiet", "--no-verify", out)
        sess = ort.InferenceSession(str(out / "onnx" / "model.onnx"), providers=["CPUExecutionProvider"])
        inputs = {i.name: i for i in sess.get_inputs()}
        positions = np.arange(start, start + ids.shape[1], dtype=np.int64)[None]
        feed = empty_cache_feed(inputs, ids, np.ones_like(ids), positions)
        ours = sess.run(["logits"], feed)[0]
        ref = transformers_logits(huge_context, ids, positions)
        diff = float(np.abs(ours - ref).max())
        assert diff <= ATOL, f"{profile} at position {start}: max abs {diff:.3g}"


def test_huge_context_longrope_switch_in_graph(tiny_checkpoint, tmp_path):
    """Longrope above the threshold: the short / long frequencies are picked per step from the total
    length (as the precomputed caches were) and the rows computed from them; ORT matches Transformers on
    both sides of the original context (4)."""
    import onnx
    import onnxruntime as ort

    from conftest import empty_cache_feed

    model = copy_of(tiny_checkpoint, "phi3-longrope-full", tmp_path / "model")
    edit_config(model, max_position_embeddings=3_000_000)
    out = tmp_path / "out"
    run_hfx("export", "--model", model, "--quiet", out)  # verified against the reference executor
    m = onnx.load(str(out / "onnx" / "model.onnx"), load_external_data=False)
    assert "GroupQueryAttention" in {n.op_type for n in m.graph.node}
    assert not [i.name for i in m.graph.initializer if "_cache" in i.name]
    sess = ort.InferenceSession(str(out / "onnx" / "model.onnx"), providers=["CPUExecutionProvider"])
    inputs = {i.name: i for i in sess.get_inputs()}
    for n in (3, 9):  # below and past original_max_position_embeddings
        ids = np.random.default_rng(n).integers(3, 128, size=(1, n), dtype=np.int64)
        ours = sess.run(["logits"], empty_cache_feed(inputs, ids, np.ones_like(ids)))[0]
        ref = transformers_logits(model, ids, np.arange(n, dtype=np.int64)[None])
        assert float(np.abs(ours - ref).max()) <= ATOL, n


# ---- D11: the static cache length is bounded

@pytest.mark.parametrize("length", [100_000_000, 2**40])
def test_max_cache_len_bounded(tiny_checkpoint, tmp_path, length):
    model = tiny_checkpoint("llama")
    proc = run_hfx("export", "--model", model, "--static-cache", "--max-cache-len", length, "--quiet",
                   tmp_path / "out", check=False)
    assert proc.returncode == 2, proc.stderr  # a flag out of range: usage; the same in a recipe file: bad input
    line = one_error_line(proc)
    assert "--max-cache-len" in line and str(length) in line and "16777216" in line, line
    assert not (tmp_path / "out").exists()

    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps({"formats": ["onnx"], "static_cache": True, "max_cache_len": length}))
    proc = run_hfx("export", "--model", model, "--recipe", recipe, "--quiet", tmp_path / "out2", check=False)
    assert proc.returncode == 1, proc.stderr
    assert "16777216" in one_error_line(proc)


# ---- D20: config.json size

def test_config_over_cap_is_one_line(tiny_checkpoint, tmp_path):
    model = copy_of(tiny_checkpoint, "llama", tmp_path / "model")
    cfg = json.loads((model / "config.json").read_text())
    cfg["padding_blob"] = "x" * (20 << 20)
    (model / "config.json").write_text(json.dumps(cfg))
    for cmd in (["inspect", model], ["export", "--model", model, "--quiet", tmp_path / "out"]):
        proc, rss = measured(*cmd)
        assert proc.returncode == 1, proc.stderr
        line = one_error_line(proc)
        assert "config.json" in line and "larger than hfx reads" in line, line
        assert rss < 200 << 20, rss  # refused before reading it
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("shape", ["array", "keys"])
def test_large_config_under_cap_bounded_memory(tiny_checkpoint, tmp_path, shape):
    """A 12-16 MB config.json (6 M numbers, or 1.3 M keys) exports in bounded memory, and the preflight
    counts the parsed document (held for the export, parsed again by the verification)."""
    model = copy_of(tiny_checkpoint, "llama", tmp_path / "model")
    cfg = json.loads((model / "config.json").read_text())
    if shape == "array":
        cfg["long_list"] = [1] * (6 << 20)  # 12 MiB of "1,"
    else:
        cfg.update({f"k{i}": 0 for i in range(1_300_000)})  # 15 MiB of "k123456":0
    (model / "config.json").write_text(json.dumps(cfg, separators=(",", ":")))
    assert (model / "config.json").stat().st_size < 16 << 20
    pre = json.loads(run_hfx("inspect", "--json", model).stdout)["preflight"]
    for extra, key in ((["--no-verify"], "peak_memory_no_verify_bytes"), ([], "peak_memory_bytes")):
        out = tmp_path / f"out{len(extra)}"
        proc, rss = measured("export", "--model", model, "--quiet", *extra, out)
        assert proc.returncode == 0, proc.stderr
        assert rss < 500 << 20, f"peak RSS {rss / 2**20:.0f} MiB"  # 350 MiB measured for the array, verified
        assert abs(pre[key] - rss) <= 0.15 * rss + (8 << 20), (key, pre[key], rss)


# ---- D18: non-finite weights and a negative epsilon

def edit_tensor(folder: Path, name: str, edit) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    path = folder / "model.safetensors"
    tensors = load_file(str(path))
    t = tensors[name].clone()
    edit(t)
    tensors[name] = t
    save_file(tensors, str(path), metadata={"format": "pt"})
    del torch


def test_inf_in_unused_embedding_row_is_named(tiny_checkpoint, tmp_path):
    model = copy_of(tiny_checkpoint, "llama", tmp_path / "model")

    def put_inf(t):
        t[5, 0] = float("inf")
    edit_tensor(model, "model.embed_tokens.weight", put_inf)
    proc = run_hfx("export", "--model", model, tmp_path / "out")
    assert "model.embed_tokens.weight: 1 non-finite value (1 inf), first at [5, 0]" in proc.stderr, proc.stderr


def test_nan_in_used_weight_names_tensor_not_exporter(tiny_checkpoint, tmp_path):
    model = copy_of(tiny_checkpoint, "llama", tmp_path / "model")

    def put_nan(t):
        t[3] = float("nan")
        t[7] = float("nan")
    edit_tensor(model, "model.norm.weight", put_nan)
    proc = run_hfx("export", "--model", model, "--quiet", tmp_path / "out", check=False)
    assert proc.returncode == 1, proc.stderr
    line = one_error_line(proc)
    assert "model.norm.weight: 2 non-finite values (2 nan), first at [3]" in line, line
    assert "does not match its reference" not in line, line
    assert not (tmp_path / "out").exists()
    # --no-verify writes it, and says which tensor holds what.
    proc = run_hfx("export", "--model", model, "--no-verify", tmp_path / "out")
    assert "model.norm.weight: 2 non-finite values" in proc.stderr, proc.stderr


def test_bf16_beyond_f16_range_names_tensor(tiny_checkpoint, tmp_path):
    import torch

    model = copy_of(tiny_checkpoint, "llama", tmp_path / "model")
    from safetensors.torch import load_file, save_file
    path = model / "model.safetensors"
    tensors = {k: v.to(torch.bfloat16) for k, v in load_file(str(path)).items()}
    tensors["model.layers.0.mlp.down_proj.weight"][1, 2] = 1e5  # finite in bf16, inf in f16
    save_file(tensors, str(path), metadata={"format": "pt"})
    edit_config(model, torch_dtype="bfloat16")
    proc = run_hfx("export", "--model", model, "--dtype", "f16", "--quiet", tmp_path / "out", check=False)
    text = proc.stderr
    assert "model.layers.0.mlp.down_proj.weight: 1 non-finite value (1 inf)" in text, text
    assert "65504" in text, text


@pytest.mark.parametrize("value", [-1, -1e-6])
def test_negative_norm_eps_is_config_error(tiny_checkpoint, tmp_path, value):
    """rms_norm_eps = -1 made every small variance NaN and the export failed "not matching its reference".
    (A non-finite number such as 1e400 is already refused by the JSON parser.)"""
    model = copy_of(tiny_checkpoint, "llama", tmp_path / "model")
    edit_config(model, rms_norm_eps=value)
    proc = run_hfx("export", "--model", model, "--quiet", tmp_path / "out", check=False)
    assert proc.returncode == 1, proc.stderr
    line = one_error_line(proc)
    assert "config.json" in line and "rms_norm_eps" in line and ">= 0" in line, line


def test_negative_layer_norm_eps_is_config_error(tmp_path):
    """An encoder's layer_norm_eps (BERT) is checked the same way."""
    import torch
    from transformers import BertConfig, BertModel

    cfg = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=48,
                     max_position_embeddings=32)
    torch.manual_seed(0)
    BertModel(cfg).save_pretrained(tmp_path / "bert", safe_serialization=True)
    edit_config(tmp_path / "bert", layer_norm_eps=-1e-12)
    proc = run_hfx("inspect", tmp_path / "bert", check=False)
    assert proc.returncode == 1, proc.stderr
    assert "layer_norm_eps" in one_error_line(proc)
