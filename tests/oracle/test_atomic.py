"""Atomic output and determinism.

- An export killed at a random moment (SIGKILL, SIGTERM, SIGINT; seeded) leaves OUT as it was: absent
  when there was none, byte-identical to the previous complete export when there was one (--overwrite).
- SIGTERM and SIGINT remove the staging folder `.OUT.hfx-partial-<pid>` before the process dies; after
  a SIGKILL the next export into the same OUT removes the stale one.
- Two exports of the same checkpoint, copied to another path, into different output paths are
  byte-identical (hfx.json differs only in source.folder).
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

import tiny_models
from conftest import hfx_binary, run_hfx

# A checkpoint whose export takes a second or two: large enough that a kill lands mid-write.
MEDIUM = dict(vocab_size=32000, hidden_size=512, intermediate_size=1024, num_hidden_layers=8,
              num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=256,
              rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False)


def save_random_checkpoint(folder: Path, model_type: str, config: dict, dtype: str = "float32", seed: int = 0) -> Path:
    """A Transformers-layout checkpoint with seeded random weights, written without building the model
    in torch (tensor names and shapes come from a meta-device model), so hundreds of MB take a second."""
    import numpy as np
    import torch
    from safetensors.numpy import save_file
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model(model_type, **config)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    rng = np.random.default_rng(seed)
    tensors = {}
    for name, p in model.state_dict().items():
        if cfg.tie_word_embeddings and name == "lm_head.weight":
            continue
        a = rng.standard_normal(tuple(p.shape), dtype=np.float32) * 0.02
        if "norm" in name:
            a += 1.0
        tensors[name] = a
    folder.mkdir(parents=True, exist_ok=True)
    cfg.save_pretrained(folder)
    if dtype == "bfloat16":
        import torch as _t
        from safetensors.torch import save_file as save_torch
        save_torch({k: _t.from_numpy(v).to(_t.bfloat16) for k, v in tensors.items()}, folder / "model.safetensors",
                   metadata={"format": "pt"})
    else:
        save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


def tree_hashes(root: Path) -> dict[str, str]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def partials(parent: Path, name: str) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(f".{name}.hfx-partial-"))


@pytest.fixture(scope="session")
def medium(tmp_path_factory) -> Path:
    return save_random_checkpoint(tmp_path_factory.mktemp("atomic") / "medium", "llama", MEDIUM)


def export_cmd(model: Path, out: Path, *extra: str) -> list[str]:
    return [str(hfx_binary()), "export", "--model", str(model), "--quiet", "--no-verify", *extra, str(out)]


def test_killed_export_leaves_previous_artifact_intact(medium, tmp_path, capsys):
    out = tmp_path / "out"
    t0 = time.monotonic()
    subprocess.run(export_cmd(medium, out), check=True)
    duration = time.monotonic() - t0
    before = tree_hashes(out)
    assert "hfx.json" in before and "onnx/model.onnx_data" in before

    rng = random.Random(20260401)
    signals = [signal.SIGKILL, signal.SIGTERM, signal.SIGINT] * 4
    rng.shuffle(signals)
    outcomes = []
    for sig in signals:
        delay = rng.uniform(0.0, duration * 1.3)
        proc = subprocess.Popen(export_cmd(medium, out, "--overwrite"), stderr=subprocess.PIPE)
        time.sleep(delay)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
        outcomes.append((sig.name, round(delay, 2), proc.returncode))
        assert proc.returncode in (0, -sig), f"{sig.name} after {delay:.2f}s: exit {proc.returncode}: {err[-500:]!r}"
        assert out.is_dir(), f"{sig.name} after {delay:.2f}s: the previous export is gone"
        assert tree_hashes(out) == before, f"{sig.name} after {delay:.2f}s: the export changed"
        if sig != signal.SIGKILL:
            assert partials(tmp_path, "out") == [], f"{sig.name} after {delay:.2f}s left a staging folder"
    with capsys.disabled():
        print("\natomicity: kills (signal, delay s, exit):", outcomes, f"full export {duration:.2f}s; previous artifact intact each time")
    # Whatever a SIGKILL left behind, the next export cleans it.
    subprocess.run(export_cmd(medium, out, "--overwrite"), check=True)
    assert partials(tmp_path, "out") == []
    assert tree_hashes(out) == before


def test_killed_first_export_leaves_nothing(medium, tmp_path):
    # A complete export to compare against: a signal that lands after the final rename (the export
    # is done, the process is still exiting) dies of the signal with OUT complete, which is allowed;
    # what must never appear is a partial OUT.
    reference = tmp_path / "reference"
    t0 = time.monotonic()
    subprocess.run(export_cmd(medium, reference), check=True)
    duration = time.monotonic() - t0
    complete = tree_hashes(reference)

    out = tmp_path / "fresh"
    rng = random.Random(7)
    mid_export = 0
    for sig in [signal.SIGTERM, signal.SIGINT, signal.SIGTERM, signal.SIGINT]:
        delay = rng.uniform(0.05, duration * 0.7)
        proc = subprocess.Popen(export_cmd(medium, out), stderr=subprocess.PIPE)
        time.sleep(delay)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode in (0, -sig), f"{sig.name} after {delay:.2f}s: exit {proc.returncode}: {err[-500:]!r}"
        assert partials(tmp_path, "fresh") == [], f"{sig.name} after {delay:.2f}s left a staging folder"
        if out.exists():  # finished before the signal, or the signal came after the final rename
            assert tree_hashes(out) == complete, f"{sig.name} after {delay:.2f}s: OUT is not a complete export"
            shutil.rmtree(out)
        else:
            assert proc.returncode == -sig
            mid_export += 1
    # The delays fall inside the export's measured time, so kills do land mid-write; if none did,
    # this test checked nothing.
    assert mid_export > 0, "no signal landed before the export finished"


def test_stale_staging_from_dead_process_is_removed(medium, tmp_path):
    out = tmp_path / "out"
    # A staging folder of a process that no longer exists (a SIGKILLed export), and one of a live
    # process (this one) that must be left alone.
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / f".out.hfx-partial-{dead.pid}"
    (stale / "onnx").mkdir(parents=True)
    (stale / "onnx" / "model.onnx_data").write_bytes(b"\0" * 1000)
    stale_old = tmp_path / f".out.hfx-partial-{dead.pid}.old"
    stale_old.mkdir()
    live = tmp_path / f".out.hfx-partial-{os.getpid()}"
    live.mkdir()
    other = tmp_path / f".other.hfx-partial-{dead.pid}"
    other.mkdir()
    subprocess.run(export_cmd(tiny_models_checkpoint(tmp_path), out), check=True)
    assert not stale.exists() and not stale_old.exists(), "stale staging folder kept"
    assert live.exists(), "a live process's staging folder was removed"
    assert other.exists(), "another output's staging folder was touched"


def tiny_models_checkpoint(tmp_path: Path) -> Path:
    return tiny_models.make("llama", tmp_path / "tiny")


def test_sigkill_then_next_export_cleans(medium, tmp_path):
    out = tmp_path / "out"
    proc = subprocess.Popen(export_cmd(medium, out))
    # Wait for the staging folder to appear, then kill outright.
    deadline = time.monotonic() + 30
    while not partials(tmp_path, "out") and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not out.exists()
    left = partials(tmp_path, "out")
    assert left, "SIGKILL cannot clean up: a staging folder is expected"
    subprocess.run(export_cmd(medium, out), check=True)
    assert partials(tmp_path, "out") == []
    assert (out / "hfx.json").exists()


@pytest.mark.parametrize("extra", [[], ["--static-cache", "--max-cache-len", "16"]], ids=["default", "static"])
def test_exports_are_deterministic(tiny_checkpoint, tmp_path, extra):
    a_src = tiny_checkpoint("llama")
    b_src = tmp_path / "elsewhere" / "copy"
    shutil.copytree(a_src, b_src)
    a, b = tmp_path / "a", tmp_path / "b" / "nested"
    run_hfx("export", "--model", a_src, "--quiet", *extra, a)
    run_hfx("export", "--model", b_src, "--quiet", *extra, b)
    ha, hb = tree_hashes(a), tree_hashes(b)
    assert sorted(ha) == sorted(hb)
    differing = [f for f in ha if ha[f] != hb[f]]
    assert differing == ["hfx.json"], f"files that differ: {differing}"
    ma, mb = json.loads((a / "hfx.json").read_text()), json.loads((b / "hfx.json").read_text())
    assert (a / ma["source"].pop("path")).resolve() == a_src.resolve()
    assert (b / mb["source"].pop("path")).resolve() == b_src.resolve()
    ma["source"].pop("name"), mb["source"].pop("name")
    assert ma == mb
