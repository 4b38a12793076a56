"""`hfx verify --oracle transformers`: the artifact (here run by ONNX Runtime) compared with Transformers
eager on the source checkpoint instead of hfx's own reference executor, on the same shape cases and
greedy prompts; `--model DIR` re-points a moved source; the manifest keeps no absolute path.

Cost: one export per decoder family (the first case of each model_type in tiny_models.CASES) and one
`hfx verify` each with 8 greedy tokens and no re-export; the full shape matrix and 64 tokens run on
llama only. Most of each verify is the driver importing torch and transformers (about 4 s of CPU).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import hfx_binary, run_hfx
from tiny_models import CASES

# One case per architecture hfx supports: the first case of each model_type.
FAMILIES = list({model_type: case for case, (model_type, _) in reversed(CASES.items())}.values())[::-1]
DEBIAN_PYTHON = "/usr/bin/python3"  # Debian's interpreter: no torch, no transformers


def report_of(out: Path, runtime: str = "onnxruntime") -> dict:
    """The report of the last `hfx verify OUT --runtime RUNTIME` (each runtime has its own folder)."""
    return json.loads((out / "verify" / runtime / "report.json").read_text())


def checks_of(report: dict, prefix: str) -> list[dict]:
    return [c for c in report["checks"] if c["name"].startswith(prefix)]


@pytest.fixture(scope="module")
def family_export(tiny_checkpoint, tmp_path_factory):
    base = tmp_path_factory.mktemp("oracle-exports")
    done: dict[str, Path] = {}

    def get(case: str) -> Path:
        if case not in done:
            out = base / case
            # portable: the shape cases feed left-padded rows with a cache (the ort profile serves
            # unpadded rows only, test_ort_profile.py)
            run_hfx("export", "--model", tiny_checkpoint(case), "--quiet", "--no-verify", "--onnx-profile", "portable", out)
            done[case] = out
        return done[case]

    return get


def test_families_cover_every_model_type():
    assert len(FAMILIES) == len({mt for mt, _ in CASES.values()}) >= 30


@pytest.mark.parametrize("case", FAMILIES)
def test_oracle_passes_on_every_decoder_family(case, family_export):
    out = family_export(case)
    full = case == "llama"
    proc = run_hfx("verify", out, "--runtime", "onnxruntime", "--oracle", "transformers", "--no-reexport",
                   *([] if full else ["--tokens", "8"]), check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = report_of(out)
    assert report["passed"] and report["runtime"] == "onnxruntime"
    assert report["oracle"].startswith("Transformers ") and "eager" in report["oracle"]
    numbers = checks_of(report, "numbers: decoder")
    assert len(numbers) == 6 and all("against Transformers" in c["tolerance"] for c in numbers)
    for c in numbers:
        per_output = c["measured"]["outputs"]
        assert "logits" in per_output and "present.0.key" in per_output
        assert all(o["mismatched"] == 0 and o["max_abs"] <= 1e-4 for o in per_output.values())
    (greedy,) = checks_of(report, "greedy generation")
    assert greedy["measured"]["expected"] == greedy["measured"]["actual"]
    assert greedy["measured"]["first_divergence"] == []
    assert len(greedy["measured"]["expected"][0]) == (64 if full else 8)
    assert "Oracle: Transformers" in (out / "verify" / "onnxruntime" / "report.md").read_text()


# One case of each family (two where a second covers a different state layout); the others' cases
# are compared with Transformers directly by their own test files.
@pytest.mark.parametrize("case", ["llama", "gemma2", "lfm2", "lfm2-bias-k4", "mamba2-g1-tied", "granitemoehybrid",
                                  "granitemoehybrid-moe", "bamba", "nemotron_h", "nemotron_h-bias-tied",
                                  "nemotron_h-moe-latent", "falcon_h1", "mamba-bias-tied", "falcon_mamba", "zamba2",
                                  "qwen3_5_moe_text"])
@pytest.mark.parametrize("layout", ["growing", "static", "split"])
def test_oracle_on_every_layout_and_a_hybrid(case, layout, tiny_checkpoint, tmp_path):
    """The oracle on a static cache with left-padded rows (its padding in the step's past: a padded
    query attends over every empty slot of the buffer, where Transformers' growing cache has the
    prompt's few) and on split graphs; and on LFM2, whose conv states (hfx's last conv_L_cache - 1
    columns) enter Transformers' cache with a zero column before them and are compared as presents;
    and on Mamba-2 mixers (mamba2, Granite 4.0-H dense and sparse-MoE, Bamba, Nemotron-H, whose MLP and MoE
    layers carry no state, Falcon-H1, whose every layer carries a mixer's states and attention's keys and
    values, and Zamba2, whose hybrid layers carry keys and values beside them in one cache layer), whose
    scan states enter as recurrent states; and on Qwen3.5-MoE's gated delta-net (past_recurrent.{i})
    beside its sparse MoE; and on
    Mamba-1's (mamba, falcon_mamba), which Transformers runs a token at a time after a cache (the oracle's
    run_token_by_token)."""
    flags = {"growing": [], "static": ["--static-cache", "--max-cache-len", "80"], "split": ["--split-prefill"]}[layout]
    out = tmp_path / "out"
    run_hfx("export", "--model", tiny_checkpoint(case), "--quiet", "--no-verify", "--onnx-profile", "portable", *flags, out)
    proc = run_hfx("verify", out, "--runtime", "onnxruntime", "--oracle", "transformers", "--no-reexport", "--tokens", "16",
                   check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = report_of(out)
    numbers = [c for c in report["checks"] if c["name"].startswith("numbers:")]
    assert numbers and all("against Transformers" in c["tolerance"] for c in numbers)
    compared = {name for c in numbers for name in c["measured"]["outputs"]}
    if case.startswith(("lfm2", "mamba", "falcon_mamba", "granitemoehybrid", "bamba", "nemotron_h", "falcon_h1", "zamba2")):
        assert any(n.startswith("present_conv.") for n in compared), compared
    if case.startswith(("mamba", "falcon_mamba", "granitemoehybrid", "bamba", "nemotron_h", "falcon_h1", "zamba2")):
        assert any(n.startswith("present_ssm.") for n in compared), compared
    if case.startswith("falcon_h1"):  # one layer, all four states
        assert {"present_conv.0", "present_ssm.0", "present.0.key", "present.0.value"} <= compared, compared
    if case.startswith("zamba2"):  # a hybrid layer's keys and values beside its mixer's states
        assert any(n.startswith("present.") and n.endswith(".key") for n in compared), compared
    (greedy,) = checks_of(report, "greedy generation")
    assert greedy["measured"]["expected"] == greedy["measured"]["actual"]


def test_oracle_passes_on_an_encoder(tmp_path):
    from test_encoders import make_checkpoint

    src = make_checkpoint("bert-cls", tmp_path / "bert-cls")
    out = tmp_path / "out"
    run_hfx("export", "--model", src, "--quiet", "--no-verify", out)
    proc = run_hfx("verify", out, "--runtime", "onnxruntime", "--oracle", "transformers", "--no-reexport", check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = report_of(out)
    numbers = checks_of(report, "numbers: encoder")
    assert numbers and all(set(c["measured"]["outputs"]) == {"last_hidden_state", "logits"} for c in numbers)
    assert not checks_of(report, "greedy")


def test_oracle_catches_a_wrong_model_definition(tiny_checkpoint, tmp_path):
    """A Helium checkpoint that hfx reads as a Llama: hfx's Llama block in place of Helium's.

    Helium and Llama checkpoints have the same tensor names and shapes (Helium with attention_bias
    false); the blocks differ in the rotary embedding only (Helium rotates interleaved pairs, GPT-J
    style; Llama rotates halves). The "wrong definition" is made with no test-only code in hfx: the
    export is made from the tiny Llama, which is what a wrong reading of this Helium checkpoint (the
    same weights under a Helium config) would build, and verified with `--model` pointing at the
    Helium checkpoint.

    hfx's source check hashes config.json, so it sees the config swap and fails in both runs; it
    cannot mask the comparison, because that is asserted per check: against hfx's reference executor
    (which rebuilds the definition hfx exported, from `as-llama`) every numbers case and the greedy
    tokens pass; against Transformers on the true Helium checkpoint every numbers case fails and the
    greedy tokens part, with the first divergence named.
    """
    as_llama = tiny_checkpoint("llama")  # untied, no biases, GQA 2
    helium = tmp_path / "helium"
    shutil.copytree(as_llama, helium)
    cfg = json.loads((helium / "config.json").read_text())
    cfg.update(model_type="helium", architectures=["HeliumForCausalLM"], attention_bias=False,
               head_dim=cfg["hidden_size"] // cfg["num_attention_heads"])  # Helium's default head_dim is 128
    (helium / "config.json").write_text(json.dumps(cfg))

    out = tmp_path / "out"
    run_hfx("export", "--model", as_llama, "--quiet", "--no-verify", "--onnx-profile", "portable", out)

    # hfx's reference executor: the artifact is what hfx's (Llama) definition computes.
    proc = run_hfx("verify", out, "--runtime", "onnxruntime", "--no-reexport", "--tokens", "16", check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ref = report_of(out)
    assert all(c["passed"] for c in checks_of(ref, "numbers") + checks_of(ref, "greedy"))

    # Transformers on the true Helium checkpoint: the rotary differs from the first layer on.
    proc = run_hfx("verify", out, "--runtime", "onnxruntime", "--no-reexport", "--tokens", "16",
                   "--oracle", "transformers", "--model", helium, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rep = report_of(out)
    by_name = {c["name"]: c for c in rep["checks"]}
    assert not by_name["source unchanged"]["passed"] and "config.json changed" in by_name["source unchanged"]["detail"]
    numbers = checks_of(rep, "numbers")
    assert numbers and not any(c["passed"] for c in numbers)
    assert all(c["measured"]["outputs"]["logits"]["mismatched"] > 0 for c in numbers)
    assert all("over tolerance: logits" in c["detail"] for c in numbers)
    (greedy,) = checks_of(rep, "greedy")
    assert not greedy["passed"] and greedy["measured"]["first_divergence"]
    first = greedy["measured"]["first_divergence"][0]
    assert f"row {first['row']} first parts at token {first['step']}: Transformers gives" in greedy["detail"]


def env_with(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "HFX_PYTHON"}
    env.update(extra)
    return env


def run_env(env, *args) -> subprocess.CompletedProcess:
    return subprocess.run([str(hfx_binary()), *map(str, args)], capture_output=True, text=True, env=env)


@pytest.mark.skipif(not Path(DEBIAN_PYTHON).exists(), reason="needs Debian's /usr/bin/python3")
def test_missing_torch_is_an_error_when_asked_and_a_note_with_auto(family_export):
    probe = subprocess.run([DEBIAN_PYTHON, "-c", "import torch"], capture_output=True)
    assert probe.returncode != 0, "this test needs a Python without torch"
    out = family_export("llama")
    env = env_with(HFX_PYTHON=DEBIAN_PYTHON)
    proc = run_env(env, "verify", out, "--oracle", "transformers", "--no-reexport")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1, proc.stderr
    assert f"--oracle transformers cannot run: {DEBIAN_PYTHON} has no torch" in lines[0]
    # auto: compared with hfx's reference executor, and the report says why Transformers did not run
    proc = run_env(env, "verify", out, "--oracle", "auto", "--no-reexport", "--tokens", "4")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = report_of(out, "reference")
    assert report["oracle"] == "hfx's reference executor"
    (note,) = checks_of(report, "oracle")
    assert note["detail"].startswith(f"Transformers not run: {DEBIAN_PYTHON} has no torch")
    # the export's built-in check says which oracle it used, and why Transformers did not run
    proc = run_env(env, "export", "--model", out / json.loads((out / "hfx.json").read_text())["source"]["path"],
                   "--verify-oracle", "auto", "--onnx-profile", "portable", out.parent / "auto-export")
    assert proc.returncode == 0, proc.stderr
    assert "; oracle: hfx's reference executor (Transformers not run: " in proc.stdout, proc.stdout


def test_export_check_names_its_oracles(tiny_checkpoint, tmp_path):
    proc = run_hfx("export", "--model", tiny_checkpoint("qwen3"), "--onnx-profile", "portable", tmp_path / "plain")
    assert "; oracle: hfx's reference executor:" in proc.stdout, proc.stdout
    env = env_with(HFX_PYTHON=str(Path(__file__).resolve().parents[2] / ".venv" / "bin" / "python"))
    proc = run_env(env, "export", "--model", tiny_checkpoint("qwen3"), "--onnx-profile", "portable",
                   "--verify-oracle", "transformers", tmp_path / "both")
    assert proc.returncode == 0, proc.stderr
    assert "; oracle: hfx's reference executor and Transformers " in proc.stdout, proc.stdout


def test_moved_source_is_found_with_model_and_the_manifest_has_no_absolute_path(tiny_checkpoint, tmp_path):
    src = tmp_path / "models" / "tiny"
    shutil.copytree(tiny_checkpoint("llama"), src)
    out = tmp_path / "exports" / "tiny-onnx"
    run_hfx("export", "--model", src, "--quiet", "--no-verify", out)
    text = (out / "hfx.json").read_text()
    manifest = json.loads(text)
    assert manifest["source"]["name"] == "tiny" and manifest["source"]["path"] == "../../models/tiny"
    assert "folder" not in manifest["source"] and str(tmp_path) not in text
    # both moved together: the relative path still finds the source
    moved = tmp_path / "moved"
    moved.mkdir()
    shutil.move(tmp_path / "models", moved / "models")
    shutil.move(tmp_path / "exports", moved / "exports")
    proc = run_hfx("verify", moved / "exports" / "tiny-onnx", "--no-reexport", "--tokens", "4", check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # the export alone moved one level deeper: the source is not where hfx.json says, and the error says
    # what to do
    (moved / "exports" / "x").mkdir()
    moved_out = moved / "exports" / "x" / "tiny-onnx"
    shutil.move(moved / "exports" / "tiny-onnx", moved_out)
    proc = run_hfx("verify", moved_out, "--no-reexport", "--tokens", "4", check=False)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1, proc.stderr
    assert (f"{moved_out / 'hfx.json'}: the source checkpoint {moved / 'exports' / 'models' / 'tiny'} is "
            "not there (moved, or another machine): pass --model DIR where it is now") in lines[0]
    # --model re-points it; the re-export from the re-pointed source reproduces the same bytes
    proc = run_hfx("verify", moved_out, "--model", moved / "models" / "tiny", "--tokens", "4", check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert report_of(moved_out, "reference")["passed"]
    # a missing --model folder is one line naming it
    proc = run_hfx("verify", moved_out, "--model", tmp_path / "nowhere", check=False)
    assert proc.returncode != 0 and f"--model {tmp_path / 'nowhere'}: no such checkpoint folder" in proc.stderr


def test_an_older_manifest_with_an_absolute_folder_is_still_read(tiny_checkpoint, tmp_path):
    out = tmp_path / "out"
    run_hfx("export", "--model", tiny_checkpoint("llama"), "--quiet", "--no-verify", out)
    manifest = json.loads((out / "hfx.json").read_text())
    folder = (out / manifest["source"].pop("path")).resolve()
    manifest["source"].pop("name")
    manifest["source"] = {"folder": str(folder), **manifest["source"]}
    (out / "hfx.json").write_text(json.dumps(manifest, indent=2))
    proc = run_hfx("verify", out, "--no-reexport", "--tokens", "4", check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
