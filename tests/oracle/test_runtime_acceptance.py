"""Never publish what the target runtime refuses (issue #14 item 4).

  (a) The ort profile's fused-op constraints (passes/ort_contrib_ops.cc kGqaConstraints, ONNX Runtime
      1.31's CPU GroupQueryAttention checks): a tiny model breaking each one falls back to the portable
      profile, the note and hfx.json name the constraint, and the folder runs in ONNX Runtime within
      1e-4 of Transformers eager. Before, gpt2-head12 and neox-head24-rotary16 were fused and ORT refused
      the graph at its first run ("head_size must be a multiple of 8", "head_size shall be a multiple
      of 16") after hfx said "verified".
  (b) The built-in check of `hfx export` runs ONNX Runtime when $HFX_PYTHON (else python3) imports it,
      and says which runtimes ran; `--verify-runtime reference` skips it.
  (c) A graph ONNX Runtime refuses shows ORT's own error text.
  (d) `--static-cache`: no genai_config.json that onnxruntime-genai cannot run.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from conftest import empty_cache_feed, hfx_binary, run_hfx
import tiny_models

# The interpreter running these tests has onnxruntime (imported above): the one HFX_PYTHON names for hfx.
ORT_PYTHON = Path(sys.executable)

# case -> (model_type, config overrides, the constraint the fallback note must name)
CONSTRAINT_CASES = {
    # learned positions, no rotary: GroupQueryAttention's head_size % 8 (odd widths included)
    "gpt2-head12": ("gpt2", dict(hidden_size=48, num_attention_heads=4, num_key_value_heads=4, n_inner=80,
                                 max_position_embeddings=128), "head_dim 12 is not a multiple of 8"),
    "gpt2-head9": ("gpt2", dict(hidden_size=36, num_attention_heads=4, num_key_value_heads=4, n_inner=80,
                                max_position_embeddings=128), "head_dim 9 is not a multiple of 8"),
    # partial rotary 16 of 24: rotary_dim / 2 = 8 passes the cache-width check, but with cos/sin caches the
    # kernel asks head_size % 16
    "neox-head24-rotary16": ("gpt_neox", dict(hidden_size=48, num_attention_heads=2, num_key_value_heads=2,
                                              max_position_embeddings=128,
                                              rope_parameters=dict(rope_type="default", rope_theta=10000.0,
                                                                   partial_rotary_factor=0.6667)),
                             "head_dim 24 is not a multiple of 16"),
    # full rotary over 20 dims: head_size % 8 is the first check broken (fell back before, for % 16)
    "llama-head20": ("llama", dict(head_dim=20, max_position_embeddings=128), "head_dim 20 is not a multiple of 8"),
}


def make_checkpoint(case: str, folder: Path) -> Path:
    """A seeded tiny checkpoint, randomised as tiny_models.make does."""
    from transformers import AutoConfig, AutoModelForCausalLM
    model_type, overrides, _ = CONSTRAINT_CASES[case]
    cfg = dict(tiny_models.BASE)
    cfg.update(overrides)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **cfg))
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            centre = 1.0 if "norm" in name and bool((p == 1).all()) else 0.0
            p.copy_(torch.randn(p.shape) * (0.25 if p.dim() > 1 else 0.2) + centre)
    model.save_pretrained(folder, safe_serialization=True)
    return folder


def hfx_env(**env) -> dict:
    out = dict(os.environ)
    out.pop("HFX_PYTHON", None)
    out.update({k: str(v) for k, v in env.items()})
    return out


def run_hfx_env(env: dict, *args) -> subprocess.CompletedProcess:
    return subprocess.run([str(hfx_binary()), *map(str, args)], capture_output=True, text=True, env=env)


@pytest.mark.parametrize("case", sorted(CONSTRAINT_CASES))
def test_fused_op_constraint_falls_back_and_runs_in_ort(case, tmp_path):
    ckpt = make_checkpoint(case, tmp_path / "ckpt")
    out = tmp_path / "out"
    # the built-in check on the reference only: this test runs ORT itself, against Transformers
    proc = run_hfx("export", "--model", ckpt, "--onnx-profile", "ort", "--verify-runtime", "reference", out)
    why = CONSTRAINT_CASES[case][2]
    assert "falls back to the portable profile" in proc.stderr and why in proc.stderr, proc.stderr
    prof = json.loads((out / "hfx.json").read_text())["onnx_profiles"][0]
    assert prof["profile"] == "portable" and why in prof["note"], prof
    ops = {n.op_type for n in onnx.load(str(out / "onnx" / "model.onnx"), load_external_data=False).graph.node}
    assert "GroupQueryAttention" not in ops

    sess = ort.InferenceSession(str(out / "onnx" / "model.onnx"), providers=["CPUExecutionProvider"])
    ids = [[3 + (i * 37) % 120 for i in range(9)]]
    feed = empty_cache_feed({i.name: i for i in sess.get_inputs()}, ids, [[1] * 9], [list(range(9))])
    logits = sess.run(["logits"], feed)[0]
    model = tiny_models.load_reference(ckpt)
    with torch.no_grad():
        ref = model(input_ids=torch.tensor(ids)).logits.numpy()
    worst = float(np.abs(logits - ref).max())
    assert worst <= 1e-4, f"{case}: ORT vs Transformers max abs {worst:.3g}"
    print(f"\n{case}: falls back ({why}); ORT vs Transformers max abs {worst:.3g}")


def test_builtin_check_runs_onnxruntime_when_found(tiny_checkpoint, tmp_path):
    env = hfx_env(HFX_PYTHON=ORT_PYTHON)
    proc = run_hfx_env(env, "export", "--model", tiny_checkpoint("llama"), tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    # ONNX Runtime found: the files run there (the runtime they are for), against the reference executor
    # on the checkpoint; not a second time on the reference executor.
    assert f"checked on ONNX Runtime {ort.__version__}; oracle: hfx's reference executor:" in proc.stdout, proc.stdout
    # --verify-runtime reference: the way to skip the real runtime
    proc = run_hfx_env(env, "export", "--model", tiny_checkpoint("llama"), "--verify-runtime", "reference", tmp_path / "ref")
    assert proc.returncode == 0, proc.stderr
    assert "checked on hfx's reference executor only (--verify-runtime reference)" in proc.stdout, proc.stdout


def test_builtin_check_says_reference_only_without_onnxruntime(tiny_checkpoint, tmp_path):
    no_ort = tmp_path / "python-without-ort"
    no_ort.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'onnxruntime'\" >&2\nexit 1\n")
    no_ort.chmod(0o755)
    proc = run_hfx_env(hfx_env(HFX_PYTHON=no_ort), "export", "--model", tiny_checkpoint("llama"), tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    assert (f"checked on hfx's reference executor only (ONNX Runtime not found for {no_ort}; set HFX_PYTHON to a "
            "Python with onnxruntime)") in proc.stdout, proc.stdout


def test_builtin_check_refusal_publishes_nothing(tiny_checkpoint, tmp_path):
    """The built-in check's ONNX Runtime pass failing (an interpreter that imports onnxruntime but whose
    driver run refuses the graph, as ORT's kernels do): the export is not published, and the line carries
    the runtime's words and how to publish without it."""
    fake = tmp_path / "python-ort-refuses"
    fake.write_text("#!/bin/sh\n"
                    "if [ \"$1\" = -c ]; then echo 1.31.1; exit 0; fi\n"  # the probe
                    "echo '{\"error\": \"InvalidArgument: [ONNXRuntimeError] : 2 : INVALID_ARGUMENT : "
                    "head_size must be a multiple of 8. Got head_size % 8 == 4\"}' > \"$3\"\nexit 1\n")
    fake.chmod(0o755)
    out = tmp_path / "out"
    proc = run_hfx_env(hfx_env(HFX_PYTHON=fake), "export", "--model", tiny_checkpoint("llama"), out)
    assert proc.returncode != 0 and not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")], list(tmp_path.iterdir())
    line = proc.stderr.strip().splitlines()[-1]
    assert "head_size must be a multiple of 8" in line and "nothing was written" in line, line
    assert "--verify-runtime reference" in line, line


