"""Elementwise arithmetic on integer, float16 and float64 tensors, with ONNX's semantics: integer
+ - * wrap around modulo 2^bits, division truncates toward zero, Mod's remainders take the sign
of the dividend (fmod=1) or of the divisor (fmod=0), shifts past the width leave the sign's bits,
Pow returns its base's type.
Integers compare exactly with onnxruntime, or with numpy where onnxruntime's CPU provider has no
kernel for the dtype (it lacks e.g. every int8 arithmetic op)."""

import numpy as np
import onnx
import pytest
from onnx import helper

from tests.harness import check_against_onnxruntime, compile_cached
from tests.onnx_builders import tensor_info

INTS = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64]
INT_IDS = [np.dtype(d).name for d in INTS]


def model(nodes, inputs, outputs, initializers=(), opset=17):
    """nodes: (op, inputs, output, attrs) tuples; inputs/outputs: {name: (shape, dtype)}."""
    graph = helper.make_graph(
        [helper.make_node(op, ins, [out], name=out, **attrs) for op, ins, out, attrs in nodes], "dtypes",
        [tensor_info(n, s, d) for n, (s, d) in inputs.items()],
        [tensor_info(n, s, d) for n, (s, d) in outputs.items()],
        initializer=[onnx.numpy_helper.from_array(a, n) for n, a in initializers])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    inferred = {o.name: o for o in onnx.shape_inference.infer_shapes(m).graph.output}
    for o in m.graph.output:  # outputs get their inferred shapes (the full check wants them)
        o.CopyFrom(inferred[o.name])
    return m


def full_range(rng, dtype, shape):
    """Values over the dtype's whole range (so sums and products wrap around), half of them small
    (so not every result does); negative ones for signed types, never only zeros."""
    info = np.iinfo(dtype)
    wide = rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype)
    small = rng.integers(max(info.min, -20), 21, size=shape).astype(dtype)
    return np.where(rng.random(shape) < 0.5, wide, small).astype(dtype)


def trunc_div(a, b):
    """C division: the quotient truncated toward zero, wrapped around into the dtype (in Python
    integers, so MIN / -1 of 64-bit types is exact too)."""
    a, b = np.broadcast_arrays(a, b)
    info = np.iinfo(a.dtype)
    half = 0 if info.min == 0 else 1 << (info.bits - 1)
    q = [abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1)
         for x, y in zip(a.ravel().tolist(), b.ravel().tolist())]
    return np.array([(v + half) % (1 << info.bits) - half for v in q], a.dtype).reshape(a.shape)


def nonzero_divisor(b):
    """b with zeros replaced; for 32/64-bit types also no -1 (onnxruntime traps on MIN / -1)."""
    b = np.where(b == 0, b.dtype.type(3), b)
    if np.issubdtype(b.dtype, np.signedinteger) and b.dtype.itemsize >= 4:
        b = np.where(b == -1, b.dtype.type(-5), b)
    return b


BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": trunc_div,
          "Max": np.maximum, "Min": np.minimum}
SHAPES = [pytest.param([3, 7, 5], [7, 1], id="broadcast-odd"),  # 105 elements: a partial last word
          pytest.param([4, 8], [4, 8], id="same-shape"),
          pytest.param([2, 1, 3], [], id="scalar")]


@pytest.mark.parametrize("a_shape,b_shape", SHAPES)
@pytest.mark.parametrize("dtype", INTS, ids=INT_IDS)
@pytest.mark.parametrize("op", list(BINARY))
def test_integer_binary(op, dtype, a_shape, b_shape, rng):
    a, b = full_range(rng, dtype, a_shape), full_range(rng, dtype, b_shape)
    if op == "Div":
        b = nonzero_divisor(b)
    m = model([(op, ["a", "b"], "y", {})], {"a": (a_shape, dtype), "b": (b_shape, dtype)},
              {"y": (None, dtype)})
    with np.errstate(over="ignore"):
        check_against_onnxruntime(m, feeds={"a": a, "b": b}, exact=True,
                                  fallback=lambda f: {"y": BINARY[op](f["a"], f["b"])})


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64],
                         ids=["int8", "int16", "int32", "int64"])
