"""Pad (every mode) and Tile against onnxruntime."""

import numpy as np
import pytest

from tests.harness import check_against_onnxruntime
from tests.onnx_builders import single_op_model

def at_opset(model, version):
    """The model re-targeted at another opset, output shapes re-inferred."""
    from tests.onnx_builders import _fill_output_shapes

    model.opset_import[0].version = version
    return _fill_output_shapes(model)


PADS = [
    pytest.param([0, 0, 1, 2, 0, 0, 2, 1], id="spatial"),
    pytest.param([0, 1, 0, 0, 0, 2, 0, 0], id="channels"),
    pytest.param([0, 0, 3, 3, 0, 0, 3, 3], id="wide"),
    pytest.param([0, 0, -1, 1, 0, 0, 1, -2], id="negative-crops"),
]


@pytest.mark.parametrize("pads", PADS)
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad(mode, pads):
    model = single_op_model("Pad", {"x": [1, 3, 4, 5]}, {"mode": mode},
                            initializers={"pads": np.array(pads, np.int64)})
    model = at_opset(model, 19)  # wrap is opset 19
    check_against_onnxruntime(model)


def test_pad_constant_value_and_axes():
    model = single_op_model("Pad", {"x": [2, 3, 4]},
                            initializers={"pads": np.array([1, 2, 0, 1], np.int64),
                                          "value": np.array(-2.5, np.float32),
                                          "axes": np.array([-1, 1], np.int64)})
    model = at_opset(model, 18)
    check_against_onnxruntime(model)


@pytest.mark.parametrize("mode", ["constant", "edge"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64], ids=["int32", "int64"])
def test_pad_integer(mode, dtype):
    inits = {"pads": np.array([1, 0, 2, 3], np.int64)}
    if mode == "constant":
        inits["value"] = np.array(-7, dtype)
    model = single_op_model("Pad", {"x": [3, 4]}, {"mode": mode}, initializers=inits,
                            input_dtypes={"x": dtype}, output_dtypes=[dtype])
    check_against_onnxruntime(model)


@pytest.mark.parametrize("shape,repeats", [([2, 3], [2, 3]), ([1, 4, 2, 2], [1, 1, 3, 2]), ([5], [1])])
def test_tile(shape, repeats):
    model = single_op_model("Tile", {"x": shape}, initializers={"r": np.array(repeats, np.int64)})
    check_against_onnxruntime(model)


def test_pad_opset10_attributes():
    attrs = {"mode": "reflect", "pads": [0, 0, 1, 2, 0, 0, 2, 1]}
    model = at_opset(single_op_model("Pad", {"x": [1, 2, 3, 4]}, attrs), 10)
    check_against_onnxruntime(model)
