"""The activations and math ops of the elementwise expression language (compiler/expr.py)
against onnxruntime, over input ranges that reach their tails and their cancellation points."""

import numpy as np
import pytest

from tests.harness import check_against_onnxruntime, random_feeds
from tests.onnx_builders import GraphBuilder, single_op_model

def at_opset(model, version):
    """The model re-targeted at another opset, output shapes re-inferred."""
    from tests.onnx_builders import _fill_output_shapes

    model.opset_import[0].version = version
    return _fill_output_shapes(model)


SHAPE = [2, 3, 8, 9]

UNARY = [
    ("Tanh", {}, 4.0), ("Tanh", {}, 0.05), ("Exp", {}, 3.0), ("Abs", {}, 2.0),
    ("Neg", {}, 2.0), ("Floor", {}, 3.0), ("Ceil", {}, 3.0), ("Round", {}, 3.0),
    ("Sign", {}, 2.0), ("Softsign", {}, 3.0), ("Softplus", {}, 6.0), ("Softplus", {}, 40.0),
    ("HardSwish", {}, 5.0), ("HardSigmoid", {}, 4.0), ("HardSigmoid", {"alpha": 0.5, "beta": 0.1}, 4.0),
    ("LeakyRelu", {}, 2.0), ("LeakyRelu", {"alpha": 0.2}, 2.0), ("Elu", {}, 3.0),
    ("Elu", {"alpha": 0.5}, 0.05), ("Selu", {}, 3.0), ("Selu", {"alpha": 2.0, "gamma": 3.0}, 1.0),
    ("ThresholdedRelu", {"alpha": 0.5}, 2.0), ("Sigmoid", {}, 12.0),
]


@pytest.mark.parametrize("op,attrs,scale", [pytest.param(*c, id=f"{c[0]}-{i}") for i, c in enumerate(UNARY)])
def test_unary(op, attrs, scale):
    model = single_op_model(op, {"x": SHAPE}, attrs)
    if op == "HardSwish":
        model = at_opset(model, 14)
    feeds = {"x": (random_feeds(model, seed=3)["x"] * scale).astype(np.float32)}
    check_against_onnxruntime(model, feeds=feeds)


@pytest.mark.parametrize("op", ["Sqrt", "Log", "Reciprocal"])
def test_unary_positive_domain(op):
    model = single_op_model(op, {"x": SHAPE})
    feeds = {"x": (np.abs(random_feeds(model, seed=4)["x"]) * 3 + 0.01).astype(np.float32)}
    check_against_onnxruntime(model, feeds=feeds)


@pytest.mark.parametrize("slope_shape", [[1], [3, 1, 1], [9], SHAPE], ids=["scalar", "channel", "last", "full"])
def test_prelu(slope_shape, rng):
    slope = rng.uniform(0.0, 0.5, slope_shape).astype(np.float32)
    check_against_onnxruntime(single_op_model("PRelu", {"x": SHAPE}, initializers={"slope": slope}))


def test_prelu_slope_at_run_time():
    check_against_onnxruntime(single_op_model("PRelu", {"x": SHAPE, "slope": [3, 1, 1]}))


@pytest.mark.parametrize("exponent", [2.0, 3.0, 0.5, -1.0, -2.0, 1.0, 0.0, 5.0, 1.7, -0.5],
                         ids=lambda e: f"exp{e}")
def test_pow_constant_exponent(exponent):
    model = single_op_model("Pow", {"x": SHAPE}, initializers={"e": np.array(exponent, np.float32)})
    x = random_feeds(model, seed=5)["x"]
    if not float(exponent).is_integer():
        x = np.abs(x) + 0.1  # a negative base to a fractional power is NaN in both
    elif exponent < 0:
        x = np.sign(x) * (np.abs(x) + 0.5)
    check_against_onnxruntime(model, feeds={"x": x.astype(np.float32)})


def test_pow_exponent_at_run_time():
    """Integer exponents (odd, even, zero, negative) on negative and zero bases, fractional
    exponents on positive bases."""
    model = single_op_model("Pow", {"x": [4, 6], "e": [4, 6]})
    rng = np.random.default_rng(6)
    y = rng.integers(-3, 4, [4, 6]).astype(np.float32)
    y[3] = rng.uniform(-2, 2, 6)
    x = rng.standard_normal([4, 6]).astype(np.float32)
    x[3] = np.abs(x[3]) + 0.1
    x[0, 0], y[0, 0] = 0.0, 2.0
    x[0, 1], y[0, 1] = 0.0, 0.0
    check_against_onnxruntime(model, feeds={"x": x, "e": y})