def test_integer_division_truncates_toward_zero(dtype):
    info = np.iinfo(dtype)
    a = np.array([-7, 7, -7, 7, -1, 1, 0, -6, info.min + 1, info.max, info.min, info.max], dtype)
    b = np.array([2, -2, -2, 2, 3, -3, -5, 3, -1, -1, 7, info.min], dtype)
    if dtype in (np.int8, np.int16):  # MIN / -1 wraps around to MIN (onnxruntime traps for int32/64)
        a, b = np.append(a, dtype(info.min)), np.append(b, dtype(-1))
    m = model([("Div", ["a", "b"], "y", {})], {"a": (a.shape, dtype), "b": (b.shape, dtype)},
              {"y": (None, dtype)})
    r = check_against_onnxruntime(m, feeds={"a": a, "b": b}, exact=True,
                                  fallback=lambda f: {"y": trunc_div(f["a"], f["b"])})
    assert list(r["outputs"]["y"][:8]) == [-3, -3, 3, 3, 0, 0, 0, -2]


@pytest.mark.parametrize("dtype", INTS, ids=INT_IDS)
def test_integer_chain_wraps_after_every_op(dtype, rng):
    """(a * b + c) / d, max'ed with c: one fused kernel that must wrap each intermediate to the
    dtype, as the ops one by one would (the division sees the wrapped sum)."""
    shape = [5, 13]
    a, b, c = (full_range(rng, dtype, shape) for _ in range(3))
    d = nonzero_divisor(full_range(rng, dtype, [13]))
    m = model([("Mul", ["a", "b"], "ab", {}), ("Add", ["ab", "c"], "s", {}), ("Div", ["s", "d"], "q", {}),
               ("Max", ["q", "c"], "y", {})],
              {"a": (shape, dtype), "b": (shape, dtype), "c": (shape, dtype), "d": ([13], dtype)},
              {"y": (None, dtype)})

    def reference(f):
        return {"y": np.maximum(trunc_div(f["a"] * f["b"] + f["c"], f["d"]), f["c"])}
    with np.errstate(over="ignore"):
        r = check_against_onnxruntime(m, feeds={"a": a, "b": b, "c": c, "d": d}, exact=True,
                                      fallback=reference)
    assert len(r["manifest"]["dispatches"]) == 1, "the chain should fuse into one kernel"


@pytest.mark.parametrize("dtype", INTS, ids=INT_IDS)
def test_integer_constants_and_clip(dtype, rng):
    """Constant operands (a scalar literal, a broadcast tensor) and Clip bounds keep their exact
    integer values, including 64-bit ones no float32 or float64 can hold."""
    info = np.iinfo(dtype)
    big = dtype(info.max - 2 if info.bits < 64 else info.max - 12345)
    table = full_range(rng, dtype, [6])
    lo, hi = dtype(max(info.min + 3, -100)), dtype(info.max - 7)
    x = full_range(rng, dtype, [4, 6])
    m = model([("Add", ["x", "big"], "s", {}), ("Mul", ["s", "table"], "p", {}),
               ("Clip", ["p", "lo", "hi"], "y", {})],
              {"x": ([4, 6], dtype)}, {"y": (None, dtype)},
              initializers=[("big", np.array(big)), ("table", table), ("lo", np.array(lo)), ("hi", np.array(hi))])
    with np.errstate(over="ignore"):
        check_against_onnxruntime(m, feeds={"x": x}, exact=True,
                                  fallback=lambda f: {"y": np.clip((f["x"] + big) * table, lo, hi)})


@pytest.mark.parametrize("op", ["Max", "Min"])  # ONNX's Sum and Mean take floats only
@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.int32, np.uint64],
                         ids=["int8", "uint16", "int32", "uint64"])
def test_integer_variadic(op, dtype, rng):
    shapes = [[3, 1, 5], [4, 1], [5]]
    xs = {f"x{i}": full_range(rng, dtype, s) for i, s in enumerate(shapes)}
    m = model([(op, list(xs), "y", {})], {n: (a.shape, dtype) for n, a in xs.items()},
              {"y": (None, dtype)})
    fn = {"Max": np.maximum, "Min": np.minimum}[op]
    check_against_onnxruntime(m, feeds=xs, exact=True,
                              fallback=lambda f: {"y": fn(fn(f["x0"], f["x1"]), f["x2"])})


SIGNED = [np.int8, np.int16, np.int32, np.int64]


