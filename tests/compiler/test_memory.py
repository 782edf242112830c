"""The memory planner on real lowered graphs: tensors alive at the same dispatch never share
bytes, views share their source's offset, and the arena meets the lower bound."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from compiler.frontend import to_ir
from compiler.lower import lower_graph
from compiler.memory import ALIGNMENT, align, plan_memory
from compiler.passes import fold_constants, run_passes
from compiler.targets import get_target
from onnx_builders import light_model, mlp, mobilenetv2_block, small_cnn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
from zoo import resnet18  # noqa: E402

MODELS = {"mlp": lambda: mlp(64, 128, 10), "small_cnn": small_cnn, "mobilenetv2_block": mobilenetv2_block,
          "resnet18": lambda: resnet18(resolution=64), "light_squeezenet": lambda: light_model("squeezenet")}


def _lifetimes(graph, kernels):
    first, last = {}, {}
    for v in graph.inputs:
        first[id(v)] = -1
    for step, k in enumerate(kernels):
        for i, v in enumerate(k.bindings):
            r = v.root()
            if r.is_constant:
                continue
            if i in k.writes:
                first.setdefault(id(r), step)
            last[id(r)] = max(last.get(id(r), step), step)
    for v in graph.outputs:
        last[id(v.root())] = len(kernels)
    return first, last


@pytest.mark.parametrize("name", MODELS)
def test_plan_never_overlaps_live_tensors_and_meets_the_bound(name):
    graph = run_passes(fold_constants(to_ir(MODELS[name]())))
    kernels = lower_graph(graph, get_target("generic"))
    plan = plan_memory(kernels, graph.inputs, graph.outputs)
    first, last = _lifetimes(graph, kernels)
    roots = {id(v.root()): v.root() for k in kernels for v in k.bindings if not v.root().is_constant}
    spans = {r: (plan.offsets[r], plan.offsets[r] + align(max(v.nbytes, 4))) for r, v in roots.items()}
    assert all(off % ALIGNMENT == 0 for off, _ in spans.values())
    assert max(end for _, end in spans.values()) == plan.arena_bytes
    ids = list(spans)
    for i, a in enumerate(ids):
        for b in ids[i + 1:]:
            alive_together = first[a] <= last[b] and first[b] <= last[a]
            bytes_overlap = spans[a][0] < spans[b][1] and spans[b][0] < spans[a][1]
            assert not (alive_together and bytes_overlap), (roots[a].name, roots[b].name)
    assert plan.lower_bound_bytes <= plan.arena_bytes <= plan.intermediates_sum_bytes
    # Greedy by size reaches the bound on these graphs (measured; a regression shows here).
    assert plan.arena_bytes == plan.lower_bound_bytes
