"""store_rows_in_cache: rotated keys, which the KV cache's TensorScatter alone reads, are stored
by the rotary kernel into the cache's rows itself (no cache-write dispatch), linear and circular,
through the head split (a decode step's view, or a prompt's Transpose, which the cache write
reads as strides: passes/transposes_in_place.py); against onnxruntime, the cache an input and
an output of its own. Where the keys are read elsewhere too, the cache write stays a kernel. A
packed projection's V columns are carried into their cache by the same kernel. The decoders'
steps are in tests/models/test_decode_step.py."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler.compile import compile_with_kernels
from runtime_min import load

B, HEADS, D, ROWS = 2, 2, 8, 6


def keys_into_cache(mode: str, keys_out: bool = False, tokens: int = 1):
    """x [B, tokens, HEADS * D] rotated (RotaryEmbedding, opset 23) at position_ids, split into
    heads [B, HEADS, tokens, D] and written into cache [B, HEADS, ROWS, D] at write_indices
    (TensorScatter)."""
    angles = np.outer(np.arange(16), 1.0 / 10000 ** (np.arange(0, D, 2) / D))
    inits = [numpy_helper.from_array(np.cos(angles).astype(np.float32), "cos"),
             numpy_helper.from_array(np.sin(angles).astype(np.float32), "sin"),
             numpy_helper.from_array(np.array([B, tokens, HEADS, D], np.int64), "heads")]
    nodes = [helper.make_node("RotaryEmbedding", ["x", "cos", "sin", "position_ids"], ["k"], num_heads=HEADS),
             helper.make_node("Reshape", ["k", "heads"], ["k4"]),
             helper.make_node("Transpose", ["k4"], ["update"], perm=[0, 2, 1, 3]),
             helper.make_node("TensorScatter", ["cache", "update", "write_indices"], ["present"], axis=2, mode=mode)]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, tokens, HEADS * D]),
              helper.make_tensor_value_info("position_ids", TensorProto.INT64, [B, tokens]),
              helper.make_tensor_value_info("cache", TensorProto.FLOAT, [B, HEADS, ROWS, D]),
              helper.make_tensor_value_info("write_indices", TensorProto.INT64, [B])]
    outputs = [helper.make_tensor_value_info("present", TensorProto.FLOAT, [B, HEADS, ROWS, D])]
    outputs += [helper.make_tensor_value_info("k", TensorProto.FLOAT, [B, tokens, HEADS * D])] if keys_out else []
    graph = helper.make_graph(nodes, "keys", inputs, outputs, inits)
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 24)])


@pytest.mark.parametrize("mode, rows, keys_out, tokens", [
    ("linear", [0, 5], False, 1), ("circular", [7, 2], False, 1), ("circular", [11, 4], False, 1),
    ("linear", [3, 1], True, 1), ("linear", [0, 3], False, 3), ("circular", [4, 9], False, 3),
    ("linear", [2, 0], True, 3)])
def test_keys_stored_into_cache(mode, rows, keys_out, tokens, rng):
    model = keys_into_cache(mode, keys_out, tokens)
    bundle, kernels = compile_with_kernels(model, target="generic", state="none")
    templates = [k.template for k in kernels]
    assert ("tensor_scatter" in templates) == keys_out and "strided_copy" not in templates
    feeds = {"x": rng.standard_normal([B, tokens, HEADS * D]).astype(np.float32),
             "position_ids": np.array([[3], [9]], np.int64) + np.arange(tokens),
             "cache": rng.standard_normal([B, HEADS, ROWS, D]).astype(np.float32),
             "write_indices": np.array(rows, np.int64)}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    with load(bundle) as m:
        got = m.run(feeds)
    np.testing.assert_allclose(got["present"], want[0], rtol=1e-5, atol=1e-6)


def packed_step(mode: str, value_rows: int = ROWS, tokens: int = 1):
    """A packed projection's rows of each batch, qkv [B, tokens, 3 * HEADS * D], split into Q, K
    and V; Q and K rotated at position_ids, K's and V's heads written into their caches at
    write_indices (V's cache `value_rows` long)."""
    angles = np.outer(np.arange(16), 1.0 / 10000 ** (np.arange(0, D, 2) / D))
    width = HEADS * D
    inits = [numpy_helper.from_array(np.cos(angles).astype(np.float32), "cos"),
             numpy_helper.from_array(np.sin(angles).astype(np.float32), "sin"),
             numpy_helper.from_array(np.array([width] * 3, np.int64), "sizes"),
             numpy_helper.from_array(np.array([B, tokens, HEADS, D], np.int64), "heads")]
    nodes = [helper.make_node("Split", ["qkv", "sizes"], ["q", "k", "v"], axis=2),
             helper.make_node("RotaryEmbedding", ["q", "cos", "sin", "position_ids"], ["q_rotated"], num_heads=HEADS),
             helper.make_node("RotaryEmbedding", ["k", "cos", "sin", "position_ids"], ["k_rotated"], num_heads=HEADS)]
    for name, x in (("key", "k_rotated"), ("value", "v")):
        nodes += [helper.make_node("Reshape", [x, "heads"], [f"{name}4"]),
                  helper.make_node("Transpose", [f"{name}4"], [f"{name}_update"], perm=[0, 2, 1, 3]),
                  helper.make_node("TensorScatter", [f"past_{name}", f"{name}_update", "write_indices"],
                                   [f"present_{name}"], axis=2, mode=mode)]
    shapes = {"key": [B, HEADS, ROWS, D], "value": [B, HEADS, value_rows, D]}
    inputs = [helper.make_tensor_value_info("qkv", TensorProto.FLOAT, [B, tokens, 3 * width]),
              helper.make_tensor_value_info("position_ids", TensorProto.INT64, [B, tokens]),
              *(helper.make_tensor_value_info(f"past_{n}", TensorProto.FLOAT, s) for n, s in shapes.items()),
              helper.make_tensor_value_info("write_indices", TensorProto.INT64, [B])]
    outputs = [helper.make_tensor_value_info("q_rotated", TensorProto.FLOAT, [B, tokens, width]),
               *(helper.make_tensor_value_info(f"present_{n}", TensorProto.FLOAT, s) for n, s in shapes.items())]
    graph = helper.make_graph(nodes, "step", inputs, outputs, inits)
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 24)])