def test_long_chain_stays_bounded():
    """Ops that read their operand twice double its text when fused; a long chain must still
    compile (fusion stops at the size bound) and compute the right thing."""
    g = GraphBuilder("chain", seed=1)
    x = g.input("x", [2, 16])
    for i in range(14):
        x = g.node("HardSwish" if i % 2 else "LeakyRelu", [x], **({} if i % 2 else {"alpha": 0.3}))
    g.node("Elu", [x], out="y")
    check_against_onnxruntime(at_opset(g.build(["y"]), 14))


@pytest.mark.parametrize("act,attrs", [("LeakyRelu", {"alpha": 0.1}), ("HardSwish", {}),
                                       ("Tanh", {}), ("Elu", {}), ("HardSigmoid", {})])
def test_activation_fused_into_conv(act, attrs):
    g = GraphBuilder("conv_act", seed=2)
    x = g.input("x", [1, 4, 9, 9])
    g.node(act, [g.conv(x, 4, 8, 3)], out="y", **attrs)
    check_against_onnxruntime(at_opset(g.build(["y"]), 14))


# ---- erf and GELU (ONNX Gelu since opset 20, and the com.microsoft forms) ---------------------

def test_erf_accuracy():
    """Max |erf error| over a dense grid against float64 erf (the kernel's rational
    approximation is within 4.3e-7 of erf in float32 arithmetic; see expr.HELPERS)."""
    import math

    from tests.harness import compile_cached, run_bundle

    x = np.concatenate([np.linspace(-6, 6, 48001), np.geomspace(1e-6, 1, 2000)]).astype(np.float32)
    model = single_op_model("Erf", {"x": list(x.shape)})
    got, _ = run_bundle(compile_cached(model), {"x": x})
    want = np.array([math.erf(float(v)) for v in x])
    err = np.abs(got["y"].astype(np.float64) - want)
    assert err.max() < 5e-7, err.max()
    small = np.abs(x) < 1  # no cancellation near 0: the error is relative there
    assert (err[small] / np.maximum(np.abs(want[small]), 1e-30)).max() < 5e-7


def test_gelu_accuracy_in_its_tail():
    """GELU's x Phi(x) against float64 within 3e-5 relative down to x = -14: its tail comes from
    erfc directly, where 1 + erf(x / sqrt(2)) would cancel (0.3% off at x = -4 before; the fuzzer
    found it, seed 31454)."""
    import math

    from tests.harness import compile_cached, run_bundle

    x = np.linspace(-14, 6, 4001).astype(np.float32)
    model = at_opset(single_op_model("Gelu", {"x": list(x.shape)}), 20)
    got, _ = run_bundle(compile_cached(model), {"x": x})
    want = np.array([float(v) * 0.5 * math.erfc(-float(v) / math.sqrt(2)) for v in x])
    big = np.abs(want) > 1e-30
    rel = np.abs(got["y"].astype(np.float64)[big] - want[big]) / np.abs(want[big])
    assert rel.max() < 3e-5, (rel.max(), x[big][rel.argmax()])


@pytest.mark.parametrize("scale", [3.0, 0.01])
def test_erf(scale):
    model = single_op_model("Erf", {"x": SHAPE})
    check_against_onnxruntime(model, feeds={"x": (random_feeds(model, seed=7)["x"] * scale).astype(np.float32)})


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("scale", [1.0, 4.0])
def test_gelu(approximate, scale):
    model = at_opset(single_op_model("Gelu", {"x": SHAPE}, {"approximate": approximate}), 20)
    x = (random_feeds(model, seed=8)["x"] * scale).astype(np.float32)
    check_against_onnxruntime(model, feeds={"x": x})


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_float16(approximate):
    """float16 computes in float32 and rounds once at the end of each op."""
    model = single_op_model("Gelu", {"x": SHAPE}, {"approximate": approximate},
                            input_dtypes={"x": np.float16}, output_dtypes=[np.float16])
    model = at_opset(model, 20)
    x = (random_feeds(model, seed=10)["x"] * 3).astype(np.float16)
    check_against_onnxruntime(model, feeds={"x": x}, rtol_l2=2e-3)


