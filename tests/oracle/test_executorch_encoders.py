"""ExecuTorch programs of the encoders (`--format executorch` on BERT, RoBERTa, XLM-RoBERTa and
DistilBERT, feature extraction and sequence classification): hfx's own `.pte` run by ExecuTorch's
runtime (`executorch.runtime`, the pinned wheel) against Transformers eager, fp32.

The program's batch is fixed (1 by default) and its sequence length DYNAMIC_BOUND up to the model's
position table (or --dim's max). Every case of test_encoders.CASES, with `xnnpack` and `portable`, at
two sequence lengths, each on a full row and a padded one (right and left padding): last_hidden_state
(and logits) within 1e-4 of Transformers, no element beyond. Then batch bounds from --dim (fixed 2,
DYNAMIC_BOUND 1..4), a sequence past the bound refused by the runtime, the built-in check, `hfx verify --runtime executorch`,
`hfx inspect`, and the refusal of a contract ExecuTorch cannot plan.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import record_coverage, run_hfx
from test_encoders import CASES, compare, make_batch, make_checkpoint, transformers_outputs

BACKENDS = ["xnnpack", "portable"]
LENGTHS = [(9, 5), (16, 11)]  # (sequence length, real tokens of the padded row)
MAX_POSITIONS = 64  # test_encoders' configs: max_position_embeddings


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return tmp_path_factory.mktemp("executorch-encoders")


@pytest.fixture(scope="module")
def checkpoint(base):
    done: dict[str, Path] = {}

    def get(case: str) -> Path:
        if case not in done:
            done[case] = make_checkpoint(case, base / "ckpt" / case, seed=sorted(CASES).index(case))
        return done[case]

    return get


@pytest.fixture(scope="module")
def et_export(base, checkpoint):
    done: dict[tuple, Path] = {}

    def get(case: str, backend: str = "xnnpack", *extra: str) -> Path:
        key = (case, backend, extra)
        if key not in done:
            out = base / "out" / f"{case}-{backend}-{len(done)}"
            # --no-verify: each case is checked here against Transformers (the built-in check has its own test)
            run_hfx("export", "--model", checkpoint(case), "--format", "executorch", "--executorch-backend", backend, *extra,
                    "--no-verify", "--quiet", out)
            done[key] = out
        return done[key]

    return get


def component(out: Path) -> dict:
    comps = json.loads((out / "hfx.json").read_text())["components"]
    assert [c["format"] for c in comps] == ["executorch"]
    return comps[0]


def load_forward(pte: Path):
    from executorch.runtime import Runtime
    return Runtime.get().load_program(pte).load_method("forward")


def run_rows(forward, names: list[str], feeds: dict[str, np.ndarray], rows: slice) -> list[np.ndarray]:
    return [t.numpy() for t in forward.execute([torch.from_numpy(np.ascontiguousarray(feeds[n][rows])) for n in names])]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_outputs_match_transformers(case, backend, checkpoint, et_export):
    _, head, _ = CASES[case]
    out = et_export(case, backend)
    comp = component(out)
    names = [i["name"] for i in comp["inputs"]]
    outputs = [o["name"] for o in comp["outputs"]]
    assert outputs == (["last_hidden_state", "logits"] if head else ["last_hidden_state"])
    assert comp["inputs"][0]["shape"] == ["1", "sequence_length"]
    forward = load_forward(out / comp["file"])
    config = json.loads((checkpoint(case) / "config.json").read_text())
    worst = 0.0
    for seq, real in LENGTHS:
        for padding in ("right", "left"):
            ids, mask, types = make_batch(config, padding, seq=seq, real1=real)
            feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
            expected = transformers_outputs(checkpoint(case), head, ids, mask, types if "token_type_ids" in names else None)
            for row in (0, 1):  # row 1 is padded: its mask hides pad keys
                got = run_rows(forward, names, feeds, slice(row, row + 1))
                for name, value in zip(outputs, got):
                    worst = max(worst, compare(f"{case}/{backend}/seq {seq}/{padding}/row {row}/{name}", value,
                                               expected[name][row:row + 1]))
    record_coverage(case, f"executorch-{backend}", "encoder outputs (2 lengths, right and left padding)", worst)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("batch, shape", [("2:2", "2"), ("1:4", "batch_size")])
def test_batch_bounds_from_dim(batch, shape, backend, checkpoint, et_export):
    """--dim batch_size=2:2 fixes the batch at 2; 1:4 makes it DYNAMIC_BOUND (with the sequence length):
    the padded batch of 2 in one call, and one row of it when the batch may vary."""
    case = "bert-cls"
    out = et_export(case, backend, "--dim", f"batch_size={batch}")
    comp = component(out)
    assert comp["inputs"][0]["shape"] == [shape, "sequence_length"]
    names = [i["name"] for i in comp["inputs"]]
    forward = load_forward(out / comp["file"])
    config = json.loads((checkpoint(case) / "config.json").read_text())
    for seq, real in LENGTHS:
        ids, mask, types = make_batch(config, "right", seq=seq, real1=real)
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        expected = transformers_outputs(checkpoint(case), True, ids, mask, types)
        for rows in [slice(0, 2)] + ([slice(1, 2)] if shape == "batch_size" else []):
            for name, value in zip(["last_hidden_state", "logits"], run_rows(forward, names, feeds, rows)):
                compare(f"{case}/{backend}/batch {batch}/rows {rows}/seq {seq}/{name}", value, expected[name][rows])


def test_sequence_bound_is_the_position_table_or_dim(et_export, capfd):
    """The query length is DYNAMIC_BOUND: up to the position table by default (RoBERTa's counts from
    pad + 1), up to --dim's max when given; a longer sequence is refused by the runtime, which says why."""
    meta = lambda out: load_forward(out / component(out)["file"]).metadata.input_tensor_meta(0)  # noqa: E731
    assert list(meta(et_export("bert", "portable")).sizes()) == [1, MAX_POSITIONS]
    assert list(meta(et_export("roberta", "portable")).sizes()) == [1, MAX_POSITIONS - 2]  # pad_token_id 1
    out = et_export("bert", "portable", "--dim", "sequence_length=1:16")
    assert list(meta(out).sizes()) == [1, 16]
    forward = load_forward(out / component(out)["file"])
    ok = [torch.ones(1, 16, dtype=torch.long)] * 3
    assert [t.shape for t in forward.execute(ok)] == [torch.Size([1, 16, 64])]
    with pytest.raises(Exception) as refused:
        forward.execute([torch.ones(1, 17, dtype=torch.long)] * 3)
    assert "set_inputs" in str(refused.value), str(refused.value)
    assert "Attempted to resize a bounded tensor with a maximum capacity of 16 elements to 17 elements" in capfd.readouterr().err


