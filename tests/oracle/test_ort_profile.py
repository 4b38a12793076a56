"""`hfx export --onnx-profile ort`: ONNX Runtime's fused ops (GroupQueryAttention with rotary caches,
SimplifiedLayerNormalization / SkipSimplifiedLayerNormalization, packed QKV) against Transformers eager.

For each decoder case the profile supports:
  (a) ORT logits and present.* of an unpadded prompt then 3 single-token steps: max abs diff <= 1e-4,
      no mismatching element (the profile serves unpadded rows: GroupQueryAttention places new tokens
      after the cache, as onnxruntime-genai does);
  (b) onnxruntime-genai greedy generation of 64 tokens from the exported folder as it is
      (genai_config.json written by hfx) equals Transformers greedy, token for token;
  (c) an ORT profiling run: every node on CPUExecutionProvider, the contrib kernels present.
Cases the profile does not support must fall back to portable, saying why, and still get a
genai_config.json (growing cache buffers): (b) holds for them too.
"""
from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from conftest import empty_cache_feed, ort_ops_per_provider, run_hfx
from tiny_models import CASES, load_reference

ATOL = 1e-4
NEW_TOKENS = 64
# Soft-capping (GQA `softcap`), sliding windows (`local_window_size`, per layer) and partial rotary
# (cos/sin caches of rotary_dim / 2 columns) are fused; the tiny windows (3-5 tokens) are far shorter
# than the prompts and the 64 generated tokens.
SUPPORTED = ["llama", "llama-mha-tied", "llama-rope-llama3", "llama-rope-yarn", "qwen2-tied", "qwen3", "olmo2",
             "granite", "gemma2", "gemma3", "mistral-window", "qwen2-window", "phi3", "starcoder2",
             "gpt-neox-rotary16", "stablelm-rotary16", "phi3-longrope-full", "llama-rope-dynamic", "gpt2",
             "gpt2-untied-scaled", "phi-rotary16-tied", "ministral", "olmo3", "seed-oss", "smollm3", "exaone4", "helium", "cohere", "cohere2", "glm4", "gpt-bigcode", "gpt-bigcode-mha", "arcee", "nemotron", "mixtral", "qwen3-moe", "qwen3-moe-raw", "qwen2-moe"]
FALLBACK = {"phi3-longrope": "partial rotary over 8 of 16 dims", "phi": "partial rotary over 8 of 16 dims",
            "gpt-neox": "partial rotary over 4 of 16 dims", "stablelm-parallel": "partial rotary over 8 of 16 dims",
            "gemma": "head_dim 24 is not a multiple of 16", "glm": "partial rotary over 8 of 16 dims"}


@pytest.fixture(scope="module")
def ort_export(tiny_checkpoint, tmp_path_factory):
    """case -> (checkpoint copy with a 128-token context, export folder). The context covers prompt +
    64 new tokens (the cos/sin caches have context rows); the rope types tested do not read it."""
    base = tmp_path_factory.mktemp("ort_profile")
    done = {}

    def get(case):
        if case not in done:
            ckpt = base / f"{case}-ckpt"
            shutil.copytree(tiny_checkpoint(case), ckpt)
            cfg = json.loads((ckpt / "config.json").read_text())
            rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
            # dynamic NTK reads it: keep the tiny 8, so the prompt and every step are past it
            if cfg.get("max_position_embeddings", 0) < 128 and rope.get("rope_type") != "dynamic":
                cfg["max_position_embeddings"] = 128
            (ckpt / "config.json").write_text(json.dumps(cfg))
            out = base / case
            proc = run_hfx("export", "--model", ckpt, "--onnx-profile", "ort", out)
            done[case] = (ckpt, out, proc)
        return done[case]

    return get


def profile_of(out):
    manifest = json.loads((out / "hfx.json").read_text())
    return manifest["onnx_profiles"][0], manifest


# Forward parity only (Transformers' Phi-3 generate() re-encodes the sequence when it crosses the original
# context, which no decode loop over a cache does): the prompt (9) within the original context (11),
# then steps past it, where the long caches take over.
SWITCH = ["phi3-longrope-full-switch"]


