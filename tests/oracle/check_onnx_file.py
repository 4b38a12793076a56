#!/usr/bin/env python3
"""Checks an ONNX file written by hfx: onnx's full checker (with shape inference), then one run in
onnxruntime on random inputs. Symbolic dims take the values given with --dim name=value (default 2).

    .venv/bin/python tests/oracle/check_onnx_file.py out/model.onnx --dim batch_size=3

Prints each output's name, dtype, shape and a few values; exits non-zero on any failure.
"""
import argparse
import sys

import numpy as np
import onnx
import onnxruntime as ort


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--dim", action="append", default=[], help="symbolic dim value, name=value")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    dims = {k: int(v) for k, v in (d.split("=", 1) for d in args.dim)}

    onnx.checker.check_model(args.model, full_check=True)
    model = onnx.load(args.model, load_external_data=False)
    print(f"checker ok: ir_version={model.ir_version} opset="
          f"{[(o.domain, o.version) for o in model.opset_import]} nodes={len(model.graph.node)} "
          f"initializers={len(model.graph.initializer)}")

    sess = ort.InferenceSession(args.model, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(args.seed)
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else dims.get(d, 2) for d in i.shape]
        if "float" in i.type:
            dtype = {"tensor(float)": np.float32, "tensor(float16)": np.float16,
                     "tensor(double)": np.float64}[i.type]
            feeds[i.name] = rng.standard_normal(shape).astype(dtype)
        elif "int" in i.type:
            feeds[i.name] = rng.integers(0, 8, size=shape).astype(np.int64 if "64" in i.type else np.int32)
        elif i.type == "tensor(bool)":
            feeds[i.name] = rng.integers(0, 2, size=shape).astype(bool)
        else:
            raise SystemExit(f"input {i.name}: type {i.type} not handled")
    outs = sess.run(None, feeds)
    for o, v in zip(sess.get_outputs(), outs):
        print(f"{o.name}: {v.dtype} {list(v.shape)} {v.ravel()[:6]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