@pytest.mark.parametrize("op", ["Abs", "Neg", "Relu", "Sign"])
@pytest.mark.parametrize("dtype", SIGNED, ids=["int8", "int16", "int32", "int64"])
def test_signed_unary(op, dtype, rng):
    x = full_range(rng, dtype, [3, 11])
    x.flat[:2] = [np.iinfo(dtype).min, 0]  # abs/neg of MIN wrap around to MIN
    m = model([(op, ["x"], "y", {})], {"x": ([3, 11], dtype)}, {"y": (None, dtype)}, opset=14)
    fn = {"Abs": np.abs, "Neg": np.negative, "Relu": lambda v: np.maximum(v, 0), "Sign": np.sign}[op]
    with np.errstate(over="ignore"):
        check_against_onnxruntime(m, feeds={"x": x}, exact=True, fallback=lambda f: {"y": fn(f["x"])})


@pytest.mark.parametrize("op", ["Abs", "Sign"])
@pytest.mark.parametrize("dtype", [np.uint8, np.uint32, np.uint64], ids=["uint8", "uint32", "uint64"])
def test_unsigned_unary(op, dtype, rng):
    x = full_range(rng, dtype, [2, 9])
    x.flat[0] = 0
    m = model([(op, ["x"], "y", {})], {"x": ([2, 9], dtype)}, {"y": (None, dtype)})
    fn = {"Abs": np.abs, "Sign": np.sign}[op]
    check_against_onnxruntime(m, feeds={"x": x}, exact=True, fallback=lambda f: {"y": fn(f["x"])})


# ---- Mod and the bitwise ops ------------------------------------------------------------------

@pytest.mark.parametrize("dtype", INTS, ids=INT_IDS)
def test_integer_mod_and_bits(dtype, rng):
    """Both remainders, And, Or, Xor, Not and both shifts (by -2 to width + 3: signed counts
    are BitShift-28's) of one dtype, over its whole range, exactly as onnxruntime."""
    info = np.iinfo(dtype)
    a, b = full_range(rng, dtype, [6, 17]), nonzero_divisor(full_range(rng, dtype, [17]))
    a.flat[:4], b[:4] = [info.min, info.max, 7, 0], [7, 7, info.max, info.min if info.min else 5]
    n = rng.integers(max(info.min, -2), info.bits + 4, [6, 17]).astype(dtype)
    nodes = [("Mod", ["a", "b"], "mod", {}), ("Mod", ["a", "b"], "fmod", {"fmod": 1}),
             ("BitwiseAnd", ["a", "b"], "and", {}), ("BitwiseOr", ["a", "b"], "or", {}),
             ("BitwiseXor", ["a", "b"], "xor", {}), ("BitwiseNot", ["a"], "not", {}),
             ("BitShift", ["a", "n"], "left", {"direction": "LEFT"}),
             ("BitShift", ["a", "n"], "right", {"direction": "RIGHT"})]
    m = model(nodes, {"a": ([6, 17], dtype), "b": ([17], dtype), "n": ([6, 17], dtype)},
              {out: (None, dtype) for _, _, out, _ in nodes}, opset=28)
    r = check_against_onnxruntime(m, feeds={"a": a, "b": b, "n": n}, exact=True)
    assert len(r["manifest"]["dispatches"]) <= 8


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.int32, np.int64],
                         ids=["int8", "uint16", "int32", "int64"])
def test_integer_mod_by_zero_and_of_min_by_minus_one_is_zero(dtype):
    """Undefined in ONNX (onnxruntime traps), 0 in vkc as in numpy."""
    from tests.harness import run_bundle

    info = np.iinfo(dtype)
    a = np.array([7, -7 if info.min else 9, info.min, 5], dtype)
    b = np.array([0, 0, -1 if info.min else 0, 3], dtype)
    for fmod in (0, 1):
        m = model([("Mod", ["a", "b"], "y", {"fmod": fmod})], {"a": ([4], dtype), "b": ([4], dtype)},
                  {"y": (None, dtype)})
        got, _ = run_bundle(compile_cached(m), {"a": a, "b": b})
        assert got["y"].tolist() == [0, 0, 0, 2], fmod


SPECIAL_FLOATS = [np.nan, -np.inf, np.inf, -0.0, 0.0, 1e-30, -3e30, 7.5, -7.5, 2.0, -2.0, 0.1]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64],
                         ids=["float32", "float16", "float64"])
