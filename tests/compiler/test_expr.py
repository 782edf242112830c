"""The expression renderer (compiler/expr.py): every elementwise op it renders, in every dtype
that has a text for it, computes what onnx's reference evaluator (numpy) computes, alone and
nested; the typing rules of mixed trees; the tables the ONNX ops map through."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from compiler import elementwise_ops as ops
from compiler import expr as E
from compiler import onnx_backend
from compiler.dtypes import TYPES
from tests.harness import assert_close

OPSET = 28
N = 97  # elements: not a multiple of a workgroup or of the 4 that packed 8- and 16-bit words hold
KIND = {"float32": "float", "float16": "float", "float64": "double", "int8": "int", "int16": "int",
        "int32": "int", "int64": "int", "uint8": "uint", "uint16": "uint", "uint32": "uint", "uint64": "uint"}
# Ops with inputs of other dtypes than their result, tested in test_typed_trees and by the
# where/compare chain below: Where (a bool condition), Cast (its `to`), the bool-only logic ops.
OTHER_TYPING = {"select", "cast"}
# float32 computes in float and float16 rounds afterwards; GPU transcendentals are not correctly
# rounded, so floats compare within these (rtol, atol); integers and bools compare exactly.
TOLERANCE = {"float32": (1e-5, 1e-6), "float16": (2e-3, 1e-3), "float64": (1e-13, 1e-15)}


def _allows(onnx_op: str, dtype: str) -> bool:
    """ONNX's schema takes the dtype for the op's first input."""
    schema = onnx.defs.get_schema(onnx_op, OPSET)
    name = schema.inputs[0].type_str
    allowed = next((c.allowed_type_strs for c in schema.type_constraints if c.type_param_str == name), [name])
    onnx_name = {"float32": "float", "float64": "double"}.get(dtype, dtype)
    return f"tensor({onnx_name})" in allowed


def _cases(dtype):
    """(ONNX op, tree op, its ONNX input count) of every op the renderer has a text for in this dtype."""
    for op in ops.OPS.values():
        if op.typing in OTHER_TYPING or op.text(KIND[dtype]) is None:
            continue
        for onnx_op in (*op.onnx, *op.variadic):
            if _allows(onnx_op, dtype) and _renders(op, onnx_op, dtype):
                yield onnx_op, op.name, 1 if onnx_op in ops.ONNX_UNARY else 2


def _renders(op, onnx_op: str, dtype: str) -> bool:
    """The renderer takes the ONNX op's tree on tensor operands of this dtype (it refuses, by
    name, what it does not compute: float64 Pow of a float exponent tensor)."""
    if op.chosen_by:
        tree = (op.name, ("in", 0), ("in", 1))
    elif onnx_op in ops.ONNX_UNARY:
        tree = (ops.ONNX_UNARY[onnx_op], ("in", 0), *(("const", v) for _, v in ops.ONNX_ATTRS.get(onnx_op, ())))
    else:
        tree = ((ops.ONNX_BINARY.get(onnx_op) or ops.ONNX_VARIADIC[onnx_op]), ("in", 0), ("in", 1))
    try:
        E.Renderer(TYPES[dtype], [TYPES[dtype]] * 2).render(tree, _leaf)
    except E.Unsupported:
        return False
    return True


def _inputs(dtype, rng):
    """a, b: operands over each dtype's interesting values (b never 0, so integer division is
    defined), signed zeros, infinities and NaN among the floats; e: small non-negative exponents
    for Pow."""
    np_type = np.dtype(dtype)
    if np_type.kind == "f":
        a = np.concatenate([rng.standard_normal(N - 7) * 3, [0.0, -0.0, 0.5, -2.5, np.inf, -np.inf, np.nan]])
        b = rng.standard_normal(N) * 2
        e = rng.integers(0, 4, N)
    else:
        info = np.iinfo(np_type)
        lo = max(info.min, -30)
        a = rng.integers(lo, 31, N)
        b = rng.integers(lo, 31, N)
        b[b == 0] = 3
        e = rng.integers(0, 4, N)
    return {"a": a.astype(np_type), "b": b.astype(np_type), "e": e.astype(np_type)}


def _model(dtype):
    """One output per op (Pow takes e as its exponent), plus chains that nest the renderer's trees:
    a product of sums and differences, and a Where on a comparison."""
    t = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    nodes, outputs = [], []
    for onnx_op, name, inputs in _cases(dtype):
        # Pow takes e as its exponent, and so do shifts as their count
        operands = ["a", "e"] if onnx_op in ("Pow", "BitShift") else ["a", "b"][:inputs]
        out = f"y_{onnx_op}" + (f"_{name}" if ops.OPS[name].chosen_by else "")
        attrs = dict([ops.OPS[name].chosen_by]) if ops.OPS[name].chosen_by else {}
        nodes.append(helper.make_node(onnx_op, operands, [out], name=out, **attrs))
        outputs.append(out)
    nodes += [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Sub", ["a", "b"], ["d"]),
              helper.make_node("Mul", ["s", "d"], ["y_chain"]),
              helper.make_node("Less", ["a", "b"], ["lt"]), helper.make_node("Where", ["lt", "a", "y_chain"], ["y_where"])]
    outputs += ["y_chain", "y_where"]
    graph = helper.make_graph(nodes, f"expr_{dtype}", [helper.make_tensor_value_info(n, t, [N]) for n in "abe"],
                              [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


@pytest.mark.parametrize("dtype", list(KIND))
def test_every_op_computes_as_numpy(dtype, rng):
    model = _model(dtype)
    feeds = _inputs(dtype, rng)
    names = [o.name for o in model.graph.output]
    with np.errstate(all="ignore"):  # inf - inf, 0 * inf, ...: NaN where numpy says so
        want = dict(zip(names, ReferenceEvaluator(model).run(None, feeds)))
    got = dict(zip(names, onnx_backend.run_model(model, [feeds[n] for n in "abe"])))
    for name in names:
        assert got[name].dtype == want[name].dtype and got[name].shape == want[name].shape, name
        if want[name].dtype.kind == "f":
            rtol, atol = TOLERANCE[str(want[name].dtype)]
            with np.errstate(invalid="ignore"):
                special = ~np.isfinite(want[name])
            np.testing.assert_array_equal(got[name][special], want[name][special], err_msg=f"{dtype} {name}")
            ok = ~special
            assert_close(f"{dtype} {name}", got[name][ok], want[name][ok], rtol_l2=rtol, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(got[name], want[name], err_msg=f"{dtype} {name}")


def test_every_op_an_onnx_node_maps_to_is_computed():
    """Each op that an ONNX node becomes is computed by test_every_op_computes_as_numpy in at least
    one dtype; the rest are built by passes (GELU, IsInf's sign), take constant bounds (Clip) or
    have operands of other types than their result (Where, Cast, the bool ops: test_typed_trees)."""
    covered = {name for dtype in KIND for _, name, _ in _cases(dtype)}
    from_nodes = {op.name for op in ops.OPS.values() if (op.onnx or op.variadic) and op.typing not in OTHER_TYPING
                  and op.kinds != ("bool",)}
    assert from_nodes <= covered, sorted(from_nodes - covered)


def _leaf(t):
    return "acc_v" if t[0] == "acc" else f"x{t[1]}"


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
    assert text == "(x0 * phi_float_float(x0))"
    assert list(r.helpers) == ["phi_float_float"]
    with pytest.raises(E.Unsupported) as info:
        _r(("erf", x0), "float64", ["float64"])
    assert info.value.dtype is TYPES["float64"]


def test_onnx_tables():
    # Each ONNX op maps to one tree op; the dtype families follow from the texts each op has.
    assert ops.ONNX_UNARY["LeakyRelu"] == "prelu" and ops.ONNX_BINARY["PRelu"] == "prelu"
    assert ops.ONNX_ATTRS["LeakyRelu"] == (("alpha", 0.01),)
    assert ops.ONNX_VARIADIC == {"Sum": "add", "Max": "max", "Min": "min", "Mean": "add"}
    assert not set(ops.ONNX_UNARY) & set(ops.ONNX_BINARY)
    assert ops.ONNX_CHOSEN == {"Mod": ("fmod", {1: "fmod", 0: "mod"}),
                               "BitShift": ("direction", {"LEFT": "shift_left", "RIGHT": "shift_right"})}
    assert not set(ops.ONNX_CHOSEN) & (set(ops.ONNX_UNARY) | set(ops.ONNX_BINARY))
    bits = {"bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "shift_left", "shift_right"}
    assert ops.INTEGER_OPS == {"add", "sub", "mul", "div", "max", "min", "clip", "neg", "abs",
                               "relu", "sign", "prelu", "pow", "equal", "less", "greater",
                               "less_equal", "greater_equal", "where", "cast", "fmod", "mod"} | bits
    assert ops.FLOAT64_OPS == ops.INTEGER_OPS - bits | {"sqrt", "reciprocal", "floor", "ceil", "round",
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
