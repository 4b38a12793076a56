"""The command line people bring from optimum-cli and transformers.exporters (issue #16, item 3; field
report F#11, F#13, F#14): `-m ORG/NAME` read offline from the Hugging Face cache, one-line answers to
other tools' spellings, numbers that mean nothing refused, and options that do not apply said so.

Usage errors (the command line itself is wrong) exit 2 in one stderr line; what the inputs are (a
model that is not cached, a link out of the snapshot) exits 1.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import hfx_binary, hfx_has_openvino, run_hfx

COMMIT = "0123456789abcdef0123456789abcdef01234567"
OTHER = "fedcba9876543210fedcba9876543210fedcba98"


def no_network_prefix() -> list[str]:
    """`unshare -rn` (a network namespace with no interfaces) when this machine allows it, so the
    cache export is shown to need no network; otherwise nothing (hfx links no network client)."""
    if shutil.which("unshare") and subprocess.run(["unshare", "-rn", "true"], capture_output=True).returncode == 0:
        return ["unshare", "-rn"]
    return []


def hfx_env(*args, env: dict | None = None, cwd: Path | None = None, offline: bool = False) -> subprocess.CompletedProcess:
    """hfx with extra environment variables (and no HF_* from the caller's environment)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    full.update(env or {})
    cmd = [*(no_network_prefix() if offline else []), str(hfx_binary()), *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, env=full, cwd=cwd)


def one_line(proc: subprocess.CompletedProcess, code: int, *texts: str) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, proc.stderr
    for text in texts:
        assert text in lines[0], (text, lines[0])
    return lines[0]


def add_snapshot(cache: Path, repo_id: str, commit: str, source: Path, refs: tuple[str, ...] = ("main",)) -> Path:
    """Lays `source` (a save_pretrained folder) out as `hf download repo_id` does: each file a blob named
    by its hash, the snapshot folder of relative symlinks into ../../blobs/, refs/<name> holding the commit."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    (repo / "blobs").mkdir(exist_ok=True)
    for f in sorted(source.iterdir()):
        blob = hashlib.sha256(f.read_bytes()).hexdigest()
        shutil.copyfile(f, repo / "blobs" / blob)
        (snap / f.name).symlink_to(f"../../blobs/{blob}")
    for ref in refs:
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / ref).write_text(commit)  # huggingface_hub writes the hash without a newline
    return snap


@pytest.fixture
def cache(tiny_checkpoint, tmp_path):
    """A Hugging Face cache with org/name: llama at refs/main, gpt2 at refs/v1 (its own commit)."""
    root = tmp_path / "hf-cache"
    add_snapshot(root, "org/name", COMMIT, tiny_checkpoint("llama"))
    add_snapshot(root, "org/name", OTHER, tiny_checkpoint("gpt2"), refs=("v1",))
    return root


def manifest(out: Path) -> dict:
    return json.loads((out / "hfx.json").read_text())


# ---- -m ORG/NAME from the Hugging Face cache

def test_hub_id_is_exported_offline_from_the_cache(cache, tiny_checkpoint, tmp_path):
    out = tmp_path / "by-id"
    proc = hfx_env("export", "-m", "org/name", out, env={"HF_HUB_CACHE": str(cache)}, offline=True)
    assert proc.returncode == 0, proc.stderr
    assert f"org/name at main (commit {COMMIT}) from the Hugging Face cache" in proc.stdout, proc.stdout
    source = manifest(out)["source"]
    assert source["hub"] == {"id": "org/name", "revision": "main", "commit": COMMIT}
    assert (out / source["path"]).resolve() == (cache / "models--org--name" / "snapshots" / COMMIT).resolve()
    assert source["name"] == "org/name"
    # the same bytes as an export of the folder itself
    run_hfx("export", "-q", "-m", tiny_checkpoint("llama"), tmp_path / "by-folder")
    assert (out / "onnx" / "model.onnx").read_bytes() == (tmp_path / "by-folder" / "onnx" / "model.onnx").read_bytes()
    # verify re-hashes the source files through the snapshot's links into blobs/
    proc = hfx_env("verify", out, "--no-reexport", "--tokens", "4")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_hub_blob_names_are_the_source_hashes_and_verify_rehashes(cache, tmp_path):
    """The cache names each blob by its content's sha256: the export records that name without reading
    the file (issue #21: no byte hashed twice), `hfx verify` re-hashes the content and so still catches a
    blob edited in the cache."""
    out = tmp_path / "by-id"
    proc = hfx_env("export", "-q", "-m", "org/name", out, env={"HF_HUB_CACHE": str(cache)}, offline=True)
    assert proc.returncode == 0, proc.stderr
    snap = cache / "models--org--name" / "snapshots" / COMMIT
    files = manifest(out)["source"]["files"]
    assert files and all(files[name] == (snap / name).resolve().name for name in files), files
    # A weight blob edited in place (same name, other bytes): the export would still record the name,
    # verify compares the content with it.
    blob = (snap / "model.safetensors").resolve()
    data = bytearray(blob.read_bytes())
    data[-1] ^= 1
    blob.write_bytes(bytes(data))
    proc = hfx_env("verify", out, "--no-reexport", "--tokens", "4")
    assert proc.returncode != 0 and "FAIL source unchanged: model.safetensors changed" in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def test_manifest_hub_source_is_validated(cache, tmp_path):
    """source.hub is optional (manifests before it, and local folders, have none) but checked when there."""
    out = tmp_path / "out"
    assert hfx_env("export", "-q", "-m", "org/name", out, env={"HF_HUB_CACHE": str(cache)}).returncode == 0
    m = manifest(out)
    m["source"]["hub"]["commit"] = 5
    (out / "hfx.json").write_text(json.dumps(m))
    one_line(hfx_env("verify", out, "--no-reexport"), 1, "/source/hub/commit: expected a string, found number 5")


def test_hf_home_hub_is_the_cache_when_hf_hub_cache_is_unset(tiny_checkpoint, tmp_path):
    add_snapshot(tmp_path / "home" / "hub", "org/name", COMMIT, tiny_checkpoint("llama"))
    proc = hfx_env("export", "-q", "-m", "org/name", tmp_path / "out", env={"HF_HOME": str(tmp_path / "home")}, offline=True)
    assert proc.returncode == 0, proc.stderr
    assert manifest(tmp_path / "out")["source"]["hub"]["commit"] == COMMIT


@pytest.mark.parametrize("revision,model_type", [("v1", "gpt2"), (OTHER, "gpt2"), ("main", "llama")])
def test_revision_is_a_ref_or_a_commit(cache, tmp_path, revision, model_type):
    out = tmp_path / "out"
    proc = hfx_env("export", "-q", "-m", "org/name", "--revision", revision, out, env={"HF_HUB_CACHE": str(cache)})
    assert proc.returncode == 0, proc.stderr
    source = manifest(out)["source"]
    assert source["model_type"] == model_type
    assert source["hub"]["revision"] == revision
    assert source["hub"]["commit"] == (COMMIT if model_type == "llama" else OTHER)


def test_hub_id_not_in_the_cache_says_how_to_download(tmp_path):
    cache = tmp_path / "empty-cache"
    proc = hfx_env("export", "-m", "Qwen/Qwen3-0.6B", tmp_path / "out", env={"HF_HUB_CACHE": str(cache)})
    one_line(proc, 1, "not in the Hugging Face cache", str(cache / "models--Qwen--Qwen3-0.6B"),
             "`hf download Qwen/Qwen3-0.6B`", "`huggingface-cli download Qwen/Qwen3-0.6B`")
    assert not (tmp_path / "out").exists()


def test_revision_not_in_the_cache_names_what_is(cache, tmp_path):
    proc = hfx_env("export", "-m", "org/name", "--revision", "v2", tmp_path / "out", env={"HF_HUB_CACHE": str(cache)})
    one_line(proc, 1, "revision v2 is not in the Hugging Face cache (refs: main, v1; 2 snapshot(s))",
             "`hf download org/name --revision v2`")


def test_a_local_folder_wins_over_a_hub_id(cache, tiny_checkpoint, tmp_path):
    shutil.copytree(tiny_checkpoint("gpt2"), tmp_path / "org" / "name")  # as `hf download --local-dir org/name` would
    proc = hfx_env("export", "-q", "-m", "org/name", "out", env={"HF_HUB_CACHE": str(cache)}, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    source = manifest(tmp_path / "out")["source"]
    assert "hub" not in source and source["model_type"] == "gpt2"
    assert source["path"] == "../org/name" and source["name"] == "name"


def test_revision_with_a_local_folder_is_a_usage_error(tiny_checkpoint, tmp_path):
    proc = hfx_env("export", "-m", tiny_checkpoint("llama"), "--revision", "v1", tmp_path / "out")
    one_line(proc, 2, "--revision v1 applies to a Hub id", "is a local folder")


def test_snapshot_link_out_of_its_repository_is_refused(cache, tmp_path):
    snap = cache / "models--org--name" / "snapshots" / COMMIT
    outside = tmp_path / "elsewhere.safetensors"
    shutil.copyfile(snap / "model.safetensors", outside)
    (snap / "model.safetensors").unlink()
    (snap / "model.safetensors").symlink_to(outside)
    proc = hfx_env("export", "-m", "org/name", tmp_path / "out", env={"HF_HUB_CACHE": str(cache)})
    one_line(proc, 1, "model.safetensors is a link to", "outside the model folder")


# ---- F#14: other tools' spellings, answered in one line (exit 2)

@pytest.mark.parametrize("args,text", [
    (["./model", "out"], "hfx export takes the model as -m/--model: hfx export -m ./model out"),
    (["-m", "MODEL", "--task", "text-generation-with-past", "out"],
     "hfx export has no --task: the task is inferred from config.json's model_type (here llama: causal-lm"),
    (["-m", "MODEL", "--opset", "17", "out"], "--onnx-opset, and writes ai.onnx opset 21 (the default) or 23, not 17"),
    (["-m", "MODEL", "--opset", "23", "out"], "hfx spells --opset as --onnx-opset: --onnx-opset 23"),
    (["-m", "MODEL", "--fp16", "out"], "hfx spells --fp16 as --dtype f16"),
    (["-m", "MODEL", "--dtype", "fp16", "out"], "--dtype fp16: hfx spells it --dtype f16"),
    (["-m", "MODEL", "out", "fp16"], "`fp16` is not an argument of hfx export: the weight dtype is --dtype f16"),
    (["-m", "MODEL", "--trust-remote-code", "out"], "hfx never runs code from the model folder"),
    (["-m", "MODEL", "--cache_dir", "/c", "out"], "HF_HUB_CACHE=/c hfx export -m ORG/NAME OUT"),
    (["-m", "MODEL", "--no-such-flag", "out"], "The following argument was not expected: --no-such-flag (`hfx export --help`"),
], ids=["positional", "task", "opset-17", "opset-23", "--fp16", "dtype-fp16", "bare-fp16", "trust-remote-code",
        "cache_dir", "unknown"])
def test_other_tools_spellings_get_one_line(tiny_checkpoint, tmp_path, args, text):
    args = [str(tiny_checkpoint("llama")) if a == "MODEL" else a for a in args]
    proc = hfx_env("export", *args, cwd=tmp_path)
    one_line(proc, 2, text.replace("./model", args[0]) if args[0] != "-m" else text)
    assert not (tmp_path / "out").exists()


def test_positional_model_alone_is_answered(tiny_checkpoint, tmp_path):
    proc = hfx_env("export", tiny_checkpoint("llama"))
    one_line(proc, 2, f"hfx export takes the model as -m/--model: hfx export -m {tiny_checkpoint('llama')} OUT")


def test_task_for_an_encoder_names_feature_extraction(tmp_path):
    model = tmp_path / "bert"  # the answer reads config.json's model_type only
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "bert"}))
    proc = hfx_env("export", "-m", model, "--task", "feature-extraction", tmp_path / "out")
    one_line(proc, 2, "(here bert: feature-extraction")


def test_format_is_case_insensitive(tiny_checkpoint, tmp_path):
    out = tmp_path / "out"
    proc = hfx_env("export", "-q", "-m", tiny_checkpoint("llama"), "--format", "ONNX", out)
    assert proc.returncode == 0, proc.stderr
    assert manifest(out)["recipe"]["formats"] == ["onnx"]


# ---- F#11: numbers that mean nothing are refused (exit 2)

@pytest.mark.parametrize("args,text", [
    (["--atol", "0"], "--atol 0: expected a positive number"),
    (["--atol", "-1"], "--atol -1: expected a positive number"),
    (["--atol", "nan"], "--atol nan: expected a positive number"),
    (["--tokens", "0"], "--tokens 0: expected at least 1"),
    (["--tokens", "-5"], "--tokens -5: expected at least 1"),
])
def test_verify_numbers(exported, args, text):
    one_line(hfx_env("verify", exported("llama"), "--no-reexport", *args), 2, text)


@pytest.mark.parametrize("args,text", [
    (["--dim", "batch_size=1:4", "--dim", "batch_size=2:8"],
     "--dim batch_size is given twice (batch_size=1:4 and batch_size=2:8): give each dim once"),
    (["--dim", "batch_size=0:4"], "--dim batch_size=0:4: batch_size is at least 1"),
    (["--dim", "batch_size=-1:4"], '"-1" is not a non-negative integer'),
    (["--max-cache-len", "0", "--static-cache"], "--max-cache-len 0: expected a positive number of tokens"),
    (["--max-cache-len", "-1", "--static-cache"], "--max-cache-len -1: expected a positive number of tokens"),
    (["--max-cache-len", "0"], "--max-cache-len 0: expected a positive number of tokens"),
    (["--onnx-opset", "17"], "--onnx-opset: onnx opset 17 (supported: 21, 23)"),
], ids=["dim-twice", "dim-min-0", "dim-negative", "cache-len-0", "cache-len-negative", "cache-len-0-alone", "opset"])
def test_export_numbers(tiny_checkpoint, tmp_path, args, text):
    one_line(hfx_env("export", "-m", tiny_checkpoint("llama"), *args, tmp_path / "out"), 2, text)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args,text", [
    (["-n", "0"], "--max-new-tokens 0: expected at least 1"),
    (["--temperature", "-1"], "--temperature -1: expected a number >= 0"),
    (["--top-k", "-1"], "--top-k -1: expected a number of tokens >= 0"),
    (["--top-p", "0"], "--top-p 0: expected a probability mass in (0, 1]"),
    (["--top-p", "1.5"], "--top-p 1.5: expected a probability mass in (0, 1]"),
    (["--prompt-ids", "1,-2"], '--prompt-ids: expected comma-separated token ids, found "-2"'),
])
def test_generate_numbers(exported, args, text):
    prompt = [] if "--prompt-ids" in args else ["--prompt-ids", "1,2"]
    one_line(hfx_env("generate", exported("llama"), *prompt, *args), 2, text)


# ---- F#13: an option that does not apply to what is asked for is a note or an error

# (--stateless without openvino: test_cli_errors.py::test_options_of_a_format_not_written_are_noted)
def test_verify_runtime_with_no_verify_is_noted(tiny_checkpoint, tmp_path):
    proc = hfx_env("export", "-q", "-m", tiny_checkpoint("llama"), "--no-verify", "--verify-runtime", "onnxruntime",
                   tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    assert ("hfx: note: --verify-runtime chooses the built-in check's runtime, which --no-verify skips; ignored"
            in proc.stderr), proc.stderr


@pytest.mark.skipif(not hfx_has_openvino(), reason="hfx built without OpenVINO")
def test_onnx_options_without_onnx_are_noted(tiny_checkpoint, tmp_path):
    proc = hfx_env("export", "-q", "-m", tiny_checkpoint("llama"), "--format", "openvino", "--onnx-profile", "portable",
                   "--onnx-opset", "23", "--verify-runtime", "onnxruntime", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    for flag in ("--onnx-profile", "--onnx-opset", "--verify-runtime"):
        assert f"hfx: note: {flag} only applies to --format onnx; ignored" in proc.stderr, proc.stderr


def test_max_cache_len_without_static_cache_is_refused(tiny_checkpoint, tmp_path):
    one_line(hfx_env("export", "-m", tiny_checkpoint("llama"), "--max-cache-len", "64", tmp_path / "out"), 2,
             "--max-cache-len is only meaningful with --static-cache")


def test_onnx_profile_with_a_recipe_is_refused(tiny_checkpoint, tmp_path):
    """The recipe fixes the profile: --onnx-profile on top was silently dropped."""
    run_hfx("export", "-q", "-m", tiny_checkpoint("llama"), tmp_path / "a")
    proc = hfx_env("export", "--recipe", tmp_path / "a" / "hfx.json", "--onnx-profile", "portable", tmp_path / "b")
    one_line(proc, 2, "--onnx-profile cannot be combined with --recipe")


def test_sampling_options_with_greedy_decoding_are_noted(exported):
    proc = hfx_env("generate", exported("llama"), "--prompt-ids", "1,2", "-n", "2", "--top-k", "5", "--seed", "3")
    assert proc.returncode == 0, proc.stderr
    for flag in ("--top-k", "--seed"):
        assert f"hfx: note: {flag} only applies to sampling (--temperature > 0); ignored" in proc.stderr, proc.stderr
