"""An encoder-decoder (T5) through hfx's own tools: every precision's export passes its built-in check,
`hfx generate` gives Transformers' greedy tokens from ids and from text (T5's SentencePiece tokenizer
in C++), `hfx inspect` shows the three graphs, and what hfx does not do yet is refused in one line
with nothing written. The numbers against Transformers are test_seq2seq_t5.py's."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

import make_tokenizers
import tiny_models
from conftest import record_coverage, run_hfx

PYTHON_ENV = {**os.environ, "HFX_PYTHON": os.environ.get("HFX_PYTHON", str(Path(os.sys.executable)))}


def hfx(*args, check=True, input_text=None):
    import subprocess
    from conftest import hfx_binary
    proc = subprocess.run([str(hfx_binary()), *map(str, args)], capture_output=True, text=True, env=PYTHON_ENV,
                          input=input_text)
    if check and proc.returncode != 0:
        raise AssertionError(f"hfx {' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


# Every family in every precision, each format's default blocks. bart's K = 80 and whisper's conv stem
# (K = 3 x 16 mel bins = 48) are not multiples of int4's block of 32: OpenVINO, which takes whole groups,
# gets the largest divisor that is a multiple of 8 (16, 24), ONNX a padded last block (docs/quantization.md). f16 may part
# greedy paths at a near-tie (bart: the reference scores the two tokens 1.1e-4 apart), which the check
# allows within 2x the f16 budget (docs/verify.md).


@pytest.mark.parametrize("precision", [["--dtype", "f16"], ["--dtype", "bf16"], ["--quantize", "int8"],
                                       ["--quantize", "int4"]], ids=lambda p: p[1])
@pytest.mark.parametrize("case", ["t5-gated-tied", "mt5", "t5", "bart", "whisper"])
def test_every_precision_passes_its_check(case, precision, tiny_checkpoint, tmp_path):
    out = tmp_path / "out"
    proc = hfx("export", "--model", tiny_checkpoint(case), "--format", "onnx,openvino", *precision, out)
    assert "checks passed" in proc.stdout and "on ONNX Runtime" in proc.stdout, proc.stdout
    assert "openvino: " in proc.stdout and "checks passed on OpenVINO" in proc.stdout, proc.stdout
    manifest = json.loads((out / "hfx.json").read_text())
    assert sorted({c["role"] for c in manifest["components"]}) == ["decoder", "decoder_merged", "decoder_with_past", "encoder"]


def transformers_tokens(folder: Path, sources: list[list[int]], new_tokens: int) -> list[list[int]]:
    """Transformers' greedy tokens for right-padded sources, without the start token."""
    from transformers import DynamicCache, EncoderDecoderCache
    model = tiny_models.load_reference(folder)
    length = max(len(s) for s in sources)
    ids = torch.zeros((len(sources), length), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for b, s in enumerate(sources):
        ids[b, :len(s)] = torch.tensor(s)
        mask[b, :len(s)] = 1
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens, do_sample=False, num_beams=1,
                             past_key_values=EncoderDecoderCache(DynamicCache(), DynamicCache()))
    return out[:, 1:].tolist()


def test_generate_ids_match_transformers(tiny_checkpoint, tmp_path):
    ckpt = tiny_checkpoint("t5-gated-tied")
    out = tmp_path / "out"
    hfx("export", "--model", ckpt, "--format", "onnx,openvino", "--quiet", out)
    sources = [[5, 9, 17, 33, 2, 60, 1], [7, 7, 40, 1]]
    expected = transformers_tokens(ckpt, sources, 24)
    for runtime in ("reference", "openvino"):
        proc = hfx("generate", out, "--runtime", runtime, "--print-ids", "-n", "24",
                   *[a for s in sources for a in ("--prompt-ids", ",".join(map(str, s)))])
        rows = [[int(t) for t in line.split(",")] for line in proc.stdout.split()]
        assert rows == expected, (runtime, rows, expected)


