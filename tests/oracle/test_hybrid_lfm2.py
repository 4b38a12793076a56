"""LFM2 (short-convolution + attention hybrid) against Transformers eager, fp32, on tiny random checkpoints.

Each case: a left-padded batch of 2 (empty state), then 3 single-token steps, each fed the previous
step's present outputs: every logit and every carried state (the conv layers' past_conv.{i}
[batch, hidden, conv_L_cache - 1] and the attention layers' past_key_values.{i}.key|value) within
1e-4 of Transformers with no mismatching element, through ONNX Runtime and the reference executor;
then 64 greedy tokens from `hfx generate` identical to Transformers' generate().

Transformers' conv cache keeps conv_L_cache columns, the first of which no later step reads
(causal_conv1d_update's conv over state ++ x keeps only its last output); hfx's state is the last
conv_L_cache - 1 (onnxruntime-genai's and ONNX CausalConvWithState's shape), compared with those.
"""
from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

import decode_inputs as D
from conftest import export_once, hfx_has_openvino, record_coverage, run_hfx
from tiny_models import HYBRID_CASES, load_reference
from test_decoder_parity import assert_close, decode_feeds, reference_step_runner

CASES = sorted(c for c, (model_type, _) in HYBRID_CASES.items() if model_type == "lfm2")
LAYOUTS = ["growing", "static"]
MAX_CACHE_LEN = 24


def present_name(past):
    """The output a past_* input is fed from (the js-hybrid names: past_conv / past_ssm -> present_*)."""
    return past.replace("past_key_values.", "present.") if past.startswith("past_key_values.") else past.replace("past_", "present_", 1)


def is_conv(model, i):
    return model.config.layer_types[i] == "conv"


def transformers_steps(model, steps):
    """[(logits, {port name: state})] per step; a conv state as its last conv_L_cache - 1 columns."""
    out, cache = [], None
    with torch.no_grad():
        for feed in steps:
            r = model(input_ids=torch.from_numpy(feed["input_ids"]),
                      attention_mask=torch.from_numpy(feed["attention_mask"]),
                      position_ids=torch.from_numpy(feed["position_ids"]),
                      past_key_values=cache, use_cache=True)
            cache = r.past_key_values
            states = {}
            for i in range(model.config.num_hidden_layers):
                if is_conv(model, i):
                    states[f"present_conv.{i}"] = cache.get_conv_state(i).numpy()[:, :, 1:].copy()
                else:
                    states[f"present.{i}.key"] = cache.layers[i].keys.numpy().copy()
                    states[f"present.{i}.value"] = cache.layers[i].values.numpy().copy()
            out.append((r.logits.float().numpy(), states))
    return out


def initial_state(model, batch, layout):
    c = model.config
    head_dim = c.hidden_size // c.num_attention_heads
    length = MAX_CACHE_LEN if layout == "static" else 0
    past = {}
    for i in range(c.num_hidden_layers):
        if is_conv(model, i):
            past[f"past_conv.{i}"] = np.zeros((batch, c.hidden_size, c.conv_L_cache - 1), np.float32)
        else:
            for kv in ("key", "value"):
                past[f"past_key_values.{i}.{kv}"] = np.zeros((batch, c.num_key_value_heads, length, head_dim), np.float32)
    return past


def step_feed(feed, layout, total):
    """The static layout's step: the mask over the whole buffer, the slots this step writes."""
    if layout != "static":
        return dict(feed)
    full = dict(feed)
    mask = feed["attention_mask"]
    buf = np.zeros((mask.shape[0], MAX_CACHE_LEN), np.int64)
    buf[:, : mask.shape[1]] = mask
    full["attention_mask"] = buf
    s = feed["input_ids"].shape[1]
    full["cache_position"] = np.arange(total - s, total, dtype=np.int64)
    return full


def run_steps(run_one, steps, model, layout):
    past = initial_state(model, steps[0]["input_ids"].shape[0], layout)
    results = []
    for feed in steps:
        full = step_feed(feed, layout, feed["attention_mask"].shape[1])
        full.update(past)
        outs = run_one(full)
        past = {name: outs[present_name(name)] for name in past}
        states = {k: v for k, v in outs.items() if k != "logits"}
        results.append((outs["logits"], states))
    return results


