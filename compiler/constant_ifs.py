"""If nodes whose condition is known at compile time replaced by the branch they take.

The TorchScript exporter writes Python's `if` over a shape as an If node (transformers'
`if height > max_positions:` in SAM 3's embeddings, Mamba's `if seq_len == 1:`); with the input
shapes pinned, constant folding computes its condition. The branch taken is spliced into the
ONNX graph in the If's place (its names prefixed with the If's, its outputs copied to the If's),
and the graph is converted again, so shape inference sees the branch as ordinary nodes. An If
whose condition depends on the inputs' values stays, and is refused as an unsupported op."""
from __future__ import annotations

import numpy as np
import onnx

from .frontend import to_ir
from .ir import Graph, is_onnx

# Branches may hold Ifs of their own, decided in the next round.
ROUNDS = 8


def take_constant_branches(model: onnx.ModelProto, input_shapes, front,
                           arrays: dict | None = None) -> tuple[onnx.ModelProto, Graph]:
    """(the model with every decidable If replaced by its branch, its folded IR graph);
    `front(graph)` folds constants; arrays: the initializers' arrays, where the caller has them."""
    graph = front(to_ir(model, input_shapes, arrays))
    for _ in range(ROUNDS):
        decided = {n.name: bool(np.asarray(n.inputs[0].data).reshape(-1)[0]) for n in graph.nodes
                   if is_onnx(n, "If") and n.inputs[0] is not None and n.inputs[0].is_constant}
        if not decided:
            break
        model = _splice(model, decided)
        graph = front(to_ir(model, input_shapes, arrays))
    return model, graph


def _splice(model: onnx.ModelProto, decided: dict[str, bool]) -> onnx.ModelProto:
    spliced = onnx.ModelProto()
    spliced.CopyFrom(model)
    g = spliced.graph
    nodes = []
    for i, node in enumerate(g.node):
        name = node.name or f"{node.op_type}_{i}"   # the IR's name of the node (frontend.to_ir)
        if node.op_type != "If" or node.domain not in ("", "ai.onnx") or name not in decided:
            nodes.append(node)
            continue
        taken = "then_branch" if decided[name] else "else_branch"
        branch = next(a.g for a in node.attribute if a.name == taken)
        prefix = f"{name}/{taken.split('_')[0]}/"
        local = {t.name for t in branch.initializer} | {o for n in branch.node for o in n.output if o}

        def renamed(x: str) -> str:
            return prefix + x if x in local else x
        for t in branch.initializer:
            copy = onnx.TensorProto()
            copy.CopyFrom(t)
            copy.name = renamed(t.name)
            g.initializer.append(copy)
        for j, n in enumerate(branch.node):
            copy = onnx.NodeProto()
            copy.CopyFrom(n)
            copy.name = prefix + (n.name or f"{n.op_type}_{j}")
            copy.input[:] = [renamed(x) if x else x for x in n.input]
            copy.output[:] = [renamed(x) if x else x for x in n.output]
            nodes.append(copy)
        for k, (out, target) in enumerate(zip(branch.output, node.output)):
            nodes.append(onnx.helper.make_node("Identity", [renamed(out.name)], [target], name=f"{prefix}output_{k}"))
    del g.node[:]
    g.node.extend(nodes)
    return spliced
