"""Ops whose result dtype differs from their operands': comparisons, IsNaN and IsInf (-> bool),
Not/And/Or/Xor on bool, Where (a bool condition choosing between values of any dtype) and Cast,
against onnxruntime; fused chains mixing bool and float32; attention masks as exporters write
them. NaN and inf inputs go through `check_exact` (the harness refuses non-finite feeds)."""

import numpy as np
import onnx
import pytest
from onnx import helper

from tests.harness import (check_against_onnxruntime, compile_cached, run_bundle, run_onnxruntime,
                     spirv_validate)
from tests.onnx_builders import tensor_info


def model(nodes, inputs, outputs, initializers=(), opset=17):
    """nodes: (op, inputs, output, attrs) tuples; inputs/outputs: {name: (shape, dtype)}."""
    graph = helper.make_graph(
        [helper.make_node(op, ins, [out], name=out, **attrs) for op, ins, out, attrs in nodes],
        "bool", [tensor_info(n, s, d) for n, (s, d) in inputs.items()],
        [tensor_info(n, s, d) for n, (s, d) in outputs.items()],
        initializer=[onnx.numpy_helper.from_array(np.asarray(a), n) for n, a in initializers])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    inferred = {o.name: o for o in onnx.shape_inference.infer_shapes(m).graph.output}
    for o in m.graph.output:
        o.CopyFrom(inferred[o.name])
    return m


def check_exact(m, feeds):
    """vkc's outputs equal onnxruntime's bit for bit, NaN where it has NaN (feeds may hold NaN
    and inf)."""
    bundle = compile_cached(m)
    spirv_validate(bundle)
    got, _ = run_bundle(bundle, feeds)
    want = run_onnxruntime(m, feeds)
    for name, w in want.items():
        assert got[name].dtype == w.dtype, (name, got[name].dtype, w.dtype)
        assert np.array_equal(got[name], w, equal_nan=w.dtype.kind == "f"), (name, got[name], w)
    return got


def values(rng, shape, dtype):
    """Small integers (so comparisons meet ties), as `dtype`; floats also get fractions."""
    x = rng.integers(-4, 5, shape).astype(np.float64)
    if np.dtype(dtype).kind == "f":
        x += np.where(rng.random(shape) < 0.3, rng.random(shape), 0.0)
    return x.astype(dtype)


SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -2.5, 3e38, -1e-30, np.nan],
                   np.float32)
BROADCAST = [pytest.param([3, 1, 5], [4, 5], id="broadcast"), pytest.param([2, 9], [], id="scalar"),
             pytest.param([6, 7], [6, 7], id="same")]
COMPARE = {"Equal": np.equal, "Less": np.less, "Greater": np.greater,
           "LessOrEqual": np.less_equal, "GreaterOrEqual": np.greater_equal}


@pytest.mark.parametrize("a_shape,b_shape", BROADCAST)
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64, np.float16, np.uint8],
                         ids=["float32", "int32", "int64", "float16", "uint8"])
@pytest.mark.parametrize("op", list(COMPARE))
def test_comparison(op, dtype, a_shape, b_shape, rng):
    a, b = values(rng, a_shape, dtype), values(rng, b_shape, dtype)
    m = model([(op, ["a", "b"], "y", {})], {"a": (a_shape, dtype), "b": (b_shape, dtype)},
              {"y": (None, np.bool_)})
    check_against_onnxruntime(m, feeds={"a": a, "b": b}, exact=True,
                              fallback=lambda f: {"y": COMPARE[op](f["a"], f["b"])})


@pytest.mark.parametrize("op", list(COMPARE))
def test_comparison_with_nan_and_inf(op):
    a = SPECIAL.reshape(2, 5)
    b = np.array([np.nan, np.inf, 0.0, -0.0, 1.5], np.float32)
    m = model([(op, ["a", "b"], "y", {})], {"a": ([2, 5], np.float32), "b": ([5], np.float32)},
              {"y": (None, np.bool_)})
    check_exact(m, {"a": a, "b": b})


