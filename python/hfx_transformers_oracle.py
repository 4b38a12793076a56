"""Transformers side of `hfx verify --oracle transformers`: the source checkpoint run by Transformers
eager, in f32, on the same step inputs and greedy prompts hfx runs the artifact on. Reads a job file,
writes a result file, both JSON; tensors go through safetensors files:

  {"model": DIR, "hf_class": "LlamaForCausalLM", "layers": N,
   "runs": [{"inputs": "in.safetensors", "outputs": "out.safetensors"}],
   "generate": {"prompts": [[...]], "max_new_tokens": N, "eos_token_ids": [...], "pad_token_id": P} | null}
  -> {"transformers_version": "..", "torch_version": "..", "generate": {"tokens": [[...]]}}

Each run's outputs are named as hfx names them: logits, present.<layer>.key / .value (the cache after
the step: the given past_key_values.* plus the step's own keys and values; for a --static-cache step the
buffers with them written at cache_position, see static_step), last_hidden_state. An encoder-decoder's
runs are its three graphs (seq2seq_step): the encoder, the decoder's first step and a later one.

Only safetensors are read (use_safetensors=True) and no code from the checkpoint folder runs
(trust_remote_code=False): the class is the one hfx's definition reproduces, taken from transformers
itself. A failure writes {"error": "<the exception's last line>"} and exits 1.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import transformers
from safetensors.torch import load_file, save_file


def error_line(exc: BaseException) -> str:
    import traceback
    text = traceback.format_exception_only(type(exc), exc)[-1]
    return " ".join(text.split())[:2000]


def load_model(job):
    cls = getattr(transformers, job["hf_class"], None)
    if not (isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel)):
        raise ValueError(f"transformers {transformers.__version__} has no model class {job['hf_class']}")
    model = cls.from_pretrained(job["model"], use_safetensors=True, trust_remote_code=False, dtype=torch.float32,
                                attn_implementation="eager", local_files_only=True)
    return model.eval()


def is_recurrent(model, layer):
    """A layer whose state is a convolution's (LFM2's "conv") or a Mamba mixer's ("linear_attention";
    Mamba2Config names every layer so; Falcon-H1's and Zamba2's "hybrid" layers carry a mixer's and
    attention's)."""
    types = getattr(model.config, "layer_types", None) or []
    return layer < len(types) and types[layer] in ("conv", "linear_attention", "mamba", "hybrid")


def is_stateless(model, layer):
    """A layer that carries nothing from step to step: Nemotron-H's MLP (and MoE) layers."""
    types = getattr(model.config, "layer_types", None) or []
    return layer < len(types) and types[layer] in ("mlp", "moe")


def has_attention(model, layer):
    """A layer with keys and values: every layer but a recurrent or stateless one, and Falcon-H1's."""
    types = getattr(model.config, "layer_types", None) or []
    return not (is_recurrent(model, layer) or is_stateless(model, layer)) or (
        layer < len(types) and types[layer] == "hybrid")


def is_hybrid(model):
    """A model with recurrent layers (LFM2, Mamba-2, Granite 4.0-H): its cache has a layer of each kind."""
    return any(is_recurrent(model, i) for i in range(len(getattr(model.config, "layer_types", None) or [])))


def cache_argument(model):
    """The name forward() takes its cache by: cache_params (Mamba2ForCausalLM) or past_key_values."""
    import inspect
    return "cache_params" if "cache_params" in inspect.signature(model.forward).parameters else "past_key_values"


def empty_cache(model):
    """A decoder's cache: a plain DynamicCache, so that every layer keeps its whole past as hfx's present.*
    does, sliding layers too (their window is in the mask); a hybrid's, from its config, which gives its
    conv layers their own kind."""
    from transformers import DynamicCache
    return DynamicCache(config=model.config) if is_hybrid(model) else DynamicCache()


# A recurrent layer's scan state is past_ssm.{i} / present_ssm.{i} in the js-hybrid name set and
# past_recurrent.{i} / present_recurrent.{i} in js-linear-attention, the gated delta-net families'
# (src/tasks/state_names.cc); the families named by the latter:
LINEAR_ATTENTION_NAMES = ("qwen3_5_text", "qwen3_next", "qwen3_5_moe_text")


def recurrent_name(model, side, layer):
    kind = "recurrent" if model.config.model_type in LINEAR_ATTENTION_NAMES else "ssm"
    return f"{side}_{kind}.{layer}"


