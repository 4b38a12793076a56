"""Greedy decoding over an hfx seq2seq export (T5, BART's family, Whisper) with ONNX Runtime.

The export is Optimum's three-graph layout (the one ORTModelForSeq2SeqLM and transformers.js load),
listed in hfx.json's components by role:

    encoder            input_ids, attention_mask -> last_hidden_state                  (run once)
                       (Whisper: input_features -> last_hidden_state; its steps read no encoder_attention_mask)
    decoder            input_ids, encoder_attention_mask, encoder_hidden_states
                       -> logits, present.{i}.decoder.key|value, present.{i}.encoder.key|value
    decoder_with_past  input_ids, encoder_attention_mask, past_key_values.{i}.decoder|encoder.key|value
                       -> logits, present.{i}.decoder.key|value

The first step runs `decoder` on [[decoder_start_token_id]] per row; every later step runs
`decoder_with_past` on the previous token, fed the self-attention presents of the step before as
past_key_values.{i}.decoder.* and the cross-attention keys/values of the first step unchanged as
past_key_values.{i}.encoder.* (decoder_with_past does not output them again). Each graph is fed
only the inputs it declares.

    from hfx_ort_seq2seq import generate
    rows = generate("out/t5", {"input_ids": ids, "attention_mask": mask}, max_new_tokens=32,
                    decoder_start_token_id=0, eos_token_id=1, pad_token_id=0)

The result is what Transformers' generate() returns for an encoder-decoder: [batch, 1 + steps], the
start token (the decoder prompt) first; a row that has emitted EOS is padded with pad_token_id, and decoding stops when
every row has (or after max_new_tokens).

Command line:  python python/hfx_ort_seq2seq.py OUT --prompt-ids 5,6,7,1 [--prompt-ids ...] [-n 64]
(rows of different lengths are right-padded, as T5 tokenizers pad; prints each row's new ids, up to
its EOS)
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

ROLES = ("encoder", "decoder", "decoder_with_past")
# Optimum's file names, for a folder without hfx.json (an Optimum export)
OPTIMUM_FILES = {"encoder": "encoder_model.onnx", "decoder": "decoder_model.onnx",
                 "decoder_with_past": "decoder_with_past_model.onnx"}


def component_files(export_dir: str | Path) -> dict[str, Path]:
    """role -> .onnx path of the three graphs: from hfx.json's components, else Optimum's names in the
    folder or its onnx/ subfolder."""
    export_dir = Path(export_dir)
    manifest = export_dir / "hfx.json"
    if manifest.is_file():
        files = {c["role"]: export_dir / c["file"] for c in json.loads(manifest.read_text())["components"]
                 if c.get("format", "onnx") == "onnx" and c["role"] in ROLES}
    else:
        base = export_dir / "onnx" if (export_dir / "onnx").is_dir() else export_dir
        files = {role: base / name for role, name in OPTIMUM_FILES.items() if (base / name).is_file()}
    # onnxruntime-genai's layout (--onnx-layout genai) has no first-step decoder: its encoder returns the
    # cross state and decoder_with_past (decoder.onnx) runs every step
    genai = manifest.is_file() and json.loads(manifest.read_text())["model"].get("state_names") == "genai-whisper"
    missing = [r for r in ROLES if r not in files and not (genai and r == "decoder")]
    if missing:
        raise ValueError(f"{export_dir}: no {', '.join(missing)} component (found {sorted(files) or 'none'})")
    return files


def open_sessions(export_dir: str | Path, providers=("CPUExecutionProvider",)) -> dict:
    """role -> onnxruntime.InferenceSession of each of the three graphs."""
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return {role: ort.InferenceSession(str(path), opts, providers=list(providers))
            for role, path in component_files(export_dir).items()}


def run(session, feed: dict) -> dict:
    """One run fed the inputs the graph declares (of `feed`); its outputs by name."""
    wanted = {i.name for i in session.get_inputs()}
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, {k: v for k, v in feed.items() if k in wanted})))


def verify_speech_features(prompts, mel_bins: int, frames: int) -> np.ndarray:
    """The features hfx's checks feed a speech encoder for greedy prompts (token ids): [rows, mel_bins,
    frames], feature [m, t] = f32(sin(0.05 (t + 1) (m + 1) + 0.3 prompt[(m + t) mod n])) computed in
    double as runtime/seq2seq_generate.cc's verify_speech_features computes it (math.sin is the C
    library's sin, so the bits agree)."""
    out = np.empty((len(prompts), mel_bins, frames), np.float32)
    for b, p in enumerate(prompts):
        for m in range(mel_bins):
            out[b, m] = [math.sin(0.05 * (t + 1) * (m + 1) + 0.3 * p[(m + t) % len(p)]) for t in range(frames)]
    return out