def test_equal_on_bool(rng):
    a, b = rng.random([3, 8]) < 0.5, rng.random([8]) < 0.5
    m = model([("Equal", ["a", "b"], "y", {})], {"a": ([3, 8], np.bool_), "b": ([8], np.bool_)},
              {"y": (None, np.bool_)})
    check_against_onnxruntime(m, feeds={"a": a, "b": b}, exact=True)


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logic(op, rng):
    a, b = rng.random([2, 3, 7]) < 0.5, rng.random([3, 1]) < 0.5
    m = model([(op, ["a", "b"], "y", {})], {"a": ([2, 3, 7], np.bool_), "b": ([3, 1], np.bool_)},
              {"y": (None, np.bool_)})
    check_against_onnxruntime(m, feeds={"a": a, "b": b}, exact=True)


def test_not_of_a_comparison_fuses(rng):
    """Not(Less(a, b)) And c: bool intermediates fuse into one kernel."""
    a, b, c = rng.standard_normal([5, 6]).astype(np.float32), rng.standard_normal([6]).astype(np.float32), rng.random([5, 6]) < 0.5
    m = model([("Less", ["a", "b"], "l", {}), ("Not", ["l"], "n", {}), ("And", ["n", "c"], "y", {})],
              {"a": ([5, 6], np.float32), "b": ([6], np.float32), "c": ([5, 6], np.bool_)},
              {"y": (None, np.bool_)})
    r = check_against_onnxruntime(m, feeds={"a": a, "b": b, "c": c}, exact=True)
    assert len(r["manifest"]["dispatches"]) == 1


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32, np.int8, np.float16, np.bool_],
                         ids=["float32", "int64", "int32", "int8", "float16", "bool"])
def test_where(dtype, rng):
    cond = rng.random([3, 1, 5]) < 0.5
    x, y = values(rng, [4, 5], dtype), values(rng, [1, 5], dtype)
    m = model([("Where", ["c", "x", "y"], "z", {})],
              {"c": ([3, 1, 5], np.bool_), "x": ([4, 5], dtype), "y": ([1, 5], dtype)},
              {"z": (None, dtype)})
    check_against_onnxruntime(m, feeds={"c": cond, "x": x, "y": y}, exact=True,
                              fallback=lambda f: {"z": np.where(f["c"], f["x"], f["y"])})


def test_where_with_scalar_constant(rng):
    cond = rng.random([4, 6]) < 0.5
    x = rng.standard_normal([4, 6]).astype(np.float32)
    m = model([("Where", ["c", "x", "k"], "z", {})], {"c": ([4, 6], np.bool_), "x": ([4, 6], np.float32)},
              {"z": (None, np.float32)}, initializers=[("k", np.array(-7.25, np.float32))])
    check_against_onnxruntime(m, feeds={"c": cond, "x": x}, exact=True)


def test_less_where_add_fuses_into_one_kernel(rng):
    """Less -> Where -> Add: the bool comparison joins the float32 chain; float32 operands and
    output keep the float32 template."""
    a, b = rng.standard_normal([3, 4, 8]).astype(np.float32), rng.standard_normal([8]).astype(np.float32)
    m = model([("Less", ["a", "b"], "l", {}), ("Where", ["l", "a", "b"], "w", {}),
               ("Add", ["w", "b"], "y", {})],
              {"a": ([3, 4, 8], np.float32), "b": ([8], np.float32)}, {"y": (None, np.float32)})
    r = check_against_onnxruntime(m, feeds={"a": a, "b": b}, exact=True)
    assert len(r["manifest"]["dispatches"]) == 1


# ---- Cast -------------------------------------------------------------------------------------

CASTS = [(np.float32, np.int32), (np.float32, np.int64), (np.float32, np.bool_),
         (np.float32, np.float16), (np.float16, np.float32), (np.int32, np.float32),
         (np.int64, np.float32), (np.bool_, np.float32), (np.int64, np.bool_), (np.bool_, np.int64),
         (np.int32, np.bool_), (np.bool_, np.int32), (np.int64, np.int32), (np.int32, np.int64),
         (np.float32, np.uint8), (np.int32, np.int8), (np.float32, np.float64),
         (np.float64, np.float32), (np.uint8, np.float32), (np.bool_, np.float16)]


