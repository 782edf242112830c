"""compile_model(argmax_output="logits") (`vkc compile --argmax-output logits`): one more bundle
output, `logits_argmax`, the index of the largest value of the output's last row (the last
position's logits: [..., S, V] -> [...], int64), computed on the device by ArgMax over every
position and a Gather of the last (ties to the first index, as numpy's and onnxruntime's argmax). Greedy decoding (runtime_min/generate.py)
then copies back one token id a step instead of the vocabulary's logits; the logits output stays
and is copied only when asked for (Model.run(..., fetch=...))."""
from __future__ import annotations

import numpy as np

from .errors import CompileError
from .ir import Graph, Node, Value

SUFFIX = "_argmax"


def argmax_name(output: str) -> str:
    return output + SUFFIX


def add_argmax_output(graph: Graph, output: str | None) -> Graph:
    """The graph with the argmax of `output`'s last row as a further output (None: as it is)."""
    if output is None:
        return graph
    if not isinstance(output, str):
        raise CompileError(f"--argmax-output must name an output, not {output!r:.60}.")
    found = [v for v in graph.outputs if v.name == output]
    names = ", ".join(v.name for v in graph.outputs)
    if not found:
        raise CompileError(f"--argmax-output {output}: the model has no output '{output}'; its "
                           f"outputs: {names}.")
    logits = found[0]
    if np.dtype(logits.dtype).kind != "f" or logits.shape is None or len(logits.shape) == 0:
        raise CompileError(f"--argmax-output {output}: '{output}' is {np.dtype(logits.dtype).name} "
                           f"{list(logits.shape or [])}; name a float output of rank >= 1 (the "
                           "logits [..., positions, vocabulary]).")
    name = argmax_name(output)
    if any(v.name == name for v in graph.values()):
        raise CompileError(f"--argmax-output {output}: the model already has a tensor '{name}'.")
    rank = len(logits.shape)
    # every position's argmax, then the last one's: a Gather of S int64 values instead of a copy
    # of the last row of logits; at S = 1 (a decode step) the argmax itself, its positions' axis
    # squeezed (a view: no kernel)
    index = Value(name if rank == 1 else f"{name}/rows", np.dtype(np.int64), None)
    nodes = [Node("ArgMax", index.name, [logits], [index], {"axis": -1, "keepdims": int(rank == 1)})]
    if rank >= 2:
        index = Value(name, np.dtype(np.int64), None)
        if logits.shape[-2] == 1:
            axes = Value(f"{name}/axis", np.dtype(np.int64), (1,), data=np.array([rank - 2], np.int64))
            nodes.append(Node("Squeeze", name, [nodes[0].outputs[0], axes], [index]))
        else:
            last = Value(f"{name}/last", np.dtype(np.int64), (), data=np.array(-1, np.int64))
            nodes.append(Node("Gather", name, [nodes[0].outputs[0], last], [index], {"axis": rank - 2}))
    graph.nodes += nodes
    graph.outputs.append(index)
    graph.relink()
    return graph
