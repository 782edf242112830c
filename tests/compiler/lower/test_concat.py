"""Concat against onnxruntime."""

import numpy as np
import pytest

from tests.harness import check_against_onnxruntime
from tests.onnx_builders import GraphBuilder, single_op_model

CONCAT_CASES = [
    pytest.param([[2, 3, 4, 5], [1, 3, 4, 5]], 0, id="axis0-2in"),
    pytest.param([[1, 3, 4, 5], [1, 5, 4, 5]], 1, id="axis1-2in"),
    pytest.param([[1, 3, 4, 5], [1, 5, 4, 5], [1, 1, 4, 5]], 1, id="axis1-3in"),
    pytest.param([[1, 3, 4, 5], [1, 5, 4, 5], [1, 1, 4, 5], [1, 8, 4, 5]], 1, id="axis1-4in"),
    pytest.param([[2, 3, 4, 5], [2, 3, 4, 2]], -1, id="axis-1-2in"),
    pytest.param([[2, 3, 4, 5], [2, 3, 4, 1], [2, 3, 4, 7]], -1, id="axis-1-3in"),
    pytest.param([[2, 3, 4, 5], [2, 3, 6, 5]], 2, id="axis2"),
    pytest.param([[3, 4], [5, 4], [1, 4]], 0, id="2d-axis0"),
    pytest.param([[3, 4], [3, 7]], 1, id="2d-axis1"),
    pytest.param([[1, 64, 13, 13], [1, 64, 13, 13]], 1, id="squeezenet-fire"),
]


@pytest.mark.parametrize("shapes,axis", CONCAT_CASES)
def test_concat(shapes, axis):
    model = single_op_model("Concat", {f"x{i}": s for i, s in enumerate(shapes)}, {"axis": axis})
    check_against_onnxruntime(model)


@pytest.mark.parametrize("position", [0, 1, 2], ids=["init-first", "init-middle", "init-last"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat_with_initializer(axis, position, rng):
    shape_in = [2, 3, 4]
    shape_c = list(shape_in)
    shape_c[axis] = 3
    inputs = {"x0": shape_in, "x1": shape_in}
    names = ["x0", "x1"]
    names.insert(position, "c")
    model = single_op_model("Concat", inputs, {"axis": axis},
                            initializers={"c": rng.standard_normal(shape_c).astype(np.float32)},
                            node_inputs=names)
    check_against_onnxruntime(model)


def test_concat_of_computed_values():
    """Concat of two kernels' outputs feeding another kernel (SqueezeNet fire module shape)."""
    g = GraphBuilder("fire", seed=9)
    x = g.input("x", [1, 8, 9, 9])
    s = g.node("Relu", [g.conv(x, 8, 4, 1)])
    e1 = g.node("Relu", [g.conv(s, 4, 6, 1)])
    e3 = g.node("Relu", [g.conv(s, 4, 6, 3)])
    cat = g.node("Concat", [e1, e3], axis=1)
    g.node("Conv", [cat, g.const("w", (g.rng.standard_normal((5, 12, 1, 1)) * 0.4).astype(np.float32))], out="y",
           kernel_shape=[1, 1])
    check_against_onnxruntime(g.build(["y"]))


@pytest.mark.parametrize("target", ["generic", "lavapipe"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("axis, shapes", [(1, {"a": [2, 3, 4], "b": [2, 5, 4]}), (0, {"a": [3, 4], "b": [2, 4]}),
                                          (-1, {"a": [2, 3], "b": [2, 1]})])
def test_concat_integers(axis, shapes, dtype, target):
    """Integers computed at run time (LongT5's block ids), moved bit for bit: int64 values past
    32 bits keep their high words."""
    model = single_op_model("Concat", shapes, {"axis": axis}, input_dtypes={k: dtype for k in shapes},
                            output_dtypes=[dtype])
    rng = np.random.default_rng(0)
    low = -2**40 if dtype == np.int64 else -2**30
    feeds = {k: rng.integers(low, 2**30, v).astype(dtype) for k, v in shapes.items()}
    check_against_onnxruntime(model, feeds=feeds, target=target, exact=True)


@pytest.mark.parametrize("dtype", [np.bool_, np.int8, np.uint16])
@pytest.mark.parametrize("axis, shapes", [(1, {"a": [2, 32], "b": [2, 16]}),     # CPM-Ant's mask
                                          (0, {"a": [4, 6], "b": [2, 6], "c": [6, 6]}),
                                          (1, {"a": [3, 2, 6], "b": [3, 4, 6]})])
def test_concat_packed(axis, shapes, dtype):
    """8- and 16-bit elements move as words where each input's part of an output row is whole
    words."""
    model = single_op_model("Concat", shapes, {"axis": axis}, input_dtypes={k: dtype for k in shapes},
                            output_dtypes=[dtype])
    rng = np.random.default_rng(0)
    feeds = {k: (rng.integers(-100, 100, v) if dtype != np.bool_ else rng.random(v) < 0.5).astype(dtype)
             for k, v in shapes.items()}
    check_against_onnxruntime(model, feeds=feeds, exact=True)


def test_concat_packed_parts_off_words_refused():
    from compiler import CompileError, compile_model

    model = single_op_model("Concat", {"a": [2, 3], "b": [2, 5]}, {"axis": 1},
                            input_dtypes={"a": np.bool_, "b": np.bool_}, output_dtypes=[np.bool_])
    with pytest.raises(CompileError, match=r"Concat .* joins bool parts of \[3, 5\] elements per row"):
        compile_model(model)
