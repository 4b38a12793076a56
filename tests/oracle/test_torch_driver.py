"""The torch driver (python/hfx_torch.py, python/hfx_torch_runner.py) against toy decoder programs
made with torch.export itself in the form hfx writes (tests/oracle/torch_toys.py): the decode loop
against the eager toy, the no-pickle refusal, and the step server's protocol."""
from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from safetensors.torch import load_file, save_file  # noqa: E402

import torch_toys  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
import hfx_torch  # noqa: E402

PROMPTS = [[5, 7, 9, 11], [8, 2], [1]]  # left padded; the first row ends with EOS before the others
NEW_TOKENS = 16


@pytest.fixture(scope="module")
def toys(tmp_path_factory):
    """layout -> (export folder, eager toy), each exported once."""
    base = tmp_path_factory.mktemp("torch-toys")
    return {layout: torch_toys.write_toy(base / layout, layout) for layout in torch_toys.LAYOUTS}


def test_eager_reference_is_not_trivial(toys):
    # The comparison below means something only if the tokens depend on the context and a row ends.
    _, toy = toys["growing"]
    rows = torch_toys.eager_greedy(toy, PROMPTS, NEW_TOKENS)
    assert torch_toys.EOS in rows[0] and rows[0][-1] == torch_toys.PAD
    assert all(len(set(r)) > 3 for r in rows)
    assert rows[1] != rows[2]


@pytest.mark.parametrize("layout", torch_toys.LAYOUTS)
def test_generate_matches_the_eager_model(toys, layout):
    folder, toy = toys[layout]
    gen = hfx_torch.TorchGenerator(folder)
    assert gen.generate(PROMPTS, NEW_TOKENS) == torch_toys.eager_greedy(toy, PROMPTS, NEW_TOKENS)


@pytest.mark.parametrize("layout", ["static", "split-static"])
def test_static_buffers_are_written_in_place(toys, layout):
    folder, _ = toys[layout]
    gen = hfx_torch.TorchGenerator(folder)
    rows = gen.generate([[5, 7, 9, 11, 13, 2]], 4)
    written = 6 + len(rows[0]) - 1  # the last token picked is never fed back
    for name, buf in gen.static_buffers.items():
        assert buf[:, :, :written].abs().sum() > 0, name
        assert buf[:, :, written:].abs().sum() == 0, name


def test_command_line_prints_one_row_per_prompt(toys):
    folder, toy = toys["split-growing"]
    args = [a for p in PROMPTS for a in ("--prompt-ids", ",".join(map(str, p)))]
    out = subprocess.run([sys.executable, str(ROOT / "python" / "hfx_torch.py"), str(folder), *args, "-n", str(NEW_TOKENS)],
                         capture_output=True, text=True, check=True).stdout
    rows = [[int(x) for x in line.split(",")] for line in out.splitlines()]
    assert rows == torch_toys.eager_greedy(toy, PROMPTS, NEW_TOKENS)


