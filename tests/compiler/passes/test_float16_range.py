"""float16_range: `--precision fp16` keeps in float32, by itself, the nodes where float16 storage
overflows (an attention with a -1e9 additive mask, a LayerNorm over activations past 65504, a sum
of squares over a long axis), names each with why, and the bundle then matches float32 (rel L2
< 1e-2, the fp16 model tests' tolerance); models without such nodes keep none."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from bundles import read_bundle
from compiler.cli import app
from compiler.errors import CompileError
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


def _conv_stack(gain: float, layers: int = 6, channels: int = 32, depthwise: bool = False, relu6: bool = False):
    """Convolutions followed by Relu (or ReLU6: Clip(0, 6)), their weights drawn as library-default
    init draws them (normal, std gain * sqrt(2 / fan_in), so each layer scales its input's size by
    about gain), then a Linear head: a network whose activations shrink (gain < 1, depthwise
    convolutions under kaiming fan_out) or grow (gain > 1) by the product of the gains."""
    rng = np.random.default_rng(4)
    nodes, inits, x = [], {}, "x"
    if relu6:
        inits["zero"], inits["six"] = np.array(0, np.float32), np.array(6, np.float32)
    for i in range(layers):
        shape = (channels, 1, 3, 3) if depthwise else (channels, channels, 1, 1)
        fan_in = int(np.prod(shape[1:]))
        inits[f"w{i}"] = (gain * np.sqrt(2 / fan_in) * rng.standard_normal(shape)).astype(np.float32)
        nodes += [helper.make_node("Conv", [x, f"w{i}"], [f"c{i}"], name=f"conv{i}", pads=[1, 1, 1, 1] if depthwise
                                   else [0, 0, 0, 0], group=channels if depthwise else 1),
                  helper.make_node("Clip", [f"c{i}", "zero", "six"], [f"r{i}"], name=f"relu{i}") if relu6
                  else helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}")]
        x = f"r{i}"
    inits["wh"] = (0.01 * rng.standard_normal((10, channels))).astype(np.float32)
    inits["shape"] = np.array([1, -1], np.int64)
    nodes += [helper.make_node("GlobalAveragePool", [x], ["pooled"]),
              helper.make_node("Reshape", ["pooled", "shape"], ["flat"]),
              helper.make_node("Gemm", ["flat", "wh"], ["y"], name="head", transB=1)]
    return _model(nodes, [("x", [1, channels, 8, 8])], [1, 10], inits)


def test_activations_below_float16s_normal_range_stay_float32():
    """Each layer takes its input's size down 16 times: by the fourth, typical values are about
    2e-5, below float16's smallest normal (6.1e-5); from there on the nodes stay float32, the
    first ones compute float16."""
    model = _conv_stack(gain=1 / 16)
    kept = _kept(model)
    assert "conv0" not in kept and "relu2" not in kept, kept
    assert "below float16's normal range" in kept["conv3"] and "head" in kept, kept
    check_against_onnxruntime(model, **FP16)


def test_depthwise_convolutions_of_default_init_shrink_below_float16_and_stay_float32():
    """Kaiming fan_out draws a depthwise 3x3 kernel of 32 channels with std sqrt(2 / (32 * 9)):
    each layer scales its input by about 0.18 (MobileNet's and EfficientNet's blocks)."""
    model = _conv_stack(gain=1 / np.sqrt(32), layers=10, depthwise=True)
    kept = _kept(model)
    assert "head" in kept and "conv0" not in kept, kept
    check_against_onnxruntime(model, **FP16)


def test_a_relu6_of_values_many_times_its_window_is_refused():
    """Each layer scales its input by 30 (random weights of std 0.5 over a fan-in of hundreds):
    the second ReLU6 reads values about 250, 40 times its window, and what it passes is what is
    left where terms of that size cancel, which float16 holds to 0.1 each. Refused, naming it."""
    with pytest.raises(CompileError, match=r"Clip 'relu1' keeps values within a window of 6 from "
                                           r"values about 2.5e\+02 \('c1'\).*--precision fp32"):
        passes_graph(_conv_stack(gain=30.0, relu6=True), "fp16")


def test_a_relu6_of_values_within_its_window_computes_float16():
    """He init (each layer keeps the size): every ReLU6 reads values about 1, float16 throughout."""
    model = _conv_stack(gain=1.0, relu6=True)
    assert _kept(model) == {}
    check_against_onnxruntime(model, **FP16)


def test_activations_weights_grow_past_float16s_range_stay_float32():
    """Each layer takes its input's size up 6 times (Inception's default init: std 0.1 over a
    fan-in of hundreds): about 1e4 by the fifth layer, past LIMIT."""
    model = _conv_stack(gain=6.0)
    kept = _kept(model)
    assert "conv0" not in kept and "may reach" in kept["conv5"], kept
    check_against_onnxruntime(model, **FP16)


def test_a_layernorm_of_values_below_its_epsilon_keeps_them_small():
    """SAM's vision encoder at library-default init: its patch embedding gives about 1e-9, and a
    LayerNorm of such rows gives x / sqrt(epsilon), 1e-6, not values near 1: below float16's
    normal range, so what reads it stays float32 (it was flushed to 0: rel L2 1.0)."""
    rng = np.random.default_rng(1)
    model = _model([helper.make_node("Mul", ["x", "tiny"], ["t"], name="patch_embed"),
                    helper.make_node("LayerNormalization", ["t", "g", "b"], ["n"], name="ln", epsilon=1e-6),
                    helper.make_node("MatMul", ["n", "w"], ["y"], name="qkv")],
                   [("x", [1, 16, 32])], [1, 16, 32],
                   {"tiny": np.array(1e-9, np.float32), "g": np.ones(32, np.float32), "b": np.zeros(32, np.float32),
                    "w": (rng.standard_normal((32, 32)) / np.sqrt(32)).astype(np.float32)})
    kept = _kept(model)
    assert "below float16's normal range" in kept["qkv"], kept
    check_against_onnxruntime(model, **FP16)


def test_activations_of_unit_size_keep_float16():
    """He init (each Conv and Relu keep the size): every node computes float16."""
    assert _kept(_conv_stack(gain=1.0, layers=12)) == {}


def _gate(own: bool):
    """relu(x) * sigmoid(W relu(x)) over 64 channels of 256 rows, W's rows of norm 1e4: gate logits
    about 1e4 times their input's size (a squeeze-excite gate of random weights), computed from a
    value float16 stores; own: the gate multiplies its own input instead (SiLU's form)."""
    w = (1e4 / np.sqrt(64) * np.random.default_rng(5).standard_normal((64, 64))).astype(np.float32)
    return _model([helper.make_node("Relu", ["x"], ["r"], name="relu"),
                   helper.make_node("MatMul", ["r", "w"], ["logits"], name="logits"),
                   helper.make_node("Sigmoid", ["logits"], ["gate"], name="gate"),
                   helper.make_node("Mul", ["logits" if own else "r", "gate"], ["y"], name="gated")],
                  [("x", [1, 256, 64])], [1, 256, 64], {"w": w})


def test_a_gate_reading_values_float16_cannot_carry_is_refused():
    """Float16 holds relu(x) to 1 part in 2048, so each logit, a sum of 64 terms of about 1e3
    that cancel, moves by about 3 where the gate moves fastest, near its 0: float16's answer would
    differ from float32's by over 1e-2, and vkc refuses it, naming the gate. Without the float16
    Relu before it (the product reading the float32 input), float32 computes it all: no refusal."""
    with pytest.raises(CompileError, match=r"Sigmoid 'gate' weighs by values about 7.1e\+03 \('logits'\).*--precision fp32"):
        passes_graph(_gate(own=False), "fp16")
    direct = _gate(own=False)
    direct.graph.node[1].input[0] = "x"
    passes_graph(direct, "fp16")


def test_a_gate_of_its_own_input_is_no_gate():
    """SiLU (x * sigmoid(x)): where the sigmoid moves, near 0, its factor x is small."""
    passes_graph(_gate(own=True), "fp16")


def test_an_attention_weighing_by_scores_float16_cannot_carry_is_refused():
    """A fused attention whose scores are about 450: q and k rectified by float16 Relus (size
    0.7), scaled by 30 each (folded into the attention's scale, 225), 16 terms a score. Float16
    holds q and k to 1 part in 2048, so each score moves by about 0.2, enough to shift which keys
    it attends to; with q and k straight from the float32 inputs it stays float32: no refusal."""
    model = _masked_attention()
    model.graph.node.insert(0, helper.make_node("Mul", ["qr", "thirty"], ["q"]))
    model.graph.node.insert(0, helper.make_node("Mul", ["kr", "thirty"], ["kt"]))
    model.graph.node.insert(0, helper.make_node("Relu", ["q0"], ["qr"]))
    model.graph.node.insert(0, helper.make_node("Relu", ["k0"], ["kr"]))
    model.graph.input[0].name, model.graph.input[1].name = "q0", "k0"
    model.graph.initializer.append(numpy_helper.from_array(np.array(30.0, np.float32), "thirty"))
    with pytest.raises(CompileError, match=r"vkc.Attention '.*' weighs by values about 4.5e\+02"):
        passes_graph(model, "fp16")
    for relu in model.graph.node[:2]:
        relu.op_type = "Identity"
    passes_graph(model, "fp16")


def _divided_by_mean(inner: str | None = None):
    """mean(x / mean(x)) over rows of 5 values (the fuzzer's seed 637, reduced): 1 for every row,
    but a row's mean of signed values may cancel to far below its values; inner: an op on x first
    (a MatMul, whose weights then feed the divisor too; a Relu: never negative, no cancelling)."""
    nodes, inits, x = [], {"axes": np.array([-1], np.int64)}, "x"
    if inner == "MatMul":
        inits["w"] = (np.random.default_rng(6).standard_normal((5, 5)) / np.sqrt(5)).astype(np.float32)
        nodes.append(helper.make_node("MatMul", ["x", "w"], ["h"], name="inner"))
        x = "h"
    elif inner:
        nodes.append(helper.make_node(inner, ["x"], ["h"], name="inner"))
        x = "h"
    nodes += [helper.make_node("ReduceMean", [x, "axes"], ["m"], name="mean"),
              helper.make_node("Div", [x, "m"], ["q"], name="div"),
              helper.make_node("ReduceMean", ["q", "axes"], ["y"], name="ratio", keepdims=0)]
    return _model(nodes, [("x", [64, 5])], [64], inits, opset=18)


def test_a_division_by_a_mean_that_cancels_stays_float32():
    """Rows whose means are 1e-3 of their values: float16's rounding of the values moves each mean
    by a few percent (rel L2 5.7e4 where the division computed float16). The mean and the division
    stay float32, reading the float32 input, and what reads the quotient too (it is unbounded)."""
    kept = _kept(_divided_by_mean())
    assert "divides by 'm', a sum of terms of both signs (ReduceMean 'mean')" in kept["div"], kept
    assert "feeds 'm', which Div 'div' divides by" in kept["mean"], kept
    assert "may reach inf (from Div 'div')" in kept["ratio"], kept
    x = np.random.default_rng(7).standard_normal((64, 5))
    x = (x - x.mean(axis=1, keepdims=True) + 1e-3).astype(np.float32)
    check_against_onnxruntime(_divided_by_mean(), feeds={"x": x}, **FP16)


def test_what_a_cancelling_divisor_is_computed_from_stays_float32(tmp_path):
    kept = _kept(_divided_by_mean("MatMul"))
    assert "feeds 'm'" in kept["inner"] and "feeds 'm'" in kept["mean"] and "div" in kept, kept
    path = tmp_path / "div.vkb"
    path.write_bytes(compile_cached(_divided_by_mean("MatMul"), target="lavapipe", precision="fp16"))
    out = CliRunner().invoke(app, ["inspect", str(path)]).output
    assert "kept float32: div: divides by 'm', a sum of terms of both signs" in out, out


def test_a_cancelling_divisor_of_a_float16_input_is_refused():
    """With --io fp16 the input is rounded before any node reads it: keeping cannot help."""
    from compiler.frontend import to_ir
    from compiler.passes import fold_constants, run_passes
    from compiler.passes.precision import Precision

    graph = fold_constants(to_ir(_divided_by_mean()))
    graph.precision = Precision.parse("fp16", io="fp16")
    with pytest.raises(CompileError, match=r"^Div 'div' divides by 'm', a sum that may cancel "
                                           r"\(ReduceMean 'mean'\), computed from 'x', float16 at the API"):
        run_passes(graph)


def test_divisions_by_one_signed_sums_compute_float16():
    """What normalizations divide by never cancels: a mean of squares plus eps (RMSNorm, a
    variance of x - mean), a softmax's sum of exponentials, a largest |value|, 1 + |x|; nor a
    mean of a Relu's values. None of these keeps a node float32 for cancelling (an activation's
    square or exponential may still pass float16's range: rules 2 and 3)."""
    assert _kept(_divided_by_mean("Relu")) == {}
    inits = {"axes": np.array([-1], np.int64), "eps": np.array(1e-5, np.float32),
             "one": np.array(1.0, np.float32), "two": np.array(2.0, np.float32)}
    node = helper.make_node
    nodes = [node("Mul", ["x", "x"], ["sq"]), node("ReduceMean", ["sq", "axes"], ["ms"]),
             node("Add", ["ms", "eps"], ["mse"]), node("Sqrt", ["mse"], ["rms"]),
             node("Reciprocal", ["rms"], ["inv"]), node("Mul", ["x", "inv"], ["rmsnorm"]),
             node("ReduceMean", ["x", "axes"], ["mean"]), node("Sub", ["x", "mean"], ["d"]),
             node("Pow", ["d", "two"], ["d2"]), node("ReduceMean", ["d2", "axes"], ["var"]),
             node("Add", ["var", "eps"], ["vare"]), node("Sqrt", ["vare"], ["std"]),
             node("Transpose", ["std"], ["stdt"], perm=[1, 0]), node("Transpose", ["stdt"], ["std2"], perm=[1, 0]),
             node("Div", ["d", "std2"], ["norm"]),
             node("ReduceMax", ["x", "axes"], ["top"]), node("Sub", ["x", "top"], ["shifted"]),
             node("Exp", ["shifted"], ["e"]), node("ReduceSum", ["e", "axes"], ["total"]),
             node("Div", ["e", "total"], ["softmax"]),
             node("Abs", ["x"], ["ax"]), node("ReduceMax", ["ax", "axes"], ["amax"]),
             node("Div", ["x", "amax"], ["scaled"]), node("Add", ["ax", "one"], ["soft"]),
             node("Div", ["x", "soft"], ["softsign"]),
             node("Sum", ["rmsnorm", "norm", "softmax", "scaled", "softsign"], ["y"])]
    model = _model(nodes, [("x", [4, 16])], [4, 16], inits, opset=18)
    assert not [why for why in _kept(model).values() if "cancel" in why], _kept(model)
    check_against_onnxruntime(model, **FP16)


def test_a_product_of_values_that_cancel_stays_float32():
    """ReduceProd of x - y over 8 values: a factor where x and y nearly agree carries float16's
    rounding of them as most of itself, and the product sums its factors' relative errors."""
    model = _model([helper.make_node("Sub", ["x", "b"], ["d"], name="diff"),
                    helper.make_node("ReduceProd", ["d", "axes"], ["y"], name="prod", keepdims=0)],
                   [("x", [16, 8])], [16], {"b": np.full(8, 0.75, np.float32),
                                             "axes": np.array([-1], np.int64)}, opset=18)
    kept = _kept(model)
    assert "multiplies together 'd', a sum of terms of both signs (Sub 'diff')" in kept["prod"], kept
    assert "feeds 'd', which ReduceProd 'prod' multiplies together" in kept["diff"], kept
    x = (0.75 + np.random.default_rng(8).choice([-1, 1], (16, 8)) * np.random.default_rng(9).uniform(0.01, 2, (16, 8)))
    check_against_onnxruntime(model, feeds={"x": x.astype(np.float32)}, **FP16)