def cast_input(rng, dtype, shape):
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind == "f":  # fractions on both sides of 0, to truncate toward zero
        x = rng.standard_normal(shape) * 40
        x.flat[:4] = [0.0, -0.0, -2.7, 2.7]
        return x.astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -1000), min(info.max, 1000), shape, endpoint=True).astype(dtype)


@pytest.mark.parametrize("src,dst", CASTS,
                         ids=[f"{np.dtype(a).name}-{np.dtype(b).name}" for a, b in CASTS])
def test_cast(src, dst, rng):
    x = cast_input(rng, src, [3, 11])
    if dst == np.uint8:
        x = np.abs(x)  # a negative float to an unsigned type is undefined in C (onnxruntime)
    m = model([("Cast", ["x"], "y", {"to": onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dst))})],
              {"x": ([3, 11], src)}, {"y": (None, dst)})
    check_against_onnxruntime(m, feeds={"x": x}, exact=True,
                              fallback=lambda f: {"y": f["x"].astype(dst)})


def test_castlike(rng):
    """CastLike converts to its second input's dtype (a mask's int64 to the scores' float32)."""
    mask = rng.integers(0, 2, [2, 9]).astype(np.int64)
    scores = rng.standard_normal([2, 9]).astype(np.float32)
    m = model([("CastLike", ["mask", "scores"], "mf", {}), ("Mul", ["mf", "scores"], "y", {})],
              {"mask": ([2, 9], np.int64), "scores": ([2, 9], np.float32)}, {"y": (None, np.float32)})
    check_against_onnxruntime(m, feeds={"mask": mask, "scores": scores}, exact=True)


@pytest.mark.parametrize("dst", [np.bool_, np.float16, np.float64], ids=["bool", "float16", "float64"])
def test_cast_of_nan_and_inf(dst):
    """NaN is true as a bool (x != 0); float16 keeps NaN and inf and overflows to inf."""
    x = np.append(SPECIAL, np.float32([65520.0, -70000.0]))
    m = model([("Cast", ["x"], "y", {"to": onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dst))})],
              {"x": ([12], np.float32)}, {"y": (None, dst)})
    check_exact(m, {"x": x})


# ---- IsNaN, IsInf -----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64], ids=["float32", "float16", "float64"])
def test_isnan(dtype):
    x = SPECIAL.astype(dtype).reshape(2, 5)
    m = model([("IsNaN", ["x"], "y", {})], {"x": ([2, 5], dtype)}, {"y": (None, np.bool_)})
    check_exact(m, {"x": x})


@pytest.mark.parametrize("negative,positive", [(1, 1), (0, 1), (1, 0), (0, 0)])
def test_isinf(negative, positive):
    x = SPECIAL.reshape(2, 5)
    m = model([("IsInf", ["x"], "y", {"detect_negative": negative, "detect_positive": positive})],
              {"x": ([2, 5], np.float32)}, {"y": (None, np.bool_)}, opset=20)
    check_exact(m, {"x": x})


def test_nan_test_chain():
    """Where(IsNaN(x) Or IsInf(x), 0, x): the predicates and the select fuse."""
    x = SPECIAL.reshape(2, 5)
    m = model([("IsNaN", ["x"], "n", {}), ("IsInf", ["x"], "i", {}), ("Or", ["n", "i"], "bad", {}),
               ("Where", ["bad", "zero", "x"], "y", {})],
              {"x": ([2, 5], np.float32)}, {"y": (None, np.float32)},
              initializers=[("zero", np.array(0.0, np.float32))])
    check_exact(m, {"x": x})
    from bundles import read_bundle
    assert len(read_bundle(compile_cached(m)).manifest["dispatches"]) == 1


# ---- attention masks as exporters write them --------------------------------------------------

def _attention_mask(rng, batch, keys):
    mask = (rng.random([batch, keys]) < 0.7).astype(np.int64)
    mask[:, 0] = 1  # every query sees at least one key
    return mask


