"""Slice and Split against onnxruntime."""

import numpy as np
import pytest

from harness import check_against_onnxruntime
from onnx_builders import single_op_model

def at_opset(model, version):
    """The model re-targeted at another opset, output shapes re-inferred."""
    from onnx_builders import _fill_output_shapes

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
