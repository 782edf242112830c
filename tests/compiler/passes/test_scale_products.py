"""A gated MLP's product, read only by its down projection, is scaled by a power of two under
--precision fp16 so that the product and the projection compute in float16
(compiler/passes/scale_products.py)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from tests.harness import check_against_onnxruntime, passes_graph
from tests.onnx_builders import make_model, tensor_info

HIDDEN, FFN, ROWS = 64, 96, 8


def _swiglu(*, bias_down: bool = False, product_is_output: bool = False, weight_scale: float = 1.0):
    """down(silu(x @ gate) * (x @ up)), as Llama's MLP exports (Sigmoid and Mul for silu)."""
    rng = np.random.default_rng(0)

    def w(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * weight_scale / np.sqrt(shape[0]))
                                       .astype(np.float32), name)
    inits = [w("w_gate", HIDDEN, FFN), w("w_up", HIDDEN, FFN), w("w_down", FFN, HIDDEN)]
    mk = helper.make_node
    nodes = [mk("MatMul", ["x", "w_gate"], ["g"], name="gate_proj"),
             mk("Sigmoid", ["g"], ["sg"], name="sigmoid"),
             mk("Mul", ["g", "sg"], ["a"], name="silu"),
             mk("MatMul", ["x", "w_up"], ["u"], name="up_proj"),
             mk("Mul", ["a", "u"], ["h"], name="gated"),
             mk("MatMul", ["h", "w_down"], ["d"], name="down_proj")]
    outputs = [tensor_info("y", [ROWS, HIDDEN])]
    if bias_down:
        inits.append(numpy_helper.from_array(rng.standard_normal(HIDDEN).astype(np.float32), "b_down"))
        nodes.append(mk("Add", ["d", "b_down"], ["y"], name="bias"))
    else:
        nodes[-1].output[0] = "y"
    if product_is_output:
        outputs.append(tensor_info("h", [ROWS, FFN]))
    graph = helper.make_graph(nodes, "swiglu", [tensor_info("x", [ROWS, HIDDEN])], outputs, initializer=inits)
    return make_model(graph)


def _kept(graph) -> set[str]:
    return {entry["node"] for entry in graph.float32_nodes}


def test_the_product_and_its_projection_compute_in_float16():
    graph = passes_graph(_swiglu(), "fp16")
    kept = _kept(graph)
    assert not {"gated", "down_proj"} & kept, kept
    # without the scale both would stay float32: the product of two activations may pass 65504
    unscaled = passes_graph(_swiglu(), "fp16", skip=("scale_products",))
    assert {"gated", "down_proj"} <= _kept(unscaled)


@pytest.mark.parametrize("bias_down", [False, True])
def test_scaled_products_match_onnxruntime(bias_down):
    model = _swiglu(bias_down=bias_down)
    feeds = {"x": np.random.default_rng(1).standard_normal((ROWS, HIDDEN)).astype(np.float32)}
    check_against_onnxruntime(model, feeds=feeds, target="lavapipe")
    result = check_against_onnxruntime(model, feeds=feeds, target="generic", precision="fp16", rtol_l2=1e-2,
                                       rtol=2e-2, atol=2e-2)
    assert not {"gated", "down_proj"} & {e["node"] for e in result["manifest"].get("float32_nodes", [])}


def test_large_products_keep_their_range():
    """Inputs of a few hundred: products past float16's 65504, which the scale keeps in range."""
    model = _swiglu()
    x = (np.random.default_rng(2).standard_normal((ROWS, HIDDEN)) * 100).astype(np.float32)
    w = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    g, u = x @ w["w_gate"], x @ w["w_up"]
    assert np.abs(g * 0.5 * (1 + np.tanh(g / 2)) * u).max() > 65504   # silu(g) * u
    result = check_against_onnxruntime(model, feeds={"x": x}, target="generic", precision="fp16", rtol_l2=1e-2,
                                       rtol=2e-2, atol=1e-3 * float(np.abs(g * u).max()))
    assert np.all(np.isfinite(result["outputs"]["y"]))


def test_left_alone():
    # the product is a graph output: its bytes are the user's, unscaled
    assert {"gated"} <= _kept(passes_graph(_swiglu(product_is_output=True), "fp16"))
    # its typical size scaled would fall below float16's normal range: float32 stays
    assert {"gated"} <= _kept(passes_graph(_swiglu(weight_scale=0.05), "fp16"))
    # float32 bundles are not touched
    assert not any(n.name.endswith("/rescale") for n in passes_graph(_swiglu(), "fp32").nodes)


def test_a_block_quantized_projection_reads_the_scaled_product():
    from bundles import read_bundle
    from compiler.compile import compile_model

    manifest = read_bundle(compile_model(_swiglu(), target="generic", precision="fp16", weights="int4")).manifest
    assert {q["node"]: q["op"] for q in manifest["quantized_weights"]["quantized"]}["down_proj"] == "MatMulNBits"
    assert [e["node"] for e in manifest["float32_nodes"]] == ["down_proj/rescale"]
