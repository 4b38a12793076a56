"""Hostile and broken checkpoints: each case below breaks one thing in a valid tiny Llama checkpoint
(made once per session with tiny_models.make; nothing binary is checked in). `hfx export` must
answer every one with exactly one line on stderr that names the file at fault, exit code 1, and no
output folder nor staging folder left beside it.
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

import tiny_models
from conftest import run_hfx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "malformed"))
from cases import CASES, deep  # noqa: E402  (tests/malformed/cases.py: the corpus)


@pytest.fixture(scope="session")
def pristine(tmp_path_factory) -> Path:
    return tiny_models.make("llama", tmp_path_factory.mktemp("malformed") / "llama")


@pytest.mark.parametrize("name,breakage,expected", CASES, ids=[c[0] for c in CASES])
def test_malformed_checkpoint(pristine, tmp_path, name, breakage, expected):
    model = tmp_path / "model"
    shutil.copytree(pristine, model)
    breakage(model)
    out = tmp_path / "out"
    proc = run_hfx("export", "--model", model, "--quiet", out, check=False)
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert proc.returncode == 1, f"exit {proc.returncode}, stderr: {proc.stderr[-2000:]!r}"
    assert len(lines) == 1, f"expected one error line, got: {proc.stderr[-2000:]!r}"
    assert len(lines[0]) < 600, f"error line too long: {lines[0]!r}"
    for text in expected:
        assert text in lines[0], f"{text!r} not in {lines[0]!r}"
    assert not out.exists(), "a failed export must leave nothing behind"
    left = [p.name for p in tmp_path.iterdir() if ".hfx-partial" in p.name]
    assert not left, f"staging folder left behind: {left}"


def test_enough_cases():
    assert len(CASES) >= 30


# `hfx export --recipe FILE` reads another user file: a recipe or a whole hfx.json.
RECIPES = [
    ("recipe-deep", '{"recipe": {"task": ' + deep(100000) + "}}", ["recipe.json", "nested"]),
    ("recipe-folder-number", json.dumps({"recipe": {"formats": ["onnx"]}, "source": {"folder": 5}}), ["--model"]),
    ("recipe-not-json", '{"recipe": ', ["recipe.json", "not valid JSON"]),
    ("recipe-task-list", json.dumps({"task": [1, 2]}), ["recipe.json", "task"]),
]


@pytest.mark.parametrize("name,text,expected", RECIPES, ids=[r[0] for r in RECIPES])
def test_malformed_recipe(pristine, tmp_path, name, text, expected):
    recipe = tmp_path / "recipe.json"
    recipe.write_text(text)
    out = tmp_path / "out"
    args = ["export", "--recipe", recipe, "--quiet", out]
    if name != "recipe-folder-number":
        args[1:1] = ["--model", pristine]
    proc = run_hfx(*args, check=False)
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert proc.returncode == 1, f"exit {proc.returncode}, stderr: {proc.stderr[-2000:]!r}"
    assert len(lines) == 1, proc.stderr
    for t in expected:
        assert t in lines[0], f"{t!r} not in {lines[0]!r}"
    assert not out.exists()
