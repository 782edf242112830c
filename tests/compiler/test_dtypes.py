"""The low-precision dtypes (format 1.2): ONNX's Cast to and from each, compiled and run on the
device, against onnx's reference evaluator bit for bit, on values chosen to hit every rule:
round-to-nearest-even ties, subnormals, the largest finite value and just past it, overflow with
saturate 1 and 0, NaN and infinities, negative zero; and the packing of the sub-byte types in
bundles (bundles/dtypes.py pack / unpack, as onnx.numpy_helper packs them)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from bundles.dtypes import DTYPES, pack, unpack
from compiler import onnx_backend as backend

FLOAT8 = ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"]
SMALL_FLOATS = [*FLOAT8, "float4_e2m1fn"]
INTS = ["int4", "uint4", "int2", "uint2"]


def cast_model(src: str, dst: str, shape, **attrs) -> onnx.ModelProto:
    elem = lambda name: DTYPES[name].onnx
    x = helper.make_tensor_value_info("x", elem(src), list(shape))
    y = helper.make_tensor_value_info("y", elem(dst), list(shape))
    node = helper.make_node("Cast", ["x"], ["y"], to=elem(dst), **attrs)
    return helper.make_model(helper.make_graph([node], "cast", [x], [y]),
                             opset_imports=[helper.make_opsetid("", 25)], ir_version=11)


def run_both(model, x):
    (got,) = backend.run_model(model, [x])
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    return got, want


def same_bits(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    g, w = got.view(np.uint8 if got.dtype.itemsize == 1 else np.uint16), \
        want.view(np.uint8 if want.dtype.itemsize == 1 else np.uint16)
    bad = np.nonzero(g != w)[0]
    assert not bad.size, [(i, got[i], want[i], g[i], w[i]) for i in bad[:10]]


def every_value(name: str) -> np.ndarray:
    """Every code of a float8 / float4 type as float32 (NaN codes included)."""
    codes = np.arange(1 << DTYPES[name].bits, dtype=np.uint8)
    return codes.view(getattr(ml_dtypes, name)).astype(np.float32)


def probes(name: str) -> np.ndarray:
    """Every value of the type, the midpoints between neighbours (ties) and one float32 step to
    either side of them, past the largest finite value, infinities, NaN, -0, tiny values."""
    v = np.unique(every_value(name)[~np.isnan(every_value(name))])
    v = v[np.isfinite(v)]
    mid = ((v[1:].astype(np.float64) + v[:-1]) / 2).astype(np.float32)
    top = np.float32(v.max())
    extra = np.array([top * 1.0625, top * 1.125, top * 2, 1e6, 3e38, np.inf, -np.inf, np.nan,
                      -np.nan, -0.0, 1e-30, -1e-30, 1e-40, np.float32(v[v > 0].min()) / 2],
                     np.float32)
    x = np.concatenate([v, mid, np.nextafter(mid, np.float32(np.inf)),
                        np.nextafter(mid, np.float32(-np.inf)), extra, -extra])
    return x.astype(np.float32)


@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("name", SMALL_FLOATS)
def test_float32_to_small_float(name, saturate):
    x = probes(name)
    got, want = run_both(cast_model("float32", name, x.shape, saturate=saturate), x)
    if name == "float4_e2m1fn":
        # float4 has no NaN: NaN becomes 0 (ml_dtypes gives it the opposite sign bit; the sign of
        # that zero is not compared)
        nan = np.isnan(x)
        assert np.all(got[nan].astype(np.float32) == 0)
        got, want, x = got[~nan], want[~nan], x[~nan]
    same_bits(got, want)


@pytest.mark.parametrize("name", SMALL_FLOATS)
def test_small_float_to_float32_and_float16(name):
    x = np.arange(1 << DTYPES[name].bits, dtype=np.uint8).view(getattr(ml_dtypes, name))
    got, want = run_both(cast_model(name, "float32", x.shape), x)
    np.testing.assert_array_equal(got, want)  # NaN where NaN; -0 and 0 compare equal...
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))  # ...so the signs too
    got, want = run_both(cast_model(name, "float16", x.shape), x)
    np.testing.assert_array_equal(got, want)


def test_float8_to_float8_and_from_float16():
    x = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e5m2)  # 57344 overflows e4m3fn
    same_bits(*run_both(cast_model("float8_e5m2", "float8_e4m3fn", x.shape), x))
    same_bits(*run_both(cast_model("float8_e5m2", "float8_e4m3fnuz", x.shape, saturate=0), x))
    h = probes("float8_e4m3fn").astype(np.float16)
    same_bits(*run_both(cast_model("float16", "float8_e4m3fn", h.shape), h))


def test_bfloat16():
    rng = np.random.default_rng(0)
    ties = np.array([0x3f808000, 0x3f818000, 0x3f80ffff, 0x3f817fff, 0x7f7fffff, 0x00012345,
                     0x80008000, 0x7fc00000, 0xffc00001, 0x7f800000, 0xff800000, 0x80000000],
                    np.uint32).view(np.float32)
    x = np.concatenate([rng.standard_normal(500).astype(np.float32) * 1e3, ties])
    same_bits(*run_both(cast_model("float32", "bfloat16", x.shape), x))
    b = np.arange(1 << 16, dtype=np.uint16).view(ml_dtypes.bfloat16)
    got, want = run_both(cast_model("bfloat16", "float32", b.shape), b)
    np.testing.assert_array_equal(got.view(np.uint32)[~np.isnan(want)],
                                  want.view(np.uint32)[~np.isnan(want)])
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))


@pytest.mark.parametrize("mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [1, 0])
def test_float8_e8m0(mode, saturate):
    powers = np.ldexp(np.float32(1), np.arange(-127, 128)).astype(np.float32)
    x = np.concatenate([powers, powers * np.float32(1.5), powers * np.float32(1.25),
                        powers * np.float32(1.75), np.nextafter(powers, np.float32(0)),
                        np.array([0, 3.4e38, np.inf, np.nan, 1e-40, 5e-39], np.float32)])
    x = x[np.isfinite(x) | np.isnan(x) | (x == np.inf)]
    model = cast_model("float32", "float8_e8m0fnu", x.shape, saturate=saturate, round_mode=mode)
    same_bits(*run_both(model, x))
    codes = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e8m0fnu)
    got, want = run_both(cast_model("float8_e8m0fnu", "float32", codes.shape), codes)
    np.testing.assert_array_equal(got.view(np.uint32)[:255], want.view(np.uint32)[:255])
    assert np.isnan(got[255])


@pytest.mark.parametrize("name", INTS)
def test_small_ints(name):
    info = ml_dtypes.iinfo(getattr(ml_dtypes, name))
    # in range, fractions (truncated), out of range (0 in onnx's reference; undefined in ONNX)
    x = np.array([info.min - 0.5, info.min, info.min + 0.75, -0.5, -0.0, 0.25, 1.5, info.max,
                  info.max + 0.9, info.max + 1, info.min - 1, 100, -100], np.float32)
    same_bits(*run_both(cast_model("float32", name, x.shape), x))
    wide = np.arange(-40, 40, dtype=np.int32)  # wraps into the narrow type
    same_bits(*run_both(cast_model("int32", name, wide.shape), wide))
    codes = np.arange(1 << DTYPES[name].bits, dtype=np.uint8).view(getattr(ml_dtypes, name))
    codes = np.tile(codes, 5)[:37]  # an odd count: a partly used last byte and word
    for dst in ("float32", "int8" if info.min < 0 else "uint8", "float16"):
        got, want = run_both(cast_model(name, dst, codes.shape), codes)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", INTS + ["float4_e2m1fn", "float8_e4m3fn", "bfloat16"])
def test_pack_matches_onnx(name):
    dtype = getattr(ml_dtypes, name)
    n = 1 << DTYPES[name].bits
    x = np.resize(np.arange(n, dtype=np.uint16 if DTYPES[name].bits == 16 else np.uint8), 45)
    a = (x.view(dtype) if DTYPES[name].bits >= 8 else (x & (n - 1)).astype(np.uint8).view(dtype))
    tensor = onnx.numpy_helper.from_array(a)
    expected = np.frombuffer(tensor.raw_data, np.uint8)
    np.testing.assert_array_equal(pack(a), expected)
    assert pack(a).size == DTYPES[name].nbytes(a.size)
    np.testing.assert_array_equal(unpack(pack(a), name, a.shape).view(np.uint8), a.view(np.uint8))


def test_int4_weights_and_transpose():
    """A constant int4 tensor (packed into the weights) moved by a Transpose kernel (4-bit
    elements, eight to a word) and cast to float32."""
    w = (np.arange(35) % 16 - 8).astype(ml_dtypes.int4).reshape(5, 7)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [7, 5])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [7, 5])
    nodes = [helper.make_node("Constant", [], ["w"], value=onnx.numpy_helper.from_array(w)),
             helper.make_node("Transpose", ["w"], ["t"], perm=[1, 0]),
             helper.make_node("Cast", ["t"], ["c"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["c", "x"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 25)], ir_version=11)
    xs = np.random.default_rng(1).standard_normal((7, 5)).astype(np.float32)
    (got,) = backend.run_model(model, [xs])
    np.testing.assert_allclose(got, w.astype(np.float32).T + xs, rtol=1e-6)


def test_runtime_takes_and_gives_int4_by_name_or_as_packed_bytes():
    """runtime_min at the I/O boundary: an int4 input as an ml_dtypes array or as its packed
    bytes (flat uint8, ONNX's packing); an int4 output as an ml_dtypes array (ml_dtypes is loaded
    here, by onnx)."""
    from compiler import compile_model
    from runtime_min import load

    x = (np.arange(13) % 16 - 8).astype(ml_dtypes.int4)
    model = cast_model("int4", "int4", x.shape)  # a copy of the input to the output
    model.graph.node[0].op_type = "Identity"
    del model.graph.node[0].attribute[:]
    with load(compile_model(model)) as m:
        assert m.inputs[0].dtype == np.dtype(ml_dtypes.int4) and m.inputs[0].shape == (13,)
        for feed in (x, pack(x)):
            (y,) = m.run({"x": feed}).values()
            assert y.dtype == np.dtype(ml_dtypes.int4)
            np.testing.assert_array_equal(y.view(np.uint8), x.view(np.uint8))
        with pytest.raises(ValueError, match="expected int4"):
            m.run({"x": x.astype(np.int8)})


def test_matmul_then_float8_round_trip():
    """MatMul -> Cast to float8 -> Cast back (fake quantization): the casts stay an elementwise
    kernel of their own (the matmul templates do not include the low-precision conversions)."""
    rng = np.random.default_rng(2)
    w = rng.standard_normal((8, 6)).astype(np.float32)
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [4, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 6])
    nodes = [helper.make_node("MatMul", ["a", "w"], ["m"]),
             helper.make_node("Cast", ["m"], ["q"], to=TensorProto.FLOAT8E4M3FN),
             helper.make_node("Cast", ["q"], ["y"], to=TensorProto.FLOAT)]
    model = helper.make_model(helper.make_graph(nodes, "g", [a], [y],
                                                [onnx.numpy_helper.from_array(w, "w")]),
                              opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    (got,) = backend.run_model(model, [x])
    want = (x @ w).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
    # the matmul's float32 sums may differ in the last bit, which can move a value across a
    # float8 rounding boundary: one float8 step at most
    np.testing.assert_allclose(got, want, rtol=2 ** -3)


def test_bfloat16_arithmetic():
    """bfloat16 computes in float32 and rounds each op's result back (as ml_dtypes, and so onnx's
    reference, do): a fused Add -> Mul -> Sub -> Max -> Relu chain, bit for bit."""
    bf16 = TensorProto.BFLOAT16
    a, b = (helper.make_tensor_value_info(n, bf16, [300]) for n in "ab")
    y = helper.make_tensor_value_info("y", bf16, [300])
    nodes = [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Mul", ["s", "a"], ["p"]),
             helper.make_node("Sub", ["p", "b"], ["d"]), helper.make_node("Max", ["d", "a"], ["m"]),
             helper.make_node("Relu", ["m"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "g", [a, b], [y]),
                              opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    rng = np.random.default_rng(3)
    xa, xb = (rng.standard_normal(300).astype(ml_dtypes.bfloat16) * 8 for _ in range(2))
    (got,) = backend.run_model(model, [xa, xb])
    (want,) = ReferenceEvaluator(model).run(None, {"a": xa, "b": xb})
    same_bits(got, want)


# ONNX's Transpose takes every low-precision type; Slice, Gather and Expand bfloat16 only.
MOVES = [("Transpose", n) for n in ("int4", "uint2", "float8_e5m2", "bfloat16", "float4_e2m1fn")] + \
    [(op, "bfloat16") for op in ("Slice", "Gather", "Expand")]


@pytest.mark.parametrize("op,name", MOVES)
def test_data_movement(op, name):
    """The strided-copy and gather kernels move 2- to 16-bit elements packed, bit for bit."""
    dtype, elem = getattr(ml_dtypes, name), DTYPES[name].onnx
    bits = DTYPES[name].bits
    codes = np.random.default_rng(4).integers(0, 1 << bits, (3, 5, 7)).astype(
        np.uint16 if bits == 16 else np.uint8)
    x = codes.view(dtype) if bits >= 8 else codes.astype(np.uint8).view(dtype)
    inits, node_inputs, attrs = [], ["x"], {}
    if op == "Transpose":
        attrs = {"perm": [2, 0, 1]}
    elif op == "Slice":
        inits = [onnx.numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
                 (("starts", [1, 4]), ("ends", [3, -10]), ("axes", [0, 2]), ("steps", [1, -2]))]
    elif op == "Gather":
        inits = [onnx.numpy_helper.from_array(np.array([[4, 0], [2, 2]], np.int64), "idx")]
        attrs = {"axis": 1}
    else:
        inits = [onnx.numpy_helper.from_array(np.array([2, 3, 5, 7], np.int64), "shape")]
    node_inputs += [t.name for t in inits]
    node = helper.make_node(op, node_inputs, ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", elem, x.shape)],
                              [helper.make_tensor_value_info("y", elem, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 25)], ir_version=11)
    model = onnx.shape_inference.infer_shapes(model)
    (got,) = backend.run_model(model, [x])
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    assert got.shape == want.shape
    got, want = got.reshape(-1), want.reshape(-1)
    if DTYPES[name].kind == "float":  # the kernels keep NaN payloads; numpy may not (Expand)
        nan = np.isnan(want.astype(np.float32))
        assert np.isnan(got[nan].astype(np.float32)).all()
        got, want = got[~nan], want[~nan]
    same_bits(got, want)
