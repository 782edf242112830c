"""The expression renderer (compiler/expr.py) renders every case of expr_fixture.json exactly as
the two renderers before it did (expr.render for float32, TypedRenderer for other dtypes; see
make_expr_fixture.py): same GLSL, same helper functions in the same order, same errors."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from compiler import elementwise_ops as ops
from compiler import expr as E
from compiler.dtypes import TYPES

FIXTURE = json.loads(Path(__file__).with_name("expr_fixture.json").read_text())
# Deliberate changes since the fixture: float64 exp and log, which it records as unsupported,
# now call expr.HELPERS' double exp and log (tested against numpy in test_double_exp_log).
NOW_SUPPORTED = {("float64", "Unsupported: exp"), ("float64", "Unsupported: log")}


def _tree(x):
    return tuple(_tree(c) for c in x) if isinstance(x, list) else x


def _leaf(t):
    return "acc_v" if t[0] == "acc" else f"x{t[1]}"


def _render(dtype, tree, operands):
    """What the compiler renders now: expr.Renderer for every dtype (float32 included: the
    float32 kernel and epilogues declare no helper the old trees call, nor int64)."""
    try:
        r = E.Renderer(TYPES[dtype], [TYPES[o] for o in operands])
        if dtype == "float32" and all(o == "float32" for o in operands):
            text = r.render(tree, _leaf)
            assert not r.helpers and not r.int64
            return {"expr": text, "helpers": [], "int64": False}, {}
        text = r.render(tree, _leaf)
        return {"expr": text, "helpers": list(r.helpers), "int64": r.int64}, r.helpers
    except Exception as exc:  # noqa: BLE001 - the error is part of the recorded behaviour
        return {"error": f"{type(exc).__name__}: {exc}"}, {}


@pytest.mark.parametrize("dtype", sorted({c["dtype"] for c in FIXTURE["cases"]}))
def test_renders_as_before(dtype):
    cases = [c for c in FIXTURE["cases"] if c["dtype"] == dtype]
    for case in cases:
        tree = _tree(case["tree"])
        got, helpers = _render(dtype, tree, case["operands"])
        want = {k: case[k] for k in ("expr", "helpers", "int64", "error") if k in case}
        if (dtype, want.get("error")) in NOW_SUPPORTED:
            assert "error" not in got, (dtype, tree, got)
            continue
        assert got == want, (dtype, tree, case["operands"])
        for name, text in helpers.items():
            assert text == FIXTURE["helpers"][name], name
        assert E.render_size(tree) == case["size"], tree


# Ops added after the fixture was recorded; their GLSL is tested against onnxruntime
# (tests/compiler/lower/test_elementwise_bool.py, test_activations.py) and in test_typed_trees.
NEWER_OPS = {"erf", "gelu", "gelu_tanh", "equal", "less", "greater", "less_equal", "greater_equal",
             "isnan", "isinf", "not", "and", "or", "xor", "where", "cast"}


def test_every_op_has_cases():
    rendered = {c["tree"][0] for c in FIXTURE["cases"]} | {
        c["tree"][1][0] for c in FIXTURE["cases"] if isinstance(c["tree"][1], list)}
    assert set(ops.OPS) - NEWER_OPS <= rendered


def _r(tree, out="float32", operands=("float32",)):
    r = E.Renderer(TYPES[out], [TYPES[o] for o in operands])
    return r.render(tree, _leaf), r


def test_typed_trees():
    """Each subtree computes in its own type: a predicate's operands in theirs, constants in
    their context's type, a cast converts between them."""
    x0, x1 = ("in", 0), ("in", 1)
    assert _r(("less", x0, ("const", 0)), "bool", ["int64"])[0] == "(x0 < 0l)"
    assert _r(("where", ("less", x0, x1), x0, ("const", -1)), "int8", ["int8", "int8"])[0] == \
        "((x0 < x1) ? x0 : -1)"
    assert _r(("where", x0, x1, ("const", float("-inf"))), "float32", ["bool", "float32"])[0] == \
        "(x0 ? x1 : uintBitsToFloat(0xff800000u))"
    assert _r(("not", ("equal", x0, ("const", 0))), "bool", ["int32"])[0] == "(!(x0 == 0))"
    assert _r(("cast", x0, "float32"), "float32", ["int64"])[0] == "float(x0)"
    assert _r(("cast", x0, "bool"), "bool", ["float32"])[0] == "(x0 != 0.0)"
    assert _r(("cast", x0, "float32"), "float32", ["bool"])[0] == "(x0 ? 1.0 : 0.0)"
    assert _r(("cast", x0, "int8"), "int8", ["int64"])[0] == "bitfieldExtract(int(x0), 0, 8)"
    assert _r(("cast", x0, "float16"), "float16", ["float32"])[0] == \
        "unpackHalf2x16(packHalf2x16(vec2(x0, 0.0))).x"
    text, r = _r(("mul", ("cast", ("cast", x0, "int64"), "float32"), ("const", 2)))
    assert text == "(float(int64_t(x0)) * 2.0)" and r.int64
    text, r = _r(("gelu", x0))
    assert text == "(0.5 * x0 * (1.0 + erf_float_float(x0 * 0.707106781)))"
    assert list(r.helpers) == ["erf_float_float"]
    with pytest.raises(E.Unsupported) as info:
        _r(("erf", x0), "float64", ["float64"])
    assert info.value.dtype is TYPES["float64"]


