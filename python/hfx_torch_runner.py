"""PyTorch side of hfx's `torch` runtime (src/backends/pt2/pt2_runner.cc): a step server over one
`.pt2` program, so the C++ decode loop (`hfx verify --runtime torch`, `hfx generate --runtime torch`,
the built-in check of `hfx export --format pt2`) runs torch itself without loading it per step.

    python hfx_torch_runner.py --serve FILE.pt2 --input input_ids --input attention_mask ...
                               [--shared past_key_values.0.key present.0.key ...]

`--input` names the program's user inputs in order (the manifest's `inputs`): it is called with one
tensor per name, positionally. `--shared IN OUT` is one buffer the program updates in place (the
static cache): the mutated IN is written out as output OUT.

Protocol, one JSON object per line. First line on stdout once the program is loaded:
  {"ready": true, "torch_version": "2.13.0+cpu", "load_s": 1.2}
or, exiting 1, {"error": ..., "torch_version": ..} when torch refused the archive, {"error": ...} alone
when torch cannot be imported;
then for each request on stdin
  {"inputs": "in.safetensors", "outputs": "out.safetensors"}
it runs the program on the named tensors of `inputs` (others are ignored), writes every output (the
returned dict, plus OUT for each shared pair) to `outputs`, and answers
  {"ok": true}   or   {"error": "<the exception's last line>"}
End of stdin ends the server. Stdout carries the protocol only: anything else (torch's warnings, a
print) goes to stderr.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path


def protocol_stream():
    """A line-buffered writer on the original stdout; fd 1 and sys.stdout then point at stderr, so
    that nothing but the protocol (not a C extension's printf either) reaches the reader."""
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return proto


def error_line(exc: BaseException) -> str:
    """The exception as Python's last traceback line, on one line (torch's messages span several)."""
    text = traceback.format_exception_only(type(exc), exc)[-1]
    return " ".join(text.split())[:2000]


def serve_requests(say, server) -> None:
    """One request per line of stdin until it ends, each answered {"ok": true} or with its error's
    last line (the server goes on)."""
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            server.run(json.loads(line))
        except Exception as exc:  # noqa: BLE001 - any refusal is answered, with its own text
            say({"error": error_line(exc)})
            continue
        say({"ok": True})


class StepServer:
    def __init__(self, pt2: str, inputs: list[str], shared: list[tuple[str, str]]):
        from hfx_torch import load_program
        self.file = pt2
        self.module = load_program(pt2)
        self.inputs = inputs
        self.shared = shared

    def run(self, request: dict) -> None:
        import torch
        from safetensors.torch import load_file, save_file
        feeds = load_file(request["inputs"])
        missing = [n for n in self.inputs if n not in feeds]
        if missing:
            raise ValueError(f"{request['inputs']}: no tensor {missing[0]} (the program's inputs: {', '.join(self.inputs)})")
        args = [feeds[n] for n in self.inputs]
        with torch.no_grad():
            out = self.module(*args)
        if not isinstance(out, dict):
            raise ValueError(f"{self.file}: the program returned {type(out).__name__}, not a dict of outputs")
        out = dict(out)
        for i, o in self.shared:
            out[o] = feeds[i]  # the buffer the call updated in place
        # safetensors refuses tensors that share memory: a second output over the same storage is copied.
        seen, tensors = set(), {}
        for name, t in out.items():
            t = t.detach().contiguous()
            key = t.untyped_storage().data_ptr()
            tensors[name] = t.clone() if key in seen else t
            seen.add(key)
        save_file(tensors, request["outputs"])


def main() -> None:
    proto = protocol_stream()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    ap.add_argument("--serve", required=True, metavar="FILE.pt2")
    ap.add_argument("--input", action="append", default=[], metavar="NAME", help="a user input, in order; repeat")
    ap.add_argument("--shared", action="append", nargs=2, default=[], metavar=("IN", "OUT"),
                    help="an input the program updates in place, written out as output OUT; repeat")
    args = ap.parse_args()

    def say(obj: dict) -> None:
        proto.write(json.dumps(obj) + "\n")

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    t0 = time.perf_counter()
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - no torch here: said without a torch_version
        say({"error": error_line(exc)})
        raise SystemExit(1) from exc
    try:
        server = StepServer(args.serve, args.input, [tuple(p) for p in args.shared])
    except Exception as exc:  # noqa: BLE001 - torch (or hfx's no-pickle check) refused the archive
        say({"error": error_line(exc), "torch_version": torch.__version__})
        raise SystemExit(1) from exc
    say({"ready": True, "torch_version": torch.__version__, "load_s": round(time.perf_counter() - t0, 3)})
    serve_requests(say, server)


if __name__ == "__main__":
    main()
