"""ONNX Runtime side of `hfx verify --runtime onnxruntime` (ONNX Runtime's C++ API is not on this
machine; its Python wheel is). Reads a job file, writes a result file, both JSON; the first run is
profiled (the placements):

  {"runs": [{"model": "...onnx", "inputs": "in.safetensors", "outputs": "out.safetensors"}],
   "generate": {"export": DIR, "prompts": [[...]], "max_new_tokens": N} | null, "quantized": bool,
   "casts_weights": bool}
  -> {"placements": {"<op type>": {"<provider>": count}}, "generate": {"tokens": [[...]],
      "cold_start_s": .., "step_s": [..]}, "ort_version": ".."}

When ONNX Runtime refuses the model (a kernel's check, "Got invalid dimensions ...") the result file is
{"error": "<the exception's last line>", "ort_version": ".."} and the exit status 1: hfx shows the
runtime's own words.

`hfx_ort_runner.py JOB RESULT` runs one job; `hfx_ort_runner.py --serve` waits for jobs on stdin (serve()).
"""
from __future__ import annotations

import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

try:
    import onnxruntime as ort
    import numpy as np
    from safetensors.numpy import load_file, save_file

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from hfx_ort import OrtGenerator  # noqa: E402
    import hfx_ort_seq2seq  # noqa: E402
except ImportError as missing:
    if sys.argv[1:] == ["--serve"]:  # the first line says what is missing (serve()); ort_version null: no ONNX Runtime
        version = getattr(sys.modules.get("onnxruntime"), "__version__", None)
        print(json.dumps({"ready": False, "ort_version": version, "error": f"{type(missing).__name__}: {missing}"}),
              flush=True)
        raise SystemExit(1) from missing
    raise


# ORT fuses DequantizeLinear + MatMul (the portable profile's quantized Linear layers) into MatMulNBits
# and by default (level 4) lets it quantize the activations to int8: a speed choice of the runtime, not
# the file's numbers, which are what verify compares with the f32 reference executor.
F32_CONFIG = {"session.qdq_matmulnbits_accuracy_level": "0"}


QUANTIZED_OPS = {"MatMulNBits", "GatherBlockQuantized", "DequantizeLinear", "MatMulInteger"}

# Sessions of graphs without quantized products: the same kernels on the same values as ORT's
# defaults, without copying the weights at load.
#  - No prepacking (session_config's docstring).
#  - No ConstantFolding where no weight is cast at use (NO_FOLDING). A portable graph's tied lm_head reads
#    the embedding table through a Transpose (as the onnxruntime-genai builder writes it too; hfx's ort
#    profile writes it as FusedMatMul(transB=1) over the table itself); folding it copies the
#    table three times at load: 1.7-3.4 s and 1.2 GiB of the session's open on the Qwen3-0.6B shape,
#    against 0.17 s without. Unfolded, ORT's MatmulTransposeFusion makes the pair one FusedMatMul(transB)
#    instead, which feeds the same MLAS kernel: the logits and the cache came out bit-identical on that
#    shape, and tests/oracle/test_runtime_acceptance.py holds these sessions to ORT's defaults bit for
#    bit on tiny models. A graph that casts its weights at use (--dtype bf16: stored bf16, computed in
#    f32) keeps the fold: unfolded, every run would cast the whole model again (a bf16 0.6B export's
#    check took 11-18 s and 5.3 GiB so, against 8-11 s and 3 GiB folded).
NO_PREPACKING = {"session.disable_prepacking": "1"}
NO_FOLDING = {"optimization.disable_specified_optimizers": "ConstantFolding"}


