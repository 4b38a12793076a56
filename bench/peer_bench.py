"""hfx beside its peers, in one run: export cost, then ONNX Runtime speed of each tool's artifact.

Saves one random-initialised checkpoint (export_bench.CONFIGS; default Qwen3-0.6B's shape, bf16 as
published, nothing downloaded) and exports it with:
  - hfx:          `hfx export --no-verify` (+ `--onnx-profile ort` when the binary has it),
                  `--quantize int4` (when the binary has it; lm_head kept f32, hfx's default) and
                  `--quantize int4 --quantize-lm-head` (row int4+lm: lm_head in int4 as the builder does),
                  `+ --quantize-embeddings` (row int4+lm+emb: the tied table quantized once, GatherBlockQuantized,
                  the builder's layout) and `int4:accuracy=4` with both (row int4+lm+emb+acc4: the builder's recipe)
  - onnxexporter: Transformers' OnnxExporter.export_for_generation (prefill.onnx + decode.onnx, fp32);
                  int4 = its fp32 export through ONNX Runtime's MatMulNBitsQuantizer (block 32,
                  symmetric, accuracy_level 4: the builder's CPU int4 recipe), time and RSS added
  - builder:      `python -m onnxruntime_genai.models.builder -p fp32|int4 -e cpu`
(a) export wall time and peak RSS (ru_maxrss of the child process, export_bench.measure);
(b) ONNX Runtime CPU prefill latency (one prompt of --prompt tokens) and decode tokens/s (--new
    greedy tokens, KV cache carried as OrtValues with IO binding), each artifact in its own child
    process, same SessionOptions for all (ORT defaults, log level 3), median of --repeat runs after a
    warm-up. The hfx artifact is also run through python/hfx_ort.py's own decode loop (a row of its
    own; it must produce the same tokens as the IO-binding loop).
(b') hfx's fp32 and builder-recipe int4 artifacts beside the builder's at the same precision, both loaded
    in one process and their decode runs alternated (--paired-rounds), in both load orders (the session
    loaded second decodes up to 9 % faster, whichever it is): the separate processes of (b) run minutes
    apart, and the machine drifts between them. --paired-processes N repeats that in N processes and
    reports their geometric mean (one process's ratio moves by about 3 % with where its weights land) with
    a 95 % confidence interval over the processes; --paired-control pairs each hfx artifact with itself
    the same way, the spread a difference between two files must exceed to be seen on this machine.
    --malloc-hugetlb runs every decode child (all tools alike) with glibc's malloc on transparent huge
    pages: ONNX Runtime's prepacked weights then cost fewer TLB misses, and the load order matters much less.
(c) a table and the ratios hfx / peer, and the issue's goals.

A tool that fails is reported as failed with the last line of its error; the run goes on.

Usage: .venv/bin/python bench/peer_bench.py [--model qwen3-0.6b|qwen3-tiny] [--skip onnxexporter,builder]
                                           [--keep DIR] [--hfx build/hfx] [--prompt 128] [--new 64]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "python"))

from export_bench import CONFIGS, drop_caches_hint, make_checkpoint, measure  # noqa: E402

# A small shape for quick runs of the whole script (seconds, not minutes).
CONFIGS.setdefault(
    "qwen3-tiny",
    dict(model_type="qwen3", vocab_size=4096, hidden_size=128, intermediate_size=384, num_hidden_layers=2,
         num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=4096,
         rms_norm_eps=1e-6, tie_word_embeddings=True, rope_theta=1000000.0, bos_token_id=1, eos_token_id=2),
)

PEERS = ("onnxexporter", "builder")
MB = 1 << 20


# ----------------------------------------------------------------------------------------------
# Child-process workers (run as `peer_bench.py _worker ...`, so each has its own RSS and memory)
# ----------------------------------------------------------------------------------------------

def worker_onnxexporter(ckpt: str, out: str) -> None:
    """Transformers' OnnxExporter, used as its docstrings show: export_for_generation on a loaded model."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.exporters.configs import OnnxConfig
    from transformers.exporters.exporter_onnx import OnnxExporter

    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32)
    model.eval()
    ids = torch.arange(8, dtype=torch.int64)[None] + 1000  # generate() sample: 8 tokens, batch 1
    with torch.no_grad():
        exported = OnnxExporter().export_for_generation(
            model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, OnnxConfig(dynamic=True))
    exported.save_pretrained(out)


def worker_quantize_int4(src: str, out: str) -> None:
    """ONNX Runtime's MatMulNBitsQuantizer on every graph of an export (the builder's CPU int4 recipe)."""
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    src_dir, out_dir = Path(src), Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    for f in src_dir.iterdir():
        if f.suffix == ".onnx":
            model = onnx.load(str(f), load_external_data=True)
            q = MatMulNBitsQuantizer(model, bits=4, block_size=32, is_symmetric=True, accuracy_level=4)
            q.process()
            q.model.save_model_to_file(str(out_dir / f.name), use_external_data_format=True)
            del model, q
        elif f.is_file() and not f.name.endswith(".data"):
            shutil.copy2(f, out_dir / f.name)