def cache_of(model, feeds, layers):
    """The past_* inputs as a Transformers cache (None when the step has none). A conv layer's state
    (hfx's last conv_L_cache - 1 columns) enters with a zero column before it: Transformers keeps
    conv_L_cache columns, the first of which no step reads. A step with no tokens before it leaves the
    conv states unset, so Transformers pads its prompt with zeros as in a generation's first step."""
    if not any(name.startswith("past_") for name in feeds):
        return None
    cache = empty_cache(model)
    started = feeds["attention_mask"].shape[1] > feeds["input_ids"].shape[1]
    for layer in range(layers):
        if f"past_key_values.{layer}.key" in feeds:
            cache.update(feeds[f"past_key_values.{layer}.key"], feeds[f"past_key_values.{layer}.value"], layer)
        if f"past_conv.{layer}" in feeds and started:
            state = feeds[f"past_conv.{layer}"].to(torch.float32)
            cache.update_conv_state(torch.nn.functional.pad(state, (1, 0)), layer, conv_kernel_size=state.shape[-1] + 1)
            if recurrent_name(model, "past", layer) in feeds:
                state = feeds[recurrent_name(model, "past", layer)].to(torch.float32).contiguous()
                cache.update_recurrent_state(state, layer)
    return cache


def cache_tensors(model, cache, layers):
    out = {}
    for layer in range(layers):
        if is_recurrent(model, layer):
            out[f"present_conv.{layer}"] = cache.get_conv_state(layer)[:, :, 1:]
            ssm = cache.get_recurrent_state(layer)
            if ssm is not None:
                out[recurrent_name(model, "present", layer)] = ssm
        if not has_attention(model, layer):
            continue
        if hasattr(cache, "layers"):
            k, v = cache.layers[layer].keys, cache.layers[layer].values
        else:  # older Transformers
            k, v = cache.key_cache[layer], cache.value_cache[layer]
        out[f"present.{layer}.key"], out[f"present.{layer}.value"] = k, v
    return out


def static_step(model, feeds, layers):
    """A --static-cache step (past_key_values.* buffers of max_cache_len, cache_position the slots this
    step writes, attention_mask over the whole buffer) run by Transformers on the cache it stands for:
    the buffers' first cache_position[0] slots as a DynamicCache and the mask over those slots and the
    step's. The present buffers are the past ones with the step's keys and values written at
    cache_position, which is what a static cache's update does; the slots the mask leaves out take no
    part in either computation."""
    position = feeds["cache_position"]
    start, seq = int(position[0]), int(position.numel())
    if not torch.equal(position, torch.arange(start, start + seq, dtype=position.dtype)):
        raise ValueError(f"cache_position {position.tolist()} is not one run of slots")
    mask = feeds["attention_mask"]
    if bool(mask[:, start + seq:].any()):
        raise ValueError(f"attention_mask attends slots past the step's last one ({start + seq - 1})")
    grown = dict(feeds)
    del grown["cache_position"]
    grown["attention_mask"] = mask[:, :start + seq].contiguous()
    kv_layers = [layer for layer in range(layers) if f"past_key_values.{layer}.key" in feeds]  # a hybrid's conv states
    for layer in kv_layers:                                                                    # are the same in every layout
        for part in ("key", "value"):
            name = f"past_key_values.{layer}.{part}"
            if start == 0:
                grown.pop(name)
            else:
                grown[name] = feeds[name][:, :, :start].contiguous()
    result = run_step(model, grown, layers)
    for layer in kv_layers:
        for part in ("key", "value"):
            buffer = feeds[f"past_key_values.{layer}.{part}"].to(torch.float32).clone()
            buffer[:, :, start:start + seq] = result[f"present.{layer}.{part}"][:, :, start:start + seq]
            result[f"present.{layer}.{part}"] = buffer.contiguous()
    return result