def session_config(*paths, quantized: bool | None = None, casts_weights: bool | None = None) -> dict:
    """F32_CONFIG, and for graphs without quantized MatMuls no prepacking. Prepacking copies every f32
    MatMul weight into MLAS's packed layout when a session loads; the same kernels pack per call without
    it. verify opens several sessions of a model it runs for a few tokens, so the copies cost more than
    they save: on the Qwen3-0.6B shape a load took 7.8 s and 2.9 GiB with them, 1.6 s and 1.2 GiB without
    (the external data read in place). MatMulNBits keeps them: it computes from its packed form (unpacked,
    the Qwen3-0.6B int4 file's runs took 7x as long and moved the logits by 1e-5; its int8-activation
    kernels, accuracy level 4, which the reference rounds alike, run on prepacked weights only). Of those graphs, the ones
    that cast no weight at use also skip ConstantFolding (NO_FOLDING above). `quantized`,
    `casts_weights`: what the caller already knows of the graphs (hfx read them back: the job says), so
    they are not parsed again (0.75 s of a 1.3 s job's set-up on the Qwen3-0.6B shape, whose graph
    carries its rotary tables inline); without them and without the onnx package to look: ORT's
    defaults."""
    if quantized is None or casts_weights is None:
        try:
            import onnx
        except ImportError:
            return dict(F32_CONFIG)
        quantized, casts_weights = False, False
        for path in paths:
            g = onnx.load(str(path), load_external_data=False).graph
            weights = {t.name for t in g.initializer}
            quantized = quantized or any(n.op_type in QUANTIZED_OPS for n in g.node)
            casts_weights = casts_weights or any(n.op_type == "Cast" and n.input[0] in weights for n in g.node)
    if quantized:
        return dict(F32_CONFIG)
    return {**F32_CONFIG, **NO_PREPACKING, **({} if casts_weights else NO_FOLDING)}


def session(path, config: dict, profile=False):
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    for key, value in config.items():
        opts.add_session_config_entry(key, value)
    if profile:
        opts.enable_profiling = True
        opts.profile_file_prefix = str(Path(path).with_suffix("")) + "-ortprofile"
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def placements(sess, feeds):
    """Which execution provider ran each node, from ORT's own profile of one run of `sess` (opened with
    profiling on), and that run's outputs; the profile ends with it, so later runs of the session are
    not profiled."""
    outs = sess.run(None, feeds)
    prof = sess.end_profiling()
    counts = defaultdict(lambda: defaultdict(int))
    events = json.loads(Path(prof).read_text())
    seen = set()
    for e in events:
        args = e.get("args", {})
        if e.get("cat") == "Node" and "provider" in args and e["name"].endswith("_kernel_time"):
            node = e["name"][: -len("_kernel_time")]
            if node in seen:
                continue
            seen.add(node)
            counts[args.get("op_name", "?")][args["provider"]] += 1
    Path(prof).unlink(missing_ok=True)
    return {op: dict(p) for op, p in sorted(counts.items())}, outs


def error_line(exc: BaseException) -> str:
    """The exception as Python's last traceback line, on one line (ORT's messages span several)."""
    import traceback
    text = traceback.format_exception_only(type(exc), exc)[-1]
    return " ".join(text.split())[:2000]


def job(job_path: str, result_path: str) -> int:
    """Runs one job file into its result file; 0, or 1 when ONNX Runtime (or anything) refused it."""
    result = {"ort_version": ort.__version__}
    try:
        run(json.loads(Path(job_path).read_text()), result)
    except Exception as exc:  # noqa: BLE001 - any refusal is reported, with its own text
        Path(result_path).write_text(json.dumps({"error": error_line(exc), "ort_version": ort.__version__}))
        return 1
    Path(result_path).write_text(json.dumps(result))
    return 0