def _session_options():
    import onnxruntime as ort

    opts = ort.SessionOptions()  # the same for every artifact: ORT defaults (ORT_ENABLE_ALL, all cores)
    opts.log_severity_level = 3
    return opts


def _artifact_sessions(kind: str, path: Path):
    """(first session, next session, hfx OrtGenerator or None) for one tool's artifact."""
    import onnxruntime as ort

    opts = _session_options()
    if kind == "hfx":
        from hfx_ort import OrtGenerator  # python/hfx_ort.py: reads hfx.json, loads the components

        gen = OrtGenerator(path)  # its SessionOptions: ORT defaults + log level 3, as _session_options()
        return gen.first, gen.next, gen
    if kind == "onnxexporter":
        files = {f.stem: f for f in path.glob("*.onnx")}
        first = ort.InferenceSession(str(files["prefill"]), opts, providers=["CPUExecutionProvider"])
        nxt = ort.InferenceSession(str(files["decode"]), opts, providers=["CPUExecutionProvider"])
        return first, nxt, None
    if kind == "builder":
        s = ort.InferenceSession(str(path / "model.onnx"), opts, providers=["CPUExecutionProvider"])
        return s, s, None
    raise ValueError(kind)


_NP_TYPES = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(bfloat16)": "float32"}


def _cache_input_for(output: str, inputs: set[str]) -> str | None:
    """The next step's input that takes this present/cache output (each tool names them its own way)."""
    for cand in (output.replace("present.", "past_key_values.", 1), output.replace("output.", "input.", 1),
                 "input." + output):
        if cand in inputs and cand != output:
            return cand
    return None


def ort_loop(first, nxt, prompt, n_new: int, kv_heads: int, head_dim: int):
    """Greedy decoding over any of the three artifacts' graphs with IO binding: the KV cache stays in
    the OrtValues ORT returned and is bound as the next step's input (no numpy copy). Returns
    (prefill seconds, decode seconds for n_new steps, tokens)."""
    import numpy as np
    import onnxruntime as ort

    p = len(prompt)
    cache: dict[str, ort.OrtValue] = {}
    tokens: list[int] = []
    t0 = time.perf_counter()
    t_prefill = 0.0
    feed_ids = np.asarray([prompt], np.int64)
    for step in range(n_new + 1):
        sess = first if step == 0 else nxt
        past = 0 if step == 0 else p + step - 1
        total = past + feed_ids.shape[1]
        b = sess.io_binding()
        keep = []  # bound numpy arrays must outlive the run (the binding may point at their memory)
        for i in sess.get_inputs():
            if i.name in cache:
                b.bind_ortvalue_input(i.name, cache[i.name])
                continue
            if i.name == "input_ids":
                arr = feed_ids
            elif i.name == "attention_mask":
                arr = np.ones((1, total), np.int64)
            elif i.name == "position_ids":
                arr = np.arange(past, total, dtype=np.int64)[None]
            elif step == 0:  # an empty past for graphs that take one on the prompt step
                arr = np.zeros((1, kv_heads, 0, head_dim), _NP_TYPES.get(i.type, "float32"))
            else:
                raise RuntimeError(f"no value for input {i.name} at step {step}")
            keep.append(arr)
            b.bind_cpu_input(i.name, arr)
        names = [o.name for o in sess.get_outputs()]
        for n in names:
            b.bind_output(n)
        sess.run_with_iobinding(b)
        outs = dict(zip(names, b.get_outputs()))
        logits = outs.pop("logits").numpy()
        tok = int(logits[0, -1].argmax())
        tokens.append(tok)
        next_inputs = {i.name for i in nxt.get_inputs()}
        cache = {}
        for n, v in outs.items():
            target = _cache_input_for(n, next_inputs)
            if target:
                cache[target] = v
        feed_ids = np.asarray([[tok]], np.int64)
        if step == 0:
            t_prefill = time.perf_counter() - t0
    return t_prefill, time.perf_counter() - t0 - t_prefill, tokens


class _TimedSession:
    """Wraps an InferenceSession to time hfx_ort's own loop from outside it."""

    def __init__(self, sess):
        self._s, self.ends, self.dropped = sess, [], set()
        self._inputs = {i.name for i in sess.get_inputs()}

    def run(self, output_names, feed, *a, **k):
        # hfx_ort.py feeds position_ids to every graph; the `ort` profile's graph has none (GroupQueryAttention
        # computes positions): drop what the graph does not take, and say so in the report.
        self.dropped |= set(feed) - self._inputs
        feed = {n: v for n, v in feed.items() if n in self._inputs}
        r = self._s.run(output_names, feed, *a, **k)
        self.ends.append(time.perf_counter())
        return r

    def __getattr__(self, name):
        return getattr(self._s, name)