def test_float_mod(dtype, rng):
    """C's fmod (fmod=1) bit for bit, quotients up to 2^60 included; the floored remainder
    (fmod=0, Mod-28) as onnxruntime computes it: fmod, then + b where the signs differ. Every pair
    of special values (NaN, infinities, signed zeros) and random ones."""
    from tests.harness import run_bundle, run_onnxruntime, spirv_validate

    with np.errstate(over="ignore"):  # -3e30 is -inf in float16
        a, b = np.meshgrid(np.array(SPECIAL_FLOATS, dtype), np.array(SPECIAL_FLOATS, dtype))
    top = 30 if dtype != np.float16 else 8
    big = rng.standard_normal(60) * np.exp2(rng.uniform(-top, top, 60))
    small = rng.standard_normal(60) * np.exp2(rng.uniform(-top, top / 3, 60))
    a, b = np.concatenate([a.ravel(), big]).astype(dtype), np.concatenate([b.ravel(), small]).astype(dtype)
    nodes = [("Mod", ["a", "b"], "fmod", {"fmod": 1}), ("Mod", ["a", "b"], "mod", {})]
    m = model(nodes, {"a": (a.shape, dtype), "b": (b.shape, dtype)},
              {"fmod": (None, dtype), "mod": (None, dtype)}, opset=28)
    bundle = compile_cached(m)
    spirv_validate(bundle)
    got, _ = run_bundle(bundle, {"a": a, "b": b})
    want = run_onnxruntime(m, {"a": a, "b": b})
    for name in ("fmod", "mod"):
        same = (got[name] == want[name]) & (np.signbit(got[name]) == np.signbit(want[name]))
        same |= np.isnan(got[name]) & np.isnan(want[name])
        bad = np.flatnonzero(~same)
        assert not bad.size, [(name, a[i], b[i], got[name][i], want[name][i]) for i in bad[:8]]


def test_mod_attribute_out_of_range_is_refused():
    from compiler import CompileError, compile_model

    m = model([("Mod", ["a", "b"], "y", {"fmod": 2})], {"a": ([4], np.int32), "b": ([4], np.int32)},
              {"y": (None, np.int32)})
    with pytest.raises(CompileError, match=r"Mod 'y' has fmod=2; ONNX defines 1, 0"):
        compile_model(m)


# ---- floating point: float16 (computed in float32, rounded after each op) and float64 ---------

def test_float16_chain(rng):
    """A broadcast float16 chain with an odd element count; every op rounds to float16."""
    a = rng.standard_normal([3, 5, 7]).astype(np.float16)
    b = rng.standard_normal([5, 1]).astype(np.float16)
    c = (np.abs(rng.standard_normal([7])) + 0.5).astype(np.float16)
    m = model([("Mul", ["a", "b"], "p", {}), ("Div", ["p", "c"], "q", {}), ("Sigmoid", ["q"], "s", {}),
               ("Sub", ["s", "a"], "d", {}), ("Max", ["d", "b"], "y", {})],
              {"a": ([3, 5, 7], np.float16), "b": ([5, 1], np.float16), "c": ([7], np.float16)},
              {"y": (None, np.float16)})
    r = check_against_onnxruntime(m, feeds={"a": a, "b": b, "c": c}, rtol_l2=2e-3)
    assert len(r["manifest"]["dispatches"]) == 1


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min"])
def test_float16_binary(op, rng):
    a = rng.standard_normal([9, 7]).astype(np.float16)
    b = (rng.standard_normal([7]) + 3).astype(np.float16)  # |b| away from 0 for Div
    m = model([(op, ["a", "b"], "y", {})], {"a": ([9, 7], np.float16), "b": ([7], np.float16)},
              {"y": (None, np.float16)})
    # One op of float16 inputs computed in float32 and rounded once is exact.
    check_against_onnxruntime(m, feeds={"a": a, "b": b}, exact=True)


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min"])
def test_float64_binary(op, rng):
    a = rng.standard_normal([4, 1, 6])
    b = rng.standard_normal([3, 1]) + 3.0
    m = model([(op, ["a", "b"], "y", {})], {"a": ([4, 1, 6], np.float64), "b": ([3, 1], np.float64)},
              {"y": (None, np.float64)})
    check_against_onnxruntime(m, feeds={"a": a, "b": b}, exact=True)


