"""The trigonometric and hyperbolic ops (compiler/float_functions.py) against float64 numpy, over
inputs that reach their hard places: sin, cos and tan of 1e3 to 1e5 and up to float32's largest,
of multiples of pi/2 (the remainders nearest 0), tan near its poles, asin, acos and atanh near +-1,
acosh near 1, sinh near 0 and near its overflow, tiny and subnormal inputs, +-0, +-inf and NaN.

Bound, per element: within ULPS float32 ulps of the exact result (measured on lavapipe: sin 2.3,
cos 2.0, tan 3.0, asin 2.3, acos 1.2, atan 2.1, sinh 1.4, cosh 1.3, asinh 2.4, acosh 2.6,
atanh 2.3), which is tighter than |got - ref| <= 2e-7 + 1e-6 |ref| (checked too); NaN and
infinities exactly where numpy gives them. The runtime fills output buffers with NaN first, so an
unwritten element fails."""
from __future__ import annotations

import numpy as np
import pytest

from compiler.errors import CompileError
from compiler.float_functions import TWO_OVER_PI_WORDS
from tests.harness import check_against_onnxruntime, compile_cached, run_bundle, spirv_validate
from tests.onnx_builders import GraphBuilder, single_op_model

ULPS = 4.0
NUMPY = {"Sin": np.sin, "Cos": np.cos, "Tan": np.tan, "Asin": np.arcsin, "Acos": np.arccos,
         "Atan": np.arctan, "Sinh": np.sinh, "Cosh": np.cosh, "Asinh": np.arcsinh,
         "Acosh": np.arccosh, "Atanh": np.arctanh}
SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 1e-40, 1e-30, -1e-30, 1e-8]


def _inputs(op: str) -> np.ndarray:
    rng = np.random.default_rng(1)
    grid = np.geomspace(1e-38, 3.4e38, 4000)
    if op in ("Sin", "Cos", "Tan"):
        parts = [rng.uniform(-4, 4, 8000), rng.uniform(-1e3, 1e3, 2000), rng.uniform(-1e4, 1e4, 2000),
                 rng.uniform(-1e5, 1e5, 2000), grid, -grid,
                 # multiples of pi/2 (poles of tan, zeros of sin and cos), and the float32 input
                 # nearest one (16367173 * 2^72)
                 np.pi / 2 * np.arange(-3000, 3000), np.nextafter(np.float32(np.pi / 2), np.float32(0)) * np.ones(1),
                 [16367173 * 2.0 ** 72, 3.4028235e38, 8192.0, 1e5, 1e4, 1e3]]
    elif op in ("Asin", "Acos", "Atanh"):
        edge = np.geomspace(6e-8, 0.5, 2000)
        parts = [rng.uniform(-1, 1, 8000), 1 - edge, edge - 1, [1.0, -1.0, 1.0000001, -1.0000001, 2.0, -5.0],
                 np.geomspace(1e-38, 1, 1000), -np.geomspace(1e-38, 1, 1000)]
    elif op == "Acosh":
        parts = [1 + np.geomspace(1.2e-7, 8, 3000), grid, rng.uniform(1, 5, 4000), [1.0, 0.5, -2.0, 0.999]]
    elif op in ("Sinh", "Cosh"):
        parts = [rng.uniform(-10, 10, 8000), rng.uniform(-89.4, 89.4, 2000), grid[grid < 100],
                 -grid[grid < 100], [88.7, 89.0, 89.41, 89.42, 90.0, -89.41, -89.42, 1e3]]
    else:  # Atan, Asinh
        parts = [rng.uniform(-10, 10, 8000), grid, -grid]
    return np.concatenate(parts + [SPECIAL]).astype(np.float32)


def _run(model, feeds, precision="fp32"):
    bundle = compile_cached(model, precision=precision)
    spirv_validate(bundle)
    return run_bundle(bundle, feeds)[0]


