"""templates/grid_sample.comp.j2 against onnxruntime: bilinear and nearest, zeros, border and
reflection padding, both align_corners conventions, points inside, on and past the edges (the
grid an input, as deformable attention computes it), opset 16's and opset 20's mode names;
what is not built is refused by name."""
import numpy as np
import pytest
from onnx import TensorProto, helper

from compiler import compile_model
from compiler.errors import CompileError
from runtime_min import load
from tests.harness import check_against_onnxruntime, run_onnxruntime


def grid_sample_model(mode="bilinear", padding="zeros", align=0, opset=16, x=(2, 3, 5, 7), out=(4, 6)):
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], mode=mode, padding_mode=padding,
                            align_corners=align)
    graph = helper.make_graph([node], "grid_sample",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x)),
                               helper.make_tensor_value_info("grid", TensorProto.FLOAT, [x[0], *out, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [x[0], x[1], *out])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def feeds(model, seed=0):
    rng = np.random.default_rng(seed)
    shape = lambda name: [d.dim_value for i in model.graph.input if i.name == name for d in i.type.tensor_type.shape.dim]
    grid = rng.uniform(-1.4, 1.4, shape("grid")).astype(np.float32)
    grid.reshape(-1)[:8] = [-1, 1, 1, -1, 0, 0, -1.25, 1.25]   # corners, centre, just outside
    return {"x": rng.standard_normal(shape("x")).astype(np.float32), "grid": grid}


@pytest.mark.parametrize("align", [0, 1])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_grid_sample(mode, padding, align):
    model = grid_sample_model(mode, padding, align)
    check_against_onnxruntime(model, feeds=feeds(model), target="generic")


@pytest.mark.parametrize("mode", ["linear", "nearest"])
def test_opset_20_mode_names(mode):
    model = grid_sample_model(mode, "border", 0, opset=20, x=(1, 2, 8, 8), out=(3, 5))
    check_against_onnxruntime(model, feeds=feeds(model, 1), target="generic")


def test_float16_bundle():
    model = grid_sample_model("bilinear", "zeros", 0, x=(1, 4, 16, 16), out=(8, 8))
    check_against_onnxruntime(model, feeds=feeds(model, 2), target="generic", precision="fp16",
                              rtol_l2=1e-2, rtol=1e9, atol=1e9)


@pytest.mark.parametrize("mode", ["bicubic", "cubic"])
def test_cubic_is_refused(mode):
    with pytest.raises(CompileError, match=f"GridSample .* mode '{mode}' is not built"):
        compile_model(grid_sample_model(mode, opset=16 if mode == "bicubic" else 20))


@pytest.mark.parametrize("align", [0, 1])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_points_no_integer_holds(mode, padding, align):
    """NaN, infinite and huge grid points sample at the lower bound of their axis, as onnxruntime
    does (Mask2Former's deformable attention samples a 1x1 feature map at NaN points)."""
    model = grid_sample_model(mode, padding, align, x=(1, 2, 4, 5), out=(2, 4))
    f = feeds(model, 3)
    f["grid"][0, 0] = [[np.nan, 0.2], [0.3, np.nan], [np.nan, np.nan], [np.inf, -0.4]]
    f["grid"][0, 1] = [[-np.inf, 0.1], [1e30, 0.5], [0.6, -1e30], [-np.inf, np.inf]]
    want = run_onnxruntime(model, f)["y"]
    with load(compile_model(model, target="generic")) as m:
        got = m.run(f)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
