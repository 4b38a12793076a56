"""Mamba mixers against Transformers eager, fp32, on tiny random checkpoints: mamba2 (a pure
state-space model), granitemoehybrid (Granite 4.0-H) and bamba (Mamba-2 and attention layers),
nemotron_h (Mamba-2, attention, MLP and MoE layers, one block each), falcon_h1 (a Mamba-2 mixer and
attention side by side in every layer, muP multipliers), zamba2 (Mamba-2 layers, some after a shared
transformer block), the Mamba-1 models mamba and falcon_mamba, and jamba (Mamba-1 and attention
layers, sparse MoE).

Each case: a left-padded batch of 2 whose 10-token prompt spans several scan chunks (chunk sizes 3
and 4, the last chunk padded; Mamba-1's floor(sqrt(10)) = 3), then 3 single-token steps, each fed
the previous step's present outputs: every logit and every carried state (a mamba layer's
past_conv.{i} [batch, conv_dim, conv_kernel - 1] and past_ssm.{i} [batch, heads, head_dim,
state_size], Mamba-1's [batch, intermediate, state_size], an attention layer's
past_key_values.{i}.key|value; a Falcon-H1 layer carries all four, a Zamba2 hybrid layer both kinds, a Nemotron-H MLP or MoE layer none) within 1e-4 of Transformers with no mismatching element, through
ONNX Runtime (both profiles) and the reference executor (fused and decomposed); then 64 greedy
tokens identical to Transformers' generate() from `hfx generate`, a plain ONNX Runtime loop, the
prefill + decode split, a static cache, and OpenVINO (stateful and stateless, with `hfx verify`).

The portable profile's `--onnx-recurrence scan` (each scan an ONNX Scan over time whose body is one
recurrent step) runs the same comparison on each family's first case, and 64 greedy tokens through
ONNX Runtime on Mamba-2 and Mamba-1.

Transformers' conv cache keeps conv_kernel columns, the first of which no later step reads; hfx's
state is the last conv_kernel - 1 (ONNX CausalConvWithState's shape), compared with those.
"""
from __future__ import annotations

import json
import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from conftest import export_once, hfx_has_openvino, record_coverage, run_hfx
from test_decoder_parity import assert_close, decode_feeds, reference_step_runner
from test_hybrid_lfm2 import NEW_TOKENS, PROMPTS, ort_greedy, present_name, transformers_greedy
from tiny_models import HYBRID_CASES, load_reference

MAMBA1 = ("mamba", "falcon_mamba")
# Mamba-1 mixers among attention layers (past_key_values cache, mamba_* config names).
MAMBA1_HYBRIDS = ("jamba",)
FAMILIES = ("mamba2", "granitemoehybrid", "bamba", "nemotron_h", "falcon_h1", "zamba2", *MAMBA1, *MAMBA1_HYBRIDS)
CASES = sorted(c for c, (model_type, _) in HYBRID_CASES.items() if model_type in FAMILIES)
# A family's first case runs every layout and lowering; its other cases vary the blocks' options
# (biases, tied heads, MoE layers), which the layouts do not touch, so they run the parity and greedy
# tests only. This keeps the suite's time in bounds as families are added.
FIRST_CASES = sorted({min(c for c in CASES if HYBRID_CASES[c][0] == f)
                      for f in {HYBRID_CASES[c][0] for c in CASES}})
MAX_CACHE_LEN = 80
# The ONNX lowerings: the ort profile's fused ops, the portable profile's loop-free chunked scans, and
# the portable profile's ONNX Scan over time.
LOWERINGS = {"portable": ["--onnx-profile", "portable"], "ort": ["--onnx-profile", "ort"],
             "scan": ["--onnx-profile", "portable", "--onnx-recurrence", "scan"]}
# The Scan lowering's greedy tokens, one family per scan kind: Mamba-2's SSD and Mamba-1's selective scan.
SCAN_GREEDY_CASES = ("mamba2", "mamba")


def is_mamba(config, i):
    return config.layer_types[i] not in ("full_attention", "mlp", "moe")


def is_attention(config, i):
    """An attention layer, or a "hybrid" one: Falcon-H1's (a mixer and attention side by side) or
    Zamba2's (a shared block's keys and values beside its mamba states, both in Transformers' cache
    layer i)."""
    return config.layer_types[i] in ("full_attention", "hybrid")


def attention_head_dim(config):
    """NemotronH's attention reads head_dim from its config, Falcon-H1's when it has one, Zamba2's is
    2 * hidden / heads (attention_head_dim); the others' heads are hidden / heads."""
    if config.model_type == "nemotron_h":
        return config.head_dim
    if config.model_type == "falcon_h1":
        return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    if config.model_type == "zamba2":
        return config.attention_head_dim
    return config.hidden_size // config.num_attention_heads


