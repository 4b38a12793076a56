"""Reading an export back is as hostile-proof as reading a checkpoint (issue #14; findings D4, D6, D7, D8
of the hostile-input report). `hfx check`, `verify`, `generate` and `tokenize` read files that whoever
shipped the export controls: every name taken from a file must resolve inside its folder after every
symlink, only regular files are opened (a FIFO would block forever, /dev/zero never ends), and whole-file
reads are capped. Each test builds the hostile export from a copy of a normal tiny export, re-signing
hfx.json where needed (an attacker controls the manifest), and runs hfx with a timeout so that a
regression fails instead of hanging the suite."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import hfx_binary, hfx_has_openvino, run_hfx

TIMEOUT = 60  # seconds; each command here finishes in well under one (a hang is the regression)

# A WordLevel tokenizer small enough to write by hand: `tokenize` and `generate --prompt` load it.
TOKENIZER = {
    "version": "1.0",
    "model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "hi": 1, "there": 2}, "unk_token": "[UNK]"},
    "pre_tokenizer": {"type": "Whitespace"},
}


def hfx(*args, timeout: int = TIMEOUT) -> subprocess.CompletedProcess:
    return subprocess.run([str(hfx_binary()), *map(str, args)], capture_output=True, text=True, timeout=timeout)


def refused(proc: subprocess.CompletedProcess, *needles: str) -> str:
    """A clean refusal: exit 1 (an hfx::Error, not 70), one line on stderr naming what is wrong."""
    err = proc.stderr.strip()
    assert proc.returncode == 1, (proc.returncode, proc.stdout, err)
    assert len(err.splitlines()) == 1, err
    for n in needles:
        assert n in err, (n, err)
    return err


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_manifest(out: Path) -> dict:
    return json.loads((out / "hfx.json").read_text())


def save_manifest(out: Path, m: dict) -> None:
    (out / "hfx.json").write_text(json.dumps(m, indent=2) + "\n")


@pytest.fixture
def out(exported, tmp_path) -> Path:
    """A private copy of the tiny llama export (verify/ removed), in tmp_path/out."""
    dst = tmp_path / "out"
    shutil.copytree(exported("llama"), dst, symlinks=True, ignore=shutil.ignore_patterns("verify"))
    return dst


@pytest.fixture
def outside(tmp_path) -> Path:
    """A folder next to the export that must never be read through it."""
    d = tmp_path / "outside"
    d.mkdir()
    return d


def generate(out: Path, *extra):
    return hfx("generate", out, "--prompt-ids", "1,2", "-n", "2", *extra)


def verify_report(out: Path) -> dict:
    return json.loads((out / "verify" / "reference" / "report.json").read_text())


def failed_check(out: Path, name: str) -> str:
    checks = {c["name"]: c for c in verify_report(out)["checks"]}
    assert not checks[name]["passed"], checks[name]
    return checks[name]["detail"]


# --- D6: reads outside OUT through symlinks -------------------------------------------------------------


def test_d6a_external_data_file_linked_outside(out, outside):
    """(a) onnx/model.onnx_data -> outside/secret.bin (same bytes, so every sha256 still matches): generate
    used to run on weights read from outside OUT, and check said ok."""
    data = out / "onnx" / "model.onnx_data"
    shutil.move(data, outside / "secret.bin")
    data.symlink_to(outside / "secret.bin")
    refused(generate(out), "onnx/model.onnx_data: external data file resolves to")
    proc = hfx("check", out)
    assert proc.returncode == 1 and "onnx/model.onnx_data: resolves outside the export" in proc.stderr, proc.stderr


def test_d6b_external_location_under_linked_folder(out, outside):
    """(b) the external-data location is `sub/model.onnx_data` and onnx/sub -> outside; model.onnx is
    re-signed and model.onnx_data dropped from `files`. generate used to read the weights from outside
    and `hfx check` said "ok"."""
    onnx = pytest.importorskip("onnx")
    model_path = out / "onnx" / "model.onnx"
    model = onnx.load(str(model_path), load_external_data=False)
    for t in model.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = "sub/" + e.value
    model_path.write_bytes(model.SerializeToString())
    shutil.move(out / "onnx" / "model.onnx_data", outside / "model.onnx_data")
    (out / "onnx" / "sub").symlink_to(outside, target_is_directory=True)
    m = load_manifest(out)
    del m["files"]["onnx/model.onnx_data"]
    m["files"]["onnx/model.onnx"] = sha256(model_path)
    save_manifest(out, m)
    refused(generate(out), "onnx/sub/model.onnx_data: external data file resolves to")
    proc = hfx("check", out)
    assert proc.returncode == 1, proc.stdout
    assert "onnx/sub: a symlink that resolves outside the export" in proc.stderr, proc.stderr


def test_d6c_listed_file_through_linked_folder(out, outside):
    """(c) files["onnx/sub/secret.bin"] (re-signed) through onnx/sub -> outside: check used to hash the
    outside file and say "ok"."""
    (outside / "secret.bin").write_bytes(b"not the export's\n")
    (out / "onnx" / "sub").symlink_to(outside, target_is_directory=True)
    m = load_manifest(out)
    m["files"]["onnx/sub/secret.bin"] = sha256(outside / "secret.bin")
    save_manifest(out, m)
    proc = hfx("check", out)
    assert proc.returncode == 1, proc.stdout
    assert "onnx/sub/secret.bin: resolves outside the export" in proc.stderr, proc.stderr


def test_d6_component_file_linked_outside(out, outside):
    """The component's model.onnx itself linked out of the export: refused before it is parsed."""
    model = out / "onnx" / "model.onnx"
    shutil.copy(model, outside / "model.onnx")
    model.unlink()
    model.symlink_to(outside / "model.onnx")
    refused(generate(out), "onnx/model.onnx: component decoder file resolves to")


