"""The float comparison every suite uses (harness.assert_close) fails on one wrong element that
the relative L2 error alone would let through, and passes the error real kernels make."""
from __future__ import annotations

import numpy as np
import pytest

from tests.harness import assert_close, rel_l2


def test_one_wrong_element_in_a_large_output_fails():
    ref = np.random.default_rng(0).standard_normal(1 << 20).astype(np.float32)
    got = ref.copy()
    got[12345] += 1.0  # a wrong element of the data's own size
    assert rel_l2(got, ref) < 1e-3  # invisible to a whole-tensor rel L2 of 1e-3
    with pytest.raises(AssertionError, match=r"worst element at \(12345,\)"):
        assert_close("y", got, ref, rtol_l2=1e-3)


def test_summation_order_error_passes_even_near_zero():
    """A long dot product summed in another order: outputs near zero carry an absolute error of
    the operands' scale, which atol (scaled to max|ref|) admits."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((64, 4096)).astype(np.float32)
    b = rng.standard_normal((4096, 64)).astype(np.float32)
    ref = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    got = np.zeros_like(ref)
    for k0 in range(0, 4096, 256):  # split K, float32 partial sums, as a tiled kernel would
        got += a[:, k0:k0 + 256] @ b[k0:k0 + 256]
    st = assert_close("y", got, ref, rtol_l2=1e-4)
    assert st["ratio"] < 0.1


def test_float_dtypes_have_their_own_tolerances():
    ref = np.linspace(-3, 3, 101)
    assert_close("y", ref * (1 + 1e-14), ref, rtol_l2=1e-13)
    with pytest.raises(AssertionError):
        assert_close("y", ref * (1 + 1e-9), ref, rtol_l2=1e-6)  # float64: 1e-9 is far too much
    half = ref.astype(np.float16)
    assert_close("y", (half.astype(np.float32) * (1 + 2e-3)).astype(np.float16), half, rtol_l2=5e-3)