def mixer_dims(config):
    """(heads, head_dim, state_size, conv_dim, conv_kernel) under each family's config names."""
    c = config
    if c.model_type in MAMBA1:  # one "head" per channel: the scan state is [batch, intermediate, state_size]
        return c.intermediate_size, None, c.state_size, c.intermediate_size, c.conv_kernel
    if c.model_type in MAMBA1_HYBRIDS:  # intermediate_size is the MLP's; the mixer's is mamba_expand * hidden
        inner = c.mamba_expand * c.hidden_size
        return inner, None, c.mamba_d_state, inner, c.mamba_d_conv
    if c.model_type == "mamba2":
        heads, head_dim, state, groups, expand, kernel = (c.num_heads, c.head_dim, c.state_size, c.n_groups, c.expand,
                                                          c.conv_kernel)
    elif c.model_type == "nemotron_h":  # its mixer is mamba_num_heads x mamba_head_dim wide, whatever expand says
        heads, head_dim, state, groups, kernel = (c.mamba_num_heads, c.mamba_head_dim, c.ssm_state_size, c.n_groups,
                                                  c.conv_kernel)
        return heads, head_dim, state, heads * head_dim + 2 * groups * state, kernel
    elif c.model_type == "falcon_h1":  # mamba_d_ssm wide, or mamba_expand * hidden when it is null
        inner = c.mamba_d_ssm if c.mamba_d_ssm is not None else c.mamba_expand * c.hidden_size
        return c.mamba_n_heads, c.mamba_d_head, c.mamba_d_state, inner + 2 * c.mamba_n_groups * c.mamba_d_state, \
            c.mamba_d_conv
    elif c.model_type == "zamba2":
        heads, head_dim, state, groups, expand, kernel = (c.n_mamba_heads, c.mamba_headdim, c.mamba_d_state,
                                                          c.mamba_ngroups, c.mamba_expand, c.mamba_d_conv)
    else:
        heads, head_dim, state, groups, expand, kernel = (c.mamba_n_heads, c.mamba_d_head, c.mamba_d_state,
                                                          c.mamba_n_groups, c.mamba_expand, c.mamba_d_conv)
    return heads, head_dim, state, expand * c.hidden_size + 2 * groups * state, kernel


def chunk_size(config, prompt_length):
    """The scan's chunk over the prompt: the config's, or Mamba-1's floor(sqrt(length)) (models/ssd.h)."""
    if config.model_type in (*MAMBA1, *MAMBA1_HYBRIDS):
        return math.isqrt(prompt_length)
    return config.chunk_size if config.model_type in ("mamba2", "nemotron_h", "zamba2") else config.mamba_chunk_size


def transformers_steps(model, steps):
    """[(logits, {present port: state})] per step; a conv state as its last conv_kernel - 1 columns."""
    c = model.config
    out, cache = [], None
    with torch.no_grad():
        for feed in steps:
            mask = feed["attention_mask"]
            if c.model_type in MAMBA1:
                # MambaModel multiplies by the 2-D mask as given (Mamba-2 trims it first, in
                # create_recurrent_attention_mask): a cached step's [batch, past + 1] mask would broadcast
                # the token over past + 1 positions. generate() passes none after the prompt; the step's
                # own columns are the same thing.
                mask = mask[:, -feed["input_ids"].shape[1]:]
            kwargs = dict(input_ids=torch.from_numpy(feed["input_ids"]), attention_mask=torch.from_numpy(mask),
                          use_cache=True)
            if c.model_type in ("mamba2", *MAMBA1):
                r = model(**kwargs, cache_params=cache)
                cache = r.cache_params
            else:
                r = model(**kwargs, position_ids=torch.from_numpy(feed["position_ids"]), past_key_values=cache)
                cache = r.past_key_values
            states = {}
            for i in range(c.num_hidden_layers):
                if is_mamba(c, i):
                    states[f"present_conv.{i}"] = cache.get_conv_state(i).numpy()[:, :, 1:].copy()
                    states[f"present_ssm.{i}"] = cache.get_recurrent_state(i).numpy().copy()
                if is_attention(c, i):
                    states[f"present.{i}.key"] = cache.layers[i].keys.numpy().copy()
                    states[f"present.{i}.value"] = cache.layers[i].values.numpy().copy()
            out.append((r.logits.float().numpy(), states))
    return out


