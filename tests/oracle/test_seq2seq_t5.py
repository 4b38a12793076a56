"""T5, mT5, BART, mBART and Marian encoder-decoders against Transformers eager, fp32, on tiny random
checkpoints (tiny_models.SEQ2SEQ_CASES): relu and gated-gelu MLPs, tied (decoder output scaled by
d_model**-0.5) and untied heads, decoders deeper than their encoders, relative-position buckets
that reach their log-spaced range, and an untied T5 whose config.json is Transformers 5's own; BART's
post-norm and mBART's pre-norm LayerNorm layers, learned (offset 2) and Marian's sinusoidal positions,
scaled and unscaled embeddings, final_logits_bias, each stack's own embedding when saved, Marian's
separate decoder vocabulary, and mBART starting from bos_token_id without a decoder_start_token_id.

The export is Optimum's layout (hfx.json roles encoder, decoder, decoder_with_past), run by ONNX
Runtime. Each case: a batch of 2 encoder prompts of 12 tokens, row 1 right-padded by 4 (T5, BART
and Marian tokenizers pad right): the encoder output at every position (pad positions too: a pad query still
attends over the row's real keys, in both) within 1e-4 of Transformers; then the first decoder step
over 3 tokens ([start, t, t], a multi-token first step) with its logits, self-attention presents and
cross-attention presents; then 3 single-token steps of decoder_with_past, fed the presents of the
step before (the cross ones of the first step, unchanged), with their logits and self-attention
presents. The gate: max abs diff <= 1e-4 with no mismatching element.

Then 64 greedy tokens from python/hfx_ort_seq2seq.py identical to Transformers' generate(), stopping
at the config's EOS and at an EOS that the run really meets (one row finishing mid-way and padded
with pad_token_id after, as generate() pads), and `hfx verify` on the export (the reference executor,
ONNX Runtime, and against Transformers).
"""
from __future__ import annotations

import json
import sys

import numpy as np
import onnx
import pytest
import torch

from conftest import ROOT, export_once, record_coverage, run_hfx
from test_decoder_parity import assert_close
from tiny_models import SEQ2SEQ_CASES, SPEECH_TYPES, load_reference

sys.path.insert(0, str(ROOT / "python"))
from hfx_ort_seq2seq import component_files, generate, open_sessions, run  # noqa: E402

CASES = sorted(c for c, (model_type, _) in SEQ2SEQ_CASES.items() if model_type not in SPEECH_TYPES)
PROMPT_LEN, RIGHT_PAD = 12, 4
FIRST_STEP_LEN, CACHED_STEPS = 3, 3
# 41 decoder positions: past every case's causal max_exact (num_buckets // 2) into the log-spaced
# buckets, and past relative_attention_max_distance into the last one but for mt5's default 128
LONG_STEPS = 40
NEW_TOKENS = 64


def geometry(config):
    """(heads, head_dim, d_model, logits vocabulary, decoder layers) of the decoder of a T5 / mT5 or a
    BART / mBART / Marian config (Marian's unshared decoder_vocab_size)."""
    if config.model_type in ("t5", "mt5"):
        return config.num_heads, config.d_kv, config.d_model, config.vocab_size, config.num_decoder_layers
    heads = config.decoder_attention_heads
    shared = getattr(config, "share_encoder_decoder_embeddings", True)
    return (heads, config.d_model // heads, config.d_model, config.vocab_size if shared else config.decoder_vocab_size,
            config.decoder_layers)


def start_token(model) -> int:
    """The token generate() starts decoding from: decoder_start_token_id, else bos_token_id (mBART's)."""
    g = model.generation_config
    return g.decoder_start_token_id if g.decoder_start_token_id is not None else g.bos_token_id


def prompt_ids(config) -> tuple[int, int]:
    """The (EOS, pad) ids a prompt ends and is padded with: T5's 1 and 0, BART's 2 and 1, Marian's own."""
    eos = config.eos_token_id
    return (eos[0] if isinstance(eos, list) else eos), config.pad_token_id