def seq2seq_step(model, feeds):
    """An encoder-decoder's graph (hfx's tasks/seq2seq.h) told by its inputs: the encoder
    (last_hidden_state), the decoder's first step from encoder_hidden_states (logits, the self-attention
    cache present.{i}.decoder.* and the cross-attention keys/values present.{i}.encoder.*), or a later
    step from the carried past_key_values.{i}.decoder|encoder.* (logits, present.{i}.decoder.*). The
    caches are sized lazily: one built from the config has the encoder's depth, not the decoder's."""
    from transformers import DynamicCache, EncoderDecoderCache
    if "input_features" in feeds:  # a speech encoder's (Whisper's)
        out = model.get_encoder()(input_features=feeds["input_features"])
        return {"last_hidden_state": out.last_hidden_state.detach().contiguous()}
    if "attention_mask" in feeds:
        out = model.get_encoder()(input_ids=feeds["input_ids"], attention_mask=feeds["attention_mask"])
        return {"last_hidden_state": out.last_hidden_state.detach().contiguous()}
    # The first step reads encoder_hidden_states (the merged decoder's too, its past empty then); a
    # static cache's first step reads its self-attention buffers as well (seq2seq_static_step).
    cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
    layer = 0
    while f"past_key_values.{layer}.decoder.key" in feeds:
        p = f"past_key_values.{layer}."
        if feeds[p + "decoder.key"].numel() > 0:
            cache.self_attention_cache.update(feeds[p + "decoder.key"], feeds[p + "decoder.value"], layer)
        if feeds.get(p + "encoder.key", torch.zeros(0)).numel() > 0:
            cache.cross_attention_cache.update(feeds[p + "encoder.key"], feeds[p + "encoder.value"], layer)
            cache.is_updated[layer] = True  # the cross keys/values are read, not computed
        layer += 1
    if "encoder_hidden_states" in feeds and not any(cache.is_updated.values()):
        hidden = feeds["encoder_hidden_states"]
    else:
        # Read only for its shape: every layer's cross-attention reuses the cached keys/values.
        length = feeds["past_key_values.0.encoder.key"].shape[2]
        hidden = torch.zeros(feeds["input_ids"].shape[0], length, model.config.d_model)
    source_mask = {"attention_mask": feeds["encoder_attention_mask"]} if "encoder_attention_mask" in feeds else {}
    out = model(encoder_outputs=(hidden,), decoder_input_ids=feeds["input_ids"], past_key_values=cache, use_cache=True,
                **source_mask)
    result = {"logits": out.logits}
    for layer, entry in enumerate(out.past_key_values.self_attention_cache.layers):
        result[f"present.{layer}.decoder.key"], result[f"present.{layer}.decoder.value"] = entry.keys, entry.values
        if "encoder_hidden_states" in feeds:  # the first step, or the merged decoder (its cross state as read)
            cross = out.past_key_values.cross_attention_cache.layers[layer]
            result[f"present.{layer}.encoder.key"], result[f"present.{layer}.encoder.value"] = cross.keys, cross.values
    return {k: v.detach().to(torch.float32).contiguous() for k, v in result.items()}


# MambaModel and FalconMambaModel (Mamba-1, as of Transformers 5.23) multiply by the 2-D attention mask
# as given, where Mamba-2 first trims it to the step's own columns (create_recurrent_attention_mask):
# after a cache, a [batch, past + s] mask broadcasts the step over past + s positions. And their scan
# over several tokens starts from a zero state, dropping the cached one (mamba_selective_scan takes
# none). generate() never meets either: it passes no mask after the prompt and one token per step.
RAW_MASK_MIXERS = ("mamba", "falcon_mamba")


def run_token_by_token(model, args):
    """A Mamba-1 step after a cache as generate() runs it: one token at a time (each Transformers'
    recurrent update from the carried state), each with its own mask column; a first step whole, its
    mask being its own columns already."""
    from types import SimpleNamespace
    ids, mask = args["input_ids"], args["attention_mask"]
    past = mask.shape[1] - ids.shape[1]
    if past == 0:
        return model(**args)
    cache, logits = args["cache_params"], []
    for t in range(ids.shape[1]):
        out = model(input_ids=ids[:, t:t + 1], attention_mask=mask[:, past + t:past + t + 1], cache_params=cache,
                    use_cache=True)
        cache = out.cache_params
        logits.append(out.logits)
    return SimpleNamespace(logits=torch.cat(logits, dim=1), cache_params=cache)


# onnxruntime-genai's Whisper names (`--onnx-layout genai`) -> Optimum's, per layer: the decoder.onnx
# step is Optimum's decoder_with_past under these names (its first step from an empty self past).
GENAI_PAST = {"past_key_self_": "decoder.key", "past_value_self_": "decoder.value",
              "past_key_cross_": "encoder.key", "past_value_cross_": "encoder.value"}