def rewrite(src: Path, dst: Path, change) -> Path:
    """A copy of the archive with change(name, data) -> data applied to every entry."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            zout.writestr(info, change(info.filename, zin.read(info)))
    return dst


def test_pickled_sample_inputs_are_refused_before_torch_reads_them(toys, tmp_path, monkeypatch):
    folder, _ = toys["growing"]
    with zipfile.ZipFile(folder / "pt2" / "model.pt2") as z:
        assert all(i.file_size == 0 for i in z.infolist() if "/data/sample_inputs/" in i.filename)
    pickled = rewrite(folder / "pt2" / "model.pt2", tmp_path / "model.pt2",
                      lambda name, data: b"\x80\x02pickle" if name.endswith("data/sample_inputs/model.pt") else data)
    monkeypatch.setattr(torch.export, "load", lambda *a, **k: pytest.fail("torch.export.load was reached"))
    with pytest.raises(ValueError, match=r"model\.pt2: model/data/sample_inputs/model\.pt holds 8 bytes of pickled sample"):
        hfx_torch.load_program(pickled)


def test_pickled_weights_are_refused(toys, tmp_path):
    folder, _ = toys["growing"]

    def pickle_weights(name, data):
        if not name.endswith("data/weights/model_weights_config.json"):
            return data
        config = json.loads(data)
        for entry in config["config"].values():
            entry["use_pickle"] = True
        return json.dumps(config).encode()

    archive = rewrite(folder / "pt2" / "model.pt2", tmp_path / "model.pt2", pickle_weights)
    with pytest.raises(ValueError, match=r"model_weights_config\.json stores \S+ pickled \(use_pickle true\)"):
        hfx_torch.load_program(archive)


def test_a_returned_dict_without_the_manifest_outputs_is_refused(toys, tmp_path):
    folder, _ = toys["growing"]
    manifest = json.loads((folder / "hfx.json").read_text())
    manifest["components"][0]["outputs"].append({"name": "hidden_states", "dtype": "f32", "shape": []})
    other = tmp_path / "export"
    (other / "pt2").mkdir(parents=True)
    (other / "pt2" / "model.pt2").write_bytes((folder / "pt2" / "model.pt2").read_bytes())
    (other / "hfx.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=r"the program returned \[.*\], expected a dict of \['hidden_states', 'logits'"):
        hfx_torch.TorchGenerator(other).generate([[1, 2]], 2)


class Server:
    """hfx_torch_runner.py --serve on one component of a toy export."""

    def __init__(self, folder: Path, log: Path, archive: Path | None = None):
        self.comp = json.loads((folder / "hfx.json").read_text())["components"][0]
        self.names = [i["name"] for i in self.comp["inputs"]]
        cmd = [sys.executable, str(ROOT / "python" / "hfx_torch_runner.py"), "--serve", str(archive or folder / self.comp["file"])]
        for n in self.names:
            cmd += ["--input", n]
        for i, o in self.comp["cache"]["shared_buffers"]:
            cmd += ["--shared", i, o]
        self.log = log  # a file, not a pipe nobody reads (torch's warnings could fill it)
        with open(log, "w") as err:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True)

    def answer(self) -> dict:
        line = self.proc.stdout.readline()
        assert line.endswith("\n"), f"no answer; stderr: {self.log.read_text()[-2000:]}"
        return json.loads(line)  # every stdout line is protocol

    def ask(self, tmp: Path, name: str, inputs: dict) -> dict:
        save_file({k: v.contiguous() for k, v in inputs.items()}, str(tmp / f"{name}.in.safetensors"))
        request = {"inputs": str(tmp / f"{name}.in.safetensors"), "outputs": str(tmp / f"{name}.out.safetensors")}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self.answer()

    def close(self) -> int:
        self.proc.stdin.close()
        rest = self.proc.stdout.read()
        assert rest == "", f"stdout after the answers: {rest!r}"
        return self.proc.wait(timeout=60)


def in_process(folder: Path, comp: dict, args: tuple) -> dict:
    """The same program run here: its dict, plus each shared buffer's updated input."""
    mod = torch.export.load(str(folder / comp["file"])).module()
    args = tuple(a.clone() for a in args)
    with torch.no_grad():
        out = dict(mod(*args))
    names = [i["name"] for i in comp["inputs"]]
    for i, o in comp["cache"]["shared_buffers"]:
        out[o] = args[names.index(i)]
    return out


