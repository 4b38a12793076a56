"""ExecuTorch side of hfx's `executorch` runtime (src/backends/pt2/pt2_runner.cc): a step server
over one `.pte` program, so the C++ decode loop (`hfx verify --runtime executorch`, `hfx generate
--runtime executorch`, the built-in check of `hfx export --format executorch`) runs ExecuTorch's own
runtime (`executorch.runtime`, portable kernels) without loading it per step.

    python hfx_executorch_runner.py --serve FILE.pte --input input_ids --input cache_position --output logits

`--input` names the method's inputs in order (the manifest's `inputs`), `--output` its outputs
(the manifest's `outputs`: a decoder's logits, an encoder's last_hidden_state [, logits]; logits when
none is named). A decoder's KV cache is the
program's mutable buffers: they live in the loaded method and carry over from one call to the next,
so the server keeps one method loaded, and loads it afresh (zeroed buffers) when a step's
`cache_position` starts at 0 — a new sequence.

Protocol as hfx_torch_runner.py: first line {"ready": true, "executorch_version": ..} (or {"error":
.., "executorch_version": ..} when the runtime refused the program; {"error": ..} alone when
executorch cannot be imported), then one {"inputs": .., "outputs": ..} request per line, answered
{"ok": true} or {"error": ..}; outputs are named after the manifest's outputs.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hfx_torch_runner import error_line, protocol_stream, serve_requests  # noqa: E402


def executorch_version() -> str:
    from executorch import version
    return getattr(version, "__version__", "?")


class StepServer:
    def __init__(self, pte: str, inputs: list[str], outputs: list[str]):
        from executorch.runtime import Runtime
        self.file = pte
        self.program = Runtime.get().load_program(Path(pte))
        self.method = self.program.load_method("forward")
        self.inputs = inputs
        self.outputs = outputs or ["logits"]

    def run(self, request: dict) -> None:
        from safetensors.torch import load_file, save_file
        feeds = load_file(request["inputs"])
        missing = [n for n in self.inputs if n not in feeds]
        if missing:
            raise ValueError(f"{request['inputs']}: no tensor {missing[0]} (the program's inputs: {', '.join(self.inputs)})")
        if "cache_position" in feeds and feeds["cache_position"].numel() and int(feeds["cache_position"][0]) == 0:
            self.method = self.program.load_method("forward")  # a new sequence: zeroed buffers
        out = self.method.execute([feeds[n].contiguous() for n in self.inputs])
        if len(out) != len(self.outputs):
            raise ValueError(f"{self.file}: forward returned {len(out)} outputs, expected {', '.join(self.outputs)}")
        save_file({n: t.contiguous().clone() for n, t in zip(self.outputs, out)}, request["outputs"])


def main() -> None:
    proto = protocol_stream()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    ap.add_argument("--serve", required=True, metavar="FILE.pte")
    ap.add_argument("--input", action="append", default=[], metavar="NAME", help="a method input, in order; repeat")
    ap.add_argument("--output", action="append", default=[], metavar="NAME", help="a method output, in order; repeat")
    args = ap.parse_args()

    def say(obj: dict) -> None:
        proto.write(json.dumps(obj) + "\n")

    t0 = time.perf_counter()
    try:
        version = executorch_version()
        import executorch.runtime  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - no executorch here: said without a version
        say({"error": error_line(exc)})
        raise SystemExit(1) from exc
    try:
        server = StepServer(args.serve, args.input, args.output)
    except Exception as exc:  # noqa: BLE001 - the runtime refused the program
        say({"error": error_line(exc), "executorch_version": version})
        raise SystemExit(1) from exc
    say({"ready": True, "executorch_version": version, "load_s": round(time.perf_counter() - t0, 3)})
    serve_requests(say, server)


if __name__ == "__main__":
    main()