def encoder_prompt(vocab: int, eos: int = 1, pad: int = 0):
    """input_ids, attention_mask [2, 12]: ids of 2.. (T5: not pad 0 nor EOS 1), each real row ending in
    EOS as a T5 / BART / Marian tokenizer's does; row 1 right-padded with pad by RIGHT_PAD."""
    rng = np.random.default_rng(11)
    ids = rng.integers(2, vocab, size=(2, PROMPT_LEN)).astype(np.int64)
    mask = np.ones_like(ids)
    real = PROMPT_LEN - RIGHT_PAD
    ids[0, -1] = ids[1, real - 1] = eos
    ids[1, real:], mask[1, real:] = pad, 0
    return ids, mask


def decoder_inputs(vocab: int, start: int):
    """The first step's ids [2, 3] (the start token and two more) and CACHED_STEPS single tokens [2, 1]."""
    rng = np.random.default_rng(12)
    first = rng.integers(2, vocab, size=(2, FIRST_STEP_LEN)).astype(np.int64)
    first[:, 0] = start
    return first, [rng.integers(2, vocab, size=(2, 1)).astype(np.int64) for _ in range(CACHED_STEPS)]


def transformers_run(model, ids, mask, first, steps):
    """Transformers eager: the encoder output, then [(logits, {present name: array})] per decoder step;
    the first step's presents include the cross-attention ones (present.{i}.encoder.*)."""
    t = torch.from_numpy
    out = []
    with torch.no_grad():
        enc = model.get_encoder()(input_ids=t(ids), attention_mask=t(mask))
        cache = None  # T5Stack makes its EncoderDecoderCache (self, cross) on the first call
        for n, dec in enumerate([first, *steps]):
            r = model(encoder_outputs=enc, attention_mask=t(mask), decoder_input_ids=t(dec), past_key_values=cache,
                      use_cache=True)
            cache = r.past_key_values
            presents = {}
            for kind, part in (("decoder", cache.self_attention_cache), ("encoder", cache.cross_attention_cache)):
                if kind == "encoder" and n > 0:
                    continue  # decoder_with_past does not output the cross keys/values again
                assert len(part.layers) == geometry(model.config)[4]
                for i, layer in enumerate(part.layers):
                    presents[f"present.{i}.{kind}.key"] = layer.keys.numpy().copy()
                    presents[f"present.{i}.{kind}.value"] = layer.values.numpy().copy()
            out.append((r.logits.numpy().copy(), presents))
    return enc.last_hidden_state.numpy().copy(), out


def ort_run(sessions, ids, mask, first, steps):
    """The same through the three ONNX Runtime sessions: the encoder once, `decoder` on the first step,
    `decoder_with_past` on each later one with the self presents of the step before as its past and
    the first step's cross presents unchanged."""
    hidden = run(sessions["encoder"], {"input_ids": ids, "attention_mask": mask})["last_hidden_state"]
    out, state = [], {}
    for n, dec in enumerate([first, *steps]):
        feed = {"input_ids": dec, "encoder_attention_mask": mask, "encoder_hidden_states": hidden}
        if n == 0:
            result = run(sessions["decoder"], feed)
        else:
            for i in sessions["decoder_with_past"].get_inputs():
                if i.name.startswith("past_key_values."):
                    feed[i.name] = state["present." + i.name[len("past_key_values."):]]
            result = run(sessions["decoder_with_past"], feed)
        state.update({k: v for k, v in result.items() if k.startswith("present.")})
        out.append((result["logits"], {k: v for k, v in result.items() if k != "logits"}))
    return hidden, out


@pytest.fixture(scope="session")
def seq2seq_export(tiny_checkpoint, tmp_path_factory):
    return export_once(tmp_path_factory.mktemp("seq2seq"), lambda case, variant: (
        "--model", tiny_checkpoint(case), "--format", "onnx", "--quiet"))


