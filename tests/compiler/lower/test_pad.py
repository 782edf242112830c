"""Pad (every mode) and Tile against onnxruntime."""

import numpy as np
import pytest

from tests.harness import check_against_onnxruntime, passes_graph
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
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int8, np.uint8], ids=["int32", "int64", "int8", "uint8"])
def test_pad_integer(mode, dtype):
    inits = {"pads": np.array([1, 0, 2, 3], np.int64)}
    if mode == "constant":
        inits["value"] = np.array(-7 if np.iinfo(dtype).min < 0 else 7, dtype)
    model = single_op_model("Pad", {"x": [3, 5]}, {"mode": mode}, initializers=inits,
                            input_dtypes={"x": dtype}, output_dtypes=[dtype])
    check_against_onnxruntime(model)


# Sub-word elements move packed: 2 (float16) or 4 (int8) to a 32-bit word, an odd total included.
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_float16(mode):
    inits = {"pads": np.array([0, 1, 2, -1, 0, 2, 1, 1], np.int64)}
    if mode == "constant":
        inits["value"] = np.array(-1.5, np.float16)
    model = single_op_model("Pad", {"x": [1, 3, 5, 3]}, {"mode": mode}, initializers=inits,
                            input_dtypes={"x": np.float16}, output_dtypes=[np.float16])
    check_against_onnxruntime(at_opset(model, 19), exact=True)


def test_tile_float16():
    model = single_op_model("Tile", {"x": [3, 5]}, initializers={"r": np.array([2, 3], np.int64)},
                            input_dtypes={"x": np.float16}, output_dtypes=[np.float16])
    check_against_onnxruntime(model, exact=True)


def test_pad_stays_float16_under_fp16_precision():
    model = single_op_model("Pad", {"x": [1, 3, 5, 5]}, {"mode": "constant"},
                            initializers={"pads": np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64)})
    [pad] = [n for n in passes_graph(model, "fp16").nodes if n.op_type == "Pad"]
    assert pad.inputs[0].dtype == pad.outputs[0].dtype == np.float16
    check_against_onnxruntime(model, precision="fp16", rtol_l2=1e-2)


@pytest.mark.parametrize("shape,repeats", [([2, 3], [2, 3]), ([1, 4, 2, 2], [1, 1, 3, 2]), ([5], [1])])
def test_tile(shape, repeats):
    model = single_op_model("Tile", {"x": shape}, initializers={"r": np.array(repeats, np.int64)})
    check_against_onnxruntime(model)


def test_pad_opset10_attributes():
    attrs = {"mode": "reflect", "pads": [0, 0, 1, 2, 0, 0, 2, 1]}
    model = at_opset(single_op_model("Pad", {"x": [1, 2, 3, 4]}, attrs), 10)
    check_against_onnxruntime(model)