def test_graph_ort_refuses_shows_its_own_error(tiny_checkpoint, tmp_path):
    """An ort export whose GroupQueryAttention is edited to 8 query and 4 kv heads over the packed
    64 + 2 x 32 columns: heads of 8, the same widths, so hfx's read-back finds every product's shapes
    consistent (an edit to 8 query heads alone makes the output 80 wide, which the read-back refuses
    itself), but the past keys hold 2 heads of 16: ORT refuses at its first run. verify shows ORT's own
    line, not a guess about the installation (before: "onnxruntime driver failed: <command> (is
    onnxruntime installed for that interpreter? set HFX_PYTHON)")."""
    out = tmp_path / "out"
    run_hfx("export", "--model", tiny_checkpoint("llama"), "--onnx-profile", "ort", "--no-verify", out)
    path = out / "onnx" / "model.onnx"
    m = onnx.load(str(path), load_external_data=False)
    for node in m.graph.node:
        if node.op_type == "GroupQueryAttention":
            for a in node.attribute:
                if a.name == "num_heads":
                    a.i = 8
                if a.name == "kv_num_heads":
                    a.i = 4
    onnx.save(m, str(path))
    env = hfx_env(HFX_PYTHON=ORT_PYTHON)
    proc = run_hfx_env(env, "verify", out, "--runtime", "onnxruntime", "--no-reexport", "--tokens", "2")
    assert proc.returncode != 0
    line = proc.stderr.strip().splitlines()[-1]
    assert "ONNX Runtime (run by" in line and "failed on the artifact" in line, proc.stderr
    assert "[ONNXRuntimeError]" in line and "GroupQueryAttention" in line, proc.stderr
    assert "is onnxruntime installed" not in proc.stderr