def initial_state(config, batch):
    c = config
    heads, head_dim, state, conv_dim, kernel = mixer_dims(c)
    past = {}
    for i in range(c.num_hidden_layers):
        if is_mamba(c, i):
            past[f"past_conv.{i}"] = np.zeros((batch, conv_dim, kernel - 1), np.float32)
            ssm = (batch, heads, state) if head_dim is None else (batch, heads, head_dim, state)
            past[f"past_ssm.{i}"] = np.zeros(ssm, np.float32)
        if is_attention(c, i):
            kv_heads, attn_head_dim = c.num_key_value_heads, attention_head_dim(c)
            for kv in ("key", "value"):
                past[f"past_key_values.{i}.{kv}"] = np.zeros((batch, kv_heads, 0, attn_head_dim), np.float32)
    return past


def run_steps(run_one, steps, config):
    past = initial_state(config, steps[0]["input_ids"].shape[0])
    results = []
    for feed in steps:
        outs = run_one({**feed, **past})
        past = {name: outs[present_name(name)] for name in past}
        results.append((outs["logits"], {k: v for k, v in outs.items() if k != "logits"}))
    return results


def compare(case, ours, ref):
    worst = 0.0
    for step, ((logits, states), (ref_logits, ref_states)) in enumerate(zip(ours, ref)):
        worst = max(worst, assert_close(f"{case} step {step} logits", logits, ref_logits))
        assert set(states) == set(ref_states), f"{case}: state ports {sorted(states)} vs {sorted(ref_states)}"
        for name, r in ref_states.items():
            worst = max(worst, assert_close(f"{case} step {step} {name}", states[name], r))
    return worst


@pytest.fixture(scope="session")
def ssm_export(tiny_checkpoint, tmp_path_factory):
    return export_once(tmp_path_factory.mktemp("ssm"), lambda case, lowering: (
        "--model", tiny_checkpoint(case), "--format", "onnx", *LOWERINGS[lowering], "--quiet"))


@pytest.mark.parametrize("case, profile", [(c, p) for p in ("portable", "ort") for c in CASES] +
                         [(c, "scan") for c in FIRST_CASES])
def test_onnxruntime_matches_transformers(case, profile, tiny_checkpoint, ssm_export):
    folder = ssm_export(case, profile)
    model_path = folder / "onnx" / "model.onnx"
    onnx.checker.check_model(str(model_path), full_check=True)
    model = load_reference(tiny_checkpoint(case))
    steps = decode_feeds(model.config.vocab_size)
    prompt_length = steps[0]["input_ids"].shape[1]
    assert prompt_length > chunk_size(model.config, prompt_length), "the prompt must span more than one scan chunk"
    ref = transformers_steps(model, steps)
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(str(model_path), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    wanted = {i.name for i in sess.get_inputs()}
    ours = run_steps(lambda feed: dict(zip(names, sess.run(None, {k: v for k, v in feed.items() if k in wanted}))),
                     steps, model.config)
    worst = compare(case, ours, ref)
    record_coverage(case, f"onnxruntime-{profile}", "logits and states max abs diff", worst)


@pytest.mark.parametrize("case, decomposed",
                         [(c, False) for c in CASES] + [(c, True) for c in FIRST_CASES],
                         ids=lambda v: {False: "fused", True: "decomposed"}.get(v, v) if isinstance(v, bool) else v)
def test_reference_executor_matches_transformers(case, decomposed, tiny_checkpoint, tmp_path):
    ckpt = tiny_checkpoint(case)
    model = load_reference(ckpt)
    steps = decode_feeds(model.config.vocab_size)
    ref = transformers_steps(model, steps)

    run_one = reference_step_runner(ckpt, tmp_path, decomposed)
    worst = compare(case, run_steps(run_one, steps, model.config), ref)
    record_coverage(case, "reference" + ("-decomposed" if decomposed else ""), "logits and states max abs diff", worst)


def generated(folder, *flags):
    args = []
    for p in PROMPTS:
        args += ["--prompt-ids", ",".join(map(str, p))]
    proc = run_hfx("generate", folder, *args, "-n", NEW_TOKENS, "--print-ids", *flags)
    return [[int(t) for t in line.split(",")] for line in proc.stdout.strip().splitlines()]


@pytest.mark.parametrize("case, lowering", [(c, "portable") for c in CASES] + [(c, "scan") for c in SCAN_GREEDY_CASES])
def test_greedy_tokens_match_transformers(case, lowering, tiny_checkpoint, ssm_export):
    model = load_reference(tiny_checkpoint(case))
    want = transformers_greedy(model)
    folder = ssm_export(case, lowering)
    assert generated(folder) == want
    eos = model.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos])
    assert ort_greedy(folder / "onnx" / "model.onnx", eos, model.generation_config.pad_token_id or 0) == want
    suffix = "" if lowering == "portable" else f"-{lowering}"
    record_coverage(case, f"reference+onnxruntime{suffix}", f"greedy {NEW_TOKENS} batch2", "identical")