@pytest.fixture(scope="session")
def sessions_of(seq2seq_export):
    opened: dict = {}

    def get(case):
        if case not in opened:
            opened[case] = open_sessions(seq2seq_export(case))
        return opened[case]

    return get


@pytest.mark.parametrize("case", CASES)
def test_each_graph_has_its_own_weights_file(case, seq2seq_export):
    """The four graphs hfx.json names (the merged decoder too), under Optimum's file names, each a valid ONNX model whose
    weights are all in its own <file>_data: Optimum (from the hub, and its save_pretrained) and
    transformers.js fetch a graph's external data by that one name, so a graph reading another's
    file does not load there."""
    folder = seq2seq_export(case)
    manifest = json.loads((folder / "hfx.json").read_text())
    roles = {c["role"]: folder / c["file"] for c in manifest["components"] if c["format"] == "onnx"}
    assert set(roles) == {"encoder", "decoder", "decoder_with_past", "decoder_merged"}, manifest["components"]
    problems = []
    for role, path in roles.items():
        assert path.name == {"encoder": "encoder_model.onnx", "decoder": "decoder_model.onnx",
                             "decoder_with_past": "decoder_with_past_model.onnx",
                             "decoder_merged": "decoder_model_merged.onnx"}[role], path
        onnx.checker.check_model(str(path), full_check=True)
        locations = {e.value for t in onnx.load(str(path), load_external_data=False).graph.initializer
                     for e in t.external_data if e.key == "location"}
        if locations != {path.name + "_data"}:
            problems.append(f"{role}: {path.name} reads its weights from {sorted(locations)}, not {path.name}_data alone")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("case", CASES)
def test_io_contract(case, tiny_checkpoint, seq2seq_export):
    """Optimum's input names, types and dimension names, the static sizes of the checkpoint, and the
    outputs Optimum's ORTModelForSeq2SeqLM reads (no cross presents from decoder_with_past; as many
    layers as num_decoder_layers, not num_layers)."""
    folder = seq2seq_export(case)
    config = load_reference(tiny_checkpoint(case)).config
    heads, d_kv, d_model, vocab, layers = geometry(config)
    f32, i64 = "tensor(float)", "tensor(int64)"
    enc_ids = (i64, ["batch_size", "encoder_sequence_length"])
    dec_ids = (i64, ["batch_size", "decoder_sequence_length"])
    want_inputs = {
        "encoder": {"input_ids": enc_ids, "attention_mask": enc_ids},
        "decoder": {"input_ids": dec_ids, "encoder_attention_mask": enc_ids,
                    "encoder_hidden_states": (f32, ["batch_size", "encoder_sequence_length", d_model])},
        "decoder_with_past": {"input_ids": dec_ids, "encoder_attention_mask": enc_ids},
    }
    for i in range(layers):
        for kv in ("key", "value"):
            want_inputs["decoder_with_past"][f"past_key_values.{i}.decoder.{kv}"] = (
                f32, ["batch_size", heads, "past_decoder_sequence_length", d_kv])
            want_inputs["decoder_with_past"][f"past_key_values.{i}.encoder.{kv}"] = (
                f32, ["batch_size", heads, "encoder_sequence_length", d_kv])
    # outputs: names, types and static sizes (Optimum's own names for the grown lengths vary)
    presents = {f"present.{i}.{part}.{kv}": (f32, [None, heads, None, d_kv])
                for i in range(layers) for part in ("decoder", "encoder") for kv in ("key", "value")}
    want_outputs = {
        "encoder": {"last_hidden_state": (f32, [None, None, d_model])},
        "decoder": {"logits": (f32, [None, None, vocab]), **presents},
        "decoder_with_past": {"logits": (f32, [None, None, vocab]),
                              **{k: v for k, v in presents.items() if ".decoder." in k}},
    }
    problems = []
    for role, sess in open_sessions(folder).items():
        for kind, got, want in (("input", sess.get_inputs(), want_inputs[role]),
                                ("output", sess.get_outputs(), want_outputs[role])):
            got = {g.name: (g.type, list(g.shape)) for g in got}
            if set(got) != set(want):
                problems.append(f"{role} {kind}s: extra {sorted(set(got) - set(want))}, "
                                f"missing {sorted(set(want) - set(got))}")
            for name in set(got) & set(want):
                (gtype, gshape), (wtype, wshape) = got[name], want[name]
                if gtype != wtype or len(gshape) != len(wshape) or any(
                        w is not None and g != w for g, w in zip(gshape, wshape)) or isinstance(gshape[0], int):
                    problems.append(f"{role} {kind} {name}: {gtype} {gshape}, expected {wtype} {wshape}")
    assert not problems, "\n".join(problems)