def prompt_source(sessions: dict, prompts, pad_token_id: int) -> dict:
    """The encoder's inputs for greedy prompts: the ids right-padded with their mask, or for a speech
    encoder (input_features, Whisper's) verify_speech_features of the graph's fixed shape."""
    inputs = {i.name: i for i in sessions["encoder"].get_inputs()}
    for name in ("input_features", "audio_features"):  # Optimum's name, onnxruntime-genai's
        if name in inputs:
            _, mel_bins, frames = inputs[name].shape
            return {name: verify_speech_features(prompts, int(mel_bins), int(frames))}
    length = max(len(p) for p in prompts)
    ids = np.full((len(prompts), length), pad_token_id, np.int64)
    mask = np.zeros((len(prompts), length), np.int64)
    for b, p in enumerate(prompts):
        ids[b, :len(p)], mask[b, :len(p)] = p, 1
    return {"input_ids": ids, "attention_mask": mask}


def greedy_next(logits: np.ndarray, done: np.ndarray, eos: set, pad_token_id: int) -> np.ndarray:
    """The next token per row as Transformers' greedy search picks it: a finished row takes
    pad_token_id, a row finishes on EOS (`done` is updated)."""
    tokens = logits[:, -1, :].argmax(axis=-1).astype(np.int64)
    tokens = np.where(done, np.int64(pad_token_id), tokens)
    done |= np.isin(tokens, list(eos))
    return tokens


def generate(export_dir, source: dict, max_new_tokens: int, decoder_start_token_id: int,
             eos_token_id, pad_token_id: int, sessions: dict | None = None, decoder_prompt=None) -> np.ndarray:
    """Greedy tokens [batch, len(decoder prompt) + steps] (the decoder prompt first) for the encoder's
    inputs `source` (input_ids + attention_mask [batch, length], or input_features; prompt_source).
    `decoder_prompt`: the tokens decoding starts from (default [decoder_start_token_id]).
    `eos_token_id`: an id, a list of ids, or None (never stops early). `sessions`: role -> session
    already open (anything with ORT's get_inputs / get_outputs / run), else opened from `export_dir`."""
    sessions = sessions or open_sessions(export_dir)
    if "decoder" not in sessions:
        return generate_genai_layout(sessions, source, max_new_tokens, eos_token_id, pad_token_id,
                                     decoder_prompt if decoder_prompt is not None else [decoder_start_token_id])
    eos = set() if eos_token_id is None else {int(e) for e in np.atleast_1d(eos_token_id)}
    hidden = run(sessions["encoder"], source)["last_hidden_state"]
    batch = hidden.shape[0]
    prompt = np.asarray(decoder_prompt if decoder_prompt is not None else [decoder_start_token_id], np.int64)
    mask = source.get("attention_mask")  # a text source's, read as encoder_attention_mask
    rows = [np.full(batch, t, np.int64) for t in prompt]
    done = np.zeros(batch, bool)
    state: dict = {}  # present.* by name: the latest self-attention ones, the first step's cross ones
    # A static cache (--static-cache): every step reads the self-attention buffers [batch, heads,
    # max_cache_len, head_dim], zeros before the first, and cache_position, the slots its tokens fill.
    first_inputs = {i.name: i for i in sessions["decoder"].get_inputs()}
    static = "cache_position" in first_inputs
    if static:
        state.update({"present." + name[len("past_key_values."):]: np.zeros([batch, *i.shape[1:]], np.float32)
                      for name, i in first_inputs.items() if name.startswith("past_key_values.")})
    for step in range(max_new_tokens):
        ids = np.stack(rows, axis=1) if step == 0 else rows[-1][:, None]
        feed = {"input_ids": ids, "encoder_hidden_states": hidden}
        if mask is not None:
            feed["encoder_attention_mask"] = mask
        if static:
            start = 0 if step == 0 else len(prompt) + step - 1
            feed["cache_position"] = np.arange(start, start + ids.shape[1], dtype=np.int64)
        if step == 0:
            feed.update({p: state["present." + p[len("past_key_values."):]] for p in first_inputs
                         if p.startswith("past_key_values.")})
            out = run(sessions["decoder"], feed)
        else:
            past = {i.name for i in sessions["decoder_with_past"].get_inputs() if i.name.startswith("past_key_values.")}
            feed.update({p: state["present." + p[len("past_key_values."):]] for p in past})
            out = run(sessions["decoder_with_past"], feed)
        state.update({k: v for k, v in out.items() if k.startswith("present.")})
        rows.append(greedy_next(out["logits"], done, eos, pad_token_id))
        if done.all():
            break
    return np.stack(rows, axis=1)