# generation_config.json rules `hfx generate` applies as generate() does (runtime/generation_rules.h):
# Marian's bad word (its pad) and forced EOS, mBART-50's forced target-language token, BART's forced EOS.
# -n 12: the forced EOS is the 12th token of a row still running then.
GENERATION_RULES = {
    "marian": {"bad_words_ids": [[127]], "forced_eos_token_id": 0},
    "mbart": {"forced_bos_token_id": 50, "forced_eos_token_id": 2},
    "bart": {"forced_eos_token_id": [2, 9]},
}


@pytest.mark.parametrize("case", sorted(GENERATION_RULES))
def test_generate_applies_generation_config_rules(case, tiny_checkpoint, tmp_path):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoint(case), ckpt)
    path = ckpt / "generation_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **GENERATION_RULES[case]}))
    out = tmp_path / "out"
    hfx("export", "--model", ckpt, "--format", "onnx", "--quiet", out)
    sources = [[5, 9, 17, 33, 2, 60], [7, 7, 40, 2]]
    expected = transformers_tokens(ckpt, sources, 12)
    proc = hfx("generate", out, "--print-ids", "-n", "12", *[a for s in sources for a in ("--prompt-ids", ",".join(map(str, s)))])
    rows = [[int(t) for t in line.split(",")] for line in proc.stdout.split()]
    assert rows == expected, (rows, expected)
    rules = GENERATION_RULES[case]
    if "forced_bos_token_id" in rules:
        assert all(r[0] == rules["forced_bos_token_id"] for r in rows)
    if "bad_words_ids" in rules:
        assert all(rules["bad_words_ids"][0][0] not in r for r in rows)


def test_generate_refuses_a_bad_word_of_several_tokens(tiny_checkpoint, tmp_path):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoint("marian"), ckpt)
    path = ckpt / "generation_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "bad_words_ids": [[5, 6]]}))
    out = tmp_path / "out"
    hfx("export", "--model", ckpt, "--format", "onnx", "--quiet", out)
    proc = hfx("generate", out, "--prompt-ids", "5,9,0", check=False)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1 and "bad_words_ids" in lines[0], proc.stderr


@pytest.fixture(scope="module")
def t5_with_tokenizer(tmp_path_factory):
    """A tiny T5 over the vocabulary of make_tokenizers' SentencePiece T5 tokenizer (tokenizer.json in the
    checkpoint, copied into the export as a side file)."""
    from transformers import AutoConfig, AutoModelForSeq2SeqLM
    base = tmp_path_factory.mktemp("t5tok")
    tok_path = make_tokenizers.make("t5", base / "tok")
    vocab = json.loads(tok_path.read_text())
    size = len(vocab["model"]["vocab"]) + len(vocab["added_tokens"])
    cfg = dict(tiny_models.SEQ2SEQ_CASES["t5-gated-tied"][1], vocab_size=size)
    torch.manual_seed(3)
    model = AutoModelForSeq2SeqLM.from_config(AutoConfig.for_model("t5", **cfg))
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn(p.shape) * (0.2 if p.dim() > 1 else 0.1) + (1.0 if "norm" in name else 0.0))
            if name.endswith(".q.weight"):
                p.mul_(cfg["d_kv"] ** -0.5)  # as T5's init: its attention is unscaled
    ckpt = base / "ckpt"
    model.save_pretrained(ckpt)
    shutil.copy(tok_path, ckpt / "tokenizer.json")
    out = base / "out"
    hfx("export", "--model", ckpt, "--format", "onnx", "--quiet", out)
    return ckpt, out


def test_generate_prompt_text_through_t5_tokenizer(t5_with_tokenizer):
    from tokenizers import Tokenizer
    ckpt, out = t5_with_tokenizer
    tok = Tokenizer.from_file(str(ckpt / "tokenizer.json"))
    text = "translate English to German: the weather is nice today"
    source = tok.encode(text).ids
    assert source[-1] == 1  # T5's tokenizer appends </s>
    expected = transformers_tokens(ckpt, [source], 16)[0]
    proc = hfx("generate", out, "--prompt", text, "--print-ids", "-n", "16")
    assert [int(t) for t in proc.stdout.split(",")] == expected
    # Streamed as text: tokenizers' decoding of the same tokens (up to an EOS, special tokens skipped).
    streamed = hfx("generate", out, "--prompt", text, "-n", "16").stdout
    ended = expected[: expected.index(1) + 1] if 1 in expected else expected
    assert streamed.rstrip("\n") == tok.decode(ended, skip_special_tokens=True)