def test_float64_chain(rng):
    """Unary ops GLSL has double versions of, and constants that float32 cannot hold."""
    x = rng.standard_normal([5, 6]) * 10
    third = np.array(1.0 / 3.0)
    m = model([("Mul", ["x", "third"], "t", {}), ("Abs", ["t"], "a", {}), ("Sqrt", ["a"], "s", {}),
               ("Neg", ["s"], "n", {}), ("Clip", ["n", "lo"], "c", {}), ("Floor", ["t"], "f", {}),
               ("Add", ["c", "f"], "y", {})],
              {"x": ([5, 6], np.float64)}, {"y": (None, np.float64)},
              initializers=[("third", third), ("lo", np.array(-1.7))])
    r = check_against_onnxruntime(m, feeds={"x": x}, rtol_l2=1e-15)
    assert r["manifest"]["requirements"]["features"] == ["shaderFloat64"]


def test_float64_sigmoid_is_refused_as_unsupported():
    """No float64 text for Sigmoid (float64 takes exp and log through helpers, not every
    transcendental op): a clear error naming the op and dtype, which the ONNX backend counts as
    a skip, not a failure."""
    from compiler import CompileError, compile_model
    from compiler.onnx_backend import _not_supported

    m = model([("Sigmoid", ["x"], "y", {})], {"x": ([4], np.float64)}, {"y": (None, np.float64)})
    with pytest.raises(CompileError, match=r"computes sigmoid on float64 tensor 'y'") as info:
        compile_model(m)
    assert _not_supported(info.value)


# ---- Pow: the output has the base's type, whatever the exponent's -----------------------------

POW_CASES = [
    pytest.param(np.float32, np.int32, id="float32^int32"),
    pytest.param(np.float32, np.int64, id="float32^int64"),
    pytest.param(np.float32, np.uint32, id="float32^uint32"),
    pytest.param(np.float32, np.uint64, id="float32^uint64"),
    pytest.param(np.int32, np.float32, id="int32^float32"),
    pytest.param(np.int64, np.float32, id="int64^float32"),
    pytest.param(np.int32, np.int32, id="int32^int32"),
    pytest.param(np.int64, np.int64, id="int64^int64"),
    pytest.param(np.float64, np.int32, id="float64^int32"),
    pytest.param(np.float16, np.float16, id="float16^float16"),
]


@pytest.mark.parametrize("base_t,exp_t", POW_CASES)
def test_pow_types(base_t, exp_t, rng):
    n = 24
    if np.issubdtype(base_t, np.integer):  # small bases, no overflow (onnxruntime's is undefined)
        x = rng.integers(-6, 7, n).astype(base_t)
        x[:4] = [1, -1, 0, 3]
    else:
        x = (rng.standard_normal(n) * 2).astype(base_t)
        x[:2] = [0.5, -2.0]
    if np.issubdtype(exp_t, np.integer):
        lo = 0 if np.issubdtype(exp_t, np.unsignedinteger) or np.issubdtype(base_t, np.integer) else -4
        y = rng.integers(lo, 9, n).astype(exp_t)
        if np.issubdtype(base_t, np.integer) and np.issubdtype(exp_t, np.signedinteger):
            y[:4] = [-3, -2, 5, -1]  # negative exponents of +-1, 0 ** 5, 3 ** -1 truncating to 0
    elif np.issubdtype(base_t, np.integer):  # integral float exponents, and fractional ones of positive bases
        y = rng.integers(0, 9, n).astype(exp_t)
        y[4:8] = [0.5, 1.5, 2.5, 0.25]
        x[4:8] = np.abs(x[4:8]) + 1
    else:
        x = np.abs(x) + 0.25  # a fractional exponent of a negative base is NaN
        y = (rng.standard_normal(n) * 2).astype(exp_t)
    m = model([("Pow", ["x", "y"], "z", {})], {"x": ([n], base_t), "y": ([n], exp_t)}, {"z": (None, base_t)},
              opset=15)
    exact = np.issubdtype(base_t, np.integer)

    def reference(f):  # what onnxruntime does: pow in double, then cast (truncating) to the base type
        z = np.power(f["x"].astype(np.float64), f["y"].astype(np.float64))
        return {"z": (np.trunc(z) if exact else z).astype(base_t)}
    check_against_onnxruntime(m, feeds={"x": x, "y": y}, exact=exact, fallback=reference,
                              rtol_l2=2e-3 if base_t == np.float16 else 1e-5)