def generate_genai_layout(sessions: dict, source: dict, max_new_tokens: int, eos_token_id, pad_token_id: int,
                          decoder_prompt) -> np.ndarray:
    """generate() over onnxruntime-genai's Whisper layout (`--onnx-layout genai`): the encoder returns
    the cross state (present_key|value_cross_{i}), and decoder_with_past (decoder.onnx, int32 ids) runs
    every step, the first from an empty self-attention past. A past input past_X is fed the present
    output present_X (genai's names)."""
    eos = set() if eos_token_id is None else {int(e) for e in np.atleast_1d(eos_token_id)}
    state = {k: v for k, v in run(sessions["encoder"], source).items() if k.startswith("present_")}
    decoder = sessions["decoder_with_past"]
    ids_type = {i.name: i.type for i in decoder.get_inputs()}["input_ids"]
    ids_dtype = np.int32 if ids_type == "tensor(int32)" else np.int64
    batch = next(iter(source.values())).shape[0]
    for i in decoder.get_inputs():
        present = "present_" + i.name[len("past_"):]
        if i.name.startswith("past_") and present not in state:  # the self-attention cache starts empty
            state[present] = np.zeros((batch, i.shape[1], 0, i.shape[3]), np.float32)
    rows = [np.full(batch, t, np.int64) for t in decoder_prompt]
    done = np.zeros(batch, bool)
    for step in range(max_new_tokens):
        ids = np.stack(rows, axis=1) if step == 0 else rows[-1][:, None]
        feed = {"input_ids": ids.astype(ids_dtype)}
        feed.update({i.name: state["present_" + i.name[len("past_"):]] for i in decoder.get_inputs()
                     if i.name.startswith("past_")})
        out = run(decoder, feed)
        state.update({k: v for k, v in out.items() if k.startswith("present_")})
        rows.append(greedy_next(out["logits"], done, eos, pad_token_id))
        if done.all():
            break
    return np.stack(rows, axis=1)


def main() -> None:
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from hfx_decode import OneLineParser, fail

    ap = OneLineParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("export")
    ap.add_argument("--prompt-ids", "--ids", action="append", required=True,
                    help="comma-separated encoder ids; repeat for a batch")
    ap.add_argument("-n", "--max-new-tokens", type=int, default=64)
    ap.add_argument("--decoder-start-token-id", type=int, help="default: the export's config.json (T5: 0)")
    ap.add_argument("--eos-token-id", type=int, help="default: the export's config.json (T5: 1)")
    ap.add_argument("--pad-token-id", type=int, help="default: the export's config.json (T5: 0)")
    args = ap.parse_args()
    if args.max_new_tokens < 1:
        fail(f"--max-new-tokens {args.max_new_tokens}: expected at least 1", code=2)
    config = {}
    for name in ("config.json", "generation_config.json"):  # the latter wins, as in Transformers
        path = Path(args.export) / name
        if path.is_file():
            config.update({k: v for k, v in json.loads(path.read_text()).items() if v is not None})
    pick = lambda given, key, default: given if given is not None else config.get(key, default)  # noqa: E731
    start = pick(args.decoder_start_token_id, "decoder_start_token_id", 0)
    eos = pick(args.eos_token_id, "eos_token_id", 1)
    pad = pick(args.pad_token_id, "pad_token_id", 0)
    vocab = config.get("vocab_size")
    prompts = []
    for text in args.prompt_ids:
        try:
            prompts.append([int(x) for x in text.split(",")])
        except ValueError:
            fail(f"--prompt-ids {text!r}: expected comma-separated token ids such as 5,6,7,1", code=2)
        bad = [i for i in prompts[-1] if i < 0 or (vocab is not None and i >= vocab)]
        if bad:
            fail(f"--prompt-ids: token {bad[0]} is outside the vocabulary [0, {vocab})", code=2)
    try:
        sessions = open_sessions(args.export)
        rows = generate(None, prompt_source(sessions, prompts, pad), args.max_new_tokens, start, eos, pad, sessions)
    except Exception as exc:  # noqa: BLE001 - a missing component or a runtime's refusal, on one line
        fail(f"{type(exc).__name__}: {exc}")
    eos_ids = set(np.atleast_1d(eos).tolist()) if eos is not None else set()
    for row in rows[:, 1:].tolist():  # without the start token, up to and with the row's EOS
        ends = [i for i, t in enumerate(row) if t in eos_ids]
        print(",".join(map(str, row[: ends[0] + 1] if ends else row)))


if __name__ == "__main__":
    main()
