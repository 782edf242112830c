"""DFT against onnxruntime: forward and inverse, real and complex input, onesided (RFFT and IRFFT),
a DFT length that pads or truncates, every signal axis, opset 17's axis attribute and opset 20's
input, float16 storage; FNet's fftn as the dynamo exporter writes it."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.harness import check_against_onnxruntime
from tests.onnx_builders import make_model

from compiler import compile_model
from compiler.errors import CompileError


def dft_model(shape, axis=None, length=None, opset=20, **attrs):
    """One DFT node: opset 20 takes the axis as an input, opset 17 as an attribute."""
    inits, inputs = [], ["x", ""]
    if length is not None:
        inits.append(numpy_helper.from_array(np.array(length, np.int64), "dft_length"))
        inputs[1] = "dft_length"
    if opset >= 20 and axis is not None:
        inits.append(numpy_helper.from_array(np.array(axis, np.int64), "axis"))
        inputs.append("axis")
    elif axis is not None:
        attrs["axis"] = axis
    graph = helper.make_graph([helper.make_node("DFT", inputs, ["y"], **attrs)], "dft",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return make_model(graph, opset=opset)


@pytest.mark.parametrize("parts", [1, 2], ids=["real", "complex"])
@pytest.mark.parametrize("inverse", [0, 1], ids=["forward", "inverse"])
@pytest.mark.parametrize("axis", [1, -2, -4], ids=["axis1", "last-signal-axis", "first-axis"])
def test_dft(axis, inverse, parts):
    check_against_onnxruntime(dft_model([3, 12, 5, parts], axis, inverse=inverse))


@pytest.mark.parametrize("length", [7, 12, 20], ids=["odd-truncated", "whole", "padded"])
@pytest.mark.parametrize("inverse", [0, 1], ids=["forward", "inverse"])
def test_dft_length(length, inverse):
    check_against_onnxruntime(dft_model([2, 12, 3, 2], 1, length, inverse=inverse))


@pytest.mark.parametrize("length", [None, 7, 16, 9], ids=["default", "odd", "even", "truncated"])
def test_rfft(length):
    """onesided forward: a real signal's spectrum up to N/2."""
    check_against_onnxruntime(dft_model([2, 12, 3, 1], 1, length, onesided=1))


@pytest.mark.parametrize("length", [None, 11], ids=["even", "odd"])
def test_irfft(length):
    """onesided inverse: a real signal of length N from the N/2 + 1 values of its spectrum (the
    imaginary parts of its first and, for an even N, middle value ignored)."""
    check_against_onnxruntime(dft_model([2, 6, 3, 2], 1, length, inverse=1, onesided=1))


@pytest.mark.parametrize("length", [7, 9, 14])
def test_irfft_of_another_spectrum_length_is_refused(length):
    """A spectrum of 6 values for a length whose N/2 + 1 is not 6: ONNX cuts it or pads it with
    zeros (numpy's irfft), onnxruntime gives other values (it takes all 6 and their conjugates)."""
    with pytest.raises(CompileError, match="takes .* values of the spectrum"):
        compile_model(dft_model([2, 6, 3, 2], 1, length, inverse=1, onesided=1))


@pytest.mark.parametrize("attrs", [{}, {"inverse": 1}, {"onesided": 1}], ids=["forward", "inverse", "rfft"])
def test_dft_opset17(attrs):
    check_against_onnxruntime(dft_model([2, 10, 4, 1], 2, opset=17, **attrs))


def test_dft_default_axis():
    """The axis input absent: opset 20's default, the last signal axis."""
    check_against_onnxruntime(dft_model([2, 3, 10, 2]))


def test_long_dft_lavapipe():
    """A transform of 512: the roots of unity from the table keep float32's accuracy where a sum
    of 512 terms amplifies any error in them."""
    check_against_onnxruntime(dft_model([2, 512, 1], 1, onesided=1), target="lavapipe")


def test_dft_float16_storage():
    """--precision fp16: the kernel reads and writes float16, sums in float32."""
    from compiler.compile import compile_with_kernels
    model = dft_model([2, 16, 8, 2], 1)
    [kernel] = [k for k in compile_with_kernels(model, precision="fp16")[1] if k.template == "dft"]
    assert kernel.params["T"].name == "float16"
    check_against_onnxruntime(model, precision="fp16", rtol_l2=1e-2, rtol=2e-2, atol=2e-2)


def test_fnet_fourier_mixing():
    """FNet's torch.fft.fftn(x, dim=(1, 2)).real as the dynamo exporter writes it: x made complex
    (a zero imaginary part concatenated), a DFT over the sequence, one over the hidden axis, the
    real part gathered, added to the residual."""
    shape = [2, 16, 32]
    nodes = [helper.make_node("Unsqueeze", ["x", "minus_one"], ["real"]),
             helper.make_node("Concat", ["real", "zeros"], ["complex"], axis=-1),
             helper.make_node("DFT", ["complex", "", "one"], ["over_sequence"]),
             helper.make_node("DFT", ["over_sequence", "", "two"], ["spectrum"]),
             helper.make_node("Gather", ["spectrum", "zero"], ["real_part"], axis=3),
             helper.make_node("Add", ["x", "real_part"], ["y"])]
    inits = [numpy_helper.from_array(np.array([-1], np.int64), "minus_one"),
             numpy_helper.from_array(np.zeros([*shape, 1], np.float32), "zeros"),
             numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array(2, np.int64), "two"),
             numpy_helper.from_array(np.array(0, np.int64), "zero")]
    graph = helper.make_graph(nodes, "fnet_mixing", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)
    check_against_onnxruntime(make_model(graph, opset=20))


def test_run_time_length_is_refused():
    graph = helper.make_graph([helper.make_node("DFT", ["x", "n"], ["y"])], "dft",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8, 1]),
                               helper.make_tensor_value_info("n", TensorProto.INT64, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8, 2])])
    model = make_model(graph, opset=20, infer_shapes=False)
    with pytest.raises(CompileError, match="'n' comes from the computation"):
        compile_model(model)
