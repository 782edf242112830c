"""A Concat of strided Slices that together hold each element of one tensor once becomes one
Transpose between two views (compiler/passes/interleaved_slices.py): Swin's patch merging,
YOLOv5's Focus; a Concat of Slices that do not tile their source so stays as it is."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from tests.harness import check_against_onnxruntime, passes_graph
from tests.onnx_builders import make_model, tensor_info

INT_MAX = 9223372036854775807


def _merged(shape, picks, axis, *, also_out=None):
    """x -> Concat([x[pick] for pick in picks], axis), each pick {axis: (start, step)} written as
    torch.onnx exports x[..., a::s, b::t, ...]: one Slice per axis, the first axes' Slices shared
    by the picks that share them. also_out: the name of a Slice output also made a graph output."""
    inits, nodes, made = [], [], {}

    def const(values):
        name = f"c{len(inits)}"
        inits.append(numpy_helper.from_array(np.array(values, np.int64), name))
        return name
    parts = []
    for pick in picks:
        x, key = "x", ()
        for a in sorted(pick):
            key += ((a,) + pick[a],)
            if key not in made:
                made[key] = f"s{len(made)}"
                start, step = pick[a]
                nodes.append(helper.make_node("Slice", [x, const([start]), const([INT_MAX]), const([a]),
                                                        const([step])], [made[key]], name=made[key]))
            x = made[key]
        parts.append(x)
    nodes.append(helper.make_node("Concat", parts, ["y"], axis=axis, name="concat"))
    outputs = [tensor_info("y", None)] + ([tensor_info(also_out, None)] if also_out else [])
    return make_model(helper.make_graph(nodes, "merge", [tensor_info("x", shape)], outputs,
                                        initializer=inits))


def _ops(model):
    return [n.op_type for n in passes_graph(model).nodes]


# Swin's PatchMerging: x0 = x[:, 0::2, 0::2], x1 = x[:, 1::2, 0::2], x2 = x[:, 0::2, 1::2],
# x3 = x[:, 1::2, 1::2], concatenated on channels (last).
SWIN = [{1: (0, 2), 2: (0, 2)}, {1: (1, 2), 2: (0, 2)}, {1: (0, 2), 2: (1, 2)}, {1: (1, 2), 2: (1, 2)}]
# YOLOv5's Focus: x[..., ::2, ::2], x[..., 1::2, ::2], x[..., ::2, 1::2], x[..., 1::2, 1::2] on NCHW,
# concatenated on channels (axis 1).
FOCUS = [{2: (0, 2), 3: (0, 2)}, {2: (1, 2), 3: (0, 2)}, {2: (0, 2), 3: (1, 2)}, {2: (1, 2), 3: (1, 2)}]
# Steps of 3 and 2, the columns' digit the more significant, on a middle axis.
MIXED = [{0: (r, 3), 2: (c, 2)} for c in range(2) for r in range(3)]


@pytest.mark.parametrize("shape,picks,axis", [([2, 6, 4, 5], SWIN, 3), ([1, 3, 6, 8], FOCUS, 1),
                                              ([6, 3, 4], MIXED, 1)], ids=["swin", "focus", "mixed"])
def test_interleaved_slices_are_one_transpose(shape, picks, axis):
    model = _merged(shape, picks, axis)
    assert _ops(model) == ["Transpose"]
    check_against_onnxruntime(model, exact=True)
    check_against_onnxruntime(model, target="lavapipe", precision="fp16", rtol_l2=1e-3)


@pytest.mark.parametrize("picks", [
    SWIN[:3],                                 # an element of x missing
    [SWIN[0], SWIN[3], SWIN[1], SWIN[2]],     # starts that count the inputs in no digit order
    SWIN[:3] + [SWIN[0]],                     # one part twice
    SWIN[:3] + [{1: (2, 1), 2: (2, 1)}],     # a corner x[:, 2:, 2:] for the last: unequal steps
], ids=["missing", "out-of-order", "twice", "unequal-steps"])
def test_slices_that_do_not_tile_stay(picks):
    model = _merged([1, 4, 4, 3], picks, 3)
    assert "Concat" in _ops(model)
    check_against_onnxruntime(model, exact=True)


def test_a_slice_read_elsewhere_stays():
    """The rows' Slice that two parts share is also a graph output: it stays, the Concat goes."""
    model = _merged([1, 4, 4, 3], SWIN, 3, also_out="s0")
    assert sorted(_ops(model)) == ["Slice", "Transpose"]
    check_against_onnxruntime(model, exact=True)