@pytest.mark.parametrize("case", SUPPORTED + SWITCH)
def test_ort_profile_matches_transformers(case, ort_export):
    ckpt, out, _ = ort_export(case)
    prof, manifest = profile_of(out)
    assert prof["profile"] == "ort", prof
    assert manifest["recipe"]["onnx_profile"] == "ort"
    model = load_reference(ckpt)
    cfg = model.config
    layers = cfg.num_hidden_layers
    sess = ort.InferenceSession(str(out / "onnx" / "model.onnx"), providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    assert "position_ids" not in names
    rng = np.random.default_rng(0)
    ids = rng.integers(3, cfg.vocab_size, size=(1, 9), dtype=np.int64)
    kv = cfg.num_key_value_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    past = [(np.zeros((1, kv, 0, head_dim), np.float32),) * 2 for _ in range(layers)]
    cache, total, worst = None, 0, 0.0
    feed_ids = ids
    for step in range(4):
        total += feed_ids.shape[1]
        mask = np.ones((1, total), np.int64)
        feed = {"input_ids": feed_ids, "attention_mask": mask}
        for i, (k, v) in enumerate(past):
            feed[f"past_key_values.{i}.key"], feed[f"past_key_values.{i}.value"] = k, v
        outs = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feed)))
        with torch.no_grad():
            r = model(input_ids=torch.from_numpy(feed_ids), attention_mask=torch.from_numpy(mask),
                      position_ids=torch.arange(total - feed_ids.shape[1], total)[None], past_key_values=cache,
                      use_cache=True)
        cache = r.past_key_values
        pairs = [("logits", outs["logits"], r.logits.numpy())]
        for i, layer in enumerate(cache.layers):
            pairs += [(f"present.{i}.key", outs[f"present.{i}.key"], layer.keys.numpy()),
                      (f"present.{i}.value", outs[f"present.{i}.value"], layer.values.numpy())]
        for name, ours, ref in pairs:
            if name.startswith("present.") and ref.shape[2] < ours.shape[2] and model.config.sliding_window:
                # a sliding layer of Transformers' cache keeps the last sliding_window - 1 positions;
                # GroupQueryAttention's present keeps them all and masks by position
                ours = ours[:, :, -ref.shape[2]:]
            assert ours.shape == ref.shape, f"{case} step {step} {name}: {ours.shape} vs {ref.shape}"
            diff = np.abs(ours.astype(np.float64) - ref)
            bad = int((diff > ATOL).sum())
            assert bad == 0, f"{case} step {step} {name}: {bad}/{diff.size} over {ATOL} (max {diff.max():.3g})"
            worst = max(worst, float(diff.max()))
        past = [(outs[f"present.{i}.key"], outs[f"present.{i}.value"]) for i in range(layers)]
        feed_ids = np.array([[int(r.logits[0, -1].argmax())]], np.int64)
    print(f"\n{case}: ORT (ort profile) vs Transformers max abs diff {worst:.3g} over prompt + 3 steps")


@pytest.mark.parametrize("case", SUPPORTED + sorted(FALLBACK))
def test_genai_greedy_equals_transformers(case, ort_export):
    """Every decoder family: the fused graph, or the portable one where attention falls back (genai runs
    it with growing cache buffers)."""
    og = pytest.importorskip("onnxruntime_genai")
    ckpt, out, _ = ort_export(case)
    model = load_reference(ckpt)
    prompt = [3 + (i * 37) % (model.config.vocab_size - 3) for i in range(7)]
    # genai stops at the config's context_length (dynamic NTK: max_position_embeddings x factor = 16 for
    # the tiny case, whose prompt and steps cross its 8 positions)
    context = json.loads((out / "onnx" / "genai_config.json").read_text())["model"]["context_length"]
    new_tokens = min(NEW_TOKENS, context - len(prompt))
    ref, ours = transformers_and_genai_greedy(og, model, out / "onnx", prompt, new_tokens)
    assert ours == ref, f"{case}: genai {ours} vs Transformers {ref}"
    print(f"\n{case}: onnxruntime-genai greedy {len(ours)} tokens identical to Transformers")


