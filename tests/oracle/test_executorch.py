"""ExecuTorch programs (`--format executorch`): hfx's own `.pte` files, run by ExecuTorch's runtime
(`executorch.runtime`, the pinned executorch wheel, portable kernels), against Transformers eager.

For every decoder case of tiny_models.CASES:
  - fp32 logits of the program's forward method within 1e-4 of Transformers eager, no element beyond,
    over a prefill and 3 cached steps (the KV cache lives in the program's mutable buffers);
  - 64 greedy tokens identical to Transformers' generate();
then the program's structure (header, constant methods the LLM runner reads, DYNAMIC_BOUND query length),
the built-in check and `hfx generate --runtime executorch`, and the refusals.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch

from conftest import export_once, record_coverage, run_hfx
from test_generation import NEW_TOKENS, PROMPTS
from test_pt2 import compare  # max abs diff <= 1e-4 and no element beyond, shapes equal
from tiny_models import CASES, load_reference

CACHE_LEN = 96  # past the 7-token prompt + 64 new tokens of the greedy test
ET_ARGS = ["--format", "executorch", "--static-cache", "--max-cache-len", str(CACHE_LEN)]
BACKENDS = ["xnnpack", "portable"]  # xnnpack: XNNPACK partitions (test_executorch_xnnpack.py); portable: portable kernels only


@pytest.fixture(scope="module")
def et_base(tmp_path_factory):
    return tmp_path_factory.mktemp("executorch-exports")


@pytest.fixture(scope="module")
def et_export(tiny_checkpoint, et_base):
    # --no-verify: each case is checked here against Transformers (the built-in check has its own test)
    return export_once(et_base, lambda case, backend: ("--model", tiny_checkpoint(case), *ET_ARGS, "--executorch-backend",
                                                      backend or "xnnpack", "--no-verify", "--quiet"))


def pte_of(out: Path) -> Path:
    manifest = json.loads((out / "hfx.json").read_text())
    comps = [c for c in manifest["components"] if c["format"] == "executorch"]
    assert len(comps) == 1, f"{out}: {len(comps)} executorch components"
    assert [i["name"] for i in comps[0]["inputs"]] == ["input_ids", "cache_position"]
    assert [o["name"] for o in comps[0]["outputs"]] == ["logits"]
    return out / comps[0]["file"]


def load_forward(pte: Path):
    from executorch.runtime import Runtime
    program = Runtime.get().load_program(pte)
    return program, program.load_method("forward")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_match_transformers(case, backend, tiny_checkpoint, et_export):
    _, forward = load_forward(pte_of(et_export(case, backend)))
    ref = load_reference(tiny_checkpoint(case))
    ids = torch.tensor([PROMPTS["batch1"][0]])
    written, hf_past, worst = 0, None, 0.0
    for step in range(4):
        cache_position = torch.arange(written, written + ids.shape[1])
        (logits,) = forward.execute([ids, cache_position])
        with torch.no_grad():
            r = ref(input_ids=ids, past_key_values=hf_past, use_cache=True,
                    position_ids=cache_position[None], attention_mask=torch.ones(1, written + ids.shape[1], dtype=torch.long))
        worst = max(worst, compare(f"{case}/{backend} step {step} logits", logits, r.logits))
        hf_past = r.past_key_values
        written += ids.shape[1]
        ids = r.logits[:, -1].argmax(-1, keepdim=True)
    record_coverage(case, f"executorch-{backend}", "logits_max_abs_diff", worst)


def greedy(forward, prompt: list[int], n: int) -> list[int]:
    ids, written, out = torch.tensor([prompt]), 0, []
    for _ in range(n):
        (logits,) = forward.execute([ids, torch.arange(written, written + ids.shape[1])])
        written += ids.shape[1]
        tok = int(logits[0, -1].argmax())
        out.append(tok)
        ids = torch.tensor([[tok]])
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_greedy_tokens_match_transformers(case, backend, et_export, reference_tokens):
    _, forward = load_forward(pte_of(et_export(case, backend)))
    expected = reference_tokens(case, "batch1")[0]
    got = greedy(forward, PROMPTS["batch1"][0], NEW_TOKENS)
    # Transformers stops a row at EOS and pads it: compare up to what it generated.
    assert got[:len(expected)] == expected
    record_coverage(case, f"executorch-{backend}", "greedy_tokens", len(expected))


def test_program_layout(et_export):
    """ET12 + the eh00 extended header, constant methods for ExecuTorch's LLM runner, and a query
    length that is DYNAMIC_BOUND up to the cache length (prefill and single steps, one method)."""
    pte = pte_of(et_export("llama", "portable"))
    head = pte.read_bytes()[:40]
    assert head[4:8] == b"ET12" and head[8:12] == b"eh00"
    program_size, segment_base, segment_size = struct.unpack("<QQQ", head[16:40])
    assert segment_base % 128 == 0 and segment_base >= program_size
    assert segment_base + segment_size == pte.stat().st_size
    program, forward = load_forward(pte)
    assert set(program.method_names) >= {"forward", "get_max_seq_len", "get_max_context_len", "get_vocab_size",
                                         "use_kv_cache", "get_eos_ids", "enable_dynamic_shape"}
    value = lambda name: program.load_method(name).execute([])  # noqa: E731
    assert value("get_max_context_len") == [CACHE_LEN] and value("get_max_seq_len") == [CACHE_LEN]
    assert value("get_vocab_size") == [128] and value("use_kv_cache") == [True] and value("get_eos_ids") == [2]
    meta = forward.metadata
    assert meta.num_inputs() == 2 and meta.num_outputs() == 1
    assert list(meta.input_tensor_meta(0).sizes()) == [1, CACHE_LEN]


def test_exir_reads_the_program_back(et_export):
    """exir's own deserializer (what ExecuTorch's devtools read a .pte with) parses hfx's file: every list
    of the Program table present, the XNNPACK payloads and named data restored from their segments."""
    from executorch.exir._serialize._program import deserialize_pte_binary
    pte = deserialize_pte_binary(pte_of(et_export("llama", "xnnpack")).read_bytes())
    (forward,) = [p for p in pte.program.execution_plan if p.name == "forward"]
    assert [d.id for d in forward.delegates] and all(d.id == "XnnpackBackend" for d in forward.delegates)
    assert len(pte.program.backend_delegate_data) == len(forward.delegates)  # the payloads, restored
    assert "model.layers.0.self_attn.q_proj.weight" in pte.named_data.pte_data  # XNNPACK's weights
    assert len(pte.program.constant_buffer) > 1  # the constant segment, restored ([0] is the placeholder)


def test_query_longer_than_the_bound_is_refused(et_export):
    _, forward = load_forward(pte_of(et_export("llama")))
    with pytest.raises(Exception):
        forward.execute([torch.zeros(1, CACHE_LEN + 1, dtype=torch.long), torch.arange(CACHE_LEN + 1)])


@pytest.mark.parametrize("backend", BACKENDS)
def test_builtin_check_verify_and_generate_run_executorch(backend, tiny_checkpoint, tmp_path):
    """The export's built-in check, `hfx verify --runtime executorch` (shape matrix, greedy tokens) and
    `hfx generate --runtime executorch` run the program through ExecuTorch's C++ runtime; the recipe
    records the backend and an XNNPACK program holds its delegates."""
    out = tmp_path / "checked"
    proc = run_hfx("export", "--model", str(tiny_checkpoint("qwen3")), *ET_ARGS, "--executorch-backend", backend, str(out))
    summary = proc.stdout + proc.stderr
    assert "greedy tokens" in summary and ("XNNPACK" if backend == "xnnpack" else "portable kernels") in summary
    assert json.loads((out / "hfx.json").read_text())["recipe"]["executorch_backend"] == backend
    assert (b"XnnpackBackend" in (out / "executorch" / "model.pte").read_bytes()) == (backend == "xnnpack")
    verify = run_hfx("verify", str(out), "--runtime", "executorch")
    assert "verified" in verify.stdout + verify.stderr
    gen = run_hfx("generate", str(out), "--runtime", "executorch", "--prompt-ids", ",".join(map(str, PROMPTS["batch1"][0])),
                  "-n", "16", "--print-ids")
    assert gen.stdout.strip(), gen.stderr


@pytest.mark.parametrize("extra, message", [
    ([], "add --static-cache --max-cache-len N"),
    (["--static-cache", "--max-cache-len", "32", "--split-prefill"], "drop --split-prefill"),
])
def test_refusals_are_one_line_and_leave_nothing(tiny_checkpoint, tmp_path, extra, message):
    out = tmp_path / "refused"
    proc = run_hfx("export", "--model", str(tiny_checkpoint("llama")), "--format", "executorch", *extra, str(out), check=False)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr
    assert len([line for line in proc.stderr.splitlines() if line.startswith("hfx:") and "warning" not in line]) == 1, proc.stderr
    assert not out.exists()


def ascii_tokenizer():
    """A byte-level BPE tokenizer whose every token decodes to ASCII: ExecuTorch's LLM runner hands each
    generated piece to Python as str, so a random model must not emit half of a UTF-8 character."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from make_tokenizers import corpus
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([line for line in corpus() if line.isascii()],
                            trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"], show_progress=False))
    return tok


def test_executorch_llm_runner_generates_transformers_tokens(tmp_path):
    """ExecuTorch's own C++ TextLLMRunner (its Python binding) loads hfx's .pte unmodified, reads the
    constant methods, runs prefill and decode through the one forward method, and generates the text
    Transformers generates greedily."""
    from executorch.extension.llm.runner import GenerationConfig, TextLLMRunner
    from transformers import AutoConfig, AutoModelForCausalLM
    tok = ascii_tokenizer()
    config = AutoConfig.for_model("llama", vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=96,
                                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                  max_position_embeddings=128, bos_token_id=0, eos_token_id=0, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            p.copy_(torch.randn(p.shape) * (0.25 if p.dim() > 1 else 0.2) + (1.0 if "norm" in name else 0.0))
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    model.save_pretrained(ckpt)
    tok.save(str(ckpt / "tokenizer.json"))
    run_hfx("export", "--model", str(ckpt), "--format", "executorch", "--static-cache", "--max-cache-len", "64", "--quiet", str(out))
    runner = TextLLMRunner(str(out / "executorch" / "model.pte"), str(ckpt / "tokenizer.json"))
    pieces: list[str] = []
    prompt = "The quick brown fox"
    runner.generate(prompt, GenerationConfig(echo=False, max_new_tokens=24, temperature=0.0), token_callback=pieces.append)
    ids = tok.encode(prompt).ids
    with torch.no_grad():
        expected = model.generate(torch.tensor([ids]), max_new_tokens=24, do_sample=False)[0, len(ids):].tolist()
    assert "".join(pieces) == tok.decode(expected)


def test_transformers_executorch_exporter_file_agrees(tiny_checkpoint, et_export, tmp_path):
    """A .pte from Transformers' own ExecutorchExporter (export_for_generation, static cache, XNNPACK, as
    its docs show) and hfx's, on the same checkpoint: both load in ExecuTorch and give the prefill
    logits Transformers eager gives."""
    from transformers import AutoModelForCausalLM, GenerationConfig as HfGenerationConfig
    from transformers.exporters.base import ExportedModel
    from transformers.exporters.configs import ExecutorchConfig
    from transformers.exporters.exporter_executorch import ExecutorchExporter
    from transformers.exporters.utils import decompose_for_generation
    case = "llama"
    model = AutoModelForCausalLM.from_pretrained(tiny_checkpoint(case)).eval()
    ids = torch.tensor([PROMPTS["batch1"][0]])
    sample = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    gc = HfGenerationConfig(cache_implementation="static", max_cache_len=32)
    ExecutorchExporter().export_for_generation(model, sample, ExecutorchConfig(backend="xnnpack"),
                                               generation_config=gc).save_pretrained(tmp_path / "hf")
    assert (tmp_path / "hf" / "prefill.pte").is_file()
    _, prefill_inputs = decompose_for_generation(model, sample, generation_config=gc)["prefill"]
    theirs = ExportedModel.from_pretrained(tmp_path / "hf").runners["prefill"](**prefill_inputs).logits
    _, forward = load_forward(pte_of(et_export(case)))
    (ours,) = forward.execute([ids, torch.arange(ids.shape[1])])
    with torch.no_grad():
        eager = model(input_ids=ids).logits
    compare("Transformers' ExecutorchExporter prefill vs eager", theirs, eager)
    compare("hfx's .pte prefill vs eager", ours, eager)
    compare("hfx's .pte vs Transformers' ExecutorchExporter", ours, theirs)


def test_inspect_shows_the_executorch_contract(tiny_checkpoint):
    proc = run_hfx("inspect", str(tiny_checkpoint("llama")), "--format", "executorch", "--static-cache", "--max-cache-len", "64")
    assert "in  input_ids                    i64  [1, sequence_length]" in proc.stdout
    assert "in  cache_position" in proc.stdout and "past_key_values" not in proc.stdout.split("I/O contract")[1].split("preflight")[0]


def test_python_step_server_runs_the_program(et_export, tmp_path):
    """python/hfx_executorch_runner.py, the driver of a build without ExecuTorch's C++ libraries: one
    request per line over executorch.runtime, the logits of forward written out."""
    import subprocess
    import sys
    from safetensors.torch import load_file, save_file
    pte = pte_of(et_export("llama"))
    save_file({"input_ids": torch.tensor([PROMPTS["batch1"][0]]), "cache_position": torch.arange(7)}, str(tmp_path / "in.safetensors"))
    request = json.dumps({"inputs": str(tmp_path / "in.safetensors"), "outputs": str(tmp_path / "out.safetensors")})
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve().parents[2] / "python" / "hfx_executorch_runner.py"), "--serve",
                           str(pte), "--input", "input_ids", "--input", "cache_position"], input=request + "\n",
                          capture_output=True, text=True, timeout=300)
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert lines[0]["ready"] and lines[1] == {"ok": True}, proc.stdout + proc.stderr
    _, forward = load_forward(pte)
    (expected,) = forward.execute([torch.tensor([PROMPTS["batch1"][0]]), torch.arange(7)])
    assert torch.equal(load_file(str(tmp_path / "out.safetensors"))["logits"], expected)