def test_additive_mask_from_int64(rng):
    """HF BERT: (1 - mask[:, None, None, :].float()) * -10000 added to the scores, then Softmax."""
    b, h, q, k = 2, 3, 5, 7
    scores = rng.standard_normal([b, h, q, k]).astype(np.float32)
    mask = _attention_mask(rng, b, k).reshape(b, 1, 1, k)
    m = model([("Cast", ["mask"], "mf", {"to": onnx.TensorProto.FLOAT}), ("Sub", ["one", "mf"], "inv", {}),
               ("Mul", ["inv", "big"], "bias", {}), ("Add", ["scores", "bias"], "s", {}),
               ("Softmax", ["s"], "p", {"axis": -1})],
              {"scores": ([b, h, q, k], np.float32), "mask": ([b, 1, 1, k], np.int64)},
              {"p": (None, np.float32)},
              initializers=[("one", np.array(1.0, np.float32)), ("big", np.array(-10000.0, np.float32))])
    check_against_onnxruntime(m, feeds={"scores": scores, "mask": mask})


@pytest.mark.parametrize("fill", [-np.inf, np.finfo(np.float32).min], ids=["-inf", "finfo.min"])
def test_where_mask_then_softmax(fill, rng):
    """scores.masked_fill(mask == 0, fill) then Softmax: Equal -> Where fuse, the mask broadcast
    over heads and queries."""
    b, h, q, k = 2, 2, 4, 9
    scores = rng.standard_normal([b, h, q, k]).astype(np.float32)
    mask = _attention_mask(rng, b, k).reshape(b, 1, 1, k)
    m = model([("Equal", ["mask", "zero"], "masked", {}), ("Where", ["masked", "fill", "scores"], "s", {}),
               ("Softmax", ["s"], "p", {"axis": -1})],
              {"scores": ([b, h, q, k], np.float32), "mask": ([b, 1, 1, k], np.int64)},
              {"p": (None, np.float32)},
              initializers=[("zero", np.array(0, np.int64)), ("fill", np.array(fill, np.float32))])
    r = check_against_onnxruntime(m, feeds={"scores": scores, "mask": mask})
    assert np.all(r["outputs"]["p"][np.broadcast_to(mask == 0, scores.shape)] == 0)


def test_bool_mask_input_where_softmax(rng):
    """A bool mask input (causal, [q, k]) choosing between the scores and -inf."""
    q = k = 6
    scores = rng.standard_normal([2, q, k]).astype(np.float32)
    causal = np.tril(np.ones([q, k], np.bool_))
    m = model([("Where", ["mask", "scores", "ninf"], "s", {}), ("Softmax", ["s"], "p", {"axis": -1})],
              {"scores": ([2, q, k], np.float32), "mask": ([q, k], np.bool_)}, {"p": (None, np.float32)},
              initializers=[("ninf", np.array(-np.inf, np.float32))])
    check_against_onnxruntime(m, feeds={"scores": scores, "mask": causal})


ONNX_CAST_CASES = [f"test_cast{like}_{a}_to_{b}{expanded}"
                   for like, expanded in (("", ""), ("like", ""), ("like", "_expanded"))
                   for a in ("FLOAT", "FLOAT16", "DOUBLE")
                   for b in ("FLOAT", "FLOAT16", "DOUBLE") if a != b]


@pytest.mark.parametrize("name", ONNX_CAST_CASES)
def test_onnx_cast_cases_at_opset_22(name):
    """ONNX's Cast cases import opset 25 or 28; their conversions between float16, float32 and
    float64 mean the same at opset 22: relabelled there, they compile and pass too."""
    from onnx.backend.test.case.node import collect_testcases

    from compiler import onnx_backend

    case = next(c for c in collect_testcases(None) if c.name == name)
    m = onnx.ModelProto.FromString(case.model.SerializeToString())
    for imp in m.opset_import:
        if imp.domain in ("", "ai.onnx"):
            imp.version = 22
    rep = onnx_backend.prepare(m, validation=True)
    try:
        for inputs, refs in case.data_sets:
            arrays = [onnx.numpy_helper.to_array(x) if isinstance(x, onnx.TensorProto) else x
                      for x in (*inputs, *refs)]
            outputs = rep.run(arrays[:len(inputs)])
            for got, want in zip(outputs, arrays[len(inputs):]):
                assert got.dtype == want.dtype
                np.testing.assert_allclose(got, want, rtol=case.rtol, atol=case.atol)
    finally:
        rep.close()