def marian_checkpoint_with_spm(source: Path, ckpt: Path) -> list[str]:
    """A copy of a tiny Marian checkpoint with a SentencePiece Unigram trained on make_tokenizers' corpus
    (nmt_nfkc) as its source.spm and target.spm; returns the model's pieces but </s> and <unk>."""
    shutil.copytree(source, ckpt)
    model = make_tokenizers._train_spm(vocab_size=300, normalization_rule_name="nmt_nfkc", character_coverage=0.98,
                                       unk_id=1, eos_id=0, bos_id=-1, pad_id=-1)
    (ckpt / "source.spm").write_bytes(model)
    (ckpt / "target.spm").write_bytes(model)
    return [p.piece for p in make_tokenizers._spm_proto(model).pieces if p.piece not in ("</s>", "<unk>")]


@pytest.fixture(scope="module")
def marian_with_tokenizer(tiny_checkpoint, tmp_path_factory):
    """The tiny Marian checkpoint with Marian's tokenizer files (no tokenizer.json, as Helsinki-NLP's
    checkpoints): a SentencePiece Unigram trained on make_tokenizers' corpus (nmt_nfkc) as source.spm and
    target.spm, and a vocab.json numbering some of its pieces in another order (the others are <unk>)
    around the config's eos (2) and pad (127)."""
    import random
    base = tmp_path_factory.mktemp("mariantok")
    ckpt = base / "ckpt"
    pieces = marian_checkpoint_with_spm(tiny_checkpoint("marian"), ckpt)
    random.Random(0).shuffle(pieces)
    free = [i for i in range(127) if i not in (2, 3, 4)]
    vocab = {"</s>": 2, "<unk>": 3, ">>de<<": 4, "<pad>": 127, **{p: i for p, i in zip(pieces, free)}}
    (ckpt / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    (ckpt / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "MarianTokenizer"}))
    out = base / "out"
    hfx("export", "--model", ckpt, "--format", "onnx", "--quiet", out)
    return ckpt, out


def test_generate_prompt_text_through_marian_tokenizer(marian_with_tokenizer):
    """Marian ships source.spm + vocab.json, no tokenizer.json: `hfx generate --prompt` encodes with them
    as Transformers' (slow, sentencepiece) MarianTokenizer does (pieces absent from vocab.json are <unk>,
    </s> appended) and gives Transformers' greedy tokens; `hfx tokenize` on the export equals
    MarianTokenizer on every sentence of the tokenizer corpus, both ways."""
    from transformers import MarianTokenizer
    ckpt, out = marian_with_tokenizer
    assert (out / "source.spm").exists() and (out / "vocab.json").exists()
    tok = MarianTokenizer(source_spm=str(ckpt / "source.spm"), target_spm=str(ckpt / "target.spm"),
                          vocab=str(ckpt / "vocab.json"))
    text = "The quick brown fox jumps."
    source = tok(text)["input_ids"]
    assert source[-1] == 2 and 3 in source  # </s> appended; a piece vocab.json lacks is <unk>
    proc = hfx("generate", out, "--prompt", text, "--print-ids", "-n", "16")
    assert [int(t) for t in proc.stdout.strip().split(",")] == transformers_tokens(ckpt, [source], 16)[0]
    # A multi-target model's leading language code is one token (<unk> when vocab.json lacks it).
    corpus = make_tokenizers.corpus() + [">>de<< The quick brown fox.", ">>xx<<Hello", ">>de<<", "a >>de<< b"]
    encoded = hfx("tokenize", "-t", out, "--jsonl", input_text="\n".join(json.dumps(t) for t in corpus) + "\n")
    got = [json.loads(line) for line in encoded.stdout.strip().splitlines()]
    assert got == [tok(t)["input_ids"] for t in corpus]
    decoded = hfx("tokenize", "-t", out, "--decode", input_text="\n".join(json.dumps(ids) for ids in got) + "\n")
    assert [json.loads(line) for line in decoded.stdout.strip().splitlines()] == \
        [tok.decode(ids, skip_special_tokens=True) for ids in got]
    record_coverage("marian", "tokenizer", "MarianTokenizer (source.spm + vocab.json)", "identical")