def test_d6d_source_files_outside_the_model_folder(out, tmp_path):
    """(d) source.files names `../../…/secret.bin`, a file outside the model folder (with its true sha256, so the old code passed the
    check: an existence and content oracle) and `/etc/hostname`: refused by name, never opened."""
    m = load_manifest(out)
    source = (Path(out) / m["source"]["path"]).resolve()
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"someone else's file\n")
    escape = os.path.relpath(secret, source)
    assert escape.startswith("..")
    m["source"]["files"] = {escape: sha256(secret), **m["source"]["files"]}
    save_manifest(out, m)
    proc = hfx("verify", out, "--no-reexport")
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    assert failed_check(out, "source unchanged") == \
        f"source.files lists `{escape}`, which is not a file of the model folder"

    m["source"]["files"] = {"/etc/hostname": "00"}
    save_manifest(out, m)
    proc = hfx("verify", out, "--no-reexport")
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    assert failed_check(out, "source unchanged") == \
        "source.files lists `/etc/hostname`, which is not a file of the model folder"


# --- D7: FIFOs and devices never hang a reader -----------------------------------------------------------


@pytest.mark.parametrize("command", ["check", "verify", "generate"])
def test_d7_fifo_as_manifest(out, command):
    """`mkfifo OUT/hfx.json`: check, verify and generate used to block forever in open()."""
    (out / "hfx.json").unlink()
    os.mkfifo(out / "hfx.json")
    args = {"check": ["check", out], "verify": ["verify", out, "--no-reexport"],
            "generate": ["generate", out, "--prompt-ids", "1,2", "-n", "2"]}[command]
    refused(hfx(*args), "hfx.json", "not a regular file")


def test_d7_fifo_as_tokenizer(tmp_path):
    """`mkfifo DIR/tokenizer.json; hfx tokenize -t DIR`: used to block forever."""
    os.mkfifo(tmp_path / "tokenizer.json")
    refused(hfx("tokenize", "-t", tmp_path, "--text", "hi"), "tokenizer.json", "not a regular file")


def test_d7_fifo_as_external_data(out):
    """onnx/model.onnx_data replaced by a FIFO (the manifest's sha256 is irrelevant: generate does not
    check it): generate used to block in open()."""
    data = out / "onnx" / "model.onnx_data"
    data.unlink()
    os.mkfifo(data)
    refused(generate(out), "onnx/model.onnx_data: external data file is not a regular file")
    proc = hfx("check", out)
    assert proc.returncode == 1 and "onnx/model.onnx_data: not a regular file" in proc.stderr, proc.stderr


def test_d7_source_file_is_dev_zero(out):
    """source.files {"/dev/zero": "00"}: verify used to hash /dev/zero forever; a name inside the model
    folder linked to /dev/zero is refused the same way."""
    m = load_manifest(out)
    m["source"]["files"] = {"/dev/zero": "00"}
    save_manifest(out, m)
    proc = hfx("verify", out, "--no-reexport")
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    assert failed_check(out, "source unchanged") == \
        "source.files lists `/dev/zero`, which is not a file of the model folder"


# --- D8: whole-file reads are capped ----------------------------------------------------------------------


def test_d8_manifest_linked_to_dev_zero(out):
    """`ln -s /dev/zero OUT/hfx.json; hfx check OUT`: used to read 2 GB, then bad_alloc, exit 70."""
    (out / "hfx.json").unlink()
    (out / "hfx.json").symlink_to("/dev/zero")
    refused(hfx("check", out), "hfx.json", "not a regular file")


def test_d8_manifest_over_the_cap(out):
    """An hfx.json over 64 MiB (sparse: nothing is written) is refused by size before it is read."""
    with open(out / "hfx.json", "r+b") as f:
        f.truncate(65 << 20)
    for args in (["check", out], ["verify", out, "--no-reexport"], ["generate", out, "--prompt-ids", "1", "-n", "1"]):
        refused(hfx(*args), "hfx.json", "is larger than hfx reads for this file (64.0 MiB)")


