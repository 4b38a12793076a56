"""What hfx does with an export someone else shipped: every hfx.json field verify / generate / check
read is checked once (pipeline/manifest_schema.h) and a bad one is one line naming its JSON pointer;
verify never writes its report through a link, and runs its checks on a read-only export; the
reference executor refuses a graph computing a huge tensor. Each test is a reproduction from the
hostile-input report of 2026-12-01 (D1, D2, D3, D5, D17, D19)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import hfx_binary

TIMEOUT = 120  # a hang or a runaway allocation fails the test rather than the CI job


def hfx(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([str(hfx_binary()), *map(str, args)], capture_output=True, text=True, timeout=TIMEOUT,
                          cwd=cwd)


def error_lines(proc) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.startswith("hfx: ")]


@pytest.fixture
def out(exported, tmp_path) -> Path:
    """A private copy of the tiny Llama's portable ONNX export, without its verify/ folder."""
    dest = tmp_path / "out"
    shutil.copytree(exported("llama"), dest, ignore=shutil.ignore_patterns("verify"))
    return dest


def edit_manifest(out: Path, edit) -> None:
    m = json.loads((out / "hfx.json").read_text())
    edit(m)
    (out / "hfx.json").write_text(json.dumps(m, indent=2))


def comp(m):
    return m["components"][0]


def expect_field_error(proc, *parts):
    assert proc.returncode == 1, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    lines = error_lines(proc)
    assert len(lines) == 1 and "internal error" not in proc.stderr, proc.stderr
    for p in parts:
        assert p in lines[0], f"`{p}` not in: {lines[0]}"


# (label, edit of hfx.json, words of the one-line error)
FIELD_CASES = [
    # D3: wrong types and missing members
    ("source-path-number", lambda m: m["source"].update(path=5),
     ["hfx.json: /source/path: expected a string, found number 5"]),
    ("source-path-deleted", lambda m: m["source"].pop("path"), ["/source/path: missing"]),
    ("source-path-absolute", lambda m: m["source"].update(path="/etc"),
     ["/source/path: expected a path relative to the export folder, found an absolute path"]),
    # an older manifest: source.folder instead of source.path
    ("source-folder-number", lambda m: (m["source"].pop("path"), m["source"].update(folder=5)),
     ["hfx.json: /source/folder: expected a string, found number 5"]),
    ("source-files-deleted", lambda m: m["source"].pop("files"), ["/source/files: missing"]),
    ("source-string", lambda m: m.update(source="x"), ["/source: expected an object, found string"]),
    ("source-file-number", lambda m: m["source"]["files"].update({"config.json": 5}),
     ["/source/files/config.json: expected a sha256 string, found number 5"]),
    ("input-name-number", lambda m: comp(m)["inputs"][0].update(name=5),
     ["/components/0/inputs/0/name: expected a string, found number 5"]),
    ("input-name-deleted", lambda m: comp(m)["inputs"][0].pop("name"), ["/components/0/inputs/0/name: missing"]),
    ("inputs-string", lambda m: comp(m).update(inputs="abc"), ["/components/0/inputs: expected a list, found string"]),
    ("shape-float", lambda m: comp(m)["inputs"][0].update(shape=[1.5]),
     ["/components/0/inputs/0/shape/0: expected an integer or a symbol name, found a fractional number 1.5"]),
    ("file-key-with-slash", lambda m: m["files"].update({"onnx/model.onnx": None}),
     ["/files/onnx~1model.onnx: expected a sha256 string, found null"]),
    # D2: roles
    ("role-x", lambda m: comp(m).update(role="x"), ["/components/0/role: unknown role `x`"]),
    ("role-deleted", lambda m: comp(m).pop("role"), ["/components/0/role: missing"]),
    # D5: geometry that sizes allocations
    ("num-layers-1e9", lambda m: m["model"].update(num_layers=1_000_000_000),
     ["/model/num_layers: 1000000000 is above 4096"]),
    ("num-layers-float", lambda m: m["model"].update(num_layers=1e9), ["/model/num_layers: expected an integer"]),
    ("num-layers-0", lambda m: m["model"].update(num_layers=0), ["/model/num_layers: 0 is below 1"]),
    ("kv-width", lambda m: m["model"].update(num_kv_heads=65536, head_dim=65536), ["/model/num_kv_heads", "KV width"]),
    ("static-cache-2p40", lambda m: m["recipe"].update(static_cache=True, max_cache_len=2 ** 40),
     ["/recipe/max_cache_len: 1099511627776 is above 16777216"]),
    ("batch-min-2p62", lambda m: comp(m)["dims"]["batch_size"].update(min=2 ** 62),
     ["/components/0/dims/batch_size/min: 4611686018427387904 is above 4096"]),
    ("batch-min-negative", lambda m: comp(m)["dims"]["batch_size"].update(min=-1),
     ["/components/0/dims/batch_size/min: -1 is below 0"]),
    ("batch-min-above-max", lambda m: comp(m)["dims"]["batch_size"].update(min=3, max=2),
     ["/components/0/dims/batch_size: min 3 is above max 2"]),
    ("max-above-2p31", lambda m: comp(m)["dims"]["sequence_length"].update(max=2 ** 40),
     ["/components/0/dims/sequence_length/max"]),
    ("eos-negative", lambda m: m["model"].update(eos_token_ids=[-1]), ["/model/eos_token_ids/0: -1 is below 0"]),
    ("pad-huge", lambda m: m["model"].update(pad_token_id=2 ** 40), ["/model/pad_token_id"]),
    ("pad-deleted", lambda m: m["model"].pop("pad_token_id"), ["/model/pad_token_id: missing"]),
    ("static-cache-string", lambda m: m["recipe"].update(static_cache="yes"),
     ["/recipe/static_cache: expected true or false, found string"]),
]


