"""Gated delta-net hybrids against Transformers eager, fp32, on tiny random checkpoints: qwen3_5_text
(Qwen3_5ForCausalLM: gated delta-net layers and gated attention layers, per layer_types), qwen3_next
(Qwen3NextForCausalLM: the same layers with fused delta-net projections, and sparse-MoE MLPs with a
shared expert beside a dense one) and qwen3_5_moe_text (Qwen3_5MoeForCausalLM: Qwen3.5's layers with a
sparse-MoE MLP and shared expert on every layer).

Each case: a left-padded batch of 2 whose 330-token prompt spans 6 of the delta rule's chunks of 64
(the last padded; its 5 chunk boundaries take three steps of the chunk scan, offsets 1, 2 and 4), then
3 single-token steps, each fed the previous step's present outputs: every logit and every carried
state (a linear-attention layer's past_conv.{i} [batch, conv_dim, kernel - 1] and past_recurrent.{i}
[batch, value_heads, key_head_dim, value_head_dim], an attention layer's past_key_values.{i}.key|value)
within 1e-4 of Transformers with no mismatching element, through ONNX Runtime (both profiles; ort
writes the conv and the delta rule as com.microsoft CausalConvWithState and LinearAttention; and, on
each family's first case, the portable profile's `--onnx-recurrence scan`, the delta rule as an ONNX
Scan over time whose body is torch_recurrent_gated_delta_rule's step), the reference executor (fused and decomposed) and OpenVINO (stateless IR);
then 64 greedy tokens after a 150-token prompt identical to Transformers' generate() from `hfx
generate`, a plain ONNX Runtime loop, the prefill + decode split, a static cache and OpenVINO (stateful
and stateless), and `hfx verify --oracle transformers`.

Transformers runs the prompt through torch_chunk_gated_delta_rule and each cached one-token step
through torch_recurrent_gated_delta_rule; hfx's one graph computes both as the chunked rule
(docs/ssm.md). Its conv cache keeps kernel columns, the first of which no later step reads; hfx's
state is the last kernel - 1, compared with those.
"""
from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

import decode_inputs as D
from conftest import export_once, hfx_has_openvino, record_coverage, run_hfx
from test_decoder_parity import reference_step_runner
from test_hybrid_lfm2 import genai_and_transformers_greedy
from test_ssm_hybrids import compare  # logits and every state, per step
from tiny_models import HYBRID_CASES, load_reference

FAMILIES = ("qwen3_5_text", "qwen3_next", "qwen3_5_moe_text")
CASES = sorted(c for c, (model_type, _) in HYBRID_CASES.items() if model_type in FAMILIES)
# onnxruntime-genai 0.18 runs Qwen3.5's delta-net (its qwen3_5_text and qwen3_5_moe_text models) and has
# no Qwen3-Next model.
GENAI_FAMILIES = ("qwen3_5_text", "qwen3_5_moe_text")
GENAI_CASES = [c for c in CASES if HYBRID_CASES[c][0] in GENAI_FAMILIES]
# --onnx-recurrence scan (the delta rule as an ONNX Scan over time) on each family's first case; its
# greedy tokens on Qwen3.5.
SCAN_CASES = sorted({min(c for c in CASES if HYBRID_CASES[c][0] == f) for f in FAMILIES})
SCAN_GREEDY_CASES = ("qwen3_5_text",)
CHUNK = 64  # torch_chunk_gated_delta_rule's chunk_size, which hfx's delta rule uses too
PROMPT_LENGTHS = (330, 291)  # left-padded by 39; 6 chunks
GREEDY_LENGTHS = (150, 97)   # 3 chunks
NEW_TOKENS = 64
MAX_CACHE_LEN = 224


def is_linear(config, i):
    return config.layer_types[i] == "linear_attention"


def left_padded(lengths, vocab, seed):
    rng = np.random.default_rng(seed)
    batch, seq = len(lengths), max(lengths)
    ids = rng.integers(3, vocab, size=(batch, seq), dtype=np.int64)
    mask = np.zeros((batch, seq), np.int64)
    for b, n in enumerate(lengths):
        mask[b, seq - n:] = 1
        ids[b, :seq - n] = 0  # pad token
    return ids, mask