def _microsoft(op, inputs, seed=9):
    """A com.microsoft op over x [2, 5, 16] (and a bias [16])."""
    from onnx import helper

    from tests.onnx_builders import make_model, tensor_info

    graph = helper.make_graph(
        [helper.make_node(op, list(inputs), ["y"], domain="com.microsoft")], op,
        [tensor_info(n, [2, 5, 16] if n == "x" else [16]) for n in inputs],
        [tensor_info("y", [2, 5, 16])])
    model = make_model(graph, extra_opsets=[("com.microsoft", 1)])
    return model, {n: (np.random.default_rng(seed).standard_normal([2, 5, 16] if n == "x" else [16]) * 2)
                   .astype(np.float32) for n in inputs}


@pytest.mark.parametrize("op,inputs", [("Gelu", ["x"]), ("FastGelu", ["x"]), ("FastGelu", ["x", "bias"]),
                                       ("BiasGelu", ["x", "bias"])],
                         ids=["Gelu", "FastGelu", "FastGelu-bias", "BiasGelu"])
def test_microsoft_gelu(op, inputs):
    model, feeds = _microsoft(op, inputs)
    r = check_against_onnxruntime(model, feeds=feeds)
    assert len(r["manifest"]["dispatches"]) == 1


def _kernel_names(manifest):
    return [manifest["kernels"][d["kernel"]]["name"] for d in manifest["dispatches"]]


@pytest.mark.parametrize("target", ["generic", "lavapipe", "nvidia"])
def test_gelu_after_matmul_and_bias(target, rng):
    """MatMul -> Add(bias) -> Gelu, a transformer's feed-forward layer: the bias and GELU run
    in the matmul's store (tiled, register and texel templates), which declares the erf helper."""
    g = GraphBuilder("ffn", seed=3)
    x = g.input("x", [2, 7, 16])
    w = g.const("w", (rng.standard_normal([16, 32]) * 0.3).astype(np.float32))
    b = g.const("b", rng.standard_normal([32]).astype(np.float32))
    h = g.node("Add", [g.node("MatMul", [x, w]), b])
    g.node("Gelu", [h], out="y")
    r = check_against_onnxruntime(at_opset(g.build(["y"]), 20), target=target)
    assert len(r["manifest"]["dispatches"]) == 1


def test_exported_gelu_after_gemm_with_split_k(rng):
    """The GELU as torch exports it before opset 20 (x * 0.5 * (1 + erf(x / sqrt(2)))) after a
    Gemm with a long K, which splits K on a GPU: the reduce pass applies the epilogue."""
    g = GraphBuilder("exported_gelu", seed=4)
    x = g.input("x", [8, 2048])  # more rows than the matrix-vector kernel takes
    h = g.gemm(x, 2048, 8)
    e = g.node("Erf", [g.node("Div", [h, g.const("sqrt2", np.array(np.sqrt(2), np.float32))])])
    half = g.node("Mul", [h, g.const("half", np.array(0.5, np.float32))])
    g.node("Mul", [half, g.node("Add", [e, g.const("one", np.array(1.0, np.float32))])], out="y")
    r = check_against_onnxruntime(g.build(["y"]), target="nvidia")
    names = _kernel_names(r["manifest"])
    assert len(names) == 2 and names[-1] == "splitk_reduce_epilogue", names


@pytest.mark.parametrize("kernel,group,channels,target",
                         [(3, 1, 8, "generic"), (3, 8, 8, "generic"), (1, 1, 8, "generic"),
                          (3, 1, 16, "lavapipe")],
                         ids=["conv3x3", "depthwise", "conv1x1", "winograd"])
def test_gelu_fused_into_conv(kernel, group, channels, target):
    g = GraphBuilder("conv_gelu", seed=5)
    x = g.input("x", [1, channels, 10, 10])
    g.node("Gelu", [g.conv(x, channels, channels, kernel, group=group)], out="y", approximate="tanh")
    r = check_against_onnxruntime(at_opset(g.build(["y"]), 20), target=target)
    names = _kernel_names(r["manifest"])
    assert not any(name.startswith("elementwise") for name in names)
    assert target != "lavapipe" or "winograd_output_epilogue" in names, names