def decode_setup(ckpt: str | Path, prompt_len: int) -> tuple[int, int, list[int]]:
    """(kv heads, head dim, the prompt) every decode timing here runs: the same seeded prompt for every
    artifact, token ids away from the special ids at the vocabulary's ends."""
    import numpy as np

    cfg = json.loads((Path(ckpt) / "config.json").read_text())
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    lo = 1000 if cfg["vocab_size"] > 2000 else 10
    prompt = [int(x) for x in np.random.default_rng(0).integers(lo, cfg["vocab_size"] - 10, prompt_len)]
    return cfg["num_key_value_heads"], head_dim, prompt


def worker_latency(kind: str, path: str, ckpt: str, prompt_len: int, n_new: int, repeat: int) -> None:
    kv_heads, head_dim, prompt = decode_setup(ckpt, prompt_len)
    t = time.perf_counter()
    first, nxt, gen = _artifact_sessions(kind, Path(path))
    load_s = time.perf_counter() - t
    ort_loop(first, nxt, prompt, 4, kv_heads, head_dim)  # warm-up: the same prompt, a few steps
    runs = [ort_loop(first, nxt, prompt, n_new, kv_heads, head_dim) for _ in range(repeat)]
    result = {
        "load_s": load_s,
        "prefill_s": statistics.median(r[0] for r in runs),
        "decode_tok_s": statistics.median(n_new / r[1] for r in runs),
        "tokens": runs[0][2],
    }
    if gen is not None:  # the same artifact through python/hfx_ort.py's decode loop (numpy feeds)
        gen.facts.eos = set()  # run all n_new steps: random weights may emit an eos id
        timed = _TimedSession(gen.first)
        timed_next = timed if gen.next is gen.first else _TimedSession(gen.next)
        gen.first, gen.next = timed, timed_next
        try:
            t0 = time.perf_counter()
            rows = gen.generate([prompt], max_new_tokens=n_new + 1)
            t_end = time.perf_counter()
            first_end = timed.ends[0]
            result["hfx_ort"] = {"prefill_s": first_end - t0, "decode_tok_s": n_new / (t_end - first_end),
                                 "same_tokens": rows[0] == result["tokens"],
                                 "dropped_feeds": sorted(timed.dropped | timed_next.dropped)}
        except Exception as e:  # noqa: BLE001 - reported, the IO-binding figures above stand
            result["hfx_ort"] = {"error": last_line(f"{type(e).__name__}: {e}")}
    print("RESULT " + json.dumps(result))