def compare(case, ours, ref, layout, steps):
    """Every element, except in the static layout the padded positions: there a pad query attends over
    every empty slot of the buffer (all masked, so a uniform average over max_cache_len slots where a
    growing cache has the prompt's), which no real position reads; real positions must agree."""
    worst = 0.0
    for step, ((logits, states), (ref_logits, ref_states), feed) in enumerate(zip(ours, ref, steps)):
        mask = feed["attention_mask"].astype(bool)  # [B, total]: which positions are real
        keep_rows = mask[:, -logits.shape[1]:, None] if layout == "static" else True
        worst = max(worst, assert_close(f"{case} step {step} logits", np.where(keep_rows, logits, 0),
                                        np.where(keep_rows, ref_logits, 0)))
        assert set(states) == set(ref_states), f"{case}: state ports {sorted(states)} vs {sorted(ref_states)}"
        for name, r in ref_states.items():
            ours_state = states[name]
            if layout == "static" and not name.startswith("present_conv."):
                ours_state = ours_state[:, :, : r.shape[2]]  # the buffer's filled slots
                real = mask[:, None, : r.shape[2], None]
                ours_state, r = np.where(real, ours_state, 0), np.where(real, r, 0)
            worst = max(worst, assert_close(f"{case} step {step} {name}", ours_state, r))
    return worst


@pytest.fixture(scope="session")
def lfm2_export(tiny_checkpoint, tmp_path_factory):
    def args(case, layout):
        extra = ["--static-cache", "--max-cache-len", str(MAX_CACHE_LEN)] if layout == "static" else []
        return ["--model", tiny_checkpoint(case), "--format", "onnx", "--onnx-profile", "portable",
                "--quiet", *extra]
    return export_once(tmp_path_factory.mktemp("lfm2"), args)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", CASES)
def test_onnxruntime_matches_transformers(case, layout, tiny_checkpoint, lfm2_export):
    folder = lfm2_export(case, layout)
    model_path = folder / "onnx" / "model.onnx"
    onnx.checker.check_model(str(model_path), full_check=True)
    model = load_reference(tiny_checkpoint(case))
    steps = decode_feeds(model.config.vocab_size)
    ref = transformers_steps(model, steps)
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(str(model_path), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    ours = run_steps(lambda feed: dict(zip(names, sess.run(None, feed))), steps, model, layout)
    worst = compare(case, ours, ref, layout, steps)
    record_coverage(case, f"onnxruntime-{layout}", "logits and states max abs diff", worst)


@pytest.mark.parametrize("decomposed", [False, True], ids=["fused", "decomposed"])
@pytest.mark.parametrize("case", CASES)
def test_reference_executor_matches_transformers(case, decomposed, tiny_checkpoint, tmp_path):
    ckpt = tiny_checkpoint(case)
    model = load_reference(ckpt)
    steps = decode_feeds(model.config.vocab_size)
    ref = transformers_steps(model, steps)

    run_one = reference_step_runner(ckpt, tmp_path, decomposed)
    ours = run_steps(run_one, steps, model, "growing")
    worst = compare(case, ours, ref, "growing", steps)
    record_coverage(case, "reference" + ("-decomposed" if decomposed else ""), "logits and states max abs diff", worst)


PROMPTS = [[9, 12, 77, 3, 45, 101, 6, 23, 64, 30], [88, 7, 19, 52, 11, 40]]  # left-padded by 4
NEW_TOKENS = 64


def transformers_greedy(model):
    length = max(len(p) for p in PROMPTS)
    ids = torch.zeros((len(PROMPTS), length), dtype=torch.long)
    mask = torch.zeros((len(PROMPTS), length), dtype=torch.long)
    for b, p in enumerate(PROMPTS):
        ids[b, length - len(p):] = torch.tensor(p)
        mask[b, length - len(p):] = 1
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False)
    return out[:, length:].tolist()


