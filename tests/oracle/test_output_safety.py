"""Output that can never destroy user data (issue #14; field report F#1, F#24, hostile-input report
D12-D16, D23). Each test is built from the report's reproduction.

- F#1 / D15: `--overwrite` replaces only a previous hfx export. OUT = the model folder, a folder
  holding it, a folder inside it (also through a symlink), a folder without hfx.json, a plain file, a
  symlink to anything but an export: refused in one line before the model is loaded, nothing touched.
- D12: two exports racing to one new OUT: the later commit fails ("appeared while exporting") and
  OUT is the complete export of the other.
- D14: `newout/`, `newout//`, `./newout/.` work like `newout`.
- D16: `hfx check` on a symlink loop or an unreadable folder: one line naming the path, exit 1, not 70.
- D23: verify scratch folders left by a SIGKILL are removed by the next verify.
- F#24: an unwritable parent is named, not the hidden staging folder.
D13 (disk full while copying side files) and D22 (fsync before the rename) are unit tests in
tests/unit/test_staged_directory.cc.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import hfx_binary, run_hfx
from test_atomic import MEDIUM, save_random_checkpoint


def tree_hashes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


def hidden(parent: Path) -> list[str]:
    """Staging folders (`.NAME.hfx-partial-PID`) in `parent`."""
    return sorted(p.name for p in parent.iterdir() if ".hfx-partial-" in p.name)


def export(model: Path, out, *extra: str) -> subprocess.CompletedProcess:
    return run_hfx("export", "--model", model, "--quiet", "--no-verify", *extra, out, check=False)


def assert_refused(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]


@pytest.fixture
def model(tiny_checkpoint, tmp_path) -> Path:
    """A private copy of the tiny llama with a user's file in it, under tmp/models/m."""
    m = tmp_path / "models" / "m"
    shutil.copytree(tiny_checkpoint("llama"), m)
    (m / "NOTES.txt").write_text("mine")
    return m


# F#1 / D15 -------------------------------------------------------------------------------------

def test_overwrite_refuses_the_source_folder(model):
    before = tree_hashes(model)
    assert_refused(export(model, model, "--overwrite"), "would replace the model folder being exported")
    assert tree_hashes(model) == before
    assert hidden(model.parent) == []


def test_overwrite_refuses_a_folder_holding_the_source(model, tiny_checkpoint):
    models = model.parent
    other = models / "other"
    shutil.copytree(tiny_checkpoint("llama"), other)
    before = tree_hashes(models)
    assert_refused(export(model, models, "--overwrite"), "would replace a folder holding the model")
    assert tree_hashes(models) == before
    assert hidden(models.parent) == []


def test_overwrite_refuses_a_folder_inside_the_source(model):
    inside = model / "onnx-export"
    assert export(model, inside).returncode == 0  # without --overwrite a new folder inside is allowed
    before = tree_hashes(model)
    assert_refused(export(model, inside, "--overwrite"), "lies inside the model folder")
    assert tree_hashes(model) == before


def test_overwrite_refuses_the_source_through_a_symlink(model, tmp_path):
    link = tmp_path / "link"
    link.symlink_to(model, target_is_directory=True)
    before = tree_hashes(model)
    assert_refused(export(model, link, "--overwrite"), "would replace the model folder being exported")
    # ...and a symlinked model folder is recognised as the same folder.
    assert_refused(export(link, model, "--overwrite"), "would replace the model folder being exported")
    assert link.is_symlink() and tree_hashes(model) == before


def test_overwrite_refuses_a_folder_that_is_not_an_export(model, tmp_path):
    somedir = tmp_path / "somedir"
    somedir.mkdir()
    (somedir / "file.txt").write_text("keep")
    assert_refused(export(model, somedir, "--overwrite"), str(somedir), "not an hfx export", "no manifest")
    assert (somedir / "file.txt").read_text() == "keep" and sorted(os.listdir(somedir)) == ["file.txt"]
    # A broken hfx.json is not an export either.
    (somedir / "hfx.json").write_text('{"schema_version": 1}')
    assert_refused(export(model, somedir, "--overwrite"), "not an hfx export")
    assert sorted(os.listdir(somedir)) == ["file.txt", "hfx.json"]
    assert hidden(tmp_path) == []