def compare_runs(case, ours, ref) -> dict:
    """Every step's logits and presents within 1e-4 of Transformers' (test_decoder_parity's assert_close:
    no mismatching element); the worst diff per step."""
    diffs = {}
    for n, ((logits, presents), (ref_logits, ref_presents)) in enumerate(zip(ours, ref)):
        where = f"decoder ({logits.shape[1]} tokens)" if n == 0 else f"decoder_with_past step {n}"
        assert set(presents) == set(ref_presents), (
            f"{case} {where}: presents {sorted(presents)} vs Transformers' {sorted(ref_presents)}")
        worst = assert_close(f"{case} {where} logits", logits, ref_logits)
        for name in sorted(ref_presents):
            worst = max(worst, assert_close(f"{case} {where} {name}", presents[name], ref_presents[name]))
        diffs[where] = worst
    return diffs


@pytest.mark.parametrize("case", CASES)
def test_onnxruntime_matches_transformers(case, tiny_checkpoint, sessions_of):
    model = load_reference(tiny_checkpoint(case))
    c = model.config
    ids, mask = encoder_prompt(c.vocab_size, *prompt_ids(c))
    first, steps = decoder_inputs(geometry(c)[3], start_token(model))
    ref_hidden, ref = transformers_run(model, ids, mask, first, steps)
    hidden, ours = ort_run(sessions_of(case), ids, mask, first, steps)
    diffs = {"encoder last_hidden_state": assert_close(f"{case} encoder last_hidden_state", hidden, ref_hidden)}
    diffs.update(compare_runs(case, ours, ref))
    print(f"\n{case}: max abs diff " + ", ".join(f"{k} {v:.2e}" for k, v in diffs.items()))
    record_coverage(case, "onnxruntime", "seq2seq logits and presents max abs diff", max(diffs.values()))


@pytest.mark.parametrize("case", CASES)
def test_long_cached_decode_matches_transformers(case, tiny_checkpoint, sessions_of):
    """A one-token first step ([start], as generate() starts) and LONG_STEPS teacher-forced steps of
    decoder_with_past, every step's logits and self presents compared: the decoder's causal
    relative-position buckets past max_exact and (t5, t5-gated-tied) past max_distance, and the BART
    family's position rows (learned or sinusoidal) taken from the past length, which the parity test's 6
    decoder positions do not all reach and greedy tokens of a random model (which soon repeat
    themselves) would hardly show."""
    model = load_reference(tiny_checkpoint(case))
    c = model.config
    if hasattr(c, "relative_attention_num_buckets"):
        assert LONG_STEPS + 1 > c.relative_attention_num_buckets // 2, "the steps must reach the log-spaced buckets"
    else:
        assert LONG_STEPS + 1 <= c.max_position_embeddings, "the steps must stay within the position table"
    ids, mask = encoder_prompt(c.vocab_size, *prompt_ids(c))
    rng = np.random.default_rng(13)
    first = np.full((2, 1), start_token(model), np.int64)
    steps = [rng.integers(2, geometry(c)[3], size=(2, 1)).astype(np.int64) for _ in range(LONG_STEPS)]
    _, ref = transformers_run(model, ids, mask, first, steps)
    _, ours = ort_run(sessions_of(case), ids, mask, first, steps)
    diffs = compare_runs(case, ours, ref)
    print(f"\n{case}: {LONG_STEPS} cached steps, max abs diff {max(diffs.values()):.2e}")
    record_coverage(case, "onnxruntime", f"seq2seq {LONG_STEPS} cached steps max abs diff", max(diffs.values()))