def test_int32_pow_constant_exponent(rng):
    x = rng.integers(-9, 10, [3, 8]).astype(np.int32)
    m = model([("Pow", ["x", "e"], "z", {})], {"x": ([3, 8], np.int32)}, {"z": (None, np.int32)},
              initializers=[("e", np.array(3, np.int32))], opset=15)
    check_against_onnxruntime(m, feeds={"x": x}, exact=True)


def test_float32_pow_of_integer_exponent_does_not_fuse_the_integer_chain(rng):
    """An int32 chain feeding a float32 Pow's exponent computes in int32 in its own kernel;
    float32 ops around the Pow fuse with it."""
    x = (np.abs(rng.standard_normal([2, 6])) + 0.5).astype(np.float32)
    e = rng.integers(-3, 4, [6]).astype(np.int32)
    m = model([("Add", ["e", "e"], "e2", {}), ("Pow", ["x", "e2"], "p", {}), ("Mul", ["p", "x"], "y", {})],
              {"x": ([2, 6], np.float32), "e": ([6], np.int32)}, {"y": (None, np.float32)}, opset=15)
    r = check_against_onnxruntime(m, feeds={"x": x, "e": e}, rtol_l2=1e-5)
    assert len(r["manifest"]["dispatches"]) == 2


# ---- bundles: features and packed bindings ------------------------------------------------------

@pytest.mark.parametrize("dtype,features", [(np.float32, []), (np.int8, []), (np.float16, []),
                                            (np.uint32, []), (np.int64, ["shaderInt64"]),
                                            (np.uint64, ["shaderInt64"]), (np.float64, ["shaderFloat64"])],
                         ids=lambda v: np.dtype(v).name if not isinstance(v, list) else ",".join(v) or "none")
def test_requirements_list_the_features_kernels_need(dtype, features):
    """8/16-bit types need no optional feature (packed words); 64-bit ones name theirs."""
    from bundles import read_bundle

    m = model([("Max", ["a", "b"], "y", {})], {"a": ([5], dtype), "b": ([5], dtype)}, {"y": (None, dtype)})
    assert read_bundle(compile_cached(m)).manifest["requirements"]["features"] == features


def test_packed_tensors_are_bound_as_whole_words():
    """A 7-byte int8 tensor is bound through a view of 8 bytes (robust access would drop a last,
    partial word); the padding byte lies in the tensor's own 256-byte allocation."""
    from bundles import read_bundle

    m = model([("Add", ["a", "b"], "y", {})], {"a": ([7], np.int8), "b": ([7], np.int8)},
              {"y": (None, np.int8)})
    man = read_bundle(compile_cached(m)).manifest
    t = man["tensors"]
    bound = [t[i] for i in man["dispatches"][0]["bindings"]]
    assert [(e["name"], e["nbytes"]) for e in bound] == [("a/words", 8), ("b/words", 8), ("y/words", 8)]
    by_name = {e["name"]: e for e in t}
    assert all(by_name[e["name"][:-6]]["offset"] == e["offset"] for e in bound)
    assert len({e["offset"] for e in bound}) == 3 and all(e["offset"] % 256 == 0 for e in bound)


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.int32, np.uint32, np.int64],
                         ids=["int8", "uint16", "int32", "uint32", "int64"])
def test_integer_division_by_zero_is_zero(dtype):
    """ONNX leaves it undefined (onnxruntime's CPU provider traps, so no comparison with it);
    vkc defines it as numpy does, since SPIR-V's undefined behaviour could be anything."""
    from tests.harness import run_bundle, spirv_validate

    m = model([("Div", ["a", "b"], "y", {})], {"a": ([5], dtype), "b": ([5], dtype)}, {"y": (None, dtype)})
    bundle = compile_cached(m)
    spirv_validate(bundle)
    a, b = np.array([7, 0, 100, 9, 1], dtype), np.array([0, 0, 3, 0, 1], dtype)
    got, _ = run_bundle(bundle, {"a": a, "b": b})
    assert got["y"].tolist() == [0, 0, 33, 0, 1]
