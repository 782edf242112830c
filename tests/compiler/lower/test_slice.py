"""Slice and Split against onnxruntime."""

from dataclasses import replace

import numpy as np
import pytest

from compiler.compile import compile_with_kernels
from compiler.targets import TARGETS
from tests.harness import check_against_onnxruntime
from tests.onnx_builders import GraphBuilder, single_op_model

def at_opset(model, version):
    """The model re-targeted at another opset, output shapes re-inferred."""
    from tests.onnx_builders import _fill_output_shapes

    model.opset_import[0].version = version
    return _fill_output_shapes(model)


SLICE_CASES = [  # starts, ends, axes, steps on a [4, 6, 8] input
    pytest.param([1], [3], [0], None, id="axis0"),
    pytest.param([0, 2], [4, 6], [1, 2], None, id="two-axes"),
    pytest.param([-3], [100], [2], None, id="negative-start-huge-end"),
    pytest.param([1, 0, 1], [-1, 6, 8], None, [1, 2, 3], id="steps"),
    pytest.param([5], [-100], [1], [-1], id="reverse"),
    pytest.param([7, 1], [0, 6], [2, 1], [-2, 2], id="negative-step-2"),
    pytest.param([0], [1], [-1], None, id="negative-axis-one-element"),
    pytest.param([-10], [2], [0], None, id="start-clamped"),
]


@pytest.mark.parametrize("starts,ends,axes,steps", SLICE_CASES)
def test_slice(starts, ends, axes, steps):
    inits = {"starts": np.array(starts, np.int64), "ends": np.array(ends, np.int64)}
    names = ["x", "starts", "ends"]
    if axes is not None or steps is not None:
        axes = axes if axes is not None else list(range(len(starts)))
        inits["axes"] = np.array(axes, np.int64)
        names.append("axes")
    if steps is not None:
        inits["steps"] = np.array(steps, np.int64)
        names.append("steps")
    check_against_onnxruntime(single_op_model("Slice", {"x": [4, 6, 8]}, initializers=inits,
                                              node_inputs=names))


def test_slice_int64_data():
    model = single_op_model("Slice", {"x": [5, 6]}, input_dtypes={"x": np.int64},
                            output_dtypes=[np.int64],
                            initializers={"s": np.array([1, 4], np.int64), "e": np.array([4, 0], np.int64),
                                          "a": np.array([0, 1], np.int64), "st": np.array([1, -1], np.int64)})
    check_against_onnxruntime(model)


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.float16], ids=lambda d: np.dtype(d).name)
def test_slice_packed_reversed(dtype):
    """A negative step over 8/16-bit elements: each output word gathers from several input words."""
    model = single_op_model("Slice", {"x": [5, 7]}, input_dtypes={"x": dtype}, output_dtypes=[dtype],
                            initializers={"s": np.array([4, 6], np.int64), "e": np.array([0, -100], np.int64),
                                          "a": np.array([0, 1], np.int64), "st": np.array([-1, -2], np.int64)})
    check_against_onnxruntime(model, exact=True)


def test_split_int8():
    model = single_op_model("Split", {"x": [3, 11]}, {"axis": 1}, input_dtypes={"x": np.int8},
                            initializers={"split": np.array([3, 5, 3], np.int64)},
                            outputs=("a", "b", "c"), output_dtypes=[np.int8] * 3)
    check_against_onnxruntime(model, exact=True)


@pytest.mark.parametrize("shape,axis,split", [
    pytest.param([6, 4], 0, None, id="equal-axis0"),
    pytest.param([2, 9, 3], 1, [2, 3, 4], id="variable-axis1"),
    pytest.param([2, 4, 6], -1, [1, 5], id="negative-axis"),
    pytest.param([1, 64, 7, 7], 1, [32, 32], id="channel-halves"),
])
def test_split(shape, axis, split):
    n = len(split) if split else 3
    outputs = [f"y{i}" for i in range(n)]
    inits = {"split": np.array(split, np.int64)} if split else {}
    model = single_op_model("Split", {"x": shape}, {"axis": axis}, initializers=inits, outputs=outputs)
    check_against_onnxruntime(model)