def test_scan_lowering_writes_a_scan_per_recurrence(ssm_export):
    """--onnx-recurrence scan: each Mamba mixer's scan is one ONNX Scan (its conv stays loop-free), and
    the manifest names the pass."""
    folder = ssm_export("mamba2", "scan")
    model = onnx.load(str(folder / "onnx" / "model.onnx"), load_external_data=False)
    scans = [n for n in model.graph.node if n.op_type == "Scan"]
    assert len(scans) == json.loads((folder / "config.json").read_text())["num_hidden_layers"]
    assert {n.op_type for n in scans[0].attribute[0].g.node} == {"Exp", "Unsqueeze", "Mul", "Add", "ReduceSum"}
    assert "scan-recurrences" in (folder / "hfx.json").read_text()


@pytest.mark.parametrize("case, flags, message", [
    ("mamba2", ["--onnx-profile", "ort"], "--onnx-recurrence scan is a lowering of the portable profile"),
    ("lfm2", ["--onnx-profile", "portable"], "--onnx-recurrence scan: lfm2 decoder has no recurrence to write as a Scan"),
])
def test_scan_lowering_is_refused_in_one_line_where_it_cannot_apply(case, flags, message, tiny_checkpoint, tmp_path):
    proc = run_hfx("export", "--model", tiny_checkpoint(case), "--format", "onnx", *flags, "--onnx-recurrence", "scan",
                   tmp_path / "out", check=False)
    assert proc.returncode != 0, proc.stderr
    assert message in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("layout, flags", [("split", ["--split-prefill"]),
                                           ("static", ["--static-cache", "--max-cache-len", str(MAX_CACHE_LEN)])])
@pytest.mark.parametrize("case", FIRST_CASES)
def test_greedy_tokens_other_layouts(case, layout, flags, tiny_checkpoint, tmp_path):
    """Prefill + decode graphs (the prefill starts both states from zeros; the decode graph, one token
    by its shape, has no padding mask and scans one padded chunk), and a static key/value cache (the
    mamba states are the same in every layout)."""
    model = load_reference(tiny_checkpoint(case))
    folder = tmp_path / layout
    run_hfx("export", "--model", tiny_checkpoint(case), "--format", "onnx", "--onnx-profile", "portable", "--quiet",
            *flags, folder)
    assert generated(folder) == transformers_greedy(model)
    record_coverage(case, f"reference-{layout}", f"greedy {NEW_TOKENS} batch2", "identical")


@pytest.fixture(scope="session")
def ssm_openvino(tiny_checkpoint, tmp_path_factory):
    if not hfx_has_openvino():
        pytest.skip("hfx built without OpenVINO")
    return export_once(tmp_path_factory.mktemp("ssm-ov"), lambda case, layout: (
        "--model", tiny_checkpoint(case), "--format", "openvino", "--quiet",
        *(["--stateless"] if layout == "stateless" else [])))


@pytest.mark.parametrize("case, layout",
                         [(c, "stateful") for c in CASES] + [(c, "stateless") for c in FIRST_CASES])
def test_openvino_greedy_and_verify(case, layout, tiny_checkpoint, ssm_openvino):
    """OpenVINO: the stateful IR keeps both states of every mamba layer (and the attention layers'
    keys and values) as variables, zeros at the start; 64 greedy tokens equal Transformers', and
    `hfx verify` passes its numbers. Its stateful cases start the reference's step from the state
    OpenVINO held after the prefix (query_state): from its own state instead, the reference differed
    by 2.1e-4 on granitemoehybrid-nope-tied's "chunk, cache partial" case, two runs' rounding of a
    scan state compounding in the step, though each runtime is within 5e-5 of Transformers."""
    model = load_reference(tiny_checkpoint(case))
    folder = ssm_openvino(case, layout)
    assert generated(folder, "--runtime", "openvino") == transformers_greedy(model)
    run_hfx("verify", folder, "--runtime", "openvino")
    record_coverage(case, f"openvino-{layout}", f"greedy {NEW_TOKENS} batch2 + verify", "identical")