@pytest.mark.parametrize("label,edit,parts", FIELD_CASES, ids=[c[0] for c in FIELD_CASES])
def test_bad_manifest_field_is_one_line_naming_it(out, label, edit, parts):
    edit_manifest(out, edit)
    expect_field_error(hfx("verify", out, "--no-reexport", "--tokens", "2"), *parts)
    expect_field_error(hfx("generate", out, "--prompt-ids", "1,2", "-n", "2"), *parts)
    expect_field_error(hfx("check", out), *parts)
    assert not (out / "verify").exists()


def test_integer_shape_dims_are_read_not_thrown(out):
    """D3: `shape` = [1, 2] was a json type_error (exit 70); integers are valid dims, and a shape
    that differs from the file's is a failed signature check."""
    edit_manifest(out, lambda m: comp(m)["inputs"][0].update(shape=[1, 2]))
    proc = hfx("verify", out, "--no-reexport", "--tokens", "2")
    assert proc.returncode == 1 and "internal error" not in proc.stderr, proc.stderr
    assert "FAIL I/O signature: decoder" in proc.stdout, proc.stdout
    report = json.loads((out / "verify" / "reference" / "report.json").read_text())
    assert not report["passed"]


def test_verify_without_a_decoder_component_fails_one_line(out):
    """D2: a component relabelled so that no decoder/prefill is left was a SIGSEGV in verify."""
    edit_manifest(out, lambda m: comp(m).update(role="encoder"))
    proc = hfx("verify", out, "--no-reexport", "--tokens", "2")
    expect_field_error(proc, "the artifact has no decoder or prefill component", "roles: encoder")