@pytest.fixture(scope="module")
def marian_with_separate_vocabs(tiny_checkpoint, tmp_path_factory):
    """The tiny Marian with separate vocabularies (encoder 128 ids, decoder 100) and its tokenizer files as
    MarianTokenizer(separate_vocabs=True) reads them: vocab.json numbers the source pieces, target_vocab.json
    the target's in another order, tokenizer_config.json says separate_vocabs."""
    import random
    base = tmp_path_factory.mktemp("mariansep")
    ckpt = base / "ckpt"
    pieces = marian_checkpoint_with_spm(tiny_checkpoint("marian-vocabs"), ckpt)
    special = {"</s>": 0, "<unk>": 1, "<pad>": 99}
    for name, size, seed in (("vocab.json", 128, 0), ("target_vocab.json", 100, 1)):
        shuffled = list(pieces)
        random.Random(seed).shuffle(shuffled)
        free = [i for i in range(size) if i not in special.values()]
        (ckpt / name).write_text(json.dumps({**special, **dict(zip(shuffled, free))}, ensure_ascii=False))
    (ckpt / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "MarianTokenizer", "separate_vocabs": True}))
    out = base / "out"
    hfx("export", "--model", ckpt, "--format", "onnx", "--quiet", out)
    return ckpt, out


def test_separate_target_vocabulary_decodes_generated_text(marian_with_separate_vocabs):
    """A Marian with separate vocabularies: the prompt encodes through vocab.json, the decoder's tokens
    decode through target_vocab.json (copied into the export), as MarianTokenizer(separate_vocabs=True):
    `hfx generate --prompt` gives Transformers' greedy tokens and prints the text MarianTokenizer decodes
    from them; `hfx tokenize --decode` decodes target ids the same way."""
    from transformers import MarianTokenizer
    ckpt, out = marian_with_separate_vocabs
    assert (out / "target_vocab.json").exists()
    tok = MarianTokenizer(source_spm=str(ckpt / "source.spm"), target_spm=str(ckpt / "target.spm"),
                          vocab=str(ckpt / "vocab.json"), target_vocab_file=str(ckpt / "target_vocab.json"),
                          separate_vocabs=True)
    text = "The quick brown fox jumps over the lazy dog."
    source = tok(text)["input_ids"]
    want = transformers_tokens(ckpt, [source], 16)[0]
    ids = hfx("generate", out, "--prompt", text, "--print-ids", "-n", "16")
    assert [int(t) for t in ids.stdout.strip().split(",")] == want
    printed = hfx("generate", out, "--prompt", text, "-n", "16")
    expected = tok.decode(want, skip_special_tokens=True)
    assert printed.stdout.strip() == expected.strip() and expected.strip(), (printed.stdout, expected)
    # ids the two vocabularies number differently decode as the target's
    target_ids = list(range(2, 60))
    decoded = hfx("tokenize", "-t", out, "--decode", input_text=json.dumps(target_ids) + "\n")
    assert json.loads(decoded.stdout.strip()) == tok.decode(target_ids, skip_special_tokens=True)
    source_pieces, target_pieces = ({i: p for p, i in json.loads((ckpt / name).read_text()).items()}
                                    for name in ("vocab.json", "target_vocab.json"))
    assert sum(source_pieces.get(i) != target_pieces.get(i) for i in target_ids) > len(target_ids) // 2
    record_coverage("marian-vocabs", "tokenizer", "MarianTokenizer separate_vocabs (target_vocab.json)", "identical")


