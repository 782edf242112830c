"""vkc.Int8CacheWrite (lower/int8_cache_write.py): what it stores, read back from the bundle's state,
against quantize_rows of onnxruntime's float cache: rows written at each batch's index, linear
and circular (wrapped), the untouched rows still zero; the update
read as rotated keys in their head split's views (tests/compiler/passes/test_cache_row_stores.py's
graph, with --kv-cache int8 the cache write is this kernel)."""
import numpy as np
import onnxruntime as ort
import pytest

from compiler.compile import compile_model
from compiler.lower.int8_cache_write import quantize_rows
from runtime_min import load
from tests.compiler.passes.test_cache_row_stores import B, D, HEADS, ROWS, keys_into_cache


@pytest.mark.parametrize("mode, runs", [("linear", [[0, 5], [1, 4]]), ("circular", [[4, 5], [7, 11]])])
def test_rows_stored_as_int8(mode, runs, rng):
    model = keys_into_cache(mode)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    cache = np.zeros([B, HEADS, ROWS, D], np.float32)
    with load(compile_model(model, target="generic", kv_cache="int8")) as m:
        assert [s.name for s in m.state] == ["cache", "cache.scale"]
        for rows in runs:
            feeds = {"x": (rng.standard_normal([B, 1, HEADS * D]) * 3).astype(np.float32),
                     "position_ids": np.array([[3], [9]], np.int64), "write_indices": np.array(rows, np.int64)}
            m.run(feeds)
            cache = sess.run(None, {**feeds, "cache": cache})[0]
            want_q, want_scale = quantize_rows(cache)
            got_q, got_scale = m.read_state("cache"), m.read_state("cache.scale")
            assert got_q.dtype == np.int8 and got_scale.shape == (B, HEADS, ROWS, 1)
            np.testing.assert_allclose(got_scale, want_scale, rtol=1e-5)
            assert np.abs(got_q.astype(int) - want_q).max() <= 1   # a tie may round either way
            cache = (want_q * want_scale).astype(np.float32)   # what the next run reads back