def test_d8_tokenizer_linked_to_dev_zero(tmp_path):
    """`ln -s /dev/zero DIR/tokenizer.json; hfx tokenize -t DIR`: used to read until bad_alloc."""
    (tmp_path / "tokenizer.json").symlink_to("/dev/zero")
    refused(hfx("tokenize", "-t", tmp_path, "--text", "hi"), "tokenizer.json", "/dev/zero")


def test_d8_tokenizer_over_the_cap(tmp_path):
    """A tokenizer.json over 512 MiB (sparse) is refused by size before it is read."""
    with open(tmp_path / "tokenizer.json", "wb") as f:
        f.truncate((512 << 20) + 1)
    refused(hfx("tokenize", "-t", tmp_path, "--text", "hi"), "tokenizer.json", "larger than hfx reads")


# --- tokenizer.json of a folder stays inside it ------------------------------------------------------------


def test_tokenizer_of_a_folder_linked_outside(tmp_path, outside, out):
    """DIR/tokenizer.json -> outside/tokenizer.json: `tokenize -t DIR` and `generate --prompt` on an export
    refuse it; naming the file itself (`-t FILE`) is the user's own choice and works."""
    (outside / "tokenizer.json").write_text(json.dumps(TOKENIZER))
    folder = tmp_path / "tok"
    folder.mkdir()
    (folder / "tokenizer.json").symlink_to(outside / "tokenizer.json")
    refused(hfx("tokenize", "-t", folder, "--text", "hi"), "tok/tokenizer.json: tokenizer resolves to")
    assert hfx("tokenize", "-t", outside / "tokenizer.json", "--text", "hi there").stdout.strip() == "[1,2]"
    (folder / "tokenizer.json").unlink()
    shutil.copy(outside / "tokenizer.json", folder / "tokenizer.json")
    assert hfx("tokenize", "-t", folder, "--text", "hi there").stdout.strip() == "[1,2]"

    (out / "tokenizer.json").symlink_to(outside / "tokenizer.json")
    refused(hfx("generate", out, "--prompt", "hi there", "-n", "2"), "out/tokenizer.json: tokenizer resolves to")


# --- D4: listed files that are missing, special or absurdly named -------------------------------------------


@pytest.mark.parametrize("case", ["missing", "fifo", "dev-zero", "overlong", "folder"])
def test_d4_listed_file_problems(out, case):
    """files["onnx/ghost.bin"], a FIFO, a link to /dev/zero, a 5000-character name, a folder: check gives a
    problem line naming the entry, and verify a failed "artifact checksums" check (it used to exit 70,
    "filesystem error: cannot get file size", summing the sizes)."""
    names = {"missing": "onnx/ghost.bin", "fifo": "onnx/fifo", "dev-zero": "zero", "overlong": "x" * 5000,
             "folder": "onnx"}
    name = names[case]
    if case == "fifo":
        os.mkfifo(out / name)
    elif case == "dev-zero":
        (out / name).symlink_to("/dev/zero")
    m = load_manifest(out)
    m["files"][name] = "00"
    save_manifest(out, m)
    expected = {"missing": "onnx/ghost.bin: listed in the manifest but missing",
                "fifo": "onnx/fifo: not a regular file",
                "dev-zero": "zero: resolves outside the export (to /dev/zero)",
                "overlong": "x" * 120 + "... (5000 characters): listed in the manifest but cannot be looked up",
                "folder": "onnx: not a regular file"}[case]
    proc = hfx("check", out)
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    assert expected in proc.stderr, proc.stderr
    assert len(proc.stderr) < 2000, proc.stderr  # the 5000-character name is shortened

    proc = hfx("verify", out, "--no-reexport")
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    assert expected in failed_check(out, "artifact checksums")


# --- OpenVINO IR read back -----------------------------------------------------------------------------------


@pytest.mark.skipif(not hfx_has_openvino(), reason="hfx built without OpenVINO")
def test_openvino_weights_linked_outside(tiny_checkpoint, tmp_path, outside):
    """openvino/openvino_model.bin -> outside: OpenVINO would read it by name; generate --runtime openvino
    refuses it first (the .xml itself is a component file, checked like model.onnx)."""
    out = tmp_path / "ov"
    run_hfx("export", "--model", tiny_checkpoint("llama"), "--format", "openvino", "--quiet", "--no-verify", out)
    bin_ = out / "openvino" / "openvino_model.bin"
    assert bin_.is_file()
    shutil.move(bin_, outside / "w.bin")
    bin_.symlink_to(outside / "w.bin")
    refused(generate(out, "--runtime", "openvino"), "openvino_model.bin: OpenVINO weights resolves to")
    fifo_bin = out / "openvino" / "openvino_model.bin"
    fifo_bin.unlink()
    os.mkfifo(fifo_bin)
    refused(generate(out, "--runtime", "openvino"), "openvino_model.bin: OpenVINO weights is not a regular file")
