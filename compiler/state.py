"""Bundle state: graph inputs that the bundle keeps on the device between runs, each fed by a
graph output (a KV cache: `past_key` in, `present_key` out). A state pair leaves the runtime API:
the runtime holds the input's bytes (zeros at load, `reset_state()`), and at the end of each run
they are the output's value, which the next run reads as the input.

Pairs are found (state="auto") where an output is what an op writes into a graph input of its
shape and dtype (the op declares `updates_in_place`: TensorScatter, ONNX's in-place cache form;
onnxruntime's GroupQueryAttention with a cache of the context's length), or named ("past=present,..." or a dict); an
output that is not written in place is copied into the state bytes at the end of the run
(compile.py). state="none" keeps every input and output at the API.
"""
from __future__ import annotations

import numpy as np

from .errors import CompileError
from .ir import Graph, Node, Value
from .registry import fact
from .lower.strided_copy import strided_copy
from .shapes import contiguous_strides


def parse_state(spec) -> "str | dict[str, str]":
    """"auto", "none", or {input name: output name} from "in=out,in2=out2" or a dict."""
    if spec is None or spec == "auto":
        return "auto"
    if spec == "none":
        return "none"
    if isinstance(spec, str):
        pairs = {}
        for item in filter(None, (x.strip() for x in spec.split(","))):
            name, sep, out = item.partition("=")
            if not sep or not name.strip() or not out.strip():
                raise CompileError(f"state {item!r} is not INPUT=OUTPUT; give pairs such as "
                                   "past_key=present_key (several joined by commas), auto or none.")
            pairs[name.strip()] = out.strip()
        return pairs
    if isinstance(spec, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in spec.items()):
        return dict(spec)
    raise CompileError(f"state must be 'auto', 'none' or input=output pairs, not {spec!r:.60}.")


def find_state(graph: Graph, spec) -> list[tuple[Value, Value]]:
    """The state pairs of `graph` for `spec` (parse_state's forms), checked."""
    spec = parse_state(spec)
    if spec == "none":
        return []
    if spec == "auto":
        return _updated_in_place(graph)
    by_name = {v.name: v for v in graph.inputs}
    outs = {v.name: v for v in graph.outputs}
    pairs = []
    for name, out in spec.items():
        if name not in by_name or out not in outs:
            missing = f"input {name!r}" if name not in by_name else f"output {out!r}"
            raise CompileError(f"state {name}={out}: the model has no {missing}; its inputs are "
                               f"{', '.join(by_name)} and its outputs {', '.join(outs)}.")
        i, o = by_name[name], outs[out]
        if not _same_kind(i, o):
            raise CompileError(f"state {name}={out}: input {_kind(i)} and output {_kind(o)} differ; a "
                               "state's output must have its input's shape and dtype (a cache of fixed size).")
        pairs.append((i, o))
    return pairs


def _updated_in_place(graph: Graph) -> list[tuple[Value, Value]]:
    """(input, output) where an op declares its output an in-place update of its input
    (`updates_in_place` with the op: TensorScatter, GroupQueryAttention's caches), the input a
    graph input and the output a graph output of its shape and dtype."""
    inputs, pairs = {id(v) for v in graph.inputs}, []
    for o in graph.outputs:
        node = o.producer
        for out_index, in_index in (fact(node, "updates_in_place") or ()) if node is not None else ():
            i = node.input(in_index)
            if node.outputs[out_index] is o and i is not None and id(i) in inputs and _same_kind(i, o):
                pairs.append((i, o))
    return pairs


def _same_kind(a: Value, b: Value) -> bool:
    return a.shape is not None and tuple(a.shape) == tuple(b.shape or ()) and np.dtype(a.dtype) == np.dtype(b.dtype)


def _kind(v: Value) -> str:
    return f"{np.dtype(v.dtype).name}{list(v.shape) if v.shape is not None else '[?]'}"


def state_updates(graph: Graph, target) -> list:
    """The kernels that end a run: each state output not written in place into its input's bytes
    copied there, for the next run to read."""
    kernels = []
    for i, o in graph.state:
        if o.root() is not i:
            node = Node("vkc.Copy", f"{i.name}/state_update", [o], [i], sources=[f"state {i.name} <- {o.name}"])
            kernels += strided_copy(node, target, o, i, contiguous_strides(o.shape))
    return kernels
