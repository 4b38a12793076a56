"""XNNPACK partitions of hfx's ExecuTorch programs (`--executorch-backend xnnpack`): each run of ops
XNNPACK covers is ONE delegate call of one XNNGraph with several nodes, not one call per linear layer.

The payloads are decoded here independently of hfx (flatc and the XNNPACK schema the executorch wheel
ships): a Llama-style step has its elementwise arithmetic (RMSNorm's square, scale and rsqrt, SiLU's
sigmoid and products, the residual adds), the attention matmuls (BatchMatrixMultiply), softmax and the
projections in XNNPACK, with fewer delegate calls than linear layers; the cache update (index_put_)
stays a portable kernel. Numbers and greedy tokens against Transformers are test_executorch.py's
(every family, xnnpack and portable); `hfx verify`'s op placement names the nodes too.
"""
from __future__ import annotations

import collections
import json
import struct
import tempfile
from pathlib import Path

from conftest import run_hfx
from test_executorch import et_base, et_export, pte_of  # noqa: F401 (fixtures)


def xnnpack_graphs(pte: Path) -> tuple[list[dict], dict]:
    """(the XNNGraph of every delegate call of forward, in call order, as JSON; forward's kernel calls by name)."""
    from importlib import resources
    from executorch.backends.xnnpack import serialization
    from executorch.exir._serialize._flatbuffer import _flatc_decompile
    from executorch.exir._serialize._program import deserialize_pte_binary
    pte_file = deserialize_pte_binary(pte.read_bytes())
    (forward,) = [p for p in pte_file.program.execution_plan if p.name == "forward"]
    graphs, kernels = [], collections.Counter()
    with tempfile.TemporaryDirectory() as d:
        schema = Path(d) / "schema.fbs"
        schema.write_bytes(resources.files(serialization).joinpath("schema.fbs").read_bytes())
        for ins in forward.chains[0].instructions:
            args = ins.instr_args
            if type(args).__name__ == "KernelCall":
                op = forward.operators[args.op_index]
                kernels[op.name] += 1
                continue
            if type(args).__name__ != "DelegateCall":
                continue
            delegate = forward.delegates[args.delegate_index]
            assert delegate.id == "XnnpackBackend"
            blob = pte_file.program.backend_delegate_data[delegate.processed.index].data
            assert blob[4:8] == b"XH00"
            offset, size = struct.unpack("<II", blob[10:18])
            binary = Path(d) / "graph.bin"
            binary.write_bytes(blob[offset:offset + size])
            _flatc_decompile(d, str(schema), str(binary))
            graph = json.loads((Path(d) / "graph.json").read_text())
            graph["args"] = list(args.args)
            graphs.append(graph)
    return graphs, kernels


def node_counts(graphs: list[dict]) -> collections.Counter:
    return collections.Counter(n["xnode_union_type"] for g in graphs for n in g["xnodes"])