@pytest.mark.parametrize("case", CASES)
def test_openvino_matches_transformers(case, tiny_checkpoint, ssm_openvino):
    """The stateless IR run by OpenVINO's own Python API: every logit and state within 1e-4 of
    Transformers over the prompt and 3 cached steps."""
    ov = pytest.importorskip("openvino")
    model = load_reference(tiny_checkpoint(case))
    steps = decode_feeds(model.config.vocab_size)
    ref = transformers_steps(model, steps)
    compiled = ov.Core().compile_model(str(ssm_openvino(case, "stateless") / "openvino" / "openvino_model.xml"), "CPU",
                                       {"INFERENCE_PRECISION_HINT": "f32"})
    names = [o.get_any_name() for o in compiled.outputs]
    wanted = {i.get_any_name() for i in compiled.inputs}

    def run_one(feed):
        r = compiled({k: v for k, v in feed.items() if k in wanted})
        return {n: r[o] for n, o in zip(names, compiled.outputs)}

    worst = compare(case, run_steps(run_one, steps, model.config), ref)
    record_coverage(case, "openvino-stateless", "logits and states max abs diff", worst)


@pytest.mark.parametrize("case", CASES)
def test_inspect_names_the_family_and_its_mixer(case, tiny_checkpoint):
    out = run_hfx("inspect", tiny_checkpoint(case)).stdout
    model_type = HYBRID_CASES[case][0]
    mixer = "Mamba-1" if model_type in (*MAMBA1, *MAMBA1_HYBRIDS) else "Mamba-2"
    assert model_type in out and mixer in out and "state" in out, out


def assert_refused(case, edit, message, tiny_checkpoint, tmp_path):
    """`case`'s checkpoint with config.json edited is refused naming config.json and `message`, and
    leaves no output folder."""
    import json
    import shutil
    folder = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoint(case), folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(edit)
    (folder / "config.json").write_text(json.dumps(config))
    proc = run_hfx("export", "--model", folder, "--format", "onnx", tmp_path / "out", check=False)
    assert proc.returncode != 0 and message in proc.stderr and "config.json" in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("edit, message", [
    (dict(expand=3), "must equal num_heads * head_dim"),
    (dict(n_groups=3), "must be a multiple of n_groups"),
    (dict(time_step_limit=[1.0, 0.5]), "is not a range"),
    (dict(hidden_act="gelu"), "hidden_act"),
    (dict(time_step_limit=[0.0, {"__float__": "NaN"}]), "time_step_limit[1]"),
])
def test_inconsistent_configs_are_refused(edit, message, tiny_checkpoint, tmp_path):
    assert_refused("mamba2", edit, message, tiny_checkpoint, tmp_path)


@pytest.mark.parametrize("edit, message", [
    (dict(num_local_experts=2, num_experts_per_tok=3), "num_experts_per_tok"),
    (dict(layer_types=["mamba", "sliding_attention", "mamba"]), "layer_types[1]"),
    (dict(layer_types=["mamba", "attention"]), "layer_types has 2 entries"),
    (dict(position_embedding_type="alibi"), "position_embedding_type"),
    (dict(mamba_n_heads=3), "must equal mamba_n_heads * mamba_d_head"),
])
def test_granite_hybrid_configs_hfx_cannot_build_are_refused(edit, message, tiny_checkpoint, tmp_path):
    assert_refused("granitemoehybrid", edit, message, tiny_checkpoint, tmp_path)


def test_granite_legacy_layer_type_names_build_the_same_graph(tiny_checkpoint, tmp_path):
    """Older Granite 4.0-H configs spell layer_types "mamba" / "attention" (Transformers remaps them):
    the export is byte-identical to the one from the new names."""
    import json
    import shutil
    folder = tmp_path / "legacy"
    shutil.copytree(tiny_checkpoint("granitemoehybrid"), folder)
    config = json.loads((folder / "config.json").read_text())
    config["layer_types"] = ["mamba" if t == "linear_attention" else "attention" for t in config["layer_types"]]
    (folder / "config.json").write_text(json.dumps(config))
    for src, out in ((tiny_checkpoint("granitemoehybrid"), tmp_path / "new"), (folder, tmp_path / "old")):
        run_hfx("export", "--model", src, "--format", "onnx", "--onnx-profile", "portable", "--quiet", "--no-verify", out)
    assert (tmp_path / "new" / "onnx" / "model.onnx").read_bytes() == (tmp_path / "old" / "onnx" / "model.onnx").read_bytes()


