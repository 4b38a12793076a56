"""BERT-family encoders (feature extraction and sequence classification): hfx's ONNX export run with
ONNX Runtime against Transformers eager in fp32, on a padded batch of 2 (right padding, as BERT's
tokenizers pad, and left padding).

Checkpoints are tiny random configs made with Transformers (seeded), every parameter randomised as
tiny_models.py does, saved with save_pretrained; the export goes through `hfx export` (which also runs
hfx's built-in verification). Pad positions are compared too: an encoder's padding mask only hides
pad *keys*, so every query row (pads included) attends to the real tokens and Transformers computes
its value deterministically; the export must reproduce those values as well.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import run_hfx

ATOL = 1e-4  # fp32: only the summation order may differ

BASE = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=64)
DISTIL_BASE = dict(vocab_size=128, dim=64, hidden_dim=96, n_layers=2, n_heads=4, max_position_embeddings=64)

# name -> (model_type, with a sequence-classification head, config overrides)
CASES: dict[str, tuple[str, bool, dict]] = {
    # BertModel: segments (type_vocab_size 2), erf gelu; its pooler is in the checkpoint, unused
    "bert": ("bert", False, dict(BASE, type_vocab_size=2, layer_norm_eps=1e-12)),
    # BertForSequenceClassification: pooler + classifier, 3 labels, tanh gelu, a larger eps, 3 segments
    "bert-cls": ("bert", True, dict(BASE, type_vocab_size=3, hidden_act="gelu_new", layer_norm_eps=1e-5, num_labels=3)),
    # RobertaModel: pad_token_id 1 (positions from 2), one token type
    "roberta": ("roberta", False, dict(BASE, type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                                       layer_norm_eps=1e-5)),
    # RobertaForSequenceClassification: dense + tanh + out_proj, 2 labels; a pad id away from 1
    "roberta-cls": ("roberta", True, dict(BASE, type_vocab_size=1, pad_token_id=5, bos_token_id=0, eos_token_id=2,
                                          num_labels=2)),
    "xlm-roberta": ("xlm-roberta", False, dict(BASE, type_vocab_size=1, pad_token_id=1, bos_token_id=0,
                                               eos_token_id=2, layer_norm_eps=1e-5)),
    "xlm-roberta-cls": ("xlm-roberta", True, dict(BASE, type_vocab_size=1, pad_token_id=1, bos_token_id=0,
                                                  eos_token_id=2, layer_norm_eps=1e-5, num_labels=4)),
    # DistilBertModel: erf gelu; then the classifier with relu inside the FFN too
    "distilbert": ("distilbert", False, dict(DISTIL_BASE)),
    "distilbert-cls": ("distilbert", True, dict(DISTIL_BASE, activation="relu", num_labels=5)),
}

# One export per model type also goes through `hfx verify --runtime onnxruntime`.
VERIFY_CASES = ["bert-cls", "roberta", "xlm-roberta-cls", "distilbert-cls"]


def make_checkpoint(case: str, folder: Path, seed: int = 0) -> Path:
    import torch
    from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification

    model_type, head, overrides = CASES[case]
    config = AutoConfig.for_model(model_type, **overrides)
    torch.manual_seed(seed)
    cls = AutoModelForSequenceClassification if head else AutoModel
    model = cls.from_config(config, dtype=torch.float32)
    # Randomise everything (LayerNorm scales around 1, the rest around 0), as tiny_models.py does, so
    # that a weight read from the wrong place cannot hide behind an init constant.
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            centre = 1.0 if "norm" in name.lower() and bool((p == 1).all()) else 0.0
            p.copy_(torch.randn(p.shape, dtype=torch.float32) * (0.25 if p.dim() > 1 else 0.2) + centre)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    return folder


def transformers_outputs(ckpt: Path, head: bool, ids, mask, types=None) -> dict:
    """What the export must give: last_hidden_state (the last hidden state: without a head it is the
    model's own output) and, with a classification head, logits; from Transformers eager."""
    import torch

    model = load_reference(ckpt, head)
    kwargs = dict(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask))
    if types is not None:
        kwargs["token_type_ids"] = torch.from_numpy(types)
    with torch.no_grad():
        ref = model(**kwargs, output_hidden_states=True)
    expected = {"last_hidden_state": ref.hidden_states[-1].numpy()}
    if not head:
        assert torch.equal(ref.last_hidden_state, ref.hidden_states[-1])
    else:
        expected["logits"] = ref.logits.numpy()
    return expected


def load_reference(folder: Path, head: bool):
    import torch
    from transformers import AutoModel, AutoModelForSequenceClassification

    cls = AutoModelForSequenceClassification if head else AutoModel
    model = cls.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    return model


@pytest.fixture(scope="module")
def encoder_export(tmp_path_factory):
    done: dict[str, tuple[Path, Path]] = {}
    base = tmp_path_factory.mktemp("encoders")

    def get(case: str) -> tuple[Path, Path]:
        if case not in done:
            ckpt = make_checkpoint(case, base / "ckpt" / case, seed=sorted(CASES).index(case))
            out = base / "out" / case
            run_hfx("export", "--model", ckpt, out, "--quiet")
            done[case] = (ckpt, out)
        return done[case]

    return get


