"""torch.roll as exported (Slices and a Concat per axis) becomes one vkc.Roll node
(compiler/passes/rolls.py)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from tests.harness import check_against_onnxruntime, passes_graph
from tests.onnx_builders import make_model, tensor_info

SHAPE = [1, 7, 6, 5]
INT_MAX = 9223372036854775807


def _rolled(rolls, shape=SHAPE, dtype=np.float32, shared=False):
    """x -> torch.roll(x, shift, axis) for each (shift, axis) in turn, as torch.onnx exports it:
    Slice(-shift:) and Slice(:-shift) concatenated on the axis. shared: the first Slice is also
    a graph output."""
    inits, nodes, x = [], [], "x"

    def const(name, values):
        inits.append(numpy_helper.from_array(np.array(values, np.int64), name))
        return name
    for i, (shift, axis) in enumerate(rolls):
        tail, head = f"tail{i}", f"head{i}"
        nodes += [helper.make_node("Slice", [x, const(f"s{i}a", [-shift]), const(f"e{i}a", [INT_MAX]),
                                             const(f"ax{i}a", [axis])], [tail], name=f"Slice_{i}a"),
                  helper.make_node("Slice", [x, const(f"s{i}b", [0]), const(f"e{i}b", [-shift]),
                                             const(f"ax{i}b", [axis])], [head], name=f"Slice_{i}b"),
                  helper.make_node("Concat", [tail, head], [f"r{i}"], axis=axis, name=f"Concat_{i}")]
        x = f"r{i}"
    nodes.append(helper.make_node("Identity", [x], ["y"], name="out"))
    outputs = [tensor_info("y", shape, dtype)]
    if shared:
        tail_shape = list(shape)
        tail_shape[rolls[0][1]] = rolls[0][0]
        outputs.append(tensor_info("tail0", tail_shape, dtype))
    return make_model(helper.make_graph(nodes, "roll", [tensor_info("x", shape, dtype)], outputs,
                                       initializer=inits))


def _ops(model, precision="fp32"):
    return [n.op_type for n in passes_graph(model, precision).nodes]


@pytest.mark.parametrize("rolls", [[(3, 1)], [(3, 1), (2, 2)], [(4, 1), (3, 2), (3, 1)], [(1, 3)]],
                         ids=["one-axis", "two-axes", "back-and-forth", "innermost"])
def test_rolls_are_one_kernel(rolls):
    model = _rolled(rolls)
    assert _ops(model) == ["vkc.Roll"]
    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    np.testing.assert_array_equal(check_against_onnxruntime(model, feeds={"x": x}, exact=True)["outputs"]["y"],
                                  _numpy_roll(x, rolls))
    check_against_onnxruntime(model, feeds={"x": x}, precision="fp16", rtol_l2=1e-3)


def _numpy_roll(x, rolls):
    for shift, axis in rolls:
        x = np.roll(x, shift, axis)
    return x


def test_rolls_of_float16_and_int64():
    for dtype in (np.float16, np.int64):
        model = _rolled([(3, 1), (2, 2)], dtype=dtype)
        assert _ops(model) == ["vkc.Roll"]
        check_against_onnxruntime(model, exact=True)


def test_a_slice_read_elsewhere_stays():
    model = _rolled([(3, 1)], shared=True)
    assert sorted(_ops(model)) == ["Slice", "vkc.Roll"]
    check_against_onnxruntime(model, exact=True)


def test_not_a_roll():
    # the head does not start at 0: a crop, not a roll
    model = _rolled([(3, 1)])
    starts = next(t for t in model.graph.initializer if t.name == "s0b")
    starts.CopyFrom(numpy_helper.from_array(np.array([1], np.int64), "s0b"))
    model.graph.output[0].type.tensor_type.shape.dim[1].dim_value = 6
    assert "vkc.Roll" not in _ops(model)