@pytest.mark.parametrize("edit, message", [
    (dict(layers_block_type=["linear_attention", "moe", "full_attention"], n_routed_experts=6, n_group=4),
     "n_routed_experts (6) is not a multiple of n_group (4)"),
    (dict(layers_block_type=["moe"], n_routed_experts=4, n_group=4), "leaves 1 expert per group"),
    (dict(layers_block_type=["moe"], n_routed_experts=8, n_group=4, topk_group=1, num_experts_per_tok=3),
     "num_experts_per_tok 3 is more than the 2 experts of topk_group 1 groups"),
    (dict(layers_block_type=["moe"], n_routed_experts=2, num_experts_per_tok=3), "num_experts_per_tok (3) is more"),
    (dict(layers_block_type=None, hybrid_override_pattern="M*X"), "hybrid_override_pattern[2] = 'X'"),
    (dict(layers_block_type=["mamba", "sliding_attention"]), "layers_block_type[1] = \"sliding_attention\""),
    (dict(mamba_hidden_act="gelu"), "mamba_hidden_act"),
    (dict(mamba_num_heads=3), "must be a multiple of n_groups"),
    (dict(num_key_value_heads=3), "must be a multiple of num_key_value_heads"),
    (dict(attention_head_dim=32), "attention_head_dim is 32 but the attention's head_dim is 24"),
])
def test_nemotron_h_configs_hfx_cannot_build_are_refused(edit, message, tiny_checkpoint, tmp_path):
    assert_refused("nemotron_h", edit, message, tiny_checkpoint, tmp_path)


def test_nemotron_h_group_limit_changes_the_choice(tiny_checkpoint):
    """The group-limited case tests something: on the parity tests' inputs, NemotronHTopkRouter's choice
    (top-k within the topk_group best groups) differs from the top-k over all experts for some tokens."""
    model = load_reference(tiny_checkpoint("nemotron_h-moe-groups"))
    assert model.config.n_group > 1
    chosen, everywhere = [], []

    def record(router, inputs, outputs):
        x = inputs[0].reshape(-1, router.hidden_dim).float()
        biased = torch.sigmoid(x @ router.weight.float().T) + router.e_score_correction_bias
        everywhere.append(torch.topk(biased, router.top_k, dim=-1)[1].sort(dim=-1)[0])
        chosen.append(outputs[2].sort(dim=-1)[0])

    hooks = [m.register_forward_hook(record) for m in model.modules() if type(m).__name__ == "NemotronHTopkRouter"]
    transformers_steps(model, decode_feeds(model.config.vocab_size))
    for h in hooks:
        h.remove()
    changed = sum(int((a != b).any(dim=-1).sum()) for a, b in zip(chosen, everywhere))
    total = sum(a.shape[0] for a in chosen)
    assert 0 < changed < total, f"{changed} of {total} layer-tokens changed by the group limit"


def test_nemotron_h_legacy_config_names_build_the_same_graph(tiny_checkpoint, tmp_path):
    """Older Nemotron-H configs (NVIDIA's remote-code ones) give the layers as hybrid_override_pattern
    ("M-*M-") and some mamba settings as mamba_n_groups, mamba_d_conv, mamba_chunk_size,
    mamba_conv_bias and mamba_dt_min, which NemotronHConfig reads over the new names; a stale
    num_hidden_layers is ignored. The export is byte-identical to the one from the saved config."""
    import json
    import shutil
    folder = tmp_path / "legacy"
    shutil.copytree(tiny_checkpoint("nemotron_h"), folder)
    config = json.loads((folder / "config.json").read_text())
    symbols = {"linear_attention": "M", "full_attention": "*", "mlp": "-"}
    config["hybrid_override_pattern"] = "".join(symbols[t] for t in config.pop("layers_block_type"))
    for new, old in (("n_groups", "mamba_n_groups"), ("conv_kernel", "mamba_d_conv"), ("chunk_size", "mamba_chunk_size"),
                     ("use_conv_bias", "mamba_conv_bias"), ("time_step_min", "mamba_dt_min")):
        config[old] = config[new]
        config[new] = {"n_groups": 1, "conv_kernel": 2, "chunk_size": 64, "use_conv_bias": False,
                       "time_step_min": 0.9}[new]  # overridden by the legacy name
    config["num_hidden_layers"] = 2
    (folder / "config.json").write_text(json.dumps(config))
    from transformers import AutoConfig
    legacy, saved = AutoConfig.from_pretrained(folder), AutoConfig.from_pretrained(tiny_checkpoint("nemotron_h"))
    for key in ("layers_block_type", "n_groups", "conv_kernel", "chunk_size", "use_conv_bias", "time_step_min"):
        assert getattr(legacy, key) == getattr(saved, key), key  # Transformers reads them so too
    for src, out in ((tiny_checkpoint("nemotron_h"), tmp_path / "new"), (folder, tmp_path / "old")):
        run_hfx("export", "--model", src, "--format", "onnx", "--onnx-profile", "portable", "--quiet", "--no-verify", out)
    assert (tmp_path / "new" / "onnx" / "model.onnx").read_bytes() == (tmp_path / "old" / "onnx" / "model.onnx").read_bytes()