def genai_whisper_step(model, feeds):
    """A graph of onnxruntime-genai's Whisper layout: the encoder (audio_features -> hidden_states and
    each layer's cross keys/values present_key|value_cross_{i}, as Transformers' first decoder step
    computes them) or the decoder (int32 input_ids and past_key|value_self|cross_{i} -> logits and
    present_key|value_self_{i}), through seq2seq_step under Optimum's names."""
    from transformers import DynamicCache, EncoderDecoderCache
    if "audio_features" in feeds:
        hidden = model.get_encoder()(input_features=feeds["audio_features"]).last_hidden_state
        start = torch.full((hidden.shape[0], 1), model.config.decoder_start_token_id, dtype=torch.long)
        out = model(encoder_outputs=(hidden,), decoder_input_ids=start,
                    past_key_values=EncoderDecoderCache(DynamicCache(), DynamicCache()), use_cache=True)
        result = {"hidden_states": hidden}
        for layer, cross in enumerate(out.past_key_values.cross_attention_cache.layers):
            result[f"present_key_cross_{layer}"], result[f"present_value_cross_{layer}"] = cross.keys, cross.values
        return {k: v.detach().to(torch.float32).contiguous() for k, v in result.items()}
    optimum = {"input_ids": feeds["input_ids"].long()}
    for name, value in feeds.items():
        for prefix, suffix in GENAI_PAST.items():
            if name.startswith(prefix):
                optimum[f"past_key_values.{name[len(prefix):]}.{suffix}"] = value
    out = seq2seq_step(model, optimum)
    result = {"logits": out["logits"]}
    for name, value in out.items():
        if name.startswith("present.") and name.endswith(".decoder.key"):
            result[f"present_key_self_{name.split('.')[1]}"] = value
        elif name.startswith("present.") and name.endswith(".decoder.value"):
            result[f"present_value_self_{name.split('.')[1]}"] = value
    return result


def seq2seq_static_step(model, feeds):
    """An encoder-decoder's --static-cache decoder step (past_key_values.{i}.decoder.* buffers of
    max_cache_len, cache_position the slots this step writes) run by Transformers on the cache it stands
    for: the buffers' first cache_position[0] slots; the present buffers are the past ones with the step's
    keys and values written at cache_position. The causal mask leaves the later slots out."""
    position = feeds["cache_position"]
    start, seq = int(position[0]), int(position.numel())
    if not torch.equal(position, torch.arange(start, start + seq, dtype=position.dtype)):
        raise ValueError(f"cache_position {position.tolist()} is not one run of slots")
    grown = {k: v for k, v in feeds.items() if k != "cache_position"}
    buffers = [k for k in feeds if k.startswith("past_key_values.") and ".decoder." in k]
    for name in buffers:
        grown[name] = feeds[name][:, :, :start].contiguous()
    result = seq2seq_step(model, grown)
    for name in buffers:
        present = "present." + name[len("past_key_values."):]
        buffer = feeds[name].to(torch.float32).clone()
        buffer[:, :, start:start + seq] = result[present][:, :, start:start + seq]
        result[present] = buffer.contiguous()
    return result


def run_step(model, feeds, layers):
    if getattr(model.config, "is_encoder_decoder", False):
        if "cache_position" in feeds:
            return seq2seq_static_step(model, feeds)
        genai = "audio_features" in feeds or "past_key_self_0" in feeds
        return genai_whisper_step(model, feeds) if genai else seq2seq_step(model, feeds)
    if "cache_position" in feeds:
        return static_step(model, feeds, layers)
    args = {"input_ids": feeds["input_ids"], "attention_mask": feeds["attention_mask"]}
    causal = "position_ids" in feeds
    if causal:
        args["position_ids"] = feeds["position_ids"]
        cache = cache_of(model, feeds, layers)
        args[cache_argument(model)] = cache if cache is not None else empty_cache(model)
        args["use_cache"] = True
    elif "token_type_ids" in feeds:
        args["token_type_ids"] = feeds["token_type_ids"]
    if not causal:
        args["output_hidden_states"] = True
    stepwise = causal and model.config.model_type in RAW_MASK_MIXERS
    out = run_token_by_token(model, args) if stepwise else model(**args)
    result = {}
    if getattr(out, "logits", None) is not None:
        result["logits"] = out.logits
    if causal:
        result.update(cache_tensors(model, getattr(out, cache_argument(model)), layers))
    else:
        hidden = getattr(out, "last_hidden_state", None)
        result["last_hidden_state"] = hidden if hidden is not None else out.hidden_states[-1]
    return {k: v.detach().to(torch.float32).contiguous() for k, v in result.items()}