@pytest.mark.parametrize("case", ["t5-gated-tied", "bart", "whisper"])
def test_static_cache_gives_transformers_numbers_and_tokens(case, tiny_checkpoint, tmp_path):
    """--static-cache: encoder, decoder and decoder_with_past whose self-attention caches are buffers of
    --max-cache-len that every step reads (zeros before the first) and writes at cache_position (no merged
    decoder: its growing cache is Optimum's). The export's check passes on ONNX Runtime and OpenVINO
    (stateless); `hfx verify --oracle transformers` passes (every graph within 1e-4 of Transformers over
    the shape cases, 64 greedy tokens identical); a text model's `hfx generate` on the reference executor
    and OpenVINO and the ONNX Runtime loop of python/hfx_ort_seq2seq.py give Transformers' tokens."""
    ckpt = tiny_checkpoint(case)
    out = tmp_path / "out"
    proc = hfx("export", "--model", ckpt, "--format", "onnx,openvino", "--stateless", "--static-cache",
               "--max-cache-len", "80", out)
    assert "on ONNX Runtime" in proc.stdout and "checks passed on OpenVINO" in proc.stdout, proc.stdout
    manifest = json.loads((out / "hfx.json").read_text())
    for fmt in ("onnx", "openvino"):
        roles = {c["role"]: c for c in manifest["components"] if c["format"] == fmt}
        assert sorted(roles) == ["decoder", "decoder_with_past", "encoder"], roles
        for role in ("decoder", "decoder_with_past"):
            self_states = [i["name"] for i in roles[role]["inputs"] if ".decoder." in i["name"]]
            assert roles[role]["cache"]["layout"] == "static" and self_states
            assert sorted(p for p, _ in roles[role]["cache"]["shared_buffers"]) == sorted(self_states)
    proc = hfx("verify", out, "--oracle", "transformers")
    assert "identical tokens" in proc.stdout, proc.stdout
    if tiny_models.SEQ2SEQ_CASES[case][0] in tiny_models.SPEECH_TYPES:
        return  # Whisper's greedy tokens from features: verify's, above
    sources = [[5, 9, 17, 33, 2, 60, 1], [7, 7, 40, 1]]
    expected = transformers_tokens(ckpt, sources, 24)
    for runtime in ("reference", "openvino"):
        proc = hfx("generate", out, "--runtime", runtime, "--print-ids", "-n", "24",
                   *[a for s in sources for a in ("--prompt-ids", ",".join(map(str, s)))])
        assert [[int(t) for t in line.split(",")] for line in proc.stdout.split()] == expected, runtime
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
    from hfx_ort_seq2seq import generate, open_sessions, prompt_source
    config = json.loads((ckpt / "config.json").read_text())
    sessions = open_sessions(out)
    rows = generate(None, prompt_source(sessions, sources, config["pad_token_id"]), 24, config["decoder_start_token_id"],
                    config["eos_token_id"], config["pad_token_id"], sessions)
    assert rows[:, 1:].tolist() == expected
    record_coverage(case, "onnxruntime+reference+openvino-static", "greedy 24 batch2 + verify vs Transformers", "identical")


def test_generate_refuses_what_the_contract_cannot_take(tiny_checkpoint, tmp_path):
    out = tmp_path / "out"
    hfx("export", "--model", tiny_checkpoint("t5-gated-tied"), "--format", "onnx", "--quiet",
        "--dim", "encoder_sequence_length=1:6", "--dim", "total_decoder_sequence_length=1:10", out)
    long = hfx("generate", out, "--prompt-ids", "5,6,7,8,9,10,11", check=False)
    assert long.returncode == 1 and long.stderr.strip().count("\n") == 0, long.stderr
    assert "prompt of 7 tokens > 6 (the export's encoder_sequence_length max)" in long.stderr
    many = hfx("generate", out, "--prompt-ids", "5,6", "-n", "10", check=False)
    assert many.returncode == 1 and "use -n 9 at most" in many.stderr, many.stderr
    # within both bounds it runs, and verify's shape cases and greedy tokens stay inside them
    assert hfx("generate", out, "--prompt-ids", "5,6", "-n", "9").returncode == 0
    assert hfx("verify", out).returncode == 0


