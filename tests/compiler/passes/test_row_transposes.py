"""move_row_transposes: a Transpose of leading dims moves across the product next to it where an
attention (or another matmul) then reads the rows in place, and stays where it would only move a
copy; every case agrees with onnxruntime."""
from pathlib import Path

import numpy as np
import pytest
from onnx import helper, load, numpy_helper

from tests.attention_models import window_block
from tests.harness import check_against_onnxruntime
from tests.onnx_builders import make_model, tensor_info

from compiler.frontend import to_ir
from compiler.passes import fold_constants, run_passes

FIXTURES = Path(__file__).resolve().parents[2] / "models" / "fixtures"


def _graph(model):
    return run_passes(fold_constants(to_ir(model)))


def _init(name, shape, rng):
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) / 3, name)


def test_vit_batch2_attention_takes_both_transposes():
    """torchvision's ViT at batch 2 (nn.MultiheadAttention, batch_first): the Transposes into the
    in-projection and out of the out-projection become strides of the attention kernel."""
    model = load(FIXTURES / "vit_tiny_b2.onnx")
    left = [n.name for n in _graph(model).nodes if n.op_type == "Transpose"]
    assert not [n for n in left if "self_attention" in n], left
    check_against_onnxruntime(model, target="generic")


def _into_product(reader):
    """X [2, 3, 8] -> Transpose(1, 0, 2) -> MatMul [8, 6] -> Add bias, then `reader`: "matmul"
    (a reshape into heads and a MatMul by a second input, as attention reads it) or "relu"."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2], name="t"),
             helper.make_node("MatMul", ["xt", "w"], ["p"], name="proj"),
             helper.make_node("Add", ["p", "b"], ["pb"], name="bias")]
    inits = [_init("w", (8, 6), rng), _init("b", (6,), rng)]
    inputs = [tensor_info("x", [2, 3, 8])]
    if reader == "matmul":
        inits.append(numpy_helper.from_array(np.array([3, 2, 2, 3], np.int64), "heads"))
        nodes += [helper.make_node("Reshape", ["pb", "heads"], ["ph"], name="heads"),
                  helper.make_node("Transpose", ["ph"], ["pt"], perm=[1, 2, 0, 3], name="th"),
                  helper.make_node("MatMul", ["pt", "k"], ["y"], name="scores")]
        inputs.append(tensor_info("k", [2, 2, 3, 4]))
    else:
        nodes.append(helper.make_node("Relu", ["pb"], ["y"], name="relu"))
    graph = helper.make_graph(nodes, "rows", inputs, [tensor_info("y", None)], inits)
    return make_model(graph)


def test_transpose_moves_into_a_product_that_feeds_matmuls():
    model = _into_product("matmul")
    graph = _graph(model)
    proj = next(n for n in graph.nodes if n.op_type == "MatMul" and n.inputs[1].is_constant)
    assert proj.inputs[0].shape == (2, 3, 8)     # X's rows as they are
    check_against_onnxruntime(model, target="generic")


def test_transpose_stays_before_a_product_read_elementwise():
    """Moving it would copy the product's 6 columns instead of the input's 8 for no reader that
    takes strides: it stays."""
    model = _into_product("relu")
    graph = _graph(model)
    proj = next(n for n in graph.nodes if n.op_type == "MatMul")
    assert proj.inputs[0].shape == (3, 2, 8)
    check_against_onnxruntime(model, target="generic")


def _out_of_product(row_bias=False):
    """P [2, 3, 4, 2] -> Transpose(1, 0, 2, 3) -> Reshape [6, 8] -> Gemm(W [5, 8]ᵀ, bias) ->
    Reshape [3, 2, 5] -> Transpose(1, 0, 2) -> Relu: the out-projection's pattern. A bias per row
    ([6, 1]) where row_bias."""
    rng = np.random.default_rng(1)
    inits = [_init("w", (5, 8), rng), _init("b", (6, 1) if row_bias else (5,), rng),
             numpy_helper.from_array(np.array([6, 8], np.int64), "rows"),
             numpy_helper.from_array(np.array([3, 2, 5], np.int64), "split")]
    nodes = [helper.make_node("Transpose", ["p"], ["pt"], perm=[1, 0, 2, 3], name="inner"),
             helper.make_node("Reshape", ["pt", "rows"], ["a"], name="merge"),
             helper.make_node("Gemm", ["a", "w", "b"], ["g"], transB=1, name="out_proj"),
             helper.make_node("Reshape", ["g", "split"], ["gs"], name="unmerge"),
             helper.make_node("Transpose", ["gs"], ["z"], perm=[1, 0, 2], name="outer"),
             helper.make_node("Relu", ["z"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "rows", [tensor_info("p", [2, 3, 4, 2])],
                              [tensor_info("y", None)], inits)
    return make_model(graph)


@pytest.mark.parametrize("row_bias", [False, True], ids=["column-bias", "row-bias"])
def test_transpose_moves_out_of_a_product_into_the_transpose_before_it(row_bias):
    """The outer Transpose joins the inner one (perms composed: the identity here) unless a
    bias per row would have to move with the rows: then it stays, read in place by the Relu
    (passes/transposes_in_place.py)."""
    model = _out_of_product(row_bias)
    graph = _graph(model)
    transposes = [n for n in graph.nodes if n.op_type == "Transpose"]
    if row_bias:
        assert [(n.name, n.attrs["perm"]) for n in transposes] == [("inner", [1, 0, 2, 3])]
        (relu,) = [n for n in graph.nodes if n.op_type == "vkc.Elementwise"]
        assert relu.attrs["input_perms"] == {0: [1, 0, 2]}
    else:
        assert [(n.name, n.attrs["perm"]) for n in transposes] == [("inner", [0, 1, 2, 3])]
    check_against_onnxruntime(model, target="generic")


@pytest.mark.parametrize("shift", [0, 1], ids=["windows", "shifted-windows"])
def test_swin_windows_move_next_to_the_attention(shift):
    """Swin's window partition before the qkv projection moves after it, and the windows put
    back after the output projection (+ bias) move before it, next to the heads' merge: the
    attention reads Q, K and V in the un-partitioned projection and writes its output in image
    order, each window and each token two strides (a grid of windows of a grid of tokens). No
    copy is left but the shifted window's rolls."""
    model = window_block(2, 3, 3, 2, 8, shift=shift)
    graph = _graph(model)
    rolls = ["vkc.Roll"] if shift else []
    assert [n.op_type for n in graph.nodes] == rolls + ["MatMul", "vkc.Attention", "MatMul"] + rolls
    att = next(n for n in graph.nodes if n.op_type == "vkc.Attention")
    c3, row = 3 * 16, 9 * 3 * 16   # the qkv projection's columns, one row of tokens of the image
    qkv = {"batch": (3, 3 * row), "row": (3, row)}   # (windows per row, a row of windows); (ws, a row)
    mask = {"mask": {"batch": (9, 0)}} if shift else {}   # the same for both images
    assert att.attrs["parts"] == {"q": qkv, "k": qkv, "v": qkv,
                                  "out": {"batch": (3, 3 * 9 * 16), "row": (3, 9 * 16)}, **mask}
    assert att.attrs["layouts"]["q"] == (0, [3 * c3, 8, c3, 1])
    check_against_onnxruntime(model, target="generic")