def test_verify_does_not_write_through_a_report_symlink(out, tmp_path):
    """D1: OUT/verify/reference/report.md -> victim was overwritten with the report."""
    victim = tmp_path / "precious.txt"
    victim.write_text("precious\n")
    reports = out / "verify" / "reference"
    reports.mkdir(parents=True)
    os.symlink(victim, reports / "report.md")
    os.symlink(tmp_path / "precious-json.txt", reports / "report.json")  # dangling: must not be created
    os.symlink(tmp_path / "precious-html.txt", reports / "report.html")
    proc = hfx("verify", out, "--no-reexport", "--tokens", "2")
    # The links in OUT may fail the checksum check (a file under OUT that the manifest does not
    # list); every other check passes, and the report is written, but not through them.
    assert proc.returncode in (0, 1) and "internal error" not in proc.stderr, proc.stdout + proc.stderr
    assert all(line.startswith("pass") for line in proc.stdout.splitlines()[1:-1]), proc.stdout
    assert victim.read_text() == "precious\n"
    assert not (tmp_path / "precious-json.txt").exists() and not (tmp_path / "precious-html.txt").exists()
    # The links were replaced by the reports themselves.
    assert not (reports / "report.md").is_symlink()
    assert (reports / "report.md").read_text().startswith("# hfx verify")
    assert json.loads((reports / "report.json").read_text())["checks"]
    assert sorted(p.name for p in reports.iterdir()) == ["report.html", "report.json", "report.md"]


@pytest.mark.parametrize("link", ["verify", "verify/reference"])
def test_verify_refuses_a_symlinked_report_folder(out, tmp_path, link):
    """D1: OUT/verify -> victimdir wrote report.json and report.md there; the runtime's folder
    OUT/verify/reference is refused alike."""
    victimdir = tmp_path / "victimdir"
    victimdir.mkdir()
    (out / link).parent.mkdir(parents=True, exist_ok=True)
    os.symlink(victimdir, out / link)
    proc = hfx("verify", out, "--no-reexport", "--tokens", "2")
    assert list(victimdir.iterdir()) == []
    assert proc.returncode == 0, proc.stdout + proc.stderr  # the checks passed; the report is what is refused
    assert "pass numbers: decoder" in proc.stdout
    lines = error_lines(proc)
    assert len(lines) == 1 and f"{link} is a symlink; not writing through it" in lines[0], proc.stderr