def test_static_cache_writes_no_genai_config_genai_cannot_run(tiny_checkpoint, tmp_path):
    """F#3: `--static-cache` wrote a genai_config.json that onnxruntime-genai 0.18 fails on ("Got invalid
    dimensions for input: attention_mask ... Got: 14 Expected: 128"). Now none is written, and the note
    and hfx.json say why. The reason is checked too: the config hfx wrote before (growing buffers) and
    one with past_present_share_buffer both fail in genai on the static graph."""
    og = pytest.importorskip("onnxruntime_genai")
    ckpt = tiny_checkpoint("llama")
    static, dynamic = tmp_path / "static", tmp_path / "dynamic"
    proc = run_hfx("export", "--model", ckpt, "--static-cache", "--max-cache-len", "32", "--verify-runtime", "reference",
                   static)
    assert not (static / "onnx" / "genai_config.json").exists()
    assert "no genai_config.json: onnxruntime-genai 0.18 does not run hfx's static-cache contract" in proc.stderr
    prof = json.loads((static / "hfx.json").read_text())["onnx_profiles"][0]
    assert "no genai_config.json" in prof["note"], prof
    run_hfx("export", "--model", ckpt, "--verify-runtime", "reference", "--quiet", dynamic)
    assert (dynamic / "onnx" / "genai_config.json").exists()  # a growing cache keeps its config
    for share in (False, True):
        cfg = json.loads((dynamic / "onnx" / "genai_config.json").read_text())
        cfg["model"]["context_length"] = cfg["search"]["max_length"] = 32
        cfg["search"]["past_present_share_buffer"] = share
        cfg["model"]["decoder"]["inputs"]["position_ids"] = "position_ids"
        (static / "onnx" / "genai_config.json").write_text(json.dumps(cfg))
        model = og.Model(str(static / "onnx"))
        params = og.GeneratorParams(model)
        params.set_search_options(do_sample=False, max_length=12)
        gen = og.Generator(model, params)
        with pytest.raises(Exception, match="attention_mask"):
            gen.append_tokens([[3, 40, 77, 5, 9]])
            while not gen.is_done():
                gen.generate_next_token()