@pytest.mark.parametrize("mode, rows, value_rows, tokens", [
    ("linear", [0, 5], ROWS, 1), ("circular", [7, 2], ROWS, 1), ("linear", [3, 1], ROWS + 2, 1),
    ("linear", [0, 3], ROWS, 3), ("circular", [4, 9], ROWS, 3), ("linear", [3, 1], ROWS + 2, 3)])
def test_values_carried_into_cache(mode, rows, value_rows, tokens, rng):
    """V's columns, right after K's in the packed projection, are copied into V's cache by the
    kernel rotating Q and K and storing K's rows: one kernel and no cache write, where V's cache
    is of K's cache's shape; otherwise V's cache write stays a kernel (reading its columns at
    strides where a prompt's head split is a Transpose)."""
    model = packed_step(mode, value_rows, tokens)
    bundle, kernels = compile_with_kernels(model, target="generic", state="none")
    templates = [k.template for k in kernels]
    assert templates.count("tensor_scatter") == (value_rows != ROWS) and templates.count("rotary") == 1
    assert "strided_copy" not in templates
    feeds = {"qkv": rng.standard_normal([B, tokens, 3 * HEADS * D]).astype(np.float32),
             "position_ids": np.array([[3], [9]], np.int64) + np.arange(tokens),
             "past_key": rng.standard_normal([B, HEADS, ROWS, D]).astype(np.float32),
             "past_value": rng.standard_normal([B, HEADS, value_rows, D]).astype(np.float32),
             "write_indices": np.array(rows, np.int64)}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    with load(bundle) as m:
        got = m.run(feeds)
    for name, ref in zip(("q_rotated", "present_key", "present_value"), want):
        np.testing.assert_allclose(got[name], ref, rtol=1e-5, atol=1e-6, err_msg=name)
