"""float16_range: `--precision fp16` keeps in float32, by itself, the nodes where float16 storage
overflows (an attention with a -1e9 additive mask, a LayerNorm over activations past 65504, a sum
of squares over a long axis), names each with why, and the bundle then matches float32 (rel L2
< 1e-2, the fp16 model tests' tolerance); models without such nodes keep none."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from bundles import read_bundle
from compiler.cli import app
from tests.harness import check_against_onnxruntime, compile_cached, passes_graph

FP16 = dict(precision="fp16", target="lavapipe", rtol_l2=1e-2, rtol=2e-2, atol=2e-2)


def _model(nodes, inputs, output, inits, opset=17):
    graph = helper.make_graph(nodes, "range", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                                               for n, s in inputs],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, output)],
                              [numpy_helper.from_array(a, n) for n, a in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _masked_attention():
    """softmax(q k^T / 4 + mask) v over 8 keys, the mask -1e9 past each query's causal window
    (a row of 8 queries; the last row masked entirely, which float32 turns into a uniform average)."""
    mask = np.triu(np.full((8, 8), -1e9, np.float32), 1)
    mask[7] = -1e9
    return _model([helper.make_node("MatMul", ["q", "kt"], ["s"]),
                   helper.make_node("Mul", ["s", "scale"], ["ss"]),
                   helper.make_node("Add", ["ss", "mask"], ["sm"], name="add_mask"),
                   helper.make_node("Softmax", ["sm"], ["p"], axis=-1, name="softmax"),
                   helper.make_node("MatMul", ["p", "v"], ["y"])],
                  [("q", [1, 2, 8, 16]), ("kt", [1, 2, 16, 8]), ("v", [1, 2, 8, 16])], [1, 2, 8, 16],
                  {"scale": np.array(0.25, np.float32), "mask": mask})


def _large_layernorm():
    """A LayerNorm over activations scaled by 1000: past float16's range before it normalizes."""
    rng = np.random.default_rng(0)
    return _model([helper.make_node("Mul", ["x", "k"], ["big"], name="scale_up"),
                   helper.make_node("LayerNormalization", ["big", "g", "b"], ["y"], name="ln")],
                  [("x", [1, 4, 64])], [1, 4, 64],
                  {"k": np.array(1000.0, np.float32),
                   "g": (1 + 0.1 * rng.standard_normal(64)).astype(np.float32),
                   "b": (0.1 * rng.standard_normal(64)).astype(np.float32)})


def _sum_of_squares():
    """ReduceSumSquare over 4096 values of N(0, 1): about 4096, past 65504 with inputs of 4x."""
    return _model([helper.make_node("Mul", ["x", "four"], ["x4"]),
                   helper.make_node("ReduceSumSquare", ["x4"], ["y"], axes=[2], keepdims=1, name="ssq")],
                  [("x", [1, 2, 4096])], [1, 2, 1], {"four": np.array(4.0, np.float32)}, opset=13)


def _kept(model):
    return {e["node"]: e["why"] for e in passes_graph(model, "fp16").float32_nodes}


def test_an_attention_mask_past_float16_keeps_the_attention_float32():
    """The pattern fuses into one attention node, kept float32 for the mask it reads."""
    (why,) = _kept(_masked_attention()).values()
    assert "reads constant 'mask' holding 1e+09, past float16's range" in why and "add_mask" in why
    rng = np.random.default_rng(1)
    feeds = {n: rng.standard_normal(s).astype(np.float32)
             for n, s in (("q", (1, 2, 8, 16)), ("kt", (1, 2, 16, 8)), ("v", (1, 2, 8, 16)))}
    check_against_onnxruntime(_masked_attention(), feeds=feeds, **FP16)


def test_a_layernorm_over_large_activations_stays_float32():
    kept = _kept(_large_layernorm())
    assert "result may reach" in kept["scale_up"] and "may reach" in kept["ln"]
    feeds = {"x": (100 * np.random.default_rng(2).standard_normal((1, 4, 64))).astype(np.float32)}
    check_against_onnxruntime(_large_layernorm(), feeds=feeds, **FP16)


def test_a_sum_of_squares_over_a_long_axis_stays_float32():
    assert "result may reach" in _kept(_sum_of_squares())["ssq"]
    check_against_onnxruntime(_sum_of_squares(), **FP16)


def test_a_softmax_bounds_what_follows_it():
    """Unfused (the product after the Softmax reads a Transpose of it): the masked sum and the
    Softmax stay float32, the product after the Softmax computes float16 again."""
    model = _masked_attention()
    node = model.graph.node[4]
    node.input[0] = "pt"
    model.graph.node.insert(4, helper.make_node("Transpose", ["p"], ["pt"], perm=[0, 1, 3, 2]))
    kept = _kept(model)
    assert "past float16's range" in kept["add_mask"] and "may reach 1e+09" in kept["softmax"], kept
    assert not any(n.startswith("MatMul") for n in kept), kept


def test_inspect_lists_the_nodes_kept_float32_with_why(tmp_path):
    path = tmp_path / "ssq.vkb"
    path.write_bytes(compile_cached(_sum_of_squares(), target="lavapipe", precision="fp16"))
    assert [e["node"] for e in read_bundle(path.read_bytes()).manifest["float32_nodes"]][-1] == "ssq"
    out = CliRunner().invoke(app, ["inspect", str(path)]).output
    assert "kept float32: ssq: its result may reach" in out, out
    onnx.checker.check_model(_sum_of_squares())


def _normalize():
    """F.normalize as torch exports it: x / expand(max(||x||, 1e-12)), over rows one of which is
    zero (Swin v2's cosine attention on a window's zero padding)."""
    return _model([helper.make_node("ReduceL2", ["x"], ["n"], axes=[2], keepdims=1),
                   helper.make_node("Clip", ["n", "eps", ""], ["c"], name="clip"),
                   helper.make_node("Expand", ["c", "shape"], ["e"]),
                   helper.make_node("Div", ["x", "e"], ["y"], name="div")],
                  [("x", [1, 4, 8])], [1, 4, 8],
                  {"eps": np.array(1e-12, np.float32), "shape": np.array([1, 4, 8], np.int64)}, opset=13)


def test_a_floor_float16_rounds_to_0_keeps_the_division_by_it_float32():
    kept = _kept(_normalize())
    assert "which float16 rounds by 100.0%" in kept["clip"], kept
    assert "may hold values float16 rounds to 0 (from constant 'eps')" in kept["div"], kept
    x = np.random.default_rng(3).standard_normal((1, 4, 8)).astype(np.float32)
    x[0, 1] = 0
    check_against_onnxruntime(_normalize(), feeds={"x": x}, **FP16)
