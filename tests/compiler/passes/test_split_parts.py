"""read_split_parts_in_place: a rotary embedding and a cache write (TensorScatter's update) read
their part of a Split along the last axis in place, through a view of all of the part (a decode
step's head split), so the Split goes; a part whose columns are not whole 32-bit words for the
copy stays a Split. Against onnxruntime."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.harness import check_against_onnxruntime
from tests.onnx_builders import make_model, tensor_info

from compiler.compile import compile_with_kernels
from compiler.frontend import to_ir
from compiler.passes import fold_constants, run_passes


def split_readers(q_width=16, v_width=8, head=8, cache_rows=6):
    """x [1, 1, q + v] split into q (rotated, as [1, heads, 1, head]) and v (written into a
    cache [1, heads, rows, head] at `position`; the cache computed, so that it is no bundle
    state)."""
    heads_q, heads_v = q_width // head, v_width // head
    angles = np.outer(np.arange(cache_rows), 1.0 / 10000 ** (np.arange(0, head, 2) / head))
    inits = [numpy_helper.from_array(np.array([q_width, v_width], np.int64), "sizes"),
             numpy_helper.from_array(np.cos(angles).astype(np.float32), "cos"),
             numpy_helper.from_array(np.sin(angles).astype(np.float32), "sin"),
             numpy_helper.from_array(np.array([1, heads_q, 1, head], np.int64), "q_heads"),
             numpy_helper.from_array(np.array([1, heads_v, 1, head], np.int64), "v_heads")]
    nodes = [helper.make_node("Split", ["x", "sizes"], ["q", "v"], axis=-1),
             helper.make_node("Reshape", ["q", "q_heads"], ["q4"]),
             helper.make_node("RotaryEmbedding", ["q4", "cos", "sin", "ids"], ["q_rope"]),
             helper.make_node("Reshape", ["v", "v_heads"], ["v4"]),
             helper.make_node("Neg", ["cache"], ["negated"]),
             helper.make_node("TensorScatter", ["negated", "v4", "position"], ["cache_out"], axis=2)]
    inputs = [tensor_info("x", [1, 1, q_width + v_width]), tensor_info("ids", [1, 1], np.int64),
              tensor_info("cache", [1, heads_v, cache_rows, head]), tensor_info("position", [1], np.int64)]
    graph = helper.make_graph(nodes, "split_readers", inputs,
                              [tensor_info("q_rope", [1, heads_q, 1, head]),
                               tensor_info("cache_out", [1, heads_v, cache_rows, head])], inits)
    return make_model(graph, opset=24)


FEEDS = {"ids": np.array([[3]], np.int64), "position": np.array([4], np.int64)}


@pytest.mark.parametrize("target", ["generic", "lavapipe"])
@pytest.mark.parametrize("widths, in_place", [((16, 8), True), ((18, 6), False)], ids=["words", "not-words"])
def test_parts_read_in_place(widths, in_place, target):
    model = split_readers(*widths, head=widths[1] if widths[1] % 4 else 8)
    graph = run_passes(fold_constants(to_ir(model)))
    assert any(n.op_type == "Split" for n in graph.nodes) != in_place
    assert sum("input_columns" in n.attrs for n in graph.nodes) == (2 if in_place else 0)
    templates = [k.template for k in compile_with_kernels(model, target=target)[1]]
    assert ("strided_copy" in templates) != in_place, templates
    rng = np.random.default_rng(0)
    cache = [d.dim_value for d in model.graph.input[2].type.tensor_type.shape.dim]
    feeds = {**FEEDS, "x": rng.standard_normal([1, 1, sum(widths)]).astype(np.float32),
             "cache": rng.standard_normal(cache).astype(np.float32)}
    check_against_onnxruntime(model, target=target, feeds=feeds)


def rotated_parts(k_tables="same"):
    """x [1, 1, 24] split into q (2 heads of 8) and k (1 head), each rotated (as [1, heads, 1,
    8]) by the same tables and positions, or k by tables of its own (`k_tables` "own")."""
    angles = np.outer(np.arange(6), 1.0 / 10000 ** (np.arange(0, 8, 2) / 8))
    inits = [numpy_helper.from_array(np.array([16, 8], np.int64), "sizes"),
             numpy_helper.from_array(np.cos(angles).astype(np.float32), "cos"),
             numpy_helper.from_array(np.sin(angles).astype(np.float32), "sin"),
             numpy_helper.from_array(np.sin(2 * angles).astype(np.float32), "sin2"),
             numpy_helper.from_array(np.array([1, 2, 1, 8], np.int64), "q_heads"),
             numpy_helper.from_array(np.array([1, 1, 1, 8], np.int64), "k_heads")]
    nodes = [helper.make_node("Split", ["x", "sizes"], ["q", "k"], axis=-1),
             helper.make_node("Reshape", ["q", "q_heads"], ["q4"]),
             helper.make_node("Reshape", ["k", "k_heads"], ["k4"]),
             helper.make_node("RotaryEmbedding", ["q4", "cos", "sin", "ids"], ["q_rope"]),
             helper.make_node("RotaryEmbedding", ["k4", "cos", "sin" if k_tables == "same" else "sin2", "ids"],
                              ["k_rope"])]
    inputs = [tensor_info("x", [1, 1, 24]), tensor_info("ids", [1, 1], np.int64)]
    graph = helper.make_graph(nodes, "rotated_parts", inputs, [tensor_info("q_rope", [1, 2, 1, 8]),
                                                               tensor_info("k_rope", [1, 1, 1, 8])], inits)
    return make_model(graph, opset=24)


@pytest.mark.parametrize("target", ["generic", "lavapipe"])
@pytest.mark.parametrize("k_tables, kernels", [("same", 1), ("own", 2)])
def test_rotations_of_neighbouring_parts_join(k_tables, kernels, target):
    """Q's and K's rotary embeddings of one packed tensor with the same tables and positions are
    one kernel with an output each; with tables of their own, two."""
    model = rotated_parts(k_tables)
    assert [k.template for k in compile_with_kernels(model, target=target)[1]] == ["rotary"] * kernels
    feeds = {"ids": np.array([[4]], np.int64), "x": np.random.default_rng(0).standard_normal([1, 1, 24]).astype(np.float32)}
    check_against_onnxruntime(model, target=target, feeds=feeds)
