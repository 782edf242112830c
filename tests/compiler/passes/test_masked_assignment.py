"""An assignment through a boolean mask, ScatterND(x, Transpose(NonZero(mask)), updates) as the
dynamo exporter writes torch's index_put, becomes a Where (compiler/passes/masked_assignment.py)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.harness import check_against_onnxruntime
from tests.onnx_builders import make_model, tensor_info

from compiler import compile_model
from compiler.errors import UnsupportedOpsError


def _count_nodes(mask: str) -> list:
    """count = the number of True elements of `mask`, shape [1] (the exporter's form)."""
    return [helper.make_node("Reshape", [mask, "minus_one"], ["mask_flat"]),
            helper.make_node("Cast", ["mask_flat"], ["mask_int"], to=TensorProto.INT64),
            helper.make_node("ReduceSum", ["mask_int"], ["count"], keepdims=1)]


def _model(x_shape, dtype, mask_nodes, mask_input, updates_nodes, extra_inputs=(), inits=()):
    nodes = [*mask_nodes,
             helper.make_node("NonZero", ["mask"], ["positions"]),
             helper.make_node("Transpose", ["positions"], ["indices"], perm=[1, 0]),
             *_count_nodes("mask"), *updates_nodes,
             helper.make_node("ScatterND", ["x", "indices", "updates"], ["y"], name="index_put")]
    inits = [numpy_helper.from_array(np.array([-1], np.int64), "minus_one"), *inits]
    graph = helper.make_graph(nodes, "g", [tensor_info("x", x_shape, dtype), mask_input, *extra_inputs],
                              [tensor_info("y", x_shape, dtype)], initializer=inits)
    return make_model(graph, opset=18)


def _fill(fill, shape_tail=()):
    """updates: one value Expanded to the count (with the data's trailing dims), then flattened
    as the exporter does where it addresses elements."""
    shape = ["count"] if not shape_tail else ["update_shape"]
    nodes = []
    if shape_tail:
        nodes.append(helper.make_node("Concat", ["count", "tail"], ["update_shape"], axis=0))
    nodes.append(helper.make_node("Expand", ["fill", *shape], ["expanded"]))
    nodes.append(helper.make_node("Reshape", ["expanded", "update_dims"], ["updates"]))
    inits = [numpy_helper.from_array(np.array(fill), "fill"),
             numpy_helper.from_array(np.array([-1, *shape_tail], np.int64), "update_dims")]
    if shape_tail:
        inits.append(numpy_helper.from_array(np.array(shape_tail, np.int64), "tail"))
    return nodes, inits


def test_token_replaced_in_ids(rng):
    """Gemma 3's input_ids[input_ids == image_token] = 0: int64 data, the mask from the data."""
    updates, inits = _fill(np.int64(0))
    model = _model([2, 16], np.int64, [helper.make_node("Equal", ["x", "token"], ["mask"])],
                   tensor_info("unused", [1], np.float32), updates,
                   inits=[*inits, numpy_helper.from_array(np.array(7, np.int64), "token")])
    model.graph.input.pop()   # no second input: the mask comes from x
    ids = rng.integers(0, 10, [2, 16]).astype(np.int64)
    assert (ids == 7).any()
    check_against_onnxruntime(model, feeds={"x": ids})


@pytest.mark.parametrize("x_shape,mask_shape", [([3, 5], [3, 5]), ([2, 4, 3], [2, 4])], ids=["elements", "rows"])
def test_bool_mask_filled_with_a_value(x_shape, mask_shape, rng):
    updates, inits = _fill(np.float32(-2.5), tuple(x_shape[len(mask_shape):]))
    model = _model(x_shape, np.float32, [helper.make_node("Identity", ["m"], ["mask"])],
                   tensor_info("m", mask_shape, np.bool_), updates, inits=inits)
    feeds = {"x": rng.standard_normal(x_shape).astype(np.float32), "m": rng.random(mask_shape) < 0.5}
    check_against_onnxruntime(model, feeds=feeds, exact=True)


def test_float_mask_and_values_gathered_from_a_tensor(rng):
    """x[m != 0] = z[m != 0], NonZero read straight from a float tensor."""
    nodes = [helper.make_node("GatherND", ["z", "indices"], ["updates"])]
    model = _model([4, 6], np.float32, [helper.make_node("Identity", ["m"], ["mask"])],
                   tensor_info("m", [4, 6], np.float32), nodes, extra_inputs=[tensor_info("z", [4, 6], np.float32)])
    m = np.where(rng.random([4, 6]) < 0.5, 0.0, rng.standard_normal([4, 6])).astype(np.float32)
    feeds = {"x": rng.standard_normal([4, 6]).astype(np.float32), "m": m,
             "z": rng.standard_normal([4, 6]).astype(np.float32)}
    check_against_onnxruntime(model, feeds=feeds, exact=True)


def test_varying_updates_still_refused():
    """Updates that are not one value (their own input, of NonZero's count) have no Where form."""
    node_updates = [helper.make_node("Identity", ["u"], ["updates"])]
    model = _model([3, 5], np.float32, [helper.make_node("Identity", ["m"], ["mask"])],
                   tensor_info("m", [3, 5], np.bool_), node_updates, extra_inputs=[tensor_info("u", [15], np.float32)])
    with pytest.raises(UnsupportedOpsError, match="NonZero"):
        compile_model(model)


def test_row_where_a_token_is(rng):
    """T5Gemma 2's embeds[(ids == token)[..., None].expand_as(embeds)] = row: the row repeated
    over the masked positions' trailing dim."""
    nodes = [helper.make_node("Equal", ["ids", "token"], ["hit"]),
             helper.make_node("Unsqueeze", ["hit", "minus_one"], ["hit1"]),
             helper.make_node("Shape", ["x"], ["x_shape"]),
             helper.make_node("Expand", ["hit1", "x_shape"], ["mask"]),
             helper.make_node("NonZero", ["mask"], ["positions"]),
             helper.make_node("Transpose", ["positions"], ["indices"], perm=[1, 0]),
             *_count_nodes("hit"),
             helper.make_node("Concat", ["count", "width"], ["rows_shape"], axis=0),
             helper.make_node("Expand", ["row", "rows_shape"], ["rows"]),
             helper.make_node("Reshape", ["rows", "minus_one"], ["updates"]),
             helper.make_node("ScatterND", ["x", "indices", "updates"], ["y"], name="index_put")]
    inits = [numpy_helper.from_array(np.array([-1], np.int64), "minus_one"),
             numpy_helper.from_array(np.array(5, np.int64), "token"),
             numpy_helper.from_array(np.array([3], np.int64), "width"),
             numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "row")]
    inputs = [tensor_info("x", [2, 6, 3], np.float32), tensor_info("ids", [2, 6], np.int64)]
    graph = helper.make_graph(nodes, "g", inputs, [tensor_info("y", [2, 6, 3], np.float32)], initializer=inits)
    ids = rng.integers(0, 8, [2, 6]).astype(np.int64)
    ids[0, 2] = ids[1, 4] = 5
    check_against_onnxruntime(make_model(graph, opset=18), exact=True,
                              feeds={"x": rng.standard_normal([2, 6, 3]).astype(np.float32), "ids": ids})
