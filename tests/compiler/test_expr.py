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


def _tree(x):
    return tuple(_tree(c) for c in x) if isinstance(x, list) else x


def _leaf(t):
    return "acc_v" if t[0] == "acc" else f"x{t[1]}"


def _render(dtype, tree, operands):
    """What the compiler renders now: lower/elementwise.py and epilogues call expr.render for
    float32-only trees, Renderer otherwise."""
    try:
        if dtype == "float32" and all(o == "float32" for o in operands):
            return {"expr": E.render(tree, _leaf), "helpers": [], "int64": False}, {}
        r = E.Renderer(TYPES[dtype], [TYPES[o] for o in operands])
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
        assert got == want, (dtype, tree, case["operands"])
        for name, text in helpers.items():
            assert text == FIXTURE["helpers"][name], name
        assert E.render_size(tree) == case["size"], tree


def test_every_op_has_cases():
    rendered = {c["tree"][0] for c in FIXTURE["cases"]} | {
        c["tree"][1][0] for c in FIXTURE["cases"] if isinstance(c["tree"][1], list)}
    assert set(ops.OPS) <= rendered


def test_onnx_tables():
    # Each ONNX op maps to one tree op; the dtype families follow from the texts each op has.
    assert ops.ONNX_UNARY["LeakyRelu"] == "prelu" and ops.ONNX_BINARY["PRelu"] == "prelu"
    assert ops.ONNX_ATTRS["LeakyRelu"] == (("alpha", 0.01),)
    assert ops.ONNX_VARIADIC == {"Sum": "add", "Max": "max", "Min": "min", "Mean": "add"}
    assert not set(ops.ONNX_UNARY) & set(ops.ONNX_BINARY)
    assert ops.INTEGER_OPS == {"add", "sub", "mul", "div", "max", "min", "clip", "neg", "abs",
                               "relu", "sign", "prelu", "pow"}
    assert ops.FLOAT64_OPS == ops.INTEGER_OPS | {"sqrt", "reciprocal", "floor", "ceil", "round",
                                                 "softsign", "thresholded_relu"}
    assert ops.OPS["exp"].kinds == ("float",)