def test_split_num_outputs_uneven():
    """Opset 18: num_outputs with a last, smaller part."""
    model = single_op_model("Split", {"x": [2, 7]}, {"axis": 1, "num_outputs": 3},
                            outputs=["a", "b", "c"])
    model = at_opset(model, 18)
    check_against_onnxruntime(model)


def test_slice_opset9_attributes():
    model = at_opset(single_op_model("Slice", {"x": [4, 6, 8]}, {"starts": [1, -4], "ends": [3, 1000],
                                                                 "axes": [0, 2]}), 9)
    check_against_onnxruntime(model)


def test_split_opset11_attribute():
    model = at_opset(single_op_model("Split", {"x": [2, 9]}, {"axis": 1, "split": [4, 5]},
                                     outputs=["a", "b"]), 11)
    check_against_onnxruntime(model)


@pytest.mark.parametrize("target,precision", [("generic", "fp32"), ("nvidia", "fp32"), ("generic", "fp16")])
def test_parts_read_in_place_by_shifted_loads(target, precision):
    """A channel Split at batch 1 (ShuffleNet's) whose parts only 1x1 convs read costs no copy:
    each conv's matmul binds the Split's input from the 256-byte boundary at or below its part
    and shifts its loads of B (6 channels of 6x6 float32 are 864 bytes: the second part starts
    96 bytes past a boundary, 24 elements; the third 128, 32 elements; in float16, 192 bytes in
    for the third: 96 elements). The first part, at offset 0, is bound from there; the second
    keeps its copy, as a Sigmoid reads it too. Slices of the flattened input feed a MatMul's A:
    8 elements in (32 or 16 bytes) it shifts A; 2 elements in (8 or 4 bytes, off the 16 that
    vector loads need) it stays a copy. (The nvidia profile's float16 products run on
    cooperative matrices, which lavapipe lacks and which keep the copy.)"""
    g = GraphBuilder("split_in_place", seed=3)
    x = g.node("Relu", [g.input("x", [1, 40, 6, 6])])
    parts = g.node("Split", [x, g.const("split", np.array([6, 18, 16], np.int64))], 3, axis=1)
    outs = [g.node("Relu", [g.conv(p, c, c_out, 1)], out=f"y{i}")
            for i, (p, c, c_out) in enumerate(zip(parts, [6, 18, 16], [48, 16, 4]))]
    outs.append(g.node("Sigmoid", [parts[1]], out="side"))
    flat = g.node("Reshape", [x, g.const("shape", np.array([1, 1440], np.int64))])
    for start in (8, 2):
        part = g.node("Slice", [flat, *(g.const(n, np.array([v], np.int64)) for n, v in
                                        (("starts", start), ("ends", start + 8), ("axes", 1)))])
        w = g.const("w", g.rng.standard_normal((8, 4)).astype(np.float32))
        outs.append(g.node("MatMul", [part, w], out=f"row{start}"))
    model = g.build(outs)
    profile = TARGETS[target] if target == "generic" else replace(TARGETS["nvidia"], max_shared_memory=32768)
    tolerances = dict(rtol_l2=1e-2, rtol=2e-2, atol=2e-2) if precision == "fp16" else {}
    check_against_onnxruntime(model, target=profile, precision=precision, **tolerances)
    _, kernels = compile_with_kernels(model, target=profile, precision=precision)
    assert sum(k.template == "strided_copy" for k in kernels) == 2
    shifts = sorted((name, v) for k in kernels for name, _, v in k.spec if name.endswith("_SHIFT"))
    assert shifts == [("A_SHIFT", 8), ("B_SHIFT", 0), ("B_SHIFT", 32 if precision == "fp32" else 96)]