@pytest.mark.parametrize("backend", BACKENDS)
def test_builtin_check_and_verify_run_executorch(backend, checkpoint, tmp_path):
    """The export's built-in check and `hfx verify --runtime executorch` run the encoder's program on
    ExecuTorch's runtime (the C++ Module API when the build links it) against the reference executor."""
    out = tmp_path / "checked"
    proc = run_hfx("export", "--model", checkpoint("roberta-cls"), "--format", "executorch", "--executorch-backend", backend, out)
    summary = proc.stdout + proc.stderr
    assert "checks passed on executorch" in summary and ("XNNPACK" if backend == "xnnpack" else "portable kernels") in summary, summary
    assert (b"XnnpackBackend" in (out / "executorch" / "model.pte").read_bytes()) == (backend == "xnnpack")
    verify = run_hfx("verify", str(out), "--runtime", "executorch")
    assert "verified" in verify.stdout + verify.stderr, verify.stdout + verify.stderr


def test_inspect_shows_the_encoder_contract(checkpoint):
    proc = run_hfx("inspect", str(checkpoint("bert-cls")), "--format", "executorch")
    contract = proc.stdout.split("I/O contract")[1]
    assert "in  input_ids                    i64  [1, sequence_length]" in contract, proc.stdout
    assert "token_type_ids" in contract and "out logits" in contract, proc.stdout


@pytest.mark.parametrize("dims, message", [
    (["--dim", "sequence_length=1:65"], "past the 64 positions"),
    (["--static-cache", "--max-cache-len", "32"], "apply to decoders only"),
])
def test_refusals_are_one_line_and_leave_nothing(checkpoint, tmp_path, dims, message):
    out = tmp_path / "refused"
    proc = run_hfx("export", "--model", checkpoint("bert"), "--format", "executorch", *dims, str(out), check=False)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr
    assert len([line for line in proc.stderr.splitlines() if line.startswith("hfx:") and "warning" not in line]) == 1, proc.stderr
    assert not out.exists()


def test_python_step_server_names_every_output(checkpoint, et_export, tmp_path):
    """python/hfx_executorch_runner.py (the driver of builds without ExecuTorch's C++ libraries) writes
    each of the method's outputs under the name --output gives it."""
    import subprocess
    import sys
    from safetensors.torch import load_file, save_file
    out = et_export("roberta-cls", "portable")
    comp = component(out)
    names = [i["name"] for i in comp["inputs"]]
    outputs = [o["name"] for o in comp["outputs"]]
    ids, mask, _ = make_batch(json.loads((checkpoint("roberta-cls") / "config.json").read_text()), "left")
    feeds = {"input_ids": torch.from_numpy(ids[1:]), "attention_mask": torch.from_numpy(mask[1:])}
    save_file(feeds, str(tmp_path / "in.safetensors"))
    request = json.dumps({"inputs": str(tmp_path / "in.safetensors"), "outputs": str(tmp_path / "out.safetensors")})
    args = [sys.executable, str(Path(__file__).resolve().parents[2] / "python" / "hfx_executorch_runner.py"), "--serve",
            str(out / comp["file"])]
    for n in names:
        args += ["--input", n]
    for n in outputs:
        args += ["--output", n]
    proc = subprocess.run(args, input=request + "\n", capture_output=True, text=True, timeout=300)
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert lines[0]["ready"] and lines[1] == {"ok": True}, proc.stdout + proc.stderr
    got = load_file(str(tmp_path / "out.safetensors"))
    assert sorted(got) == sorted(outputs)
    expected = load_forward(out / comp["file"]).execute([feeds[n] for n in names])
    for name, value in zip(outputs, expected):
        assert torch.equal(got[name], value)