def test_a_decoder_step_runs_in_multi_node_xnnpack_graphs(et_export):
    graphs, kernels = xnnpack_graphs(pte_of(et_export("llama", "xnnpack")))
    nodes = node_counts(graphs)
    layers = 2  # tiny llama: 7 linear layers a layer, and the lm head
    assert nodes["XNNFullyConnected"] == 7 * layers + 1, nodes
    # Fewer delegate calls than linear layers: q, k and v (and gate and up) read one input in one graph.
    assert len(graphs) < nodes["XNNFullyConnected"], (len(graphs), nodes)
    assert max(len(g["xnodes"]) for g in graphs) >= 10, [len(g["xnodes"]) for g in graphs]
    # The attention matmuls, softmax, SiLU, RMSNorm and the residual adds, each layer.
    assert nodes["XNNBatchMatrixMultiply"] == 2 * layers, nodes
    assert nodes["XNNSoftmax"] == layers, nodes
    assert nodes["XNNSigmoid"] == layers, nodes
    assert nodes["XNNReciprocalSquareRoot"] == 2 * layers + 1, nodes  # two norms a layer and the final one
    assert nodes["XNNGlobalAvgPooling2d"] == 2 * layers + 1, nodes    # RMSNorm's mean over the hidden dim
    assert nodes["XNNMultiply"] >= 6 * layers and nodes["XNNAdd"] >= 3 * layers, nodes
    # Each layer's attention, from the cache read (GQA's repeat as a Concatenate) to o_proj, is one graph.
    attention = [g for g in graphs if {"XNNBatchMatrixMultiply", "XNNSoftmax", "XNNConcatenate2", "XNNFullyConnected"}
                 <= {n["xnode_union_type"] for n in g["xnodes"]}]
    assert len(attention) == layers, [sorted({n["xnode_union_type"] for n in g["xnodes"]}) for g in graphs]
    # What XNNPACK has no node for stays portable: the cache update, the embedding, none of the arithmetic.
    assert kernels["aten::index_put_"] == 2 * layers and kernels["aten::embedding"] == 1, kernels
    for gone in ("aten::mm", "aten::bmm", "aten::_softmax", "aten::sigmoid", "aten::mean", "aten::sqrt", "aten::reciprocal",
                 "aten::permute_copy"):
        assert kernels[gone] == 0, (gone, kernels)
    # External values are the DelegateCall's args: inputs (flag 1), then outputs (flag 2), external id k = args[k].
    for g in graphs:
        tensors = [v["xvalue_union"].get("tensor_value", v["xvalue_union"]) for v in g["xvalues"]]
        externals = sorted((t["external_id"], t["flags"]) for t in tensors if t["external_id"] != 0xFFFFFFFF)
        assert [e for e, _ in externals] == list(range(len(g["args"]))) == list(range(g["num_externs"])), externals
        flags = [f for _, f in externals]
        assert flags == sorted(flags) and set(flags) == {1, 2}, flags


def fully_connected_dtypes(graph: dict) -> list[tuple[str, str]]:
    """(input datatype, filter datatype) of each FullyConnected node of an XNNGraph."""
    types = {}
    for v in graph["xvalues"]:
        u = v["xvalue_union"]
        t = u.get("tensor_value", u)
        types[t["id_out"]] = t.get("datatype", "")
    return [(types[n["xnode_union"]["input1_id"]], types[n["xnode_union"]["filter_id"]])
            for n in graph["xnodes"] if n["xnode_union_type"] == "XNNFullyConnected"]


def test_f16_and_int8_linears_run_inside_the_partitions(tiny_checkpoint, tmp_path):
    """f16 linears (f32 activations times f16 filters: XNNPACK computes them in f32, not in f16 with
    f16 sums where the CPU has f16 arithmetic) and weight-only int8 (qcint8 filters) are nodes of the
    same multi-node graphs as the f32 arithmetic around them, with no Convert around them."""
    for extra in (["--dtype", "f16"], ["--quantize", "int8:channel"]):
        out = tmp_path / extra[1].replace(":", "-")
        run_hfx("export", "--model", tiny_checkpoint("llama"), "--format", "executorch", "--static-cache", "--max-cache-len", "32",
                *extra, "--no-verify", "--quiet", out)
        graphs, _ = xnnpack_graphs(pte_of(out))
        nodes = node_counts(graphs)
        assert nodes["XNNFullyConnected"] == 15 and nodes["XNNBatchMatrixMultiply"] == 4, (extra, nodes)
        assert len(graphs) < 15, (extra, len(graphs))
        pairs = [p for g in graphs for p in fully_connected_dtypes(g)]
        f32, f16, q8 = "xnn_datatype_fp32", "xnn_datatype_fp16", "xnn_datatype_qcint8"
        # f16: every linear, lm_head included; int8: all but lm_head (--quantize-lm-head quantizes it)
        want = {(f32, f16): 15} if extra[0] == "--dtype" else {(f32, q8): 14, (f32, f32): 1}
        assert collections.Counter(pairs) == want, pairs
        # none around a linear; an f16 program's one Convert is its f16 embedding rows widened to f32
        assert nodes["XNNConvert"] == (1 if extra[0] == "--dtype" else 0), nodes


def test_op_placement_names_the_xnnpack_nodes(et_export):
    """`hfx verify`'s op placement: the delegate calls, the XNNPACK nodes inside them, and the portable kernels."""
    out = et_export("llama", "xnnpack")
    text = run_hfx("verify", out, "--runtime", "executorch").stdout
    assert "XnnpackBackend (delegate) x" in text and "XnnpackBackend: XNNFullyConnected x15" in text, text
    assert "XnnpackBackend: XNNBatchMatrixMultiply x4" in text and "aten::index_put_ x4" in text, text