# (case, onnx profile, dtype): tied embeddings, whose lm_head reads the table through a Transpose that
# ORT's ConstantFolding folds by default, in both profiles; a state-space model's carried conv and SSM
# states; bf16 weights cast to f32 at use, whose sessions keep the fold.
DRIVER_CONFIG_CASES = [("qwen3", "ort", "f32"), ("phi-rotary16-tied", "ort", "f32"), ("llama-mha-tied", "portable", "f32"),
                       ("mamba2-g1-tied", "portable", "f32"), ("qwen3", "ort", "bf16")]


@pytest.mark.parametrize("case,profile,dtype", DRIVER_CONFIG_CASES)
def test_check_sessions_compute_what_default_sessions_do(case, profile, dtype, tiny_checkpoint, tmp_path):
    """verify's ONNX Runtime driver opens graphs without quantized products without prepacking, and
    those that cast no weight at use without ConstantFolding (python/hfx_ort_runner.py NO_FOLDING: at
    model scale the fold of a tied lm_head's Transpose copies the table three times at load). What it
    checks must be what a user's session with ORT's defaults computes: a left-padded prompt and a
    decode step through the cache, every output bit for bit."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
    import decode_inputs
    from hfx_ort import OrtGenerator, present_of
    from hfx_ort_runner import NO_FOLDING, session_config

    out = tmp_path / "out"
    proc = run_hfx_env(hfx_env(), "export", "--model", tiny_checkpoint(case), "--onnx-profile", profile, "--dtype", dtype,
                       "--no-verify", "--quiet", out)
    assert proc.returncode == 0, proc.stderr
    # The graphs looked at (the driver's path when hfx does not say): bf16 weights cast at use keep the fold.
    config = session_config(out / "onnx" / "model.onnx")
    assert config["session.disable_prepacking"] == "1"
    assert (config.get("optimization.disable_specified_optimizers") == NO_FOLDING["optimization.disable_specified_optimizers"]) \
        == (dtype == "f32"), config

    def two_steps(gen):
        vocab = gen.facts.manifest["model"]["vocab_size"]
        ids, mask = decode_inputs.prompt(vocab)
        feed = {"input_ids": ids, "attention_mask": mask, "position_ids": decode_inputs.positions(mask, ids.shape[1]),
                **gen._empty_states(len(ids))}
        outs = []
        for step, sess in enumerate((gen.first, gen.next)):
            wanted = {i.name for i in sess.get_inputs()}
            names = [o.name for o in sess.get_outputs()]
            outs.append(dict(zip(names, sess.run(None, {k: v for k, v in feed.items() if k in wanted}))))
            mask = np.concatenate([mask, np.ones((len(ids), 1), np.int64)], axis=1)
            feed = {"input_ids": decode_inputs.next_tokens(vocab, step, len(ids)), "attention_mask": mask,
                    "position_ids": decode_inputs.positions(mask, 1),
                    **{past: outs[-1][present_of(past)] for past, _, _ in gen.states}}
        return outs

    default, checked = two_steps(OrtGenerator(out)), two_steps(OrtGenerator(out, session_config=config))
    for step, (d, c) in enumerate(zip(default, checked)):
        assert d.keys() == c.keys()
        for name in d:
            assert np.array_equal(d[name], c[name]), (
                f"{case} ({profile}, {dtype}) step {step} {name}: the check's session differs from ORT's defaults by "
                f"{float(np.abs(d[name] - c[name]).max()):.3g}")
