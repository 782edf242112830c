"""Resize and Upsample against onnxruntime: every mode, coordinate transformation and rounding,
scales and sizes, antialias, and the NHWC layout (resized axes 1 and 2)."""

import numpy as np
import pytest

from tests.harness import check_against_onnxruntime
from tests.onnx_builders import single_op_model


def at_opset(model, version):
    """The model re-targeted at another opset, output shapes re-inferred."""
    from tests.onnx_builders import _fill_output_shapes

    model.opset_import[0].version = version
    return _fill_output_shapes(model)


def resize_model(shape, attrs, scales=None, sizes=None, opset=19):
    inits = {"roi": np.array([], np.float32)}
    names = ["x", "roi"]
    if scales is not None:
        inits["scales"] = np.array(scales, np.float32)
        names.append("scales")
    else:
        inits["sizes"] = np.array(sizes, np.int64)
        names += ["", "sizes"]
    return at_opset(single_op_model("Resize", {"x": shape}, attrs, initializers=inits,
                                    node_inputs=names), opset)


TRANSFORMS = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
              "half_pixel_symmetric"]
# Scale x length is a whole number on every axis of the inputs below: for align_corners onnx's
# reference divides by scale x length - 1 while onnxruntime divides by the rounded output length
# - 1, and the two agree only then. vkc follows the reference (ONNX's own test cases).
SCALES = [pytest.param([1, 1, 2, 2], id="up2"), pytest.param([1, 1, 0.5, 0.5], id="down2"),
          pytest.param([1, 1, 1.5, 2.2], id="up-fractional"), pytest.param([1, 1, 0.75, 0.8], id="down-fractional")]


@pytest.mark.parametrize("scales", SCALES)
@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_interpolating(mode, transform, scales):
    check_against_onnxruntime(resize_model([1, 2, 8, 10], dict(mode=mode, coordinate_transformation_mode=transform),
                                           scales=scales))


@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
@pytest.mark.parametrize("transform", ["half_pixel", "asymmetric", "align_corners"])
@pytest.mark.parametrize("scales", SCALES[:3])
def test_resize_nearest(nearest_mode, transform, scales):
    attrs = dict(mode="nearest", nearest_mode=nearest_mode, coordinate_transformation_mode=transform)
    check_against_onnxruntime(resize_model([2, 3, 6, 10], attrs, scales=scales))


@pytest.mark.parametrize("sizes", [[1, 2, 13, 7], [1, 2, 4, 19]], ids=["mixed", "wide"])
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_sizes(mode, sizes):
    check_against_onnxruntime(resize_model([1, 2, 8, 10], dict(mode=mode), sizes=sizes))


@pytest.mark.parametrize("policy", ["not_larger", "not_smaller"])
def test_resize_keep_aspect_ratio(policy):
    attrs = dict(mode="linear", keep_aspect_ratio_policy=policy, axes=[2, 3])
    model = at_opset(single_op_model("Resize", {"x": [1, 2, 6, 8]}, attrs,
                                     initializers={"sizes": np.array([9, 9], np.int64)},
                                     node_inputs=["x", "", "", "sizes"]), 19)
    check_against_onnxruntime(model)


def test_resize_cubic_options():
    attrs = dict(mode="cubic", cubic_coeff_a=-0.5, exclude_outside=1)
    check_against_onnxruntime(resize_model([1, 1, 7, 9], attrs, scales=[1, 1, 1.7, 0.7]))


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_antialias(mode):
    check_against_onnxruntime(resize_model([1, 2, 16, 12], dict(mode=mode, antialias=1), scales=[1, 1, 0.5, 0.4]))


def test_resize_nhwc():
    """Resized axes 1 and 2, channels innermost (TensorFlow exports)."""
    check_against_onnxruntime(resize_model([1, 6, 5, 3], dict(mode="linear"), scales=[1, 2, 2, 1]))


def test_resize_1d_last_axis():
    check_against_onnxruntime(resize_model([2, 3, 9], dict(mode="linear"), scales=[1, 1, 1.5]))


def test_resize_tf_crop_and_resize():
    attrs = dict(mode="linear", coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=5.0)
    model = at_opset(single_op_model("Resize", {"x": [1, 1, 6, 6]}, attrs, initializers={
        "roi": np.array([0, 0, -0.2, 0.3, 1, 1, 0.9, 1.4], np.float32),
        "sizes": np.array([1, 1, 5, 4], np.int64)}, node_inputs=["x", "roi", "", "sizes"]), 19)
    check_against_onnxruntime(model)


def test_resize_leading_axis_is_refused():
    from compiler import CompileError, compile_model

    with pytest.raises(CompileError, match="resizes axes"):
        compile_model(resize_model([2, 3, 4, 5], dict(mode="linear"), scales=[2, 1, 1, 2]))


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample(mode):
    """Upsample-9 (YOLOv3 exports), asymmetric coordinates."""
    model = at_opset(single_op_model("Upsample", {"x": [1, 3, 5, 4]}, {"mode": mode},
                                     initializers={"scales": np.array([1, 1, 2, 3], np.float32)}), 9)
    check_against_onnxruntime(model)


def test_resize_opset10():
    """Resize-10: asymmetric coordinates, scales only."""
    model = at_opset(single_op_model("Resize", {"x": [1, 2, 3, 4]}, {"mode": "nearest"},
                                     initializers={"scales": np.array([1, 1, 2, 1.5], np.float32)}), 10)
    check_against_onnxruntime(model)


def test_upsample_opset7_attribute():
    attrs = {"mode": "nearest", "scales": [1.0, 1.0, 2.0, 2.0]}
    model = at_opset(single_op_model("Upsample", {"x": [1, 2, 3, 3]}, attrs), 7)
    check_against_onnxruntime(model)


@pytest.mark.parametrize("mode", ["nearest", "cubic"])
def test_resize_of_a_constant_to_length_1_pytorch_half_pixel(mode):
    """A constant [3, 2] image resized by 0.5 x 2 (one row out) with pytorch_half_pixel: its row
    is the source's row 0 (output length 1 maps to coordinate 0), as onnxruntime computes;
    onnx's reference evaluator, which folds constants, takes row 1 (it tests scale * length ==
    1), so the node is not folded and the kernel computes it. Found by the fuzzer (seed 181)."""
    from onnx import TensorProto, helper, numpy_helper

    from tests.onnx_builders import make_model

    image = np.array([0.406, 0.345, 0.226, -0.397, -0.113, -0.208], np.float32).reshape(1, 1, 3, 2)
    nodes = [helper.make_node("Resize", ["image", "", "scales"], ["resized"], mode=mode, nearest_mode="ceil",
                              coordinate_transformation_mode="pytorch_half_pixel"),
             helper.make_node("Add", ["x", "resized"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 1, 4])],
                              [numpy_helper.from_array(image, "image"),
                               numpy_helper.from_array(np.array([1, 1, 0.5, 2], np.float32), "scales")])
    check_against_onnxruntime(make_model(graph, opset=19))