def generate(model, g):
    """Greedy tokens as hfx's generate returns them: new tokens only, a finished row padded with
    pad_token_id. A decoder's prompts are left-padded; an encoder-decoder's sources right-padded (as
    hfx's seq2seq loop and their tokenizers pad) and its output follows decoder_start_token_id."""
    prompts = g["prompts"]
    length = max(len(p) for p in prompts)
    pad = g["pad_token_id"]
    seq2seq = getattr(model.config, "is_encoder_decoder", False)
    ids = torch.full((len(prompts), length), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), length), dtype=torch.long)
    for b, p in enumerate(prompts):
        cols = slice(0, len(p)) if seq2seq else slice(length - len(p), length)
        ids[b, cols] = torch.tensor(p, dtype=torch.long)
        mask[b, cols] = 1
    # A fresh greedy config: the checkpoint's generation_config.json may ask for sampling or penalties,
    # which hfx's greedy check does not apply either.
    config = transformers.GenerationConfig(max_new_tokens=g["max_new_tokens"], do_sample=False, num_beams=1,
                                           eos_token_id=g["eos_token_ids"] or None, pad_token_id=pad)
    # generate() fills the fields a given config leaves at their defaults from the model's own
    # generation_config (Whisper's suppress_tokens, begin_suppress_tokens): the model's is the fresh one,
    # with the ids a decoding starts from (mBART has no decoder_start_token_id: generate() uses bos).
    config.bos_token_id = model.generation_config.bos_token_id
    model.generation_config = config
    if not seq2seq:
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
        return out[:, length:].tolist()
    from transformers import DynamicCache, EncoderDecoderCache
    config.decoder_start_token_id = model.config.decoder_start_token_id
    # A cache sized lazily: one built from the config has the encoder's depth, not the decoder's.
    cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
    if model.main_input_name == "input_features":  # a speech model: the features hfx's checks feed it
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from hfx_ort_seq2seq import verify_speech_features
        c = model.config
        features = torch.from_numpy(verify_speech_features(prompts, c.num_mel_bins, 2 * c.max_source_positions))
        # Transformers' generate() itself (GenerationMixin's): Whisper's own generate() adds its
        # language / task prompt and suppressions from generation_config.json, which a greedy check
        # with a fresh config leaves out on both sides.
        out = transformers.GenerationMixin.generate(model, input_features=features, generation_config=config,
                                                    past_key_values=cache)
        return out[:, 1:].tolist()
    out = model.generate(input_ids=ids, attention_mask=mask, generation_config=config, past_key_values=cache)
    return out[:, 1:].tolist()


class RotaryState:
    """The rotary embeddings' frequencies as loaded, restored before each run. Transformers' dynamic
    scaling (rope_type "dynamic") keeps the frequencies of the longest position a model object has seen
    and reuses them for shorter calls; across verify's runs, which are not one generation, that state
    would leak from one run (a step at past 48) into the next (a chunk at past 32). Restored, each run
    computes what a generation reaching that step computes: its frequencies for its own positions."""

    KEPT = ("max_seq_len_cached", "attention_scaling", "original_inv_freq")

    def __init__(self, model):
        self.saved = []
        for module in model.modules():
            if not any(k.endswith("max_seq_len_cached") for k in vars(module)):
                continue
            buffers = {name: b.clone() for name, b in module._buffers.items() if b is not None and name.endswith("inv_freq")}
            attrs = {k: v for k, v in vars(module).items() if k.endswith(self.KEPT)}
            self.saved.append((module, buffers, attrs))

    def restore(self):
        for module, buffers, attrs in self.saved:
            for name, b in buffers.items():
                module._buffers[name] = b.clone()
            for k, v in attrs.items():
                setattr(module, k, v.clone() if isinstance(v, torch.Tensor) else v)


def run(job, result):
    model = load_model(job)
    layers = int(job.get("layers", 0))
    rotary = RotaryState(model)
    with torch.no_grad():
        for case in job.get("runs", []):
            rotary.restore()
            save_file(run_step(model, load_file(case["inputs"]), layers), case["outputs"])
        rotary.restore()
        if job.get("generate"):
            result["generate"] = {"tokens": generate(model, job["generate"])}


def main():
    result = {"transformers_version": transformers.__version__, "torch_version": torch.__version__}
    try:
        run(json.loads(Path(sys.argv[1]).read_text()), result)
    except Exception as exc:  # noqa: BLE001 - any refusal is reported, with its own text
        Path(sys.argv[2]).write_text(json.dumps({"error": error_line(exc), **result}))
        raise SystemExit(1) from exc
    Path(sys.argv[2]).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