def test_onnx_tables():
    # Each ONNX op maps to one tree op; the dtype families follow from the texts each op has.
    assert ops.ONNX_UNARY["LeakyRelu"] == "prelu" and ops.ONNX_BINARY["PRelu"] == "prelu"
    assert ops.ONNX_ATTRS["LeakyRelu"] == (("alpha", 0.01),)
    assert ops.ONNX_VARIADIC == {"Sum": "add", "Max": "max", "Min": "min", "Mean": "add"}
    assert not set(ops.ONNX_UNARY) & set(ops.ONNX_BINARY)
    assert ops.INTEGER_OPS == {"add", "sub", "mul", "div", "max", "min", "clip", "neg", "abs",
                               "relu", "sign", "prelu", "pow", "equal", "less", "greater",
                               "less_equal", "greater_equal", "where", "cast"}
    assert ops.FLOAT64_OPS == ops.INTEGER_OPS | {"sqrt", "reciprocal", "floor", "ceil", "round",
                                                 "exp", "log", "softsign", "thresholded_relu",
                                                 "isnan", "isinf"}
    assert {op.name for op in ops.OPS.values() if "bool" in op.kinds} == {
        "equal", "not", "and", "or", "xor", "where", "cast"}
    assert ops.OPS["exp"].kinds == ("float", "double")


@pytest.mark.parametrize("op", ["Exp", "Log"])
def test_double_exp_log(op):
    """float64 Exp and Log (expr.HELPERS "dexp", "dlog") within 4e-16 of numpy's over the whole
    double range, subnormals, zeros, infinities and NaN included."""
    import numpy as np

    from compiler import onnx_backend
    from tests.onnx_builders import single_op_model

    rng = np.random.default_rng(0)
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, 2.0, 0.5, -1.0, 1e-310, 5e-324,
               1 + 2 ** -52, 1 - 2 ** -53, 709.78, -745.0, 1e300]
    if op == "Exp":
        x = np.concatenate([rng.uniform(-750, 750, 2000), rng.uniform(-1, 1, 500), special])
    else:
        x = np.concatenate([np.exp(rng.uniform(-700, 700, 2000)), rng.uniform(0.5, 2, 500),
                            special])
    model = single_op_model(op, {"x": [x.size]}, input_dtypes={"x": np.float64},
                            output_dtypes=[np.float64])
    (got,) = onnx_backend.run_model(model, [x])
    with np.errstate(all="ignore"):
        want = np.exp(x) if op == "Exp" else np.log(x)
    normal = np.isfinite(want) & (np.abs(want) > 2.3e-308)
    assert np.max(np.abs(got[normal] - want[normal]) / np.abs(want[normal])) < 4e-16
    np.testing.assert_array_equal(got[~normal], want[~normal])  # inf, 0, NaN exactly