@pytest.mark.parametrize("op", list(NUMPY))
def test_accuracy(op):
    x = _inputs(op)
    got = _run(single_op_model(op, {"x": list(x.shape)}), {"x": x})["y"].astype(np.float64)
    with np.errstate(all="ignore"):
        want = NUMPY[op](x.astype(np.float64))
    special = ~np.isfinite(want) | (np.abs(want) > np.finfo(np.float32).max)
    assert np.array_equal(np.isnan(got), np.isnan(want)), x[np.isnan(got) != np.isnan(want)][:8]
    big = special & ~np.isnan(want)
    assert np.array_equal(got[big], np.sign(want[big]) * np.inf), (x[big], got[big])
    finite = ~special
    err = np.abs(got[finite] - want[finite])
    ulp = np.spacing(np.abs(want[finite]).astype(np.float32)).astype(np.float64)
    worst = int(np.argmax(err / ulp))
    assert (err / ulp).max() <= ULPS, (f"{op}({x[finite][worst]!r}) = {got[finite][worst]!r}, "
                                       f"exactly {want[finite][worst]!r}: {(err / ulp).max():.2f} ulps")
    assert np.all(err <= 2e-7 + 1e-6 * np.abs(want[finite]))
    # odd functions keep the sign of zero, as C's (onnxruntime's) do
    zeros = finite & (want == 0)
    assert np.array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]))


def test_two_over_pi_words():
    """The table's bits are 2/pi's (pi by Machin's formula in integers, 320 bits)."""
    bits = 320
    one = 1 << (bits + 16)

    def arctan_inverse(n: int) -> int:   # arctan(1/n) in fixed point
        total, term, k = 0, one // n, 0
        while term:
            total += term // (2 * k + 1) * (-1) ** k
            term //= n * n
            k += 1
        return total
    pi = 4 * (4 * arctan_inverse(5) - arctan_inverse(239))
    two_over_pi = (2 * one << bits) // pi          # 2/pi with `bits` bits after the point
    words = [(two_over_pi >> (bits - 32 * i)) & 0xFFFFFFFF for i in range(len(TWO_OVER_PI_WORDS))]
    assert tuple(words) == TWO_OVER_PI_WORDS


@pytest.mark.parametrize("op", list(NUMPY))
def test_float16_storage_computes_in_float32(op):
    """float16 values in and out, computed in float32 by the same helpers: within the rounding of
    the result to float16 (half an ulp) plus the float32 error."""
    x = _inputs(op)
    x = x[np.isfinite(x) & (np.abs(x) < 6e4)].astype(np.float16)
    model = single_op_model(op, {"x": list(x.shape)}, input_dtypes={"x": np.float16},
                            output_dtypes=[np.float16])
    got = _run(model, {"x": x})["y"].astype(np.float64)
    with np.errstate(all="ignore"):
        want = NUMPY[op](x.astype(np.float64))
    ok = np.isfinite(want) & (np.abs(want) < 65504)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ulp = np.spacing(np.abs(want[ok]).astype(np.float16)).astype(np.float64)
    assert np.all(np.abs(got[ok] - want[ok]) <= 0.5 * ulp + 1e-6 * np.abs(want[ok]) + 1e-12)


def test_float64_is_refused():
    model = single_op_model("Sin", {"x": [4]}, input_dtypes={"x": np.float64}, output_dtypes=[np.float64])
    with pytest.raises(CompileError, match="computes sin on float64 tensor"):
        compile_cached(model)


@pytest.mark.parametrize("target", ["generic", "lavapipe"])
def test_fused_into_a_chain_and_a_matmul_epilogue(target):
    """Helpers declared by the elementwise kernel and by a matmul's store: x @ w -> Sin -> Mul ->
    Atan, and a chain Cos(Sinh(x)) + Asinh(x)."""
    g = GraphBuilder("trig_chain", seed=3)
    x = g.input("x", [8, 32])
    h = g.node("MatMul", [x, g.const("w", g.rng.standard_normal((32, 16)).astype(np.float32))])
    h = g.node("Atan", [g.node("Mul", [g.node("Sin", [h]), g.const("k", np.array(3.0, np.float32))])],
               out="y")
    c = g.node("Add", [g.node("Cos", [g.node("Sinh", [x])]), g.node("Asinh", [x])], out="z")
    model = g.build([h, c])
    check_against_onnxruntime(model, target=target, rtol=1e-5, atol=1e-5)