def transformers_and_genai_greedy(og, model, onnx_dir, prompt, new_tokens):
    """The greedy tokens of Transformers' generate() and of onnxruntime-genai over `onnx_dir`."""
    with torch.no_grad():
        ref = model.generate(input_ids=torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                             max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
    gm = og.Model(str(onnx_dir))
    params = og.GeneratorParams(gm)
    params.set_search_options(do_sample=False, max_length=len(prompt) + new_tokens, min_length=len(prompt) + new_tokens)
    gen = og.Generator(gm, params)
    gen.append_tokens([prompt])
    while not gen.is_done():
        gen.generate_next_token()
    return ref[0, len(prompt):].tolist(), list(gen.get_sequence(0))[len(prompt):]


def test_sharded_checkpoint_is_mirrored_shard_by_shard(tiny_checkpoint, tmp_path):
    """A sharded f32 checkpoint whose tensors the ort profile reads as stored: each shard is copied, byte for
    byte, into a data file of its own (model.onnx_data, model.onnx_data_1, ... in the shards' order), the
    manifest's sha256 of each is its shard's, and onnxruntime-genai loads the folder unmodified and
    generates Transformers' greedy tokens."""
    og = pytest.importorskip("onnxruntime_genai")
    model = load_reference(tiny_checkpoint("qwen3"))
    ckpt = tmp_path / "sharded"
    model.save_pretrained(ckpt, safe_serialization=True, max_shard_size="100KB")
    for name in ("config.json", "generation_config.json"):
        if (tiny_checkpoint("qwen3") / name).exists():
            shutil.copy(tiny_checkpoint("qwen3") / name, ckpt / name)
    shards = sorted(ckpt.glob("model-*.safetensors"))
    assert len(shards) > 1, "expected a sharded checkpoint"
    out = tmp_path / "out"
    run_hfx("export", "--model", ckpt, "--quiet", out)
    data = [out / "onnx" / ("model.onnx_data" + (f"_{i}" if i else "")) for i in range(len(shards))]
    assert sorted((out / "onnx").glob("model.onnx_data*")) == sorted(data)
    files = json.loads((out / "hfx.json").read_text())["files"]
    for shard, copy in zip(shards, data):
        assert copy.read_bytes() == shard.read_bytes(), copy.name
        assert files[f"onnx/{copy.name}"] == hashlib.sha256(shard.read_bytes()).hexdigest()
    prompt = [3 + (i * 37) % (model.config.vocab_size - 3) for i in range(7)]
    ref, ours = transformers_and_genai_greedy(og, model, out / "onnx", prompt, 16)
    assert ours == ref, f"genai {ours} vs Transformers {ref}"


@pytest.mark.parametrize("case", SUPPORTED[:1] + ["qwen3", "phi-rotary16-tied"])
def test_every_node_on_cpu_with_contrib_kernels(case, ort_export, tmp_path):
    _, out, _ = ort_export(case)
    placed = ort_ops_per_provider(out / "onnx" / "model.onnx",
                                  lambda inputs: empty_cache_feed(inputs, [[5, 6, 7]], [[1, 1, 1]]), tmp_path / "prof", case)
    assert placed and all(ep == "CPUExecutionProvider" for ep, _ in placed), placed
    ops = {op for _, op in placed}
    # RMSNorm families get ORT's (Skip)SimplifiedLayerNormalization; LayerNorm families (Phi) the standard
    # LayerNormalization, and their gelu ONNX's Gelu (which ORT may fuse with its bias into BiasGelu)
    norms = ({"LayerNormalization"} if case.startswith("phi-") else
             {"SkipSimplifiedLayerNormalization", "SimplifiedLayerNormalization"})
    assert {"GroupQueryAttention"} | norms <= ops, ops
    if case.startswith("phi-"):
        assert ops & {"Gelu", "BiasGelu", "FastGelu"}, ops


def qkv_matmuls_per_attention(model_path):
    """For each GroupQueryAttention: the MatMul / FusedMatMul / MatMulNBits nodes its q, k, v inputs come from (walking
    back through the slices, reshapes and norms in between, stopping at the first matmul)."""
    import onnx
    graph = onnx.load(str(model_path), load_external_data=False).graph
    producer = {o: n for n in graph.node for o in n.output}
    found = []
    for gqa in (n for n in graph.node if n.op_type == "GroupQueryAttention"):
        matmuls, todo, seen = set(), [x for x in gqa.input[:3] if x], set()
        while todo:
            n = producer.get(todo.pop())
            if n is None or n.name in seen:
                continue
            seen.add(n.name)
            if n.op_type in ("MatMul", "FusedMatMul", "MatMulNBits"):
                matmuls.add(n.name)
            else:
                todo += [x for x in n.input if x]
        found.append(sorted(matmuls))
    return found


@pytest.mark.parametrize("case", ["qwen3", "gemma3", "olmo2", "stablelm-rotary16"])
def test_qkv_packed_with_qk_norms(case, ort_export, tiny_checkpoint, tmp_path):
    """q/k norms between the projections and GroupQueryAttention (per head: qwen3, gemma3, stablelm;
    whole projection: olmo2) still get one packed q | k | v MatMul per layer, sliced for the norms, as
    genai's model builder lays it out; with --quantize int4 it is one MatMulNBits. The logits of the same
    f32 export are checked against Transformers by test_ort_profile_matches_transformers."""
    _, out, _ = ort_export(case)
    per_layer = qkv_matmuls_per_attention(out / "onnx" / "model.onnx")
    assert per_layer and all(len(m) == 1 and "qkv_proj" in m[0] for m in per_layer), per_layer
    q4 = tmp_path / "int4"
    run_hfx("export", "--model", tiny_checkpoint(case), "--onnx-profile", "ort", "--quantize", "int4", "--quiet", q4)
    per_layer = qkv_matmuls_per_attention(q4 / "onnx" / "model.onnx")
    assert per_layer and all(len(m) == 1 and m[0].endswith("MatMulNBits") for m in per_layer), per_layer
    sess = ort.InferenceSession(str(q4 / "onnx" / "model.onnx"), providers=["CPUExecutionProvider"])
    feed = empty_cache_feed({i.name: i for i in sess.get_inputs()}, [[5, 6, 7]], [[1, 1, 1]])
    assert np.isfinite(sess.run(["logits"], feed)[0]).all()


def mlp_products(model_path):
    """The weight names the MLP products of an export read (MatMul / FusedMatMul / MatMulNBits over an
    initializer named ...mlp...), per product."""
    import onnx
    graph = onnx.load(str(model_path), load_external_data=False).graph
    return [n.input[1] for n in graph.node
            if n.op_type in ("MatMul", "FusedMatMul", "MatMulNBits") and ".mlp." in n.input[1]]


@pytest.mark.parametrize("case", ["llama", "gemma3"])
def test_gate_and_up_packed(case, ort_export, tiny_checkpoint, tmp_path):
    """A gated MLP's gate and up projections are one product per layer (SwiGLU: llama; Gelu-tanh(gate) * up:
    gemma3), sliced back for the activation, in f32 and with --quantize int4 (one MatMulNBits); down_proj
    stays apart. The same export's logits are checked against Transformers by
    test_ort_profile_matches_transformers, and the int4 weights column by column by test_quantization.py."""
    _, out, _ = ort_export(case)
    layers = json.loads((tiny_checkpoint(case) / "config.json").read_text())["num_hidden_layers"]
    q4 = tmp_path / "int4"
    run_hfx("export", "--model", tiny_checkpoint(case), "--onnx-profile", "ort", "--quantize", "int4", "--quiet", q4)
    for model in (out / "onnx" / "model.onnx", q4 / "onnx" / "model.onnx"):
        names = mlp_products(model)
        assert sum("gate_up_proj" in n for n in names) == layers, names
        assert sum("down_proj" in n for n in names) == layers, names
        assert len(names) == 2 * layers, names


@pytest.mark.parametrize("case", sorted(FALLBACK))
def test_unsupported_families_fall_back(case, ort_export):
    _, out, proc = ort_export(case)
    prof, _ = profile_of(out)
    assert prof["profile"] == "portable" and FALLBACK[case] in prof["note"], prof
    assert "falls back to the portable profile" in proc.stderr and FALLBACK[case] in proc.stderr
    # onnxruntime-genai still loads the folder: the portable graph's cache grows by concatenation
    genai = json.loads((out / "onnx" / "genai_config.json").read_text())
    assert genai["search"]["past_present_share_buffer"] is False
    assert "position_ids" in genai["model"]["decoder"]["inputs"]


@pytest.mark.parametrize("case", ["llama", "gemma2"])
def test_hfx_verify_on_onnxruntime(case, ort_export):
    """`hfx verify --runtime onnxruntime` on an ort-profile folder: the shape matrix (chunks on a cache at
    batch 1: GroupQueryAttention rejects multi-token chunks on a non-empty cache for batch > 1), greedy
    tokens, every node on the CPU provider, and the re-export's bytes."""
    _, out, _ = ort_export(case)
    proc = run_hfx("verify", out, "--runtime", "onnxruntime", "--tokens", "16", check=False)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "GroupQueryAttention" in proc.stdout and "pass re-export reproduces bytes" in proc.stdout


def test_split_prefill_with_the_ort_profile(tiny_checkpoint, tmp_path):
    """`--split-prefill` with the ort profile: both graphs fused (their prefill has neither position_ids
    nor a cache input, and serves unpadded rows like the decode graph), built-in check and
    `hfx verify --runtime onnxruntime` pass."""
    out = tmp_path / "out"
    run_hfx("export", "--model", tiny_checkpoint("qwen2-tied"), "--quiet", "--onnx-profile", "ort", "--split-prefill", out)
    for name in ("prefill", "decode"):
        model = onnx.load(str(out / "onnx" / f"{name}.onnx"), load_external_data=False)
        assert sum(n.op_type == "GroupQueryAttention" for n in model.graph.node) == 2, name
        assert "position_ids" not in {i.name for i in model.graph.input}, name
    proc = run_hfx("verify", out, "--runtime", "onnxruntime", "--tokens", "8", check=False)
    assert proc.returncode == 0 and "prefill" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("case", ["llama", "qwen3", "gemma2", "mistral-window", "phi3", "gpt2", "phi3-longrope-full",
                                  "gpt-neox-rotary16", "phi-rotary16-tied", "smollm3", "gpt-bigcode"])
def test_left_padded_batch_matches_transformers(case, ort_export):
    """A left-padded batch (Transformers' convention for batched generation) through the ort graph: each
    row's new tokens are rolled to start at position 0 for GroupQueryAttention and the logits rolled back,
    so the logits at every real position equal Transformers' over the prompt and three greedy steps fed
    the graph's own presents (GQA's cache keeps each row's keys from 0: the graph's own format)."""
    ckpt, out, _ = ort_export(case)
    model = load_reference(ckpt)
    cfg = model.config
    sess = ort.InferenceSession(str(out / "onnx" / "model.onnx"), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    layers = cfg.num_hidden_layers
    kv = cfg.num_key_value_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    rng = np.random.default_rng(1)
    lengths = [9, 5, 7]  # rows padded on the left by 0, 4 and 2
    width = max(lengths)
    ids = np.zeros((len(lengths), width), np.int64)
    mask = np.zeros((len(lengths), width), np.int64)
    for row, n in enumerate(lengths):
        ids[row, width - n:] = rng.integers(3, cfg.vocab_size, size=n)
        mask[row, width - n:] = 1
    past = {f"past_key_values.{i}.{kind}": np.zeros((len(lengths), kv, 0, head_dim), np.float32)
            for i in range(layers) for kind in ("key", "value")}
    cache, worst, feed_ids = None, 0.0, ids
    for step in range(4):
        outs = dict(zip(names, sess.run(None, {"input_ids": feed_ids, "attention_mask": mask, **past})))
        positions = np.clip(np.cumsum(mask, 1) - 1, 0, None)[:, -feed_ids.shape[1]:]
        with torch.no_grad():
            r = model(input_ids=torch.from_numpy(feed_ids), attention_mask=torch.from_numpy(mask),
                      position_ids=torch.from_numpy(positions), past_key_values=cache, use_cache=True)
        cache = r.past_key_values
        real = mask[:, -feed_ids.shape[1]:].astype(bool)
        diff = np.abs(outs["logits"].astype(np.float64) - r.logits.numpy())[real]
        bad = int((diff > ATOL).sum())
        assert bad == 0, f"{case} step {step}: {bad}/{diff.size} logits over {ATOL} (max {diff.max():.3g})"
        worst = max(worst, float(diff.max()))
        past = {f"past_key_values.{i}.{kind}": outs[f"present.{i}.{kind}"] for i in range(layers) for kind in ("key", "value")}
        feed_ids = r.logits[:, -1].argmax(-1).numpy()[:, None].astype(np.int64)
        mask = np.concatenate([mask, np.ones((len(lengths), 1), np.int64)], 1)
    print(f"\n{case}: left-padded batch of 3 (ort profile) vs Transformers max abs diff {worst:.3g}, prompt + 3 steps")


def test_ort_is_the_default_for_onnx(tiny_checkpoint, tmp_path):
    """No `--onnx-profile`: `hfx export` writes the ort profile (ONNX Runtime is the ONNX target hfx
    verifies on) and genai_config.json; `--onnx-opset 23` alone means portable (its point is the standard
    fused ops); a recipe without the field gets the same defaults; encoders fall back, saying so."""
    ckpt = tiny_checkpoint("qwen3")

    def export(name, *args):
        out = tmp_path / name
        proc = run_hfx("export", "--model", ckpt, "--no-verify", *args, out)
        ops = {n.op_type for n in onnx.load(str(out / "onnx" / "model.onnx"), load_external_data=False).graph.node}
        return out, proc, ops

    out, _, ops = export("default")
    entry, manifest = profile_of(out)
    assert entry["profile"] == "ort" and manifest["recipe"]["onnx_profile"] == "ort"
    assert {"GroupQueryAttention", "SkipSimplifiedLayerNormalization"} <= ops
    assert (out / "onnx" / "genai_config.json").exists()
    out, _, ops = export("opset23", "--onnx-opset", "23")
    assert profile_of(out)[0]["profile"] == "portable" and "Attention" in ops and "GroupQueryAttention" not in ops
    for recipe, want in (({"formats": ["onnx"]}, "ort"), ({"formats": ["onnx"], "onnx_opset": 23}, "portable")):
        path = tmp_path / f"recipe-{want}.json"
        path.write_text(json.dumps(recipe))
        out, _, _ = export(f"from-recipe-{want}", "--recipe", path)
        assert profile_of(out)[0]["profile"] == want, recipe


def test_rope_cache_rows_bound_the_contract(tiny_checkpoint, tmp_path):
    """The ort profile's precomputed cos/sin caches have max_position_embeddings rows (64 in the tiny
    llama): the manifest's total_sequence_length says so, `hfx verify` keeps its greedy run and shape
    matrix inside it, and `hfx run` past it fails naming the dim, not inside GroupQueryAttention."""
    out = tmp_path / "out"
    run_hfx("export", "--model", tiny_checkpoint("llama"), "--quiet", out)
    manifest = json.loads((out / "hfx.json").read_text())
    assert manifest["components"][0]["dims"]["total_sequence_length"]["max"] == 64
    proc = run_hfx("verify", out, "--no-reexport", check=False)
    assert proc.returncode == 0 and "cache near full" in proc.stdout, proc.stdout + proc.stderr
    from safetensors.numpy import save_file
    feed = {"input_ids": np.full((1, 1), 5, np.int64), "attention_mask": np.ones((1, 65), np.int64)}
    for i in range(2):
        for kv in ("key", "value"):
            feed[f"past_key_values.{i}.{kv}"] = np.zeros((1, 2, 64, 16), np.float32)
    save_file(feed, str(tmp_path / "in.safetensors"))
    proc = run_hfx("run", "--artifact", out, "--inputs", tmp_path / "in.safetensors", "--output",
                   tmp_path / "o.safetensors", check=False)
    assert proc.returncode == 1 and "total_sequence_length" in proc.stderr and "[1, 64]" in proc.stderr, proc.stderr