@pytest.mark.parametrize("edit, message", [
    (dict(hidden_act="gelu"), "hidden_act"),
    (dict(mamba_n_heads=5), "mamba_n_heads (5) must divide the mixer's width 96 (mamba_d_ssm)"),
    (dict(mamba_d_head=8), "mamba_n_heads * mamba_d_head (6 x 8) must equal the mixer's width 96"),
    (dict(mamba_n_groups=4), "must be a multiple of mamba_n_groups"),
    (dict(ssm_multipliers=[1.0, 1.0, 1.0, 1.0]), "ssm_multipliers must be a list of 5 numbers"),
    (dict(mlp_multipliers=[1.0, "x"]), "mlp_multipliers[1] is \"x\", not a finite number"),
    (dict(rope_parameters=dict(rope_type="default", rope_theta=1e6, partial_rotary_factor=0.5)),
     "partial_rotary_factor (rope over 8 of head_dim 16"),
])
def test_falcon_h1_configs_hfx_cannot_build_are_refused(edit, message, tiny_checkpoint, tmp_path):
    assert_refused("falcon_h1", edit, message, tiny_checkpoint, tmp_path)


def test_falcon_h1_norm_after_the_gate_matches_transformers(tiny_checkpoint, tmp_path):
    """The third form of Falcon-H1's mixer norm (mamba_rms_norm with mamba_norm_before_gate false:
    RMSNorm(y * silu(gate)), Mamba-2's), which neither case has: logits and states within 1e-4 of
    Transformers through ONNX Runtime over the prompt and 3 cached steps."""
    import json
    import shutil
    folder = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoint("falcon_h1"), folder)
    config = json.loads((folder / "config.json").read_text())
    config["mamba_norm_before_gate"] = False
    (folder / "config.json").write_text(json.dumps(config))
    run_hfx("export", "--model", folder, "--format", "onnx", "--onnx-profile", "portable", "--quiet", "--no-verify",
            tmp_path / "out")
    model = load_reference(folder)
    assert model.model.layers[0].mamba.norm.norm_before_gate is False
    steps = decode_feeds(model.config.vocab_size)
    ref = transformers_steps(model, steps)
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(str(tmp_path / "out" / "onnx" / "model.onnx"), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    wanted = {i.name for i in sess.get_inputs()}
    ours = run_steps(lambda feed: dict(zip(names, sess.run(None, {k: v for k, v in feed.items() if k in wanted}))),
                     steps, model.config)
    worst = compare("falcon_h1 norm after the gate", ours, ref)
    record_coverage("falcon_h1", "onnxruntime-portable-norm-after-gate", "logits and states max abs diff", worst)
@pytest.mark.parametrize("case, edit, message", [
    ("zamba2", dict(layers_block_type=["mamba", "hybrid", "sliding_attention"]),
     "layers_block_type[2] = \"sliding_attention\""),
    ("zamba2", dict(num_key_value_heads=2), "use_shared_attention_adapter with num_key_value_heads 2"),
    ("zamba2", dict(rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}), "rope type linear"),
    ("zamba2", dict(n_mamba_heads=3), "must be a multiple of n_mamba_heads (3)"),
    ("zamba2", dict(mamba_ngroups=3), "must be a multiple of mamba_ngroups (3)"),
    ("zamba2-untied", dict(num_attention_heads=6), "must be a multiple of num_attention_heads (6)"),
    ("zamba2-untied", dict(hidden_act="relu6"), "hidden_act"),
])
def test_zamba2_configs_hfx_cannot_build_are_refused(case, edit, message, tiny_checkpoint, tmp_path):
    assert_refused(case, edit, message, tiny_checkpoint, tmp_path)


def test_zamba2_shared_block_is_written_once(tiny_checkpoint, tmp_path):
    """Hybrid layers 1 and 4 of the tied zamba2 case run block 0: its weights are one initializer each
    in the artifact, read by both invocations; only the adapters (slot 0 and slot 2) are their own."""
    out = tmp_path / "out"
    run_hfx("export", "--model", tiny_checkpoint("zamba2"), "--format", "onnx", "--onnx-profile", "portable", "--quiet",
            "--no-verify", out)
    graph = onnx.load(str(out / "onnx" / "model.onnx"), load_external_data=False).graph
    names = [init.name for init in graph.initializer]
    assert len(names) == len(set(names))
    q = "model.layers.1.shared_transformer.self_attn.q_proj.weight"
    assert q in names and not any("layers.4.shared_transformer" in n for n in names), names
    readers = [node for node in graph.node if q in node.input]
    assert len(readers) == 2, [node.name for node in readers]