def transformers_greedy(model, ids, mask, eos):
    """generate()'s greedy tokens. Its cache is given, empty and sized lazily: the one generate() builds
    from the config (Transformers 5.23) has num_layers layers, the encoder's depth, and fails with an
    IndexError on a decoder deeper than the encoder (the "t5" case)."""
    from transformers import DynamicCache, EncoderDecoderCache
    with torch.no_grad():
        return model.generate(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                              max_new_tokens=NEW_TOKENS, do_sample=False, num_beams=1, eos_token_id=eos,
                              past_key_values=EncoderDecoderCache(DynamicCache(), DynamicCache())).numpy()


@pytest.mark.parametrize("stop", ["config-eos", "met-eos"])
@pytest.mark.parametrize("case", CASES)
def test_greedy_tokens_match_transformers(case, stop, tiny_checkpoint, sessions_of):
    """64 greedy tokens, the whole [batch, 1 + steps] including the start token and the pads after a
    row's EOS. Random weights seldom produce the config's EOS (1: t5's row 1 at step 8, no other row),
    so "met-eos" stops at a token row 0 really produces 6 steps in: a finished row padded while the
    other runs on, and (mt5, whose row 1 meets it too) the stop once every row is done."""
    model = load_reference(tiny_checkpoint(case))
    g = model.generation_config
    ids, mask = encoder_prompt(model.config.vocab_size, *prompt_ids(model.config))
    eos = g.eos_token_id
    start = start_token(model)
    if stop == "met-eos":
        free = transformers_greedy(model, ids, mask, eos)
        # row 0's first token from its 6th step on that is neither the start nor pad nor EOS already
        eos = next(int(t) for t in free[0, 6:] if t not in (start, g.pad_token_id, eos))
    want = transformers_greedy(model, ids, mask, eos)
    got = generate(None, {"input_ids": ids, "attention_mask": mask}, NEW_TOKENS, start, eos, g.pad_token_id,
                   sessions=sessions_of(case))
    assert got.shape == want.shape and (got == want).all(), (
        f"{case} (eos {eos}): hfx+onnxruntime\n{got.tolist()}\nTransformers\n{want.tolist()}")
    met = np.isin(want[:, 1:], np.atleast_1d(eos))
    ended = [int(np.argmax(m)) + 1 if m.any() else None for m in met]
    if stop == "met-eos":
        assert ended[0] is not None, f"{case}: row 0 never met EOS {eos}"
    print(f"\n{case} ({stop}, eos {eos}): {want.shape[1] - 1} steps, identical; EOS at step {ended}")
    record_coverage(case, "onnxruntime", f"greedy {NEW_TOKENS} batch2 {stop}", "identical")


@pytest.mark.parametrize("flags", [[], ["--runtime", "onnxruntime", "--no-reexport"],
                                   ["--oracle", "transformers", "--no-reexport"]],
                         ids=["reference", "onnxruntime", "oracle-transformers"])
@pytest.mark.parametrize("case", CASES)
def test_hfx_verify_passes(case, flags, seq2seq_export):
    """`hfx verify OUT` passes on the export: by default the artifact against hfx's reference executor;
    ONNX Runtime run by verify's own driver; and against Transformers eager on the checkpoint (an
    oracle apart from this file's)."""
    proc = run_hfx("verify", seq2seq_export(case), *flags, check=False)
    failed = [line for line in proc.stdout.splitlines() if line.startswith("FAIL")]
    assert proc.returncode == 0, f"hfx verify {' '.join(flags)} exited {proc.returncode}:\n" + "\n".join(
        failed + proc.stderr.strip().splitlines()[-3:])
    print(f"\n{case}: hfx verify {' '.join(flags)}\n{proc.stdout}")