def worker_paired(kind_a: str, path_a: str, kind_b: str, path_b: str, ckpt: str, prompt_len: int, n_new: int,
                  rounds: int) -> None:
    """Decode tok/s of two artifacts loaded in one process, their runs alternated (A B B A ...), so a
    drift of the machine (another process, the page cache, the CPU's clock) falls on both alike: the
    separate child processes of (b) run minutes apart. The session loaded second decodes faster here
    (up to 9 %, either artifact: where its weights land in memory), so both load orders run, half the
    rounds each, and the ratio a / b is the geometric mean of the two orders' median per-round ratios."""
    import gc
    import math

    kv_heads, head_dim, prompt = decode_setup(ckpt, prompt_len)
    specs = {"a": (kind_a, path_a), "b": (kind_b, path_b)}
    rates: dict[str, list[float]] = {"a": [], "b": []}
    order_ratios = []
    for load_order in (("a", "b"), ("b", "a")):
        sides = {}
        for label in load_order:
            first, nxt, _ = _artifact_sessions(specs[label][0], Path(specs[label][1]))
            ort_loop(first, nxt, prompt, 4, kv_heads, head_dim)  # warm-up
            sides[label] = (first, nxt)
        ratios = []
        for i in range(max(rounds // 2, 1)):
            got = {}
            for label in ("a", "b") if i % 2 == 0 else ("b", "a"):
                first, nxt = sides[label]
                got[label] = n_new / ort_loop(first, nxt, prompt, n_new, kv_heads, head_dim)[1]
                rates[label].append(got[label])
            ratios.append(got["a"] / got["b"])
        order_ratios.append(statistics.median(ratios))
        del sides, first, nxt
        gc.collect()
    print("RESULT " + json.dumps({"a_tok_s": statistics.median(rates["a"]), "b_tok_s": statistics.median(rates["b"]),
                                  "ratio": math.sqrt(order_ratios[0] * order_ratios[1]),
                                  "order_ratios": order_ratios, "rounds": 2 * max(rounds // 2, 1)}))


def worker_genai(path: str, ckpt: str, prompt_len: int, n_new: int) -> None:
    """onnxruntime-genai's own Generator on an artifact that has a genai_config.json (informational:
    genai sets its own session options and shares one max-length KV buffer)."""
    import numpy as np
    import onnxruntime_genai as og

    _, _, prompt = decode_setup(ckpt, prompt_len)
    model = og.Model(path)

    def once(n):
        params = og.GeneratorParams(model)
        params.set_search_options(do_sample=False, max_length=prompt_len + n + 1, min_length=prompt_len + n + 1)
        g = og.Generator(model, params)
        t0 = time.perf_counter()
        g.append_tokens(np.asarray([prompt], np.int32))
        g.generate_next_token()
        t1 = time.perf_counter()
        for _ in range(n):
            g.generate_next_token()
        return t1 - t0, time.perf_counter() - t1

    once(4)
    pre, dec = once(n_new)
    print("RESULT " + json.dumps({"prefill_s": pre, "decode_tok_s": n_new / dec}))


# ----------------------------------------------------------------------------------------------
# The parent: exports, latency children, table
# ----------------------------------------------------------------------------------------------

def last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "(no output)"


def timed_export(cmd: list[str], err: Path) -> dict:
    """export_bench.measure on the command, its stderr kept in `err` for the failure line."""
    wrapped = ["sh", "-c", 'f=$1; shift; exec "$@" 2>"$f"', "sh", str(err), *cmd]
    try:
        wall, rss = measure(wrapped)
        return {"ok": True, "wall_s": wall, "rss": rss}
    except subprocess.CalledProcessError as e:
        text = err.read_text(errors="replace") if err.exists() else ""
        return {"ok": False, "error": last_line(text or e.stderr or "")}


def hugetlb_env() -> dict:
    """This process's environment with glibc's malloc backing its large allocations with transparent huge
    pages (glibc >= 2.35; the kernel's THP mode `madvise`, this machine's, gives them none otherwise). ONNX
    Runtime allocates its prepacked weights through malloc: on 4 KiB pages a decode step's walk over them
    is bound by TLB misses, and where they land in memory moves a process's decode by a few % (the load
    order effect, docs/benchmarks.md run H18)."""
    env = dict(os.environ)
    tunables = [t for t in env.get("GLIBC_TUNABLES", "").split(":") if t]
    env["GLIBC_TUNABLES"] = ":".join([*tunables, "glibc.malloc.hugetlb=1"])
    return env


def child(args: list[str], err: Path, timeout: float = 3600, script: str = __file__, env: dict | None = None) -> dict:
    """Run a worker of `script` (this one unless another bench passes its own) in `env` (default: this
    process's); its RESULT line, or the last line of its error."""
    try:
        p = subprocess.run([sys.executable, str(Path(script).resolve()), *args], capture_output=True, text=True,
                           timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timed out after {timeout:.0f} s"}
    err.write_text(p.stdout + "\n" + p.stderr)
    for ln in p.stdout.splitlines():
        if ln.startswith("RESULT "):
            return {"ok": True, **json.loads(ln[7:])}
    return {"ok": False, "error": last_line(p.stderr or p.stdout)}


# Two-sided 95 % quantiles of Student's t by degrees of freedom (1-30; beyond, 1.96 is within 4 %).
_T975 = dict(enumerate([12.71, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
                        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
                        2.052, 2.048, 2.045, 2.042], start=1))


def ratio_interval(ratios: list[float]) -> tuple[float, float] | None:
    """95 % confidence interval of the geometric mean of per-process ratios (t over their logarithms), or
    None for fewer than two. What tells a difference between two artifacts from this machine's spread
    between processes (docs/benchmarks.md: about 2 % either way for the same file against itself)."""
    import math

    if len(ratios) < 2:
        return None
    logs = [math.log(x) for x in ratios]
    half = _T975.get(len(logs) - 1, 1.96) * statistics.stdev(logs) / math.sqrt(len(logs))
    mean = statistics.fmean(logs)
    return math.exp(mean - half), math.exp(mean + half)


def combine_pairings(results: list[dict]) -> dict:
    """Several _paired processes as one result: the geometric mean of their ratios (each already the mean
    of its two load orders), each process's ratio kept. One process's ratio moves by about 3 % with where
    its weights land in memory; processes average that out, rounds within one process do not."""
    import math

    failed = [r for r in results if not r.get("ok")]
    if failed:
        return failed[0]
    if len(results) == 1:
        return results[0]
    ratios = [r["ratio"] for r in results]
    return {"ok": True, "ratio": math.exp(statistics.fmean(math.log(x) for x in ratios)), "process_ratios": ratios,
            "ci95": ratio_interval(ratios),
            "a_tok_s": statistics.median(r["a_tok_s"] for r in results),
            "b_tok_s": statistics.median(r["b_tok_s"] for r in results),
            "order_ratios": [math.exp(statistics.fmean(math.log(r["order_ratios"][k]) for r in results)) for k in (0, 1)],
            "rounds": sum(r["rounds"] for r in results)}


def dir_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


def nbits_summary(folder: Path) -> str:
    """How the artifact's int4 weights are written (MatMulNBits count, block size, accuracy level)."""
    try:
        import onnx
    except ImportError:
        return ""
    count, attrs = 0, set()
    for f in sorted(folder.rglob("*.onnx")):
        m = onnx.load(str(f), load_external_data=False)
        for n in m.graph.node:
            if n.op_type == "MatMulNBits":
                count += 1
                a = {x.name: onnx.helper.get_attribute_value(x) for x in n.attribute}
                attrs.add((a.get("block_size"), a.get("accuracy_level", 0)))
    if not count:
        return ""
    return f"{count} MatMulNBits, " + "; ".join(f"block {b} acc_level {lvl}" for b, lvl in sorted(attrs))


# hfx's rows, in order; the ratios compare each with the peer's row of the same first word (fp32, int4).
HFX_ROWS = ("fp32", "int4", "int4+lm", "int4+lm+emb", "int4+lm+acc4", "int4+lm+emb+acc4")
# hfx rows compared with a builder row in one process (worker_paired): fp32, and the builder's own int4 recipe.
PAIRED = [("fp32", "fp32"), ("int4+lm+emb+acc4", "int4")]


def hfx_flags(hfx: str) -> set[str]:
    try:
        text = subprocess.run([hfx, "export", "--help"], capture_output=True, text=True, timeout=60).stdout
    except OSError:
        return set()
    flags = {f for f in ("--onnx-profile", "--quantize", "--quantize-lm-head", "--quantize-embeddings") if f in text}
    if "accuracy=" in text:
        flags.add("accuracy")  # --quantize ...:accuracy=N (MatMulNBits accuracy_level)
    return flags


def fmt(v, spec, fail="—"):
    return fail if v is None else format(v, spec)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1].startswith("_"):
        name, rest = sys.argv[1], sys.argv[2:]
        if name == "_onnxexporter":
            worker_onnxexporter(*rest)
        elif name == "_quantize_int4":
            worker_quantize_int4(*rest)
        elif name == "_latency":
            worker_latency(rest[0], rest[1], rest[2], int(rest[3]), int(rest[4]), int(rest[5]))
        elif name == "_paired":
            worker_paired(rest[0], rest[1], rest[2], rest[3], rest[4], int(rest[5]), int(rest[6]), int(rest[7]))
        elif name == "_genai":
            worker_genai(rest[0], rest[1], int(rest[2]), int(rest[3]))
        else:
            raise SystemExit(f"unknown worker {name}")
        return 0

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen3-0.6b", choices=sorted(CONFIGS))
    ap.add_argument("--skip", default="", help="comma-separated peers to leave out: " + ",".join(PEERS))
    ap.add_argument("--keep", help="folder for the checkpoint (reused when present) and the artifacts (kept)")
    ap.add_argument("--hfx", default=str(ROOT / "build" / "hfx"))
    ap.add_argument("--prompt", type=int, default=128, help="prompt tokens of the prefill")
    ap.add_argument("--new", type=int, default=64, help="greedy decode steps timed")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per artifact (median)")
    ap.add_argument("--no-genai", action="store_true", help="skip the onnxruntime-genai Generator rows")
    ap.add_argument("--paired-rounds", type=int, default=6,
                    help="rounds of the paired decode comparison with the builder (hfx's and the builder's artifact "
                         "in one process, runs alternated; 0 skips it)")
    ap.add_argument("--paired-processes", type=int, default=1,
                    help="processes of the paired comparison, each --paired-rounds rounds; their ratios' geometric mean "
                         "is reported, each one, and (2 or more) a 95 %% confidence interval")
    ap.add_argument("--paired-control", action="store_true",
                    help="also pair each hfx artifact with itself (same processes and rounds): the ratio a difference "
                         "must exceed to be more than this machine's spread")
    ap.add_argument("--malloc-hugetlb", action="store_true",
                    help="run every decode child, every tool's alike, with GLIBC_TUNABLES=glibc.malloc.hugetlb=1 "
                         "(ONNX Runtime's prepacked weights on transparent huge pages; exports are timed as they are)")
    ap.add_argument("--hfx-rows", default=",".join(HFX_ROWS),
                    help="comma-separated hfx rows to export and run (default all): " + ",".join(HFX_ROWS))
    ap.add_argument("--markdown", action="store_true", help="also print the table as Markdown (for docs/benchmarks.md)")
    args = ap.parse_args()
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    unknown = skip - set(PEERS)
    if unknown:
        ap.error(f"--skip: unknown peer(s) {sorted(unknown)}; choose from {','.join(PEERS)}")

    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="hfx-peer-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    ckpt = work / "checkpoint"
    arts = work / "artifacts"
    logs = work / "logs"
    try:
        if not (ckpt / "model.safetensors").exists():
            t = time.perf_counter()
            make_checkpoint(args.model, ckpt)
            print(f"saved {args.model} checkpoint in {time.perf_counter() - t:.1f} s", flush=True)
        shutil.rmtree(arts, ignore_errors=True)
        arts.mkdir()
        logs.mkdir(exist_ok=True)
        cfg = json.loads((ckpt / "config.json").read_text())
        largest = 4 * cfg["vocab_size"] * cfg["hidden_size"]  # the f32 embedding / lm_head
        flags = hfx_flags(args.hfx)
        print(f"hfx binary {args.hfx}: flags found {sorted(flags) or 'none of --onnx-profile/--quantize'}", flush=True)

        # ---- (a) exports: (label, tool, precision, command or worker, artifact dir[, onnx subdir])
        rows: list[dict] = []

        wanted = set(args.hfx_rows.split(","))

        def run_export(tool, prec, cmd, out, after=None):
            """Measure one export command; `after`: the result of the step it follows (a two-step pipeline:
            the times add, the peak RSS is the larger)."""
            if tool == "hfx" and prec not in wanted:
                return None
            # Every tool starts with the previous export's pages on disk (it would otherwise pay for their
            # write-back: the second of two hfx rows took 1.5-3 s longer) and the checkpoint in the cache.
            os.sync()
            drop_caches_hint(ckpt)
            print(f"export {tool} {prec} ...", flush=True)
            r = timed_export(cmd, logs / f"export-{tool}-{prec}.log")
            if r["ok"] and after is not None:
                r = {"ok": True, "wall_s": r["wall_s"] + after["wall_s"], "rss": max(r["rss"], after["rss"])}
            row = {"tool": tool, "prec": prec, "export": r, "dir": out, "onnx_dir": out}
            if r["ok"]:
                row["bytes"] = dir_size(out)
                row["nbits"] = nbits_summary(row["onnx_dir"])
                print(f"  {r['wall_s']:.1f} s, peak RSS {r['rss'] / MB:.0f} MiB, {row['bytes'] / MB:.0f} MiB written",
                      flush=True)
            else:
                print(f"  FAILED: {r['error']}", flush=True)
            rows.append(row)
            return row

        hfx_base = [args.hfx, "export", "--model", str(ckpt), "--format", "onnx", "--quiet", "--no-verify",
                    "--overwrite"]
        if "--onnx-profile" in flags:
            hfx_base += ["--onnx-profile", "ort"]
        run_export("hfx", "fp32", hfx_base + [str(arts / "hfx-fp32")], arts / "hfx-fp32")
        if "--quantize" in flags:
            run_export("hfx", "int4", hfx_base + ["--quantize", "int4", str(arts / "hfx-int4")], arts / "hfx-int4")
            if "--quantize-lm-head" in flags:  # like the builder's int4, which quantizes lm_head too
                run_export("hfx", "int4+lm", hfx_base + ["--quantize", "int4", "--quantize-lm-head",
                                                         str(arts / "hfx-int4-lm")], arts / "hfx-int4-lm")
                # The builder's layout: the tied table quantized once, read by lm_head's MatMulNBits and the
                # embedding's GatherBlockQuantized (no f32 table written).
                emb = ["--quantize-embeddings"] if "--quantize-embeddings" in flags else []
                if emb:
                    run_export("hfx", "int4+lm+emb", hfx_base + ["--quantize", "int4", "--quantize-lm-head", *emb,
                                                                  str(arts / "hfx-int4-lm-emb")], arts / "hfx-int4-lm-emb")
                # The builder's own CPU recipe: that layout and MatMulNBits accuracy_level 4 (ORT may quantize
                # activations to int8), the like-for-like row for decode speed.
                if "accuracy" in flags:
                    label = "int4+lm+emb+acc4" if emb else "int4+lm+acc4"
                    run_export("hfx", label, hfx_base + ["--quantize", "int4:accuracy=4", "--quantize-lm-head", *emb,
                                                          str(arts / f"hfx-{label.replace('+', '-')}")],
                               arts / f"hfx-{label.replace('+', '-')}")
        else:
            rows.append({"tool": "hfx", "prec": "int4", "export": {"ok": False, "error": "binary has no --quantize"}})

        me = [sys.executable, str(Path(__file__).resolve())]
        if "onnxexporter" not in skip:
            fp = run_export("onnxexporter", "fp32", me + ["_onnxexporter", str(ckpt), str(arts / "onnxexporter-fp32")],
                            arts / "onnxexporter-fp32")
            if fp["export"]["ok"]:
                run_export("onnxexporter", "int4", me + ["_quantize_int4", str(arts / "onnxexporter-fp32"),
                                                         str(arts / "onnxexporter-int4")],
                           arts / "onnxexporter-int4", after=fp["export"])
            else:
                rows.append({"tool": "onnxexporter", "prec": "int4",
                             "export": {"ok": False, "error": "fp32 export failed"}})
        if "builder" not in skip:
            for prec in ("fp32", "int4"):
                out = arts / f"builder-{prec}"
                run_export("builder", prec, [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(ckpt),
                                             "-o", str(out), "-p", prec, "-e", "cpu", "-c", str(work / "builder-cache")],
                           out)
        # ---- (b) ONNX Runtime latency of each artifact, each in its own process
        decode_env = hugetlb_env() if args.malloc_hugetlb else None
        for row in rows:
            if not row["export"].get("ok"):
                continue
            kind, d = row["tool"], row["dir"]
            print(f"ORT {kind} {row['prec']}: prefill {args.prompt} tokens, decode {args.new} ...", flush=True)
            row["ort"] = child(["_latency", kind, str(d), str(ckpt), str(args.prompt), str(args.new),
                                str(args.repeat)], logs / f"ort-{kind}-{row['prec']}.log", env=decode_env)
            if row["ort"]["ok"]:
                o = row["ort"]
                print(f"  prefill {o['prefill_s'] * 1000:.0f} ms, decode {o['decode_tok_s']:.1f} tok/s"
                      + (f"; hfx_ort loop: {o['hfx_ort']}" if "hfx_ort" in o else ""), flush=True)
            else:
                print(f"  FAILED: {row['ort']['error']}", flush=True)
            genai_dir = row["onnx_dir"] if kind != "hfx" else Path(d) / "onnx"
            if not args.no_genai and (Path(genai_dir) / "genai_config.json").exists():
                row["genai"] = child(["_genai", str(genai_dir), str(ckpt), str(args.prompt), str(args.new)],
                                     logs / f"genai-{kind}-{row['prec']}.log", env=decode_env)

        # ---- (b') hfx beside the builder at the same precision, in one process, runs alternated
        by_key = {(r["tool"], r["prec"]): r for r in rows if r["export"].get("ok")}

        def pairing(hfx_dir, other_kind: str, other_dir, log: str) -> dict:
            """hfx's artifact against another in --paired-processes _paired children, combined."""
            return combine_pairings([
                child(["_paired", "hfx", str(hfx_dir), other_kind, str(other_dir), str(ckpt), str(args.prompt),
                       str(args.new), str(args.paired_rounds)], logs / f"{log}-{i}.log", env=decode_env)
                for i in range(args.paired_processes)])

        for hprec, bprec in PAIRED:
            h, b = by_key.get(("hfx", hprec)), by_key.get(("builder", bprec))
            if not (h and b) or args.paired_rounds <= 0:
                continue
            print(f"paired decode hfx {hprec} / builder {bprec}: {args.paired_processes} x {args.paired_rounds} rounds ...",
                  flush=True)
            h["paired"] = pairing(h["dir"], "builder", b["dir"], f"paired-{hprec}")
            if args.paired_control:
                print(f"paired decode control, hfx {hprec} / itself ...", flush=True)
                h["paired_control"] = pairing(h["dir"], "hfx", h["dir"], f"paired-control-{hprec}")

        report(args, rows, flags, largest, cfg)
        (work / "results.json").write_text(json.dumps(
            {"model": args.model, "hfx_flags": sorted(flags), "rows": rows}, default=str, indent=1))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def report(args, rows, flags, largest, cfg) -> None:
    print(f"\nmodel {args.model} ({cfg['num_hidden_layers']} layers, hidden {cfg['hidden_size']}, vocab "
          f"{cfg['vocab_size']}); prompt {args.prompt} tokens, {args.new} decode steps, median of {args.repeat}; "
          f"hfx flags: {' '.join(sorted(flags)) or '(none)'}"
          + ("; decode children with glibc.malloc.hugetlb=1" if getattr(args, "malloc_hugetlb", False) else ""))
    head = (f"{'tool':<13} {'prec':<7} {'export s':>9} {'peak RSS MiB':>13} {'written MiB':>12} "
            f"{'ORT load s':>10} {'prefill ms':>11} {'decode tok/s':>13}  notes")
    print(head)
    print("-" * len(head))
    by = {}
    for r in rows:
        by[(r["tool"], r["prec"])] = r
        e, o = r["export"], r.get("ort") or {}
        if not e.get("ok"):
            print(f"{r['tool']:<13} {r['prec']:<7} {'FAILED':>9}  {e['error']}")
            continue
        notes = r.get("nbits", "")
        if o and not o.get("ok"):
            notes = f"ORT FAILED: {o['error']}"
        print(f"{r['tool']:<13} {r['prec']:<7} {e['wall_s']:9.1f} {e['rss'] / MB:13.0f} {r['bytes'] / MB:12.0f} "
              f"{fmt(o.get('load_s'), '10.1f'):>10} {fmt(o.get('prefill_s') and o['prefill_s'] * 1000, '11.0f'):>11} "
              f"{fmt(o.get('decode_tok_s'), '13.1f'):>13}  {notes}")
    for r in rows:
        o = r.get("ort") or {}
        if "hfx_ort" in o and "error" in o["hfx_ort"]:
            print(f"{'  hfx_ort.py':<13} {r['prec']:<7}  FAILED: {o['hfx_ort']['error']}")
        elif "hfx_ort" in o:
            h = o["hfx_ort"]
            print(f"{'  hfx_ort.py':<13} {r['prec']:<7} {'':>9} {'':>13} {'':>12} {'':>10} {h['prefill_s'] * 1000:11.0f} "
                  f"{h['decode_tok_s']:13.1f}  python/hfx_ort.py's loop (numpy feeds); same tokens: {h['same_tokens']}"
                  + (f"; fed {', '.join(h['dropped_feeds'])} the graph lacks (dropped)" if h.get("dropped_feeds") else ""))
        g = r.get("genai")
        if g:
            if g.get("ok"):
                print(f"{'  genai':<13} {r['prec']:<7} {'':>9} {'':>13} {'':>12} {'':>10} {g['prefill_s'] * 1000:11.0f} "
                      f"{g['decode_tok_s']:13.1f}  {r['tool']}'s artifact in onnxruntime-genai's Generator")
            else:
                print(f"{'  genai':<13} {r['prec']:<7}  FAILED: {g['error']}")

    base_tokens = (by.get(("hfx", "fp32"), {}).get("ort") or {}).get("tokens")
    if base_tokens:
        for r in rows:
            t = (r.get("ort") or {}).get("tokens")
            if t and r["prec"] == "fp32" and r["tool"] != "hfx":
                same = next((i for i, (a, b) in enumerate(zip(t, base_tokens)) if a != b), None)
                print(f"greedy tokens {r['tool']} fp32 vs hfx fp32: "
                      + ("identical" if same is None else f"first difference at token {same}"))

    print("\nratios hfx / peer: export time (goal: <= 1/50 of OnnxExporter's, <= 1/3 of the builder's), "
          "peak RSS, prefill latency (< 1: hfx faster), decode tok/s (goal: >= 2 x OnnxExporter's, >= the builder's)")
    goals = {"onnxexporter": (50, 2.0), "builder": (3, 1.0)}
    for prec in HFX_ROWS:
        h = by.get(("hfx", prec))
        if not h or not h["export"].get("ok"):
            continue
        for peer in PEERS:
            p = by.get((peer, prec.split("+")[0]))
            if not p or not p["export"].get("ok"):
                continue
            t = h["export"]["wall_s"] / p["export"]["wall_s"]
            rss = h["export"]["rss"] / p["export"]["rss"]
            ho, po = h.get("ort") or {}, p.get("ort") or {}
            both = ho.get("ok") and po.get("ok")
            dec = ho["decode_tok_s"] / po["decode_tok_s"] if both else None
            pre = ho["prefill_s"] / po["prefill_s"] if both else None
            g_exp, g_dec = goals[peer]
            print(f"  {prec:<16} hfx / {peer:<12}: export time {t:.3f} (1/{1 / t:.1f}; goal 1/{g_exp}: "
                  f"{'met' if 1 / t >= g_exp else 'NOT met'}), peak RSS {rss:.2f}, prefill {fmt(pre, '.2f')}, "
                  f"decode tok/s {fmt(dec, '.2f')} (goal {g_dec:g}: "
                  f"{'—' if dec is None else 'met' if dec >= g_dec else 'NOT met'})")
    for hprec, bprec in PAIRED:
        h = by.get(("hfx", hprec)) or {}
        for key, other in (("paired", f"builder {bprec}"), ("paired_control", f"hfx {hprec} (the same file: control)")):
            pr = h.get(key)
            if not pr:
                continue
            if not pr.get("ok"):
                print(f"  paired decode hfx {hprec} / {other}: FAILED: {pr['error']}")
                continue
            ci = pr.get("ci95")
            print(f"  paired decode (runs alternated in one process per pairing, {pr['rounds']} rounds) hfx {hprec} / {other}: "
                  f"{pr['a_tok_s']:.2f} / {pr['b_tok_s']:.2f} tok/s, ratio {pr['ratio']:.3f}"
                  + (f" (95 % CI {ci[0]:.3f}-{ci[1]:.3f})" if ci else "")
                  + f" (first loaded {pr['order_ratios'][0]:.3f}, second {pr['order_ratios'][1]:.3f}"
                  + (f"; processes {', '.join(f'{x:.3f}' for x in pr['process_ratios'])}" if "process_ratios" in pr else "")
                  + ")" + ("" if key == "paired_control" else f" (goal >= 1: {'met' if pr['ratio'] >= 1 else 'NOT met'})"))
    cap = (1 << 30) + 2 * largest
    for prec in HFX_ROWS:
        h = by.get(("hfx", prec))
        if h and h["export"].get("ok"):
            print(f"  hfx {prec} peak RSS {h['export']['rss'] / MB:.0f} MiB vs goal 1 GiB + 2 x largest f32 tensor "
                  f"= {cap / MB:.0f} MiB: {'met' if h['export']['rss'] <= cap else 'NOT met'}")

    if getattr(args, "markdown", False):
        print("\n| tool | precision | export s | peak RSS MiB | written MiB | ORT load s | prefill ms | decode tok/s |")
        print("|---|---|---|---|---|---|---|---|")
        for r in rows:
            e, o = r["export"], r.get("ort") or {}
            if not e.get("ok"):
                print(f"| {r['tool']} | {r['prec']} | failed: {e['error']} | | | | | |")
                continue
            ok = o.get("ok")
            print(f"| {r['tool']} | {r['prec']} | {e['wall_s']:.1f} | {e['rss'] / MB:.0f} | {r['bytes'] / MB:.0f} | "
                  + (f"{o['load_s']:.1f} | {o['prefill_s'] * 1000:.0f} | {o['decode_tok_s']:.2f} |" if ok else
                     f"failed: {o.get('error', 'not run')} | | |"))


if __name__ == "__main__":
    sys.exit(main())