@pytest.mark.parametrize("args,words", [
    (["--format", "executorch"], "format executorch does not write an encoder-decoder (t5) yet"),
    (["--split-prefill"], "--split-prefill applies to decoder-only models"),
    (["--static-cache", "--max-cache-len", "16", "--format", "openvino"], "with --static-cache add --stateless"),
    (["--dim", "sequence_length=1:8"], "--dim sequence_length: an encoder-decoder's dims are batch_size"),
])
def test_refusals_are_one_line_and_write_nothing(args, words, tiny_checkpoint, tmp_path):
    out = tmp_path / "out"
    proc = hfx("export", "--model", tiny_checkpoint("t5"), *args, out, check=False)
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    errors = [line for line in proc.stderr.splitlines() if not line.startswith("hfx: note:")]
    assert len(errors) == 1 and words in errors[0], proc.stderr
    assert not out.exists()


def test_inspect_shows_the_graphs_and_their_state(tiny_checkpoint):
    proc = run_hfx("inspect", tiny_checkpoint("t5"))
    for line in (" component encoder", " component decoder ", " component decoder_with_past", " component decoder_merged",
                 "in  use_cache_branch             bool [1]",
                 "in  encoder_hidden_states", "total_decoder_sequence_length = past_decoder_sequence_length + "
                 "decoder_sequence_length", "cross-attention key + value", "per source position"):
        assert line in proc.stdout, (line, proc.stdout)
    j = json.loads(run_hfx("inspect", tiny_checkpoint("t5"), "--json").stdout)
    assert [c["role"] for c in j["components"]] == ["encoder", "decoder", "decoder_with_past", "decoder_merged"]
    assert any(r["per_source_position"] for r in j["state_per_layer"])


@pytest.mark.parametrize("key,value,words", [
    ("relative_attention_num_buckets", 2, "relative_attention_num_buckets 2 is below 4"),
    ("relative_attention_max_distance", 3, "relative_attention_max_distance 3 must be above the exact buckets (4)"),
    ("feed_forward_proj", "gated-foo", "feed_forward_proj \"foo\" is not supported"),
    ("feed_forward_proj", "gated-gelu-new", "is not `gated-ACT` or `ACT`"),
    ("decoder_start_token_id", 100000, "decoder_start_token_id 100000 is not below vocab_size 128"),
    ("d_kv", 0, "field \"d_kv\": expected an integer in [1, "),
])
def test_a_bad_t5_config_is_one_line_naming_the_key(key, value, words, tiny_checkpoint, tmp_path):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoint("t5"), ckpt)
    config = json.loads((ckpt / "config.json").read_text())
    config[key] = value
    (ckpt / "config.json").write_text(json.dumps(config))
    proc = hfx("export", "--model", ckpt, tmp_path / "out", check=False)
    assert proc.returncode == 1 and words in proc.stderr and proc.stderr.strip().count("\n") == 0, proc.stderr
    assert not (tmp_path / "out").exists()


# One case: each program loads in torch for seconds (marian's passes the same way, docs/seq2seq.md).
@pytest.mark.parametrize("case", ["t5-gated-tied"])
def test_pt2_programs_run_in_torch_as_transformers(case, tiny_checkpoint, tmp_path):
    """The four graphs as torch.export archives (the pt2 lowering needed nothing new): torch.export.load
    runs them, through hfx's torch step server, over the shape matrix and 64 greedy tokens, against
    Transformers eager."""
    out = tmp_path / "out"
    proc = hfx("export", "--model", tiny_checkpoint(case), "--format", "pt2", out)
    assert "pt2: archives read back" in proc.stdout, proc.stdout
    files = sorted(p.name for p in (out / "pt2").glob("*.pt2"))
    assert files == ["decoder_model.pt2", "decoder_model_merged.pt2", "decoder_with_past_model.pt2", "encoder_model.pt2"]
    verify = hfx("verify", out, "--runtime", "torch", "--oracle", "transformers")
    assert "pass greedy generation (64 tokens, batch 2): identical tokens" in verify.stdout, verify.stdout