def make_batch(config: dict, padding: str, seq: int = 9, real1: int = 5, seed: int = 0):
    """Two rows: row 0 fills the sequence, row 1 has `real1` real tokens padded with the pad id on the
    right (as BERT tokenizers pad) or on the left. Token types: two segments on real tokens, 0 on pads."""
    rng = np.random.default_rng(seed)
    vocab = config["vocab_size"]
    pad = config.get("pad_token_id", 0)
    ids = rng.integers(3, vocab, size=(2, seq)).astype(np.int64)
    ids[ids == pad] = 3 if pad != 3 else 4  # real tokens are never the pad id
    mask = np.ones((2, seq), dtype=np.int64)
    types = np.zeros((2, seq), dtype=np.int64)
    types[0, seq // 2:] = 1
    pads = slice(real1, seq) if padding == "right" else slice(0, seq - real1)
    reals = slice(0, real1) if padding == "right" else slice(seq - real1, seq)
    ids[1, pads] = pad
    mask[1, pads] = 0
    types[1, reals] = np.arange(real1) >= real1 // 2
    ntypes = config.get("type_vocab_size", 2)
    types = np.minimum(types, ntypes - 1)
    return ids, mask, types


def run_ort(out: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(out / "onnx" / "model.onnx"), providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    res = sess.run(None, {n: feeds[n] for n in names})
    return {o.name: r for o, r in zip(sess.get_outputs(), res)}


def compare(name: str, actual: np.ndarray, expected: np.ndarray) -> float:
    assert actual.shape == expected.shape, f"{name}: shape {actual.shape} vs {expected.shape}"
    diff = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
    bad = int((~(diff <= ATOL)).sum())
    assert bad == 0, f"{name}: {bad} of {diff.size} elements differ by more than {ATOL} (max {diff.max():.3g})"
    return float(diff.max())


@pytest.mark.parametrize("padding", ["right", "left"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_encoder_matches_transformers(case, padding, encoder_export):
    model_type, head, _ = CASES[case]
    ckpt, out = encoder_export(case)
    config = json.loads((ckpt / "config.json").read_text())
    ids, mask, types = make_batch(config, padding)

    manifest = json.loads((out / "hfx.json").read_text())
    comp = manifest["components"][0]
    in_names = [i["name"] for i in comp["inputs"]]
    out_names = [o["name"] for o in comp["outputs"]]
    # Optimum's I/O: BERT takes token_type_ids, RoBERTa / XLM-R / DistilBERT do not.
    assert in_names == ["input_ids", "attention_mask"] + (["token_type_ids"] if model_type == "bert" else [])
    assert out_names == ["last_hidden_state"] + (["logits"] if head else [])

    expected = transformers_outputs(ckpt, head, ids, mask, types if "token_type_ids" in in_names else None)

    got = run_ort(out, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})
    assert sorted(got) == sorted(expected)
    diffs = {k: compare(f"{case}/{padding}/{k}", got[k], v) for k, v in expected.items()}
    print(f"{case} [{padding} padding]: " + ", ".join(f"{k} max abs {d:.2e}" for k, d in diffs.items()))


@pytest.mark.parametrize("case", VERIFY_CASES)
def test_hfx_verify_onnxruntime(case, encoder_export):
    _, out = encoder_export(case)
    proc = run_hfx("verify", out, "--runtime", "onnxruntime", check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((out / "verify" / "onnxruntime" / "report.json").read_text())
    assert report["passed"] and report["runtime"] == "onnxruntime"
    assert any(c["name"].startswith("numbers: encoder") for c in report["checks"])


def test_summary_names_the_class(encoder_export):
    for case, cls in [("bert", "BertModel"), ("bert-cls", "BertForSequenceClassification"),
                      ("xlm-roberta-cls", "XLMRobertaForSequenceClassification"), ("distilbert", "DistilBertModel")]:
        _, out = encoder_export(case)
        assert json.loads((out / "hfx.json").read_text())["source"]["hf_class"] == cls


def test_unused_tensor_is_still_reported(encoder_export, tmp_path):
    """Only the pooler is ignored on purpose; another stray tensor still fails the export."""
    import shutil

    from safetensors.numpy import load_file, save_file

    ckpt, _ = encoder_export("bert")
    bad = tmp_path / "bad"
    shutil.copytree(ckpt, bad)
    tensors = load_file(bad / "model.safetensors")
    tensors["encoder.layer.0.attention.self.rel_bias"] = np.zeros(4, dtype=np.float32)
    save_file(tensors, bad / "model.safetensors", metadata={"format": "pt"})
    proc = run_hfx("export", "--model", bad, tmp_path / "out", "--quiet", check=False)
    assert proc.returncode == 1
    assert "rel_bias" in proc.stderr and "pooler" not in proc.stderr


def test_verify_localises_a_corrupted_layer(encoder_export, tmp_path):
    """Each layer's output carries the debug name /model/layers.{i}/output, so `hfx verify` names the
    first diverging layer of an encoder too."""
    import shutil

    import onnx

    ckpt, good = encoder_export("bert-cls")
    out = tmp_path / "out"
    shutil.copytree(good, out)  # the copy's source.path (relative) no longer reaches the checkpoint: --model
    model = onnx.load(str(out / "onnx" / "model.onnx"), load_external_data=False)
    t = next(t for t in model.graph.initializer if t.name == "bert.encoder.layer.1.output.dense.weight")
    offset = int({e.key: e.value for e in t.external_data}["offset"])
    with open(out / "onnx" / "model.onnx_data", "r+b") as f:
        f.seek(offset + 64)
        f.write(b"\x00\x00\x80\x40" * 16)  # 4.0 over 16 floats
    proc = run_hfx("verify", out, "--model", ckpt, "--no-reexport", check=False)
    assert proc.returncode == 1, proc.stdout
    report = json.loads((out / "verify" / "reference" / "report.json").read_text())
    failed = [c for c in report["checks"] if not c["passed"] and c["name"].startswith("numbers")]
    assert failed and all("first diverging layer: 1" in c["detail"] for c in failed)
