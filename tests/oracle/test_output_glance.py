"""Output that tells the truth at a glance (issue #16, item 4; field report F#7, F#15, F#16, F#17, F#19,
F#20, F#26): `hfx inspect` shows the contract of the export that will be written, `hfx export` says its
profile and any fallback before the work and lists files only with -v, sizes are weight bytes, progress
in a log is plain lines, encoders are worded as encoders, `hfx generate` refuses up front what cannot
finish, and the python/ helpers take a text --prompt and fail in one line."""
from __future__ import annotations

import json
import os
import pty
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, hfx_binary, hfx_has_openvino, run_hfx

KIB = {"B": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3}


def manifest(out: Path) -> dict:
    return json.loads((out / "hfx.json").read_text())


def onnx_inputs(out: Path, fmt: str = "onnx") -> list[str]:
    comp = next(c for c in manifest(out)["components"] if c["format"] == fmt)
    return [i["name"] for i in comp["inputs"]]


def inspect_inputs(stdout: str) -> list[str]:
    """The input names of inspect's contract table ("  in  NAME  dtype [dims]"), "..." rows left out."""
    return [line.split()[1] for line in stdout.splitlines() if line.startswith("  in  ")]


def one_error_line(proc, text):
    assert proc.returncode != 0, proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and text in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def run_env(args, env=None, stderr=subprocess.PIPE):
    return subprocess.run([str(hfx_binary()), *map(str, args)], stdout=subprocess.PIPE, stderr=stderr, text=True,
                          env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def llama(tiny_checkpoint, tmp_path_factory):
    """The tiny llama with a word-level tokenizer.json over its 128 ids (for the text --prompt)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    src = tmp_path_factory.mktemp("glance") / "llama"
    shutil.copytree(tiny_checkpoint("llama"), src)
    vocab = {"[UNK]": 0, **{f"t{i}": i for i in range(1, 128) if i not in (5, 9)}, "hello": 5, "world": 9}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(src / "tokenizer.json"))
    return src


@pytest.fixture(scope="module")
def default_export(llama, tmp_path_factory):
    out = tmp_path_factory.mktemp("glance-out") / "default"
    proc = run_hfx("export", "-m", llama, "--dim", "batch_size=1:4", out)
    return out, proc


# F#7 --------------------------------------------------------------------------------------------
def test_inspect_shows_the_contract_the_default_export_writes(llama, default_export):
    out, _ = default_export
    proc = run_hfx("inspect", llama)
    assert "I/O contract of the export (onnx, profile ort;" in proc.stdout, proc.stdout
    shown = inspect_inputs(proc.stdout)
    assert "position_ids" not in shown, proc.stdout  # the ort profile derives positions in the graph
    written = onnx_inputs(out)
    assert shown == written[:len(shown) - 1] + written[-1:], (shown, written)


def test_inspect_follows_the_profile_and_format_options(llama, tmp_path):
    portable = run_hfx("inspect", llama, "--onnx-profile", "portable").stdout
    assert "position_ids" in inspect_inputs(portable) and "(onnx, profile portable;" in portable
    out = tmp_path / "portable"
    run_hfx("export", "-q", "-m", llama, "--onnx-profile", "portable", out)
    assert inspect_inputs(portable)[:3] == onnx_inputs(out)[:3] == ["input_ids", "attention_mask", "position_ids"]
    j = json.loads(run_hfx("inspect", llama, "--json").stdout)
    assert j["contract_of"]["layout"] == "profile ort" and "position_ids" not in [i["name"] for i in j["inputs"]]
    if hfx_has_openvino():
        ov = run_hfx("inspect", llama, "-f", "openvino").stdout
        assert inspect_inputs(ov) == ["input_ids", "attention_mask", "position_ids", "beam_idx"], ov
        assert "stateful KV cache" in ov
        noted = run_hfx("inspect", llama, "-f", "openvino", "--onnx-profile", "portable")
        assert "hfx: note: --onnx-profile only applies to --format onnx; ignored" in noted.stderr, noted.stderr
    proc = run_hfx("inspect", llama, "--onnx-profile", "fused", check=False)
    assert proc.returncode != 0 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


# F#19 / F#20 ------------------------------------------------------------------------------------
def weight_bytes(stdout: str) -> dict[str, float]:
    """{format: bytes} from "exported OUT in S s: N files ...; weights onnx 305.6 KiB, openvino ..."."""
    line = next(x for x in stdout.splitlines() if x.startswith("exported "))
    sizes = line.split("; weights ", 1)[1]
    return {f: float(v) * KIB[u] for f, v, u in re.findall(r"(\w+) ([\d.]+) (B|KiB|MiB|GiB)", sizes)}


def test_export_says_the_profile_first_and_lists_files_only_with_v(llama, default_export, tmp_path):
    out, proc = default_export
    lines = proc.stdout.splitlines()
    assert lines[0] == f"exporting llama (causal-lm) to {out}: onnx decoder (profile ort)", proc.stdout
    assert not any(x.startswith("  ") for x in lines), proc.stdout  # no file list
    assert "(-v lists them)" in proc.stdout and "bytes of checkpoint weights" not in proc.stdout
    verbose = run_hfx("export", "-v", "--no-verify", "-m", llama, tmp_path / "v").stdout
    listed = [x.strip() for x in verbose.splitlines() if x.startswith("  ")]
    assert "hfx.json" in listed and "onnx/model.onnx" in listed, verbose
    assert "bytes of checkpoint weights" in verbose


def test_fallback_is_said_once_before_the_work(llama, tmp_path):
    proc = run_env(["export", "-m", llama, "--static-cache", "--max-cache-len", "32", "--no-verify", tmp_path / "s"],
                   {"HFX_PROGRESS_SECONDS": "0"})
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr.splitlines()
    fallback = [i for i, x in enumerate(err) if "falls back to the portable profile" in x]
    assert len(fallback) == 1, proc.stderr
    assert ("static cache (GroupQueryAttention shares buffers its own way; cache_position writes)" in err[fallback[0]]
            and err[fallback[0]].count("static cache") == 1), err[fallback[0]]
    first_progress = next(i for i, x in enumerate(err) if x.startswith("onnx decoder: "))
    assert fallback[0] < first_progress, proc.stderr
    assert "onnx decoder (profile portable)" in proc.stdout.splitlines()[0]


def test_sizes_are_weight_bytes_not_padded_files(llama, tmp_path):
    f32, q4 = tmp_path / "f32", tmp_path / "int4"
    a = weight_bytes(run_hfx("export", "--no-verify", "-m", llama, "--onnx-profile", "portable", f32).stdout)["onnx"]
    b = weight_bytes(run_hfx("export", "--no-verify", "-m", llama, "--onnx-profile", "portable", "--quantize", "int4",
                             q4).stdout)["onnx"]
    # the data files pad every tensor to 64 KiB: on this tiny model int4's file is most of f32's
    files = [(d / "onnx" / "model.onnx_data").stat().st_size for d in (f32, q4)]
    assert a < files[0] and b < files[1], (a, b, files)
    assert b < 0.6 * a and files[1] > 0.6 * files[0], (a, b, files)


# F#26 -------------------------------------------------------------------------------------------
def test_progress_in_a_log_is_plain_lines(llama, tmp_path):
    log = tmp_path / "log.txt"
    with open(log, "w") as f:
        proc = run_env(["export", "-m", llama, "--no-verify", tmp_path / "a"], {"HFX_PROGRESS_SECONDS": "0"}, stderr=f)
    assert proc.returncode == 0
    text = log.read_text()
    assert "\r" not in text and re.search(r"^onnx decoder: \d+/\d+ tensors", text, re.M), text
    # the default interval (10 s): a quick export adds no progress line to a log
    quiet = run_env(["export", "-m", llama, "--no-verify", tmp_path / "b"])
    assert "\r" not in quiet.stderr and "tensors" not in quiet.stderr, quiet.stderr


def test_progress_on_a_terminal_is_a_bar(llama, tmp_path):
    leader, follower = pty.openpty()
    try:
        proc = subprocess.run([str(hfx_binary()), "export", "-m", str(llama), "--no-verify", str(tmp_path / "t")],
                              stdout=subprocess.PIPE, stderr=follower, text=True)
        os.close(follower)
        follower = -1
        chunks = []
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
    finally:
        if follower >= 0:
            os.close(follower)
        os.close(leader)
    assert proc.returncode == 0
    assert b"\ronnx decoder: " in b"".join(chunks), b"".join(chunks)


# F#17 -------------------------------------------------------------------------------------------
def test_encoder_output_is_worded_for_an_encoder(tmp_path):
    from test_encoders import make_checkpoint
    src = make_checkpoint("bert", tmp_path / "bert")
    out = tmp_path / "bert-out"
    formats = "onnx,openvino" if hfx_has_openvino() else "onnx"
    exported = run_hfx("export", "-m", src, "--format", formats, out)
    verified = run_hfx("verify", out, "--no-reexport")
    text = exported.stdout + exported.stderr + verified.stdout
    for word in ("greedy", "decode", "cache", "tokens", "tok/s", "past"):
        assert word not in text, (word, text)
    assert re.search(r"pass performance: \d+ sequences in [\d.]+ ms", verified.stdout), verified.stdout
    assert "numbers: encoder / one token, batch min (batch 1, seq 1)" in verified.stdout, verified.stdout


# F#15 -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("args,text", [
    (["--prompt-ids", "1,2", "-n", "300"], "prompt 2 + 300 new tokens > context 64"),
    (["--prompt-ids", "600"], "token 600 \u2265 vocab 128"),
    (["--prompt", ""], "--prompt is empty"),
    ([a for i in range(5) for a in ("--prompt-ids", f"{i + 1},2")], "5 prompts, the export takes at most 4"),
    (["--prompt-ids", "1", "-n", "4", "--runtime", "onnxruntime"], "`python python/hfx_ort.py OUT --prompt TEXT` generates with"),
])
def test_generate_refuses_up_front(default_export, args, text):
    out, _ = default_export
    one_error_line(run_hfx("generate", out, *args, check=False), text)


def test_generate_refuses_past_the_static_cache(llama, tmp_path):
    out = tmp_path / "static"
    run_hfx("export", "-q", "--no-verify", "-m", llama, "--static-cache", "--max-cache-len", "16", out)
    one_error_line(run_hfx("generate", out, "--prompt-ids", "1,2,3", "-n", "14", check=False),
                   "prompt 3 + 14 new tokens > context 16 (the export's max_cache_len); use -n 13 at most")


# F#16 -------------------------------------------------------------------------------------------
def helper(script: str, *args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "python" / script), *map(str, args)], capture_output=True,
                          text=True, env={**os.environ, **(env or {})})


def test_helper_takes_a_text_prompt(default_export):
    out, _ = default_export
    proc = helper("hfx_ort.py", out, "--prompt", "hello world", "-n", "6", "--print-ids")
    assert proc.returncode == 0, proc.stderr
    # the same ids as the C++ tokenizer's prompt, and as the ids "hello world" stands for
    assert proc.stdout == run_hfx("generate", out, "--prompt", "hello world", "-n", "6", "--print-ids").stdout
    assert proc.stdout == helper("hfx_ort.py", out, "--prompt-ids", "5,9", "-n", "6").stdout
    text = helper("hfx_ort.py", out, "--prompt", "hello world", "-n", "6")
    assert text.returncode == 0 and text.stdout.strip(), text.stderr


@pytest.mark.parametrize("args,text", [
    (["--prompt-ids", "Hello"], "--prompt-ids 'Hello': expected comma-separated token ids"),
    (["--prompt-ids", "1", "--max-new", "3"], "unrecognized arguments: --max-new"),  # no abbreviations
    (["--prompt-ids", "600"], "token 600 is outside the vocabulary [0, 128)"),
    (["--prompt", ""], "--prompt is empty"),
    (["--prompt-ids", "1", "-n", "0"], "--max-new-tokens 0: expected at least 1"),
])
def test_helper_bad_input_is_one_line(default_export, args, text):
    out, _ = default_export
    one_error_line(helper("hfx_ort.py", out, *args), text)


def test_helper_without_tokenizers_says_so(default_export, tmp_path):
    out, _ = default_export
    fake = tmp_path / "no-tokenizers"
    fake.mkdir()
    (fake / "tokenizers.py").write_text("raise ImportError('no tokenizers here')\n")
    proc = helper("hfx_ort.py", out, "--prompt", "hello", env={"PYTHONPATH": str(fake)})
    one_error_line(proc, "--prompt needs the `tokenizers` package")


def test_helper_not_an_export_is_one_line(tmp_path):
    one_error_line(helper("hfx_ort.py", tmp_path, "--prompt-ids", "1"), "no hfx.json (not an hfx export folder)")


@pytest.mark.skipif(not hfx_has_openvino(), reason="hfx built without OpenVINO")
def test_ov_helper_on_a_split_export_names_what_it_found(llama, tmp_path):
    out = tmp_path / "ov-split"
    run_hfx("export", "-q", "--no-verify", "-m", llama, "--format", "openvino", "--stateless", "--split-prefill", out)
    one_error_line(helper("hfx_ov.py", out, "--prompt-ids", "1,2"), "openvino components: decode, prefill")