def test_overwrite_refuses_a_plain_file(model, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("data")
    assert_refused(export(model, afile, "--overwrite"), "a file, not an hfx export")
    assert afile.read_text() == "data"


def test_refused_before_the_model_is_loaded(tmp_path):
    # A model folder hfx cannot read: the OUT refusal still comes first, so it is the one reported.
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{ not json")
    somedir = tmp_path / "somedir"
    somedir.mkdir()
    assert_refused(export(broken, somedir, "--overwrite"), "not an hfx export")
    assert_refused(export(broken, broken, "--overwrite"), "would replace the model folder")


def test_overwrite_of_a_symlink_to_an_export_replaces_the_link(model, tmp_path):
    target = tmp_path / "real-export"
    assert export(model, target).returncode == 0
    before = tree_hashes(target)
    link = tmp_path / "out"
    link.symlink_to(target, target_is_directory=True)
    assert export(model, link, "--overwrite").returncode == 0
    assert link.is_dir() and not link.is_symlink()
    assert tree_hashes(target) == before, "the link's target was changed"
    assert run_hfx("check", link).returncode == 0
    # A symlink to something else is refused, link and target untouched.
    other = tmp_path / "notes"
    other.mkdir()
    (other / "a.txt").write_text("a")
    link2 = tmp_path / "out2"
    link2.symlink_to(other, target_is_directory=True)
    assert_refused(export(model, link2, "--overwrite"), "not an hfx export")
    assert link2.is_symlink() and sorted(os.listdir(other)) == ["a.txt"]


def test_existing_out_without_overwrite_still_refused(model, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    assert_refused(export(model, out), "output exists (pass --overwrite to replace it)")


# D12 --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def medium(tmp_path_factory) -> Path:
    return save_random_checkpoint(tmp_path_factory.mktemp("safety") / "medium", "llama", MEDIUM)


def test_racing_exports_never_replace_each_other(medium, tiny_checkpoint, tmp_path):
    # The report's reproduction: a long export and a short one into the same new OUT, started
    # together. Both pass the "OUT exists?" check at start; the one that commits second must fail.
    out = tmp_path / "out"
    small = tiny_checkpoint("llama")
    cmd = lambda m: [str(hfx_binary()), "export", "--model", str(m), "--quiet", "--no-verify", str(out)]
    procs = {"medium": subprocess.Popen(cmd(medium), stderr=subprocess.PIPE, text=True),
             "small": subprocess.Popen(cmd(small), stderr=subprocess.PIPE, text=True)}
    results = {k: (p.wait(timeout=300), p.stderr.read()) for k, p in procs.items()}
    winners = [k for k, (rc, _) in results.items() if rc == 0]
    assert len(winners) == 1, results
    loser = "small" if winners[0] == "medium" else "medium"
    rc, err = results[loser]
    assert rc == 1 and "appeared while exporting (another export?)" in err and len(err.strip().splitlines()) == 1, err
    winner_model = medium if winners[0] == "medium" else small
    assert (out / json.loads((out / "hfx.json").read_text())["source"]["path"]).resolve() == Path(winner_model).resolve()
    assert run_hfx("check", out).returncode == 0
    assert hidden(tmp_path) == [], "the losing export left its staging folder"


# D14 --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("spelling", ["newout/", "newout//", "./newout/."])
def test_trailing_slash_is_the_folder_itself(model, tmp_path, spelling):
    proc = subprocess.run([str(hfx_binary()), "export", "--model", str(model), "--no-verify", spelling],
                          cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[1].startswith("exported newout in"), proc.stdout  # after "exporting ..."
    out = tmp_path / "newout"
    assert run_hfx("check", out).returncode == 0
    assert hidden(tmp_path) == [] and hidden(out) == []
    # --overwrite with the slash replaces it the same way.
    proc = subprocess.run([str(hfx_binary()), "export", "--model", str(model), "--no-verify", "--quiet", "--overwrite",
                           spelling], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert run_hfx("check", out).returncode == 0
    assert hidden(tmp_path) == [] and hidden(out) == []


# Running as an unprivileged user (root reads and writes everything) ------------------------------

def unprivileged():
    """preexec_fn dropping to nobody when running as root; None otherwise (already unprivileged)."""
    if os.geteuid() != 0:
        return None

    def drop():
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)
    return drop


@pytest.fixture
def public_dir():
    """A folder nobody can reach (pytest's tmp_path is private to root)."""
    d = Path(tempfile.mkdtemp(prefix="hfx-safety-"))
    d.chmod(0o755)
    yield d
    for p in [d, *d.rglob("*")]:
        if p.is_dir() and not p.is_symlink():
            p.chmod(0o755)
    shutil.rmtree(d)


def run_unprivileged(*args) -> subprocess.CompletedProcess:
    return subprocess.run([str(hfx_binary()), *map(str, args)], capture_output=True, text=True,
                          preexec_fn=unprivileged(), env={**os.environ, "HOME": "/tmp"})


def public_model(tiny_checkpoint, public_dir: Path) -> Path:
    m = public_dir / "model"
    shutil.copytree(tiny_checkpoint("llama"), m)
    for p in [m, *m.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    return m


# F#24 -------------------------------------------------------------------------------------------

def test_unwritable_parent_is_named(tiny_checkpoint, public_dir):
    m = public_model(tiny_checkpoint, public_dir)
    ro2 = public_dir / "ro2"
    ro2.mkdir()
    ro2.chmod(0o555)
    proc = run_unprivileged("export", "--model", m, "--no-verify", ro2 / "out")
    assert_refused(proc, f"{ro2}: cannot create the output folder here: Permission denied")
    assert ".hfx-partial" not in proc.stderr
    # A parent that cannot be created: under a plain file.
    (public_dir / "afile").write_text("x")
    proc = run_hfx("export", "--model", m, "--no-verify", public_dir / "afile" / "sub" / "out", check=False)
    assert_refused(proc, f"{public_dir / 'afile'}: cannot create the output folder here: Not a directory")


# D16 --------------------------------------------------------------------------------------------

def test_check_on_a_symlink_loop(exported, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(exported("llama"), out)
    (out / "loop1").symlink_to("loop2")
    (out / "loop2").symlink_to("loop1")
    proc = run_hfx("check", out, check=False)
    assert_refused(proc, str(out / "loop"), "Too many levels of symbolic links")


def test_check_on_a_looping_out(tmp_path):
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    assert_refused(run_hfx("check", tmp_path / "a", check=False), "no such export folder", "Too many levels")


def test_check_on_an_unreadable_folder(exported, public_dir):
    out = public_dir / "out"
    shutil.copytree(exported("llama"), out)
    for p in [out, *out.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    # Its files open by name (the checksums pass) but the folder cannot be listed: search permission
    # only, for whoever runs check (nobody when the tests run as root, else the owner).
    (out / "onnx").chmod(0o711 if os.geteuid() == 0 else 0o300)
    proc = run_unprivileged("check", out)
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    assert len(proc.stderr.strip().splitlines()) == 1 and str(out / "onnx") in proc.stderr, proc.stderr
    assert "Permission denied" in proc.stderr, proc.stderr


# D23 --------------------------------------------------------------------------------------------

def test_stale_verify_scratch_folders_are_reaped(exported, tmp_path):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmpdir / f"hfx-verify-{dead.pid}-Ab12Cd"  # what a SIGKILLed verify leaves
    (stale / "reexport").mkdir(parents=True)
    (stale / "job.json").write_text("{}")
    live = tmpdir / f"hfx-verify-{os.getpid()}-Ab12Cd"  # a running verify's (this process is alive)
    live.mkdir()
    proc = subprocess.run([str(hfx_binary()), "verify", str(exported("llama"))], capture_output=True, text=True,
                          env={**os.environ, "TMPDIR": str(tmpdir)})
    assert proc.returncode == 0, proc.stderr
    assert not stale.exists(), "a dead verify's scratch folder was kept"
    assert live.exists(), "a live process's scratch folder was removed"
    assert sorted(p.name for p in tmpdir.iterdir()) == [live.name], "verify left its own scratch folder"