def test_verify_report_option_writes_elsewhere(out, tmp_path):
    """D17 / F#9: --report DIR puts the reports outside the export (DIR and its parents created)."""
    dest = tmp_path / "reports" / "llama"
    proc = hfx("verify", out, "--no-reexport", "--tokens", "2", "--report", dest)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads((dest / "reference" / "report.json").read_text())["passed"]
    assert (dest / "reference" / "report.md").read_text().startswith("# hfx verify")
    assert f"report in {dest / 'reference' / 'report.md'}" in proc.stdout
    assert not (out / "verify").exists()
    # --report refuses a symlink too, and as an error: the caller asked for the report there.
    link = tmp_path / "link"
    os.symlink(tmp_path / "elsewhere", link)
    (tmp_path / "elsewhere").mkdir()
    proc = hfx("verify", out, "--no-reexport", "--tokens", "2", "--report", link)
    assert proc.returncode == 1 and "is a symlink; not writing through it" in proc.stderr, proc.stderr
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_verify_runs_its_checks_when_the_report_cannot_be_written(out):
    """D17: a report folder that cannot be written (here OUT/verify is a file, which stops root too)
    still runs and prints every check, says why on one stderr line, and exits by the checks."""
    (out / "verify").write_text("not a folder\n")
    proc = hfx("verify", out, "--no-reexport", "--tokens", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "pass greedy generation" in proc.stdout and "report not written" in proc.stdout
    lines = error_lines(proc)
    assert len(lines) == 1 and "exists and is not a folder: report not written (use --report DIR)" in lines[0]
    assert (out / "verify").read_text() == "not a folder\n"


def test_verify_on_a_read_only_export(out, tmp_path):
    """D17: OUT on a read-only mount: every check runs, "OUT is read-only: report not written (use
    --report DIR)", exit by the checks. Needs a read-only bind mount (root); chmod does not stop root."""
    ro = tmp_path / "ro"
    ro.mkdir()
    if os.geteuid() != 0:
        os.chmod(out, 0o555)
        target = out
    else:
        mounted = subprocess.run(["mount", "--bind", str(out), str(ro)], capture_output=True)
        if mounted.returncode != 0:
            pytest.xfail(f"mount --bind not permitted here: {mounted.stderr.decode().strip()}")
        if subprocess.run(["mount", "-o", "remount,ro,bind", str(ro)], capture_output=True).returncode != 0:
            subprocess.run(["umount", str(ro)])
            pytest.xfail("remount read-only not permitted here")
        target = ro
    try:
        proc = hfx("verify", target, "--no-reexport", "--tokens", "2")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "pass greedy generation" in proc.stdout
        lines = error_lines(proc)
        assert len(lines) == 1 and f"{target} is read-only: report not written" in lines[0], proc.stderr
        assert "use --report DIR" in lines[0]
    finally:
        if target == ro:
            subprocess.run(["umount", str(ro)])
        else:
            os.chmod(out, 0o755)
    assert not (out / "verify").exists()


def add_huge_expand(out: Path, output: str, declare: bool) -> None:
    """D19: model.onnx gains Expand(1.0, [10000, 100000]) (3.7 GiB of f32), as an extra output
    (output="expand") or summed into a scalar output (output="sum"); re-signed, and declared in
    hfx.json when `declare`."""
    import hashlib

    import onnx
    from onnx import TensorProto, helper

    path = out / "onnx" / "model.onnx"
    model = onnx.load(str(path), load_external_data=False)
    g = model.graph
    g.initializer.append(helper.make_tensor("huge_one", TensorProto.FLOAT, [], [1.0]))
    g.initializer.append(helper.make_tensor("huge_shape", TensorProto.INT64, [2], [10000, 100000]))
    g.node.append(helper.make_node("Expand", ["huge_one", "huge_shape"], ["huge_t"], name="/huge/Expand"))
    if output == "sum":
        g.node.append(helper.make_node("ReduceSum", ["huge_t"], ["huge"], name="/huge/ReduceSum", keepdims=0))
        g.output.append(helper.make_tensor_value_info("huge", TensorProto.FLOAT, []))
        shape = []
    else:
        g.node.append(helper.make_node("Identity", ["huge_t"], ["huge"], name="/huge/Identity"))
        g.output.append(helper.make_tensor_value_info("huge", TensorProto.FLOAT, [10000, 100000]))
        shape = ["10000", "100000"]
    onnx.save(model, str(path))

    def edit(m):
        m["files"]["onnx/model.onnx"] = hashlib.sha256(path.read_bytes()).hexdigest()
        if declare:
            comp(m)["outputs"].append({"name": "huge", "dtype": "f32", "shape": shape})
    edit_manifest(out, edit)


def test_generate_refuses_graph_outputs_the_manifest_does_not_declare(out):
    """D19: generate ran an extra output Expand(1.0, [10000, 100000]) at 7.8 GB RSS."""
    add_huge_expand(out, "expand", declare=False)
    assert hfx("check", out).returncode == 0  # re-signed: the checksums agree
    proc = hfx("generate", out, "--prompt-ids", "1,2", "-n", "2")
    expect_field_error(proc, "the graph has output `huge`", "does not declare")


def test_generate_refuses_a_tensor_above_the_contract_budget(out):
    """D19: a declared scalar output computed through a 3.7 GiB intermediate: the executor's budget
    from the contract stops the Expand before it allocates, naming the node, op and shape."""
    add_huge_expand(out, "sum", declare=True)
    proc = hfx("generate", out, "--prompt-ids", "1,2", "-n", "2")
    expect_field_error(proc, "/huge/Expand (Expand)", "f32[10000,100000]", "above the budget of 512 MiB")
    proc = hfx("verify", out, "--no-reexport", "--tokens", "2")
    expect_field_error(proc, "/huge/Expand (Expand)", "f32[10000,100000]", "above the budget")