def ort_greedy(model_path, eos, pad):
    """A greedy loop over the ONNX graph from its own ports: every past_* input starts as zeros of its
    declared shape (batch rows, an empty growing cache) and is fed back from its present output."""
    sess = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    batch, length = len(PROMPTS), max(len(p) for p in PROMPTS)
    ids = np.zeros((batch, length), np.int64)
    mask = np.zeros((batch, length), np.int64)
    for b, p in enumerate(PROMPTS):
        ids[b, length - len(p):] = p
        mask[b, length - len(p):] = 1
    past = {}
    for i in sess.get_inputs():
        if i.name.startswith("past"):
            dims = [batch if d == "batch_size" else 0 if isinstance(d, str) else d for d in i.shape]
            past[i.name] = np.zeros(dims, np.float32)
    rows, done, step_ids = [[] for _ in PROMPTS], [False] * batch, ids
    for _ in range(NEW_TOKENS):
        feed = dict(input_ids=step_ids, attention_mask=mask, position_ids=D.positions(mask, step_ids.shape[1]), **past)
        outs = dict(zip(names, sess.run(None, feed)))
        past = {n: outs[present_name(n)] for n in past}
        chosen = outs["logits"][:, -1].argmax(-1)
        for b in range(batch):
            tok = pad if done[b] else int(chosen[b])
            rows[b].append(tok)
            done[b] = done[b] or tok in eos
        if all(done):
            break
        step_ids = np.array([[r[-1]] for r in rows], np.int64)
        mask = np.concatenate([mask, np.ones((batch, 1), np.int64)], axis=1)
    return rows


@pytest.mark.parametrize("case", CASES)
def test_greedy_tokens_match_transformers(case, tiny_checkpoint, lfm2_export):
    model = load_reference(tiny_checkpoint(case))
    want = transformers_greedy(model)
    folder = lfm2_export(case, "growing")
    args = []
    for p in PROMPTS:
        args += ["--prompt-ids", ",".join(map(str, p))]
    proc = run_hfx("generate", folder, *args, "-n", NEW_TOKENS, "--print-ids")
    assert [[int(t) for t in line.split(",")] for line in proc.stdout.strip().splitlines()] == want
    eos = model.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos])
    assert ort_greedy(folder / "onnx" / "model.onnx", eos, model.generation_config.pad_token_id or 0) == want
    record_coverage(case, "reference+onnxruntime", f"greedy {NEW_TOKENS} batch2", "identical")


@pytest.fixture(scope="session")
def lfm2_openvino(tiny_checkpoint, tmp_path_factory):
    if not hfx_has_openvino():
        pytest.skip("hfx built without OpenVINO")
    return export_once(tmp_path_factory.mktemp("lfm2-ov"), lambda case, layout: (
        "--model", tiny_checkpoint(case), "--format", "openvino", "--quiet",
        *(["--stateless"] if layout == "stateless" else [])))


@pytest.mark.parametrize("layout", ["stateful", "stateless"])
@pytest.mark.parametrize("case", CASES)
def test_openvino_greedy_and_verify(case, layout, tiny_checkpoint, lfm2_openvino):
    """OpenVINO: the stateful IR keeps every state as a variable (the conv states start at zeros and
    are replaced each step); 64 greedy tokens equal Transformers', and `hfx verify` passes its numbers
    (stateful cases fill the state by running the past, as the runtime holds it)."""
    model = load_reference(tiny_checkpoint(case))
    want = transformers_greedy(model)
    folder = lfm2_openvino(case, layout)
    args = []
    for p in PROMPTS:
        args += ["--prompt-ids", ",".join(map(str, p))]
    proc = run_hfx("generate", folder, *args, "-n", NEW_TOKENS, "--print-ids", "--runtime", "openvino")
    assert [[int(t) for t in line.split(",")] for line in proc.stdout.strip().splitlines()] == want
    run_hfx("verify", folder, "--runtime", "openvino")
    record_coverage(case, f"openvino-{layout}", f"greedy {NEW_TOKENS} batch2 + verify", "identical")