def serve():
    """--serve: started by `hfx export` while it writes its files (runtime_probe.h, start_ort_driver), so
    that its check finds ONNX Runtime imported. First line {"ready": true, "ort_version": ..} (or, when an
    import failed, {"ready": false, "ort_version": .. | null, "error": ..} and exit 1); then per line
    {"job": PATH, "result": PATH} in, {"status": 0|1} out, the job's stderr in PATH.stderr; ends at end of
    input. Anything else printed goes to stderr: stdout carries the protocol only."""
    protocol, sys.stdout = sys.stdout, sys.stderr
    print(json.dumps({"ready": True, "ort_version": ort.__version__}), file=protocol, flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        # stderr (started as /dev/null) into the job's own log, where hfx reads a crash's last line
        log = os.open(request["result"] + ".stderr", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(log, 2)
        os.close(log)
        status = job(request["job"], request["result"])
        print(json.dumps({"status": status}), file=protocol, flush=True)


def main():
    if sys.argv[1:] == ["--serve"]:
        serve()
        return
    raise SystemExit(job(sys.argv[1], sys.argv[2]))


def seq2seq_tokens(sessions, model, prompts, max_new_tokens):
    """An encoder-decoder's greedy tokens as hfx's seq2seq loop returns them: sources right-padded, new
    tokens only (no start token), a finished row padded with pad_token_id."""
    pad = model["pad_token_id"] if model["pad_token_id"] is not None else 0
    rows = hfx_ort_seq2seq.generate(None, hfx_ort_seq2seq.prompt_source(sessions, prompts, pad), max_new_tokens,
                                    model["decoder_start_token_id"], model["eos_token_ids"] or None, pad,
                                    sessions=sessions)
    return rows[:, 1:].tolist()


def run(job, result):
    # One session per graph for the whole job: the cases and the generator share it (a model-sized graph
    # loads in seconds, and sessions of one graph held together would hold its weights once each). The
    # first case's run is the profiled one (the placements), not a run of its own: its graph's session is
    # opened with profiling, which that run ends.
    export = Path(job["generate"]["export"]) if job.get("generate") else None
    generated = [export / c["file"] for c in json.loads((export / "hfx.json").read_text())["components"]
                 if c["format"] == "onnx"] if export else []
    runs = job.get("runs", [])
    profiled = Path(runs[0]["model"]).resolve() if runs else None
    paths = [Path(c["model"]) for c in runs] + generated
    config = session_config(*dict.fromkeys(paths), quantized=job.get("quantized"), casts_weights=job.get("casts_weights"))
    sessions, load_s = {}, {}

    def open_session(path: Path):
        key = path.resolve()
        if key not in sessions:
            t0 = time.perf_counter()
            sessions[key] = session(path, config, profile=key == profiled)
            load_s[key] = time.perf_counter() - t0
        return sessions[key]

    for i, case in enumerate(runs):
        sess = open_session(Path(case["model"]))
        wanted = {x.name for x in sess.get_inputs()}
        feeds = {k: v for k, v in load_file(case["inputs"]).items() if k in wanted}
        if i == 0:
            result["placements"], outs = placements(sess, feeds)
        else:
            outs = sess.run(None, feeds)
        save_file({o.name: np.ascontiguousarray(v) for o, v in zip(sess.get_outputs(), outs)}, case["outputs"])
        del outs
    if export:
        g = job["generate"]
        # The generator's cold start: its graphs' loads, those done for the cases included, and its setup.
        loaded_before = sum(load_s[p.resolve()] for p in generated if p.resolve() in sessions)
        t0 = time.perf_counter()
        model = json.loads((export / "hfx.json").read_text())["model"]
        if "decoder_start_token_id" in model:  # an encoder-decoder: its three graphs
            gen = None
            by_role = {c["role"]: open_session(export / c["file"])
                       for c in json.loads((export / "hfx.json").read_text())["components"] if c["format"] == "onnx"}
        else:
            gen = OrtGenerator(export, session_config=config, sessions={p.resolve(): open_session(p) for p in generated})
        cold = loaded_before + time.perf_counter() - t0
        t1 = time.perf_counter()
        if gen:
            tokens = gen.generate(g["prompts"], g["max_new_tokens"])
        else:
            tokens = seq2seq_tokens(by_role, model, g["prompts"], g["max_new_tokens"])
        total = time.perf_counter() - t1
        result["generate"] = {"tokens": tokens, "cold_start_s": cold, "total_s": total}


if __name__ == "__main__":
    main()
