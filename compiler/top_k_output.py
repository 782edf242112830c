"""compile_model(top_k_output="logits:40") (`vkc compile --top-k-output logits:40`): two more bundle
outputs, `logits_topk_values` and `logits_topk_indices` (int64), the K largest values of the
output's last row (the last position's logits: [..., S, V] -> [..., K]) and their indices, largest
first, ties to the lower index: a Gather of the last position and TopK (lower/top_k.py), on the
device. Sampling with top_k <= K (runtime_min/generate.py) then copies back 2K numbers a step
instead of the vocabulary's logits, and draws exactly what it draws from the logits; the logits
output stays and is copied only when asked for (Model.run(..., fetch=...))."""
from __future__ import annotations

import numpy as np

from .errors import CompileError
from .ir import Graph, Node, Value
from .lower.top_k import MAX_K

VALUES, INDICES = "_topk_values", "_topk_indices"


def top_k_names(output: str) -> tuple[str, str]:
    return output + VALUES, output + INDICES


def parse(option: str) -> tuple[str, int]:
    """'NAME:K' -> (NAME, K)."""
    name, _, k = option.rpartition(":") if isinstance(option, str) else ("", "", "")
    if not name or not k.isdigit() or not 1 <= int(k) <= MAX_K:
        raise CompileError(f"--top-k-output takes an output and a K from 1 to {MAX_K} as NAME:K (logits:40), "
                           f"not {option!r:.60}.")
    return name, int(k)


def add_top_k_output(graph: Graph, option: str | None) -> Graph:
    """The graph with the top K of `option`'s output's last row as two further outputs (None: as it is)."""
    if option is None:
        return graph
    output, k = parse(option)
    found = [v for v in graph.outputs if v.name == output]
    if not found:
        names = ", ".join(v.name for v in graph.outputs)
        raise CompileError(f"--top-k-output {option}: the model has no output '{output}'; its outputs: {names}.")
    logits = found[0]
    shape = logits.shape
    if np.dtype(logits.dtype).kind != "f" or not shape:
        raise CompileError(f"--top-k-output {option}: '{output}' is {np.dtype(logits.dtype).name} {list(shape or [])}; "
                           "name a float output of rank >= 1 (the logits [..., positions, vocabulary]).")
    if k > shape[-1]:
        raise CompileError(f"--top-k-output {option}: K = {k} is more than the {shape[-1]} entries of a row of "
                           f"'{output}' {list(shape)}.")
    values, indices = top_k_names(output)
    taken = [n for n in (values, indices) if any(v.name == n for v in graph.values())]
    if taken:
        raise CompileError(f"--top-k-output {option}: the model already has a tensor '{taken[0]}'.")
    rank, nodes, row = len(shape), [], logits
    if rank >= 2:
        # the last position's row first: TopK then scans one row, not every position of a prompt
        last = Value(f"{values}/last", np.dtype(np.int64), (), data=np.array(-1, np.int64))
        row = Value(f"{values}/row", logits.dtype, None)
        nodes.append(Node("Gather", row.name, [logits, last], [row], {"axis": rank - 2}))
    outs = [Value(values, logits.dtype, None), Value(indices, np.dtype(np.int64), None)]
    if graph.opset >= 10:
        kv = Value(f"{values}/k", np.dtype(np.int64), (1,), data=np.array([k], np.int64))
        nodes.append(Node("TopK", values, [row, kv], outs, {"axis": -1}))
    else:
        nodes.append(Node("TopK", values, [row], outs, {"axis": -1, "k": k}))
    graph.nodes += nodes
    graph.outputs += outs
    graph.relink()
    return graph