@pytest.mark.parametrize("case", CASES)
def test_onnxruntime_genai_generates_transformers_tokens(case, tiny_checkpoint, tmp_path):
    """onnxruntime-genai (its LFM2 model: past_conv_names / present_conv_names, layer_types and
    conv_cache_size from genai_config.json) loads the default (ort-requested) export, which falls
    back to portable for a hybrid, and generates Transformers' greedy tokens, one prompt at a time
    up to the context length (64 positions in these checkpoints)."""
    og = pytest.importorskip("onnxruntime_genai")
    folder = tmp_path / "out"
    run_hfx("export", "--model", tiny_checkpoint(case), "--format", "onnx", "--quiet", folder)
    config = json.loads((folder / "onnx" / "genai_config.json").read_text())["model"]
    assert config["type"] == "lfm2" and config["decoder"]["inputs"]["past_conv_names"] == "past_conv.%d"
    model = load_reference(tiny_checkpoint(case))
    context = config["context_length"]
    genai = og.Model(str(folder / "onnx"))
    for prompt in PROMPTS:
        got, want = genai_and_transformers_greedy(og, genai, model, prompt, context)
        assert got == want
    record_coverage(case, "onnxruntime-genai", "greedy to the context length", "identical")


def genai_and_transformers_greedy(og, genai, model, prompt, max_length):
    """The new tokens of onnxruntime-genai's greedy search (`genai`: an og.Model) and of Transformers'
    generate() (`model`) on one unpadded prompt, both up to `max_length` positions."""
    params = og.GeneratorParams(genai)
    params.set_search_options(max_length=max_length, do_sample=False)
    gen = og.Generator(genai, params)
    gen.append_tokens(np.array([prompt], np.int32))
    while not gen.is_done():
        gen.generate_next_token()
    got = [int(t) for t in gen.get_sequence(0)][len(prompt):]
    with torch.no_grad():
        out = model.generate(input_ids=torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                             max_new_tokens=max_length - len(prompt), do_sample=False)
    return got, out[0, len(prompt):].tolist()


@pytest.mark.parametrize("edit, pointer", [
    (lambda st: st[0].update(kind="convolution"), "/model/states/0/kind"),
    (lambda st: st[0]["shape"].__setitem__(1, 1 << 30), "/model/states/0/shape"),
    (lambda st: st[0].update(layer=99), "/model/states/0/layer"),
    (lambda st: st[0].update(axis=2), "/model/states/0/axis"),
])
def test_hostile_manifest_states_are_refused(edit, pointer, lfm2_export, tmp_path):
    """A hybrid's manifest lists its StateSpecs, which size what generate and verify allocate: an
    edited entry is refused naming its place, before anything runs."""
    import shutil
    folder = tmp_path / "edited"
    shutil.copytree(lfm2_export("lfm2", "growing"), folder)
    manifest = json.loads((folder / "hfx.json").read_text())
    assert manifest["model"]["state_names"] == "js-hybrid"
    edit(manifest["model"]["states"])
    (folder / "hfx.json").write_text(json.dumps(manifest))
    proc = run_hfx("generate", folder, "--prompt-ids", "5,6,7", "-n", "2", "--print-ids", check=False)
    assert proc.returncode != 0 and pointer in proc.stderr, proc.stderr


@pytest.mark.parametrize("layout, flags", [("static", ["--static-cache", "--max-cache-len", "80"]),
                                           ("split", ["--split-prefill"])])
@pytest.mark.parametrize("case", CASES)
def test_greedy_tokens_other_layouts(case, layout, flags, tiny_checkpoint, tmp_path):
    """64 greedy tokens from a static-cache export (the conv states are the same in every layout) and
    from prefill + decode graphs (the prefill starts its conv states from zeros, the decode graph,
    one token by its shape, has no padding mask), identical to Transformers'."""
    model = load_reference(tiny_checkpoint(case))
    want = transformers_greedy(model)
    folder = tmp_path / layout
    run_hfx("export", "--model", tiny_checkpoint(case), "--format", "onnx", "--onnx-profile", "portable", "--quiet",
            *flags, folder)
    args = []
    for p in PROMPTS:
        args += ["--prompt-ids", ",".join(map(str, p))]
    proc = run_hfx("generate", folder, *args, "-n", NEW_TOKENS, "--print-ids")
    assert [[int(t) for t in line.split(",")] for line in proc.stdout.strip().splitlines()] == want
    record_coverage(case, f"reference-{layout}", f"greedy {NEW_TOKENS} batch2", "identical")