@pytest.mark.parametrize("layout", ["growing", "static"])
def test_server_runs_steps_and_answers_errors(toys, layout, tmp_path):
    folder, _ = toys[layout]
    server = Server(folder, tmp_path / "stderr")
    ready = server.answer()
    assert ready["ready"] is True and ready["torch_version"] == torch.__version__ and ready["load_s"] >= 0
    static = layout == "static"
    n = 24 if static else 0
    first = torch_toys.example_inputs(static, True, 2, 3, 0, n)
    assert server.ask(tmp_path, "first", dict(zip(server.names, first))) == {"ok": True}
    out1 = load_file(str(tmp_path / "first.out.safetensors"))
    assert sorted(out1) == sorted(o["name"] for o in server.comp["outputs"])
    expected = in_process(folder, server.comp, first)
    for k in expected:
        torch.testing.assert_close(out1[k], expected[k], rtol=0, atol=0, msg=k)

    # A second step fed with the first's cache: presents are the grown cache or the updated buffers.
    ids = out1["logits"][:, -1].argmax(-1, keepdim=True)
    mask = first[1].clone() if static else torch.ones(2, 4, dtype=torch.int64)
    if static:
        mask[:, 3] = 1
    second = [ids, mask, torch.full((2, 1), 3)] + [out1[o] for _, o in torch_toys.cache_names()]
    second += [torch.tensor([3])] if static else []
    assert server.ask(tmp_path, "second", dict(zip(server.names, second))) == {"ok": True}
    out2 = load_file(str(tmp_path / "second.out.safetensors"))
    expected = in_process(folder, server.comp, tuple(second))
    for k in expected:
        torch.testing.assert_close(out2[k], expected[k], rtol=0, atol=0, msg=k)
    assert out2["present.0.key"].shape[2] == (24 if static else 4)

    # A wrong batch size in one input: torch's own check, and the server keeps serving.
    wrong = dict(zip(server.names, second))
    wrong["input_ids"] = torch.zeros(3, 1, dtype=torch.int64)
    answer = server.ask(tmp_path, "wrong", wrong)
    assert set(answer) == {"error"} and "shape" in answer["error"] and "\n" not in answer["error"]
    missing = {k: v for k, v in zip(server.names, second) if k != "position_ids"}
    assert server.ask(tmp_path, "missing", missing) == {
        "error": f"ValueError: {tmp_path / 'missing.in.safetensors'}: no tensor position_ids (the program's inputs: "
                 f"{', '.join(server.names)})"}
    assert server.ask(tmp_path, "again", dict(zip(server.names, second))) == {"ok": True}
    assert server.close() == 0


def test_server_refuses_an_archive_that_is_not_hfx(toys, tmp_path):
    folder, _ = toys["growing"]
    pickled = rewrite(folder / "pt2" / "model.pt2", tmp_path / "model.pt2",
                      lambda name, data: b"\x80\x02pickle" if "/data/sample_inputs/" in name else data)
    server = Server(folder, tmp_path / "stderr", archive=pickled)
    answer = server.answer()
    assert answer["torch_version"] == torch.__version__
    assert answer["error"].startswith("ValueError: ") and "pickled sample inputs" in answer["error"]
    assert server.proc.wait(timeout=60) == 1


@pytest.mark.parametrize("variant", [[], ["--static-cache", "--max-cache-len", "32"],
                                     ["--split-prefill", "--static-cache", "--max-cache-len", "32"]],
                         ids=["growing", "static", "split-static"])
def test_an_hfx_export_runs_on_torch_as_on_onnx_runtime(tiny_checkpoint, tmp_path, variant):
    """A real `hfx export --format onnx,pt2`: its built-in check runs the pt2 program on torch through
    the C++ runner (pt2_runner.cc), and TorchGenerator's tokens are ONNX Runtime's on the ONNX twin."""
    from conftest import run_hfx
    from hfx_ort import OrtGenerator
    out = tmp_path / "out"
    proc = run_hfx("export", "--model", tiny_checkpoint("llama"), "--format", "onnx,pt2", "--onnx-profile", "portable",
                   *variant, out)
    assert f"on torch {torch.__version__}" in proc.stdout, proc.stdout  # the check ran torch, not "not run"
    prompts = [[5, 7, 9, 11, 3], [8, 2], [1, 40, 41]]
    assert hfx_torch.TorchGenerator(out).generate(prompts, 12) == OrtGenerator(out).generate(prompts, 12)
