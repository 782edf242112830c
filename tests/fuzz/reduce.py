"""Shrink a failing graph to a minimal one that fails the same way (delta debugging over nodes).

Steps, repeated until none applies: drop a graph output; cut a node (its outputs become graph
inputs: everything upstream of it that nothing else needs goes); bypass a node (its consumers read
its first input instead, where the types agree); then remove what is dead. A step is kept when the
smaller graph still gets a "bug" verdict of the same signature (a mismatch stays a mismatch, a
crash the same exception).
"""
from __future__ import annotations

import onnx
from onnx import helper, shape_inference

from .generate import Case
from .oracle import check


def _types(model: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    g = shape_inference.infer_shapes(model).graph
    return {vi.name: vi.type for vi in [*g.input, *g.value_info, *g.output]}


def prune(model: onnx.ModelProto) -> onnx.ModelProto:
    """Drop the nodes nothing reads, then the initializers and inputs no node reads."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    live = {o.name for o in g.output}
    kept = []
    for n in reversed(g.node):
        if any(o in live for o in n.output):
            kept.append(n)
            live.update(i for i in n.input if i)
    del g.node[:]
    g.node.extend(reversed(kept))
    inits = [t for t in g.initializer if t.name in live]
    del g.initializer[:]
    g.initializer.extend(inits)
    inputs = [i for i in g.input if i.name in live]
    del g.input[:]
    g.input.extend(inputs)
    return m


def _without_output(model, i):
    m = onnx.ModelProto()
    m.CopyFrom(model)
    del m.graph.output[i]
    return prune(m)


def _cut(model, i, types):
    """Node i's outputs become graph inputs."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    node = m.graph.node[i]
    outs = [o for o in node.output if o]
    if any(o not in types for o in outs):
        return None
    del m.graph.node[i]
    m.graph.input.extend(helper.make_value_info(o, types[o]) for o in outs
                         if o not in {x.name for x in m.graph.input})
    return prune(m)


def _bypass(model, i, types):
    """Node i's consumers (and graph outputs) read its first input instead."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    node = m.graph.node[i]
    src, dst = (node.input[0] if node.input else ""), node.output[0]
    if not src or src not in types or dst not in types or types[src] != types[dst]:
        return None
    del m.graph.node[i]
    for n in m.graph.node:
        for k, x in enumerate(n.input):
            if x == dst:
                n.input[k] = src
    for o in m.graph.output:
        if o.name == dst:
            if src in {x.name for x in m.graph.output}:
                return None
            o.name = src
    return prune(m)


def reduce_case(case: Case, signature: str, *, budget: int = 200, log=print) -> Case:
    """The smallest graph found, within `budget` checks, that still fails with `signature`."""
    tries = 0

    def fails(model) -> bool:
        nonlocal tries
        tries += 1
        try:
            onnx.checker.check_model(model, full_check=True)
        except Exception:  # noqa: BLE001 - an invalid candidate simply does not count
            return False
        v = check(Case(case.seed, model, case.precision, case.target))
        return v.kind == "bug" and v.signature == signature

    model = prune(case.model)
    progress = True
    while progress and tries < budget:
        progress = False
        for i in reversed(range(len(model.graph.output))):
            if len(model.graph.output) > 1 and i < len(model.graph.output) and tries < budget:
                smaller = _without_output(model, i)
                if fails(smaller):
                    model, progress = smaller, True
        for step in (_cut, _bypass):
            i = 0
            while i < len(model.graph.node) and tries < budget:
                smaller = step(model, i, _types(model))
                if smaller is not None and len(smaller.graph.node) < len(model.graph.node) and fails(smaller):
                    model, progress = smaller, True
                else:
                    i += 1
    log(f"  reduced seed {case.seed} to {len(model.graph.node)} node(s) in {tries} checks")
    return Case(case.seed, model, case.precision, case.target, [n.op_type for n in model.graph.node])