def test_zamba2_legacy_names_and_saved_tied_copies_build_the_same_graph(tiny_checkpoint, tmp_path):
    """Zyphra's configs spell the mixer layers "mamba" (Transformers remaps them to linear_attention), and
    a checkpoint may hold the tied block again under a later hybrid layer (layer 4's copy of layer 1's
    block 0, which Transformers loads once): the export is byte-identical to the one from the saved
    checkpoint, the copy accounted for, not written."""
    import json
    import shutil
    from safetensors.torch import load_file, save_file
    src = tiny_checkpoint("zamba2")
    folder = tmp_path / "legacy"
    shutil.copytree(src, folder)
    config = json.loads((folder / "config.json").read_text())
    config["layers_block_type"] = ["mamba" if t == "linear_attention" else t for t in config["layers_block_type"]]
    (folder / "config.json").write_text(json.dumps(config))
    tensors = load_file(str(folder / "model.safetensors"))
    block = "model.layers.1.shared_transformer."
    tensors.update({name.replace(block, "model.layers.4.shared_transformer."): t.clone()
                    for name, t in tensors.items() if name.startswith(block)})
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    for ckpt, out in ((src, tmp_path / "new"), (folder, tmp_path / "old")):
        run_hfx("export", "--model", ckpt, "--format", "onnx", "--onnx-profile", "portable", "--quiet", "--no-verify", out)
    assert (tmp_path / "new" / "onnx" / "model.onnx").read_bytes() == (tmp_path / "old" / "onnx" / "model.onnx").read_bytes()


@pytest.mark.parametrize("case", CASES)
def test_no_genai_config_for_a_model_genai_cannot_run(case, tiny_checkpoint, tmp_path):
    """onnxruntime-genai has no Mamba model: the default (ort-requested) export writes no
    genai_config.json for these families rather than one genai would misread."""
    run_hfx("export", "--model", tiny_checkpoint(case), "--format", "onnx", "--quiet", "--no-verify", tmp_path / "out")
    assert (tmp_path / "out" / "onnx" / "model.onnx").exists()
    assert not (tmp_path / "out" / "onnx" / "genai_config.json").exists()


@pytest.mark.parametrize("case", ["granitemoehybrid", "nemotron_h", "mamba", "falcon_mamba"])
@pytest.mark.parametrize("fmt", ["pt2", "executorch"])
def test_program_formats_refuse_the_scan_in_one_line(fmt, case, tiny_checkpoint, tmp_path):
    """.pt2 and .pte cannot hold the scan's chunk count yet (Mamba-2's and Mamba-1's chunked scans
    alike): one line naming the format and the state, and no output folder."""
    proc = run_hfx("export", "--model", tiny_checkpoint(case), "--format", fmt, "--static-cache",
                   "--max-cache-len", "32", tmp_path / "out", check=False)
    assert proc.returncode != 0, proc.stderr
    assert f"format {fmt} does not write a Mamba scan yet (past_ssm.0" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("fmt", ["onnx", "openvino"])
@pytest.mark.parametrize("precision", [["--dtype", "f16"], ["--dtype", "bf16"], ["--quantize", "int8"],
                                       ["--quantize", "int4"]], ids=["f16", "bf16", "int8", "int4"])
@pytest.mark.parametrize("case", ["mamba2", "granitemoehybrid", "granitemoehybrid-moe", "bamba", "nemotron_h",
                                  "nemotron_h-moe-latent", "nemotron_h-moe-groups", "falcon_h1", "mamba",
                                  "falcon_mamba", "jamba", "zamba2"])
def test_every_precision_passes_its_export_check(case, precision, fmt, tiny_checkpoint, tmp_path):
    """Every precision hfx offers, on each family: the export's own check (the artifact's numbers and
    greedy tokens against the reference executor at the precision's stated gate, docs/verify.md, on
    ONNX Runtime or OpenVINO as well as hfx's reference executor) passes, or nothing is published."""
    out = tmp_path / "out"
    proc = run_hfx("export", "--model", tiny_checkpoint(case), "--format", fmt, *precision, out)
    assert "checks passed" in proc.stdout or "identical" in proc.stdout, proc.stdout + proc.stderr
    assert (out / "hfx.json").exists()