def step_feeds(vocab):
    ids, mask = left_padded(PROMPT_LENGTHS, vocab, seed=1)
    steps = [dict(input_ids=ids, attention_mask=mask, position_ids=D.positions(mask, ids.shape[1]))]
    for s in range(D.DECODE_STEPS):
        mask = np.concatenate([mask, np.ones((mask.shape[0], 1), np.int64)], axis=1)
        steps.append(dict(input_ids=D.next_tokens(vocab, s, mask.shape[0]), attention_mask=mask,
                          position_ids=D.positions(mask, 1)))
    return steps


def greedy_prompts(vocab):
    ids, mask = left_padded(GREEDY_LENGTHS, vocab, seed=2)
    return [row[m.astype(bool)].tolist() for row, m in zip(ids, mask)]


def transformers_steps(model, steps):
    """[(logits, {present port: state})] per step; a conv state as its last kernel - 1 columns."""
    c = model.config
    out, cache = [], None
    with torch.no_grad():
        for feed in steps:
            r = model(input_ids=torch.from_numpy(feed["input_ids"]), attention_mask=torch.from_numpy(feed["attention_mask"]),
                      position_ids=torch.from_numpy(feed["position_ids"]), past_key_values=cache, use_cache=True)
            cache = r.past_key_values
            states = {}
            for i in range(c.num_hidden_layers):
                if is_linear(c, i):
                    states[f"present_conv.{i}"] = cache.get_conv_state(i).numpy()[:, :, 1:].copy()
                    states[f"present_recurrent.{i}"] = cache.get_recurrent_state(i).numpy().copy()
                else:
                    states[f"present.{i}.key"] = cache.layers[i].keys.numpy().copy()
                    states[f"present.{i}.value"] = cache.layers[i].values.numpy().copy()
            out.append((r.logits.float().numpy(), states))
    return out


def initial_state(config, batch):
    c = config
    conv_dim = 2 * c.linear_num_key_heads * c.linear_key_head_dim + c.linear_num_value_heads * c.linear_value_head_dim
    past = {}
    for i in range(c.num_hidden_layers):
        if is_linear(c, i):
            past[f"past_conv.{i}"] = np.zeros((batch, conv_dim, c.linear_conv_kernel_dim - 1), np.float32)
            past[f"past_recurrent.{i}"] = np.zeros(
                (batch, c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim), np.float32)
        else:
            for kv in ("key", "value"):
                past[f"past_key_values.{i}.{kv}"] = np.zeros((batch, c.num_key_value_heads, 0, c.head_dim), np.float32)
    return past


def present_name(past):
    """The output a past_* input is fed from (js-linear-attention: past_conv / past_recurrent -> present_*)."""
    if past.startswith("past_key_values."):
        return past.replace("past_key_values.", "present.")
    return past.replace("past_", "present_", 1)


def run_steps(run_one, steps, config):
    past = initial_state(config, steps[0]["input_ids"].shape[0])
    results = []
    for feed in steps:
        outs = run_one({**feed, **past})
        past = {name: outs[present_name(name)] for name in past}
        results.append((outs["logits"], {k: v for k, v in outs.items() if k != "logits"}))
    return results


@pytest.fixture(scope="session")
def reference(tiny_checkpoint):
    """case -> (model, step feeds, Transformers' steps), computed once."""
    done = {}

    def get(case):
        if case not in done:
            model = load_reference(tiny_checkpoint(case))
            steps = step_feeds(model.config.vocab_size)
            assert steps[0]["input_ids"].shape[1] > 4 * CHUNK, "the prompt must take more than two chunk-scan steps"
            done[case] = (model, steps, transformers_steps(model, steps))
        return done[case]

    return get


@pytest.fixture(scope="session")
def greedy_reference(reference):
    done = {}

    def get(case):
        if case not in done:
            model = reference(case)[0]
            prompts = greedy_prompts(model.config.vocab_size)
            length = max(len(p) for p in prompts)
            ids = torch.zeros((len(prompts), length), dtype=torch.long)
            mask = torch.zeros((len(prompts), length), dtype=torch.long)
            for b, p in enumerate(prompts):
                ids[b, length - len(p):] = torch.tensor(p)
                mask[b, length - len(p):] = 1
            with torch.no_grad():
                out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False)
            done[case] = (prompts, out[:, length:].tolist())
        return done[case]

    return get


@pytest.fixture(scope="session")
def gdn_export(tiny_checkpoint, tmp_path_factory):
    def args(case, layout):
        extra = {"split": ["--split-prefill"], "static": ["--static-cache", "--max-cache-len", str(MAX_CACHE_LEN)],
                 "ort": ["--onnx-profile", "ort"],
                 "scan": ["--onnx-profile", "portable", "--onnx-recurrence", "scan"]}.get(layout, ["--onnx-profile", "portable"])
        return ("--model", tiny_checkpoint(case), "--format", "onnx", "--quiet", *extra)
    return export_once(tmp_path_factory.mktemp("gdn"), args)


@pytest.mark.parametrize("case, profile", [(c, p) for p in ("portable", "ort") for c in CASES] +
                         [(c, "scan") for c in SCAN_CASES])
def test_onnxruntime_matches_transformers(case, profile, reference, gdn_export):
    folder = gdn_export(case, profile)
    model_path = folder / "onnx" / "model.onnx"
    onnx.checker.check_model(str(model_path), full_check=True)
    model, steps, ref = reference(case)
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(str(model_path), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    wanted = {i.name for i in sess.get_inputs()}
    ours = run_steps(lambda feed: dict(zip(names, sess.run(None, {k: v for k, v in feed.items() if k in wanted}))),
                     steps, model.config)
    worst = compare(case, ours, ref)
    record_coverage(case, f"onnxruntime-{profile}", "logits and states max abs diff", worst)


@pytest.mark.parametrize("decomposed", [False, True], ids=["fused", "decomposed"])
@pytest.mark.parametrize("case", CASES)
def test_reference_executor_matches_transformers(case, decomposed, tiny_checkpoint, reference, tmp_path):
    model, steps, ref = reference(case)
    run_one = reference_step_runner(tiny_checkpoint(case), tmp_path, decomposed)
    worst = compare(case, run_steps(run_one, steps, model.config), ref)
    record_coverage(case, "reference" + ("-decomposed" if decomposed else ""), "logits and states max abs diff", worst)


def generated(folder, prompts, *flags):
    args = []
    for p in prompts:
        args += ["--prompt-ids", ",".join(map(str, p))]
    proc = run_hfx("generate", folder, *args, "-n", NEW_TOKENS, "--print-ids", *flags)
    return [[int(t) for t in line.split(",")] for line in proc.stdout.strip().splitlines()]


def ort_greedy(model_path, prompts, eos, pad):
    """A greedy loop over the ONNX graph from its own ports: every past_* input starts as zeros of its
    declared shape (batch rows, an empty growing cache) and is fed back from its present output."""
    sess = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    batch, length = len(prompts), max(len(p) for p in prompts)
    ids = np.zeros((batch, length), np.int64)
    mask = np.zeros((batch, length), np.int64)
    for b, p in enumerate(prompts):
        ids[b, length - len(p):] = p
        mask[b, length - len(p):] = 1
    past = {}
    for i in sess.get_inputs():
        if i.name.startswith("past"):
            dims = [batch if d == "batch_size" else 0 if isinstance(d, str) else d for d in i.shape]
            past[i.name] = np.zeros(dims, np.float32)
    rows, done, step_ids = [[] for _ in prompts], [False] * batch, ids
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


@pytest.mark.parametrize("case, lowering", [(c, "portable") for c in CASES] + [(c, "scan") for c in SCAN_GREEDY_CASES])
def test_greedy_tokens_match_transformers(case, lowering, greedy_reference, gdn_export):
    prompts, want = greedy_reference(case)
    folder = gdn_export(case, lowering)
    assert generated(folder, prompts) == want
    config = json.loads((folder / "config.json").read_text())
    eos = config["eos_token_id"]
    eos = set(eos if isinstance(eos, list) else [eos])
    assert ort_greedy(folder / "onnx" / "model.onnx", prompts, eos, config.get("pad_token_id") or 0) == want
    suffix = "" if lowering == "portable" else f"-{lowering}"
    record_coverage(case, f"reference+onnxruntime{suffix}", f"greedy {NEW_TOKENS} batch2", "identical")


@pytest.mark.parametrize("case", GENAI_CASES)
def test_onnxruntime_genai_generates_transformers_tokens(case, reference, gdn_export):
    """onnxruntime-genai (its qwen3_5_text model: RecurrentState binds past_conv.%d / past_recurrent.%d
    from genai_config.json and sizes them from the graph's static dims) loads the ort-requested export,
    whose conv and delta rule are ONNX Runtime's CausalConvWithState and LinearAttention, and generates Transformers' 64 greedy tokens for
    each greedy prompt (3 and 2 chunks of the delta rule). One prompt per generator: genai 0.18's
    append_tokens feeds a batch's rows unmasked (attention_mask all ones), so a left-padded row is not
    what it runs."""
    og = pytest.importorskip("onnxruntime_genai")
    model = reference(case)[0]
    folder = gdn_export(case, "ort") / "onnx"
    config = json.loads((folder / "genai_config.json").read_text())["model"]
    assert config["type"] == HYBRID_CASES[case][0]
    assert config["decoder"]["inputs"]["past_recurrent_names"] == "past_recurrent.%d"
    assert config["decoder"]["outputs"]["present_conv_names"] == "present_conv.%d"
    genai = og.Model(str(folder))
    for prompt in greedy_prompts(model.config.vocab_size):
        got, want = genai_and_transformers_greedy(og, genai, model, prompt, len(prompt) + NEW_TOKENS)
        assert got == want
    record_coverage(case, "onnxruntime-genai", f"greedy {NEW_TOKENS}, one prompt at a time", "identical")


@pytest.mark.parametrize("case", sorted(set(CASES) - set(GENAI_CASES)))
def test_no_genai_config_for_a_family_genai_cannot_run(case, gdn_export):
    """The ort-requested export of a delta-net family genai has no model for writes no genai_config.json
    (genai would load the folder and fail on its recurrent state), and still writes the model."""
    folder = gdn_export(case, "ort") / "onnx"
    assert (folder / "model.onnx").exists()
    assert not (folder / "genai_config.json").exists()


@pytest.mark.parametrize("layout", ["split", "static"])
@pytest.mark.parametrize("case", CASES)
def test_greedy_tokens_other_layouts(case, layout, greedy_reference, gdn_export):
    """Prefill + decode graphs (the decode graph, one token by its shape, has no padding mask and its
    delta rule one chunk of one position), and a static key/value cache (the delta-net states are the
    same in every layout)."""
    prompts, want = greedy_reference(case)
    assert generated(gdn_export(case, layout), prompts) == want
    record_coverage(case, f"reference-{layout}", f"greedy {NEW_TOKENS} batch2", "identical")


@pytest.fixture(scope="session")
def gdn_openvino(tiny_checkpoint, tmp_path_factory):
    if not hfx_has_openvino():
        pytest.skip("hfx built without OpenVINO")
    return export_once(tmp_path_factory.mktemp("gdn-ov"), lambda case, layout: (
        "--model", tiny_checkpoint(case), "--format", "openvino", "--quiet",
        *(["--stateless"] if layout == "stateless" else [])))


@pytest.mark.parametrize("layout", ["stateful", "stateless"])
@pytest.mark.parametrize("case", CASES)
def test_openvino_greedy_and_verify(case, layout, greedy_reference, gdn_openvino):
    """OpenVINO: the stateful IR keeps both states of every delta-net layer (and the attention layers'
    keys and values) as variables, zeros at the start; 64 greedy tokens equal Transformers', and
    `hfx verify` passes its numbers."""
    prompts, want = greedy_reference(case)
    folder = gdn_openvino(case, layout)
    assert generated(folder, prompts, "--runtime", "openvino") == want
    run_hfx("verify", folder, "--runtime", "openvino")
    record_coverage(case, f"openvino-{layout}", f"greedy {NEW_TOKENS} batch2 + verify", "identical")


@pytest.mark.parametrize("case", CASES)
def test_openvino_matches_transformers(case, reference, gdn_openvino):
    """The stateless IR run by OpenVINO's own Python API: every logit and state within 1e-4 of
    Transformers over the prompt and 3 cached steps."""
    ov = pytest.importorskip("openvino")
    model, steps, ref = reference(case)
    compiled = ov.Core().compile_model(str(gdn_openvino(case, "stateless") / "openvino" / "openvino_model.xml"), "CPU",
                                       {"INFERENCE_PRECISION_HINT": "f32"})
    names = [o.get_any_name() for o in compiled.outputs]
    wanted = {i.get_any_name() for i in compiled.inputs}

    def run_one(feed):
        r = compiled({k: v for k, v in feed.items() if k in wanted})
        return {n: r[o] for n, o in zip(names, compiled.outputs)}

    worst = compare(case, run_steps(run_one, steps, model.config), ref)
    record_coverage(case, "openvino-stateless", "logits and states max abs diff", worst)


@pytest.mark.parametrize("case", CASES)
def test_verify_against_transformers(case, gdn_export):
    """`hfx verify --oracle transformers`: the export's shape cases and greedy tokens against
    Transformers eager on the checkpoint (python/hfx_transformers_oracle.py feeds past_recurrent.{i})."""
    proc = run_hfx("verify", gdn_export(case, "portable"), "--runtime", "onnxruntime", "--oracle", "transformers")
    assert "verification FAILED" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    record_coverage(case, "verify-oracle-transformers", "hfx verify", "pass")


def test_qwen3_5_moe_stacked_experts_are_read_in_place(tiny_checkpoint, tmp_path):
    """Transformers 5's own layout of Qwen3.5-MoE's experts, one experts.gate_up_proj [E, 2 I, hidden]
    (each expert's gate rows, then its up rows) and one experts.down_proj [E, hidden, I] per layer,
    which Transformers loads as it is: the export reads each expert's rows from the stacked tensors,
    gives the per-expert checkpoint's logits bit for bit, and passes `hfx verify --oracle transformers`."""
    from safetensors.torch import load_file, save_file
    src = tiny_checkpoint("qwen3_5_moe_text")
    folder = tmp_path / "stacked"
    shutil.copytree(src, folder)
    tensors = load_file(str(src / "model.safetensors"))
    experts = json.loads((src / "config.json").read_text())["num_experts"]
    layers = {name.split(".experts.")[0] for name in tensors if ".mlp.experts." in name}
    for layer in layers:
        per = [{kind: tensors.pop(f"{layer}.experts.{e}.{kind}.weight") for kind in ("gate_proj", "up_proj", "down_proj")}
               for e in range(experts)]
        tensors[f"{layer}.experts.gate_up_proj"] = torch.stack([torch.cat([p["gate_proj"], p["up_proj"]]) for p in per])
        tensors[f"{layer}.experts.down_proj"] = torch.stack([p["down_proj"] for p in per])
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    logits = []
    for ckpt, out in ((src, tmp_path / "per-expert"), (folder, tmp_path / "stacked-out")):
        run_hfx("export", "--model", ckpt, "--format", "onnx", "--onnx-profile", "portable", "--quiet", "--no-verify", out)
        sess = ort.InferenceSession(str(out / "onnx" / "model.onnx"), providers=["CPUExecutionProvider"])
        config = load_reference(ckpt).config
        feed = {**step_feeds(config.vocab_size)[0], **initial_state(config, 2)}
        logits.append(sess.run(["logits"], {i.name: feed[i.name] for i in sess.get_inputs()})[0])
    assert "stacked" in run_hfx("inspect", folder).stdout
    np.testing.assert_array_equal(logits[0], logits[1])
    proc = run_hfx("verify", tmp_path / "stacked-out", "--runtime", "onnxruntime", "--oracle", "transformers")
    assert "verification FAILED" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr


@pytest.mark.parametrize("case", CASES)
def test_manifest_records_the_states(case, reference, gdn_export):
    """hfx.json's model.states: per delta-net layer its convolution state and its recurrent state with
    their shapes, replaced each step; the attention layers' keys and values appended."""
    model = reference(case)[0]
    c = model.config
    states = json.loads((gdn_export(case, "portable") / "hfx.json").read_text())["model"]["states"]
    conv_dim = 2 * c.linear_num_key_heads * c.linear_key_head_dim + c.linear_num_value_heads * c.linear_value_head_dim
    want = []
    for i in range(c.num_hidden_layers):
        if is_linear(c, i):
            want.append((i, "convolution state", ["batch_size", conv_dim, c.linear_conv_kernel_dim - 1], "replace"))
            want.append((i, "recurrent state", ["batch_size", c.linear_num_value_heads, c.linear_key_head_dim,
                                                c.linear_value_head_dim], "replace"))
        else:
            for kind in ("self-attention key", "self-attention value"):
                want.append((i, kind, ["batch_size", c.num_key_value_heads, "past_sequence_length", c.head_dim], "append"))
    assert [(s["layer"], s["kind"], s["shape"], s["update"]) for s in states] == want


def refused(case, edit, message, tiny_checkpoint, tmp_path):
    folder = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoint(case), folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(edit)
    (folder / "config.json").write_text(json.dumps(config))
    proc = run_hfx("export", "--model", folder, "--format", "onnx", tmp_path / "out", check=False)
    assert proc.returncode != 0 and message in proc.stderr and "config.json" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("edit, message", [
    (dict(linear_num_value_heads=3), "must be a multiple of linear_num_key_heads"),
    (dict(linear_conv_kernel_dim=1), "linear_conv_kernel_dim 1"),
    (dict(layer_types=["linear_attention", "sliding_attention", "linear_attention"]), "layer_types[1]"),
    (dict(layer_types=["linear_attention", "full_attention"]), "layer_types has 2 entries"),
    (dict(hidden_act="gelu"), "hidden_act"),
])
def test_configs_hfx_cannot_build_are_refused(edit, message, tiny_checkpoint, tmp_path):
    refused("qwen3_5_text", edit, message, tiny_checkpoint, tmp_path)


@pytest.mark.parametrize("edit, message", [
    (dict(linear_num_value_heads=3), "must be a multiple of linear_num_key_heads"),  # the fused projections' groups
    (dict(num_experts_per_tok=5), "num_experts_per_tok"),                            # more than num_experts
    (dict(mlp_only_layers=[-1]), "mlp_only_layers"),
])
def test_qwen3_next_configs_hfx_cannot_build_are_refused(edit, message, tiny_checkpoint, tmp_path):
    refused("qwen3_next", edit, message, tiny_checkpoint, tmp_path)


@pytest.mark.parametrize("edit, message", [
    (dict(num_experts=0), "num_experts"),           # every layer is sparse: no dense MLP to fall back to
    (dict(num_experts_per_tok=5), "num_experts_per_tok"),  # more than num_experts
])
def test_qwen3_5_moe_configs_hfx_cannot_build_are_refused(edit, message, tiny_checkpoint, tmp_path):
    refused("qwen3_5_moe_text", edit, message, tiny_checkpoint, tmp_path)


@pytest.mark.parametrize("fmt", ["onnx", "openvino"])
@pytest.mark.parametrize("precision", [["--dtype", "f16"], ["--dtype", "bf16"], ["--quantize", "int8"],
                                       ["--quantize", "int4"]], ids=["f16", "bf16", "int8", "int4"])
@pytest.mark.parametrize("case", ["qwen3_5_moe_text"])
def test_every_precision_passes_its_export_check(case, precision, fmt, tiny_checkpoint, tmp_path):
    """Every precision hfx offers (as test_ssm_hybrids checks the Mamba families): the export's own check
    against the reference executor at the precision's gate (docs/verify.md) passes, or nothing is
    published; the routers in reduced precision included."""
    out = tmp_path / "out"
    proc = run_hfx("export", "--model", tiny_checkpoint(case), "--format", fmt, *precision, out)
    assert "checks passed" in proc.stdout or "identical" in proc.stdout, proc.stdout + proc.stderr
    assert (out / "hfx.json").exists()


@pytest.mark.parametrize("fmt", ["pt2", "executorch"])
def test_program_formats_refuse_the_scan_in_one_line(fmt, tiny_checkpoint, tmp_path):
    proc = run_hfx("export", "--model", tiny_checkpoint("qwen3_5_text"), "--format", fmt, "--static-cache",
                   "--max-cache-len", "32", tmp_path / "out", check=False)
    assert proc.returncode != 0, proc.stderr
    assert f"format {fmt} does not write" in proc.stderr and "past_recurrent.0" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "out").exists()
