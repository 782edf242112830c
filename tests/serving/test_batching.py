"""serving/batching.py: request checks, the variant a batch takes, packing, padding, splitting.
No Ray and no device."""
import numpy as np
import pytest

from serving.batching import Chunk, Layout, RequestError, fill, plan, split, variant_shapes

# Two inputs; batch sizes 1, 4, 8 for rows (x: 3, m: 2), and 2 for another row shape of x.
SHAPES = [{"x": [1, 3], "m": [1, 2]}, {"x": [8, 3], "m": [8, 2]}, {"x": [4, 3], "m": [4, 2]},
          {"x": [2, 5], "m": [2, 2]}]
LAYOUT = Layout.of(SHAPES, {"x": np.float32, "m": np.int64}, ["y"])


def request(rows, width=3, seed=0):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((rows, width)).astype(np.float32),
            "m": rng.integers(0, 9, (rows, 2)).astype(np.int64)}


def test_layout_groups_batch_sizes_by_row_shape():
    assert LAYOUT.groups == {((3,), (2,)): (1, 4, 8), ((5,), (2,)): (2,)}
    assert LAYOUT.max_batch == 8
    assert LAYOUT.expected().startswith("x float32[n, 3], m int64[n, 2] with n <= 8 (batch sizes 1, 4, 8)")


def test_a_bundle_without_a_common_leading_dim_is_refused():
    with pytest.raises(ValueError, match="without one common leading dim"):
        Layout.of([{"a": [1, 3], "b": [2, 3]}], {"a": np.float32, "b": np.float32})
    with pytest.raises(ValueError, match="without one common leading dim"):
        Layout.of([{"a": []}], {"a": np.float32})


@pytest.mark.parametrize("feeds, status, message", [
    ({"x": np.zeros((1, 3), np.float32)}, 400, "missing input 'm'"),
    ({**request(1), "z": np.zeros(1)}, 400, "unknown input 'z'; the bundle's inputs are x, m"),
    ({**request(1), "x": np.zeros((1, 3), np.float64)}, 400, "input 'x' is float64, the bundle takes float32"),
    ({**request(1), "x": [[0.0, 0.0, 0.0]]}, 400, "input 'x' is a list, not a numpy array"),
    ({**request(1), "x": np.zeros((), np.float32)}, 400, "needs a batch axis first"),
    ({**request(1), "x": np.zeros((0, 3), np.float32)}, 400, "at least one row"),
    ({"x": np.zeros((2, 3), np.float32), "m": np.zeros((1, 2), np.int64)}, 400, "batch axes differ (x: 2, m: 1)"),
    ({"x": np.zeros((1, 4), np.float32), "m": np.zeros((1, 2), np.int64)}, 400, "no variant takes rows of shape x=4,m=2"),
    (request(9), 413, "a request of 9 rows is over every variant (at most 8"),
    (request(3, width=5), 413, "at most 2 for these row shapes"),
    ([1, 2], 400, "a request is a mapping"),
])
def test_bad_requests_say_what_is_wrong_in_one_line(feeds, status, message):
    with pytest.raises(RequestError) as info:
        LAYOUT.check(feeds)
    assert message in str(info.value) and "\n" not in str(info.value)
    assert info.value.status == status


def test_a_batch_takes_the_smallest_variant_that_holds_it():
    reqs = [LAYOUT.check(request(n, seed=n)) for n in (1, 2)]
    (chunk,) = plan(reqs, LAYOUT)
    assert (chunk.batch, chunk.members) == (4, [(0, 0, 1), (1, 1, 2)])
    assert variant_shapes(chunk, LAYOUT) == {"x": (4, 3), "m": (4, 2)}
    assert [c.batch for c in plan([LAYOUT.check(request(1))], LAYOUT)] == [1]
    assert [c.batch for c in plan([LAYOUT.check(request(5))], LAYOUT)] == [8]


def test_requests_past_the_largest_variant_or_max_rows_open_a_new_chunk():
    reqs = [LAYOUT.check(request(n)) for n in (3, 4, 2, 1)]
    assert [(c.batch, c.rows) for c in plan(reqs, LAYOUT)] == [(8, 7), (4, 3)]
    assert [(c.batch, c.rows) for c in plan(reqs, LAYOUT, max_rows=4)] == [(4, 3), (4, 4), (4, 3)]


def test_row_shapes_run_in_chunks_of_their_own():
    reqs = [LAYOUT.check(request(1)), LAYOUT.check(request(1, width=5)), LAYOUT.check(request(1))]
    chunks = plan(reqs, LAYOUT)
    assert [(c.key, c.batch, [m[0] for m in c.members]) for c in chunks] == [
        (((3,), (2,)), 4, [0, 2]), (((5,), (2,)), 2, [1])]


def test_fill_pads_with_zeros_and_split_gives_each_request_its_rows():
    reqs = [LAYOUT.check(request(n, seed=n)) for n in (2, 1)]
    (chunk,) = plan(reqs, LAYOUT)
    dest = {"x": np.full((4, 3), np.nan, np.float32), "m": np.full((4, 2), -1, np.int64)}
    fill(dest, chunk, reqs, LAYOUT)
    assert np.array_equal(dest["x"][:2], reqs[0].arrays[0]) and np.array_equal(dest["x"][2:3], reqs[1].arrays[0])
    assert not dest["x"][3:].any() and not dest["m"][3:].any()
    outputs = {"y": dest["x"] * 2}
    parts = split(outputs, chunk, LAYOUT)
    assert [i for i, _ in parts] == [0, 1]
    assert np.array_equal(parts[1][1]["y"], reqs[1].arrays[0] * 2)
    assert parts[0][1]["y"].base is None  # a copy: the run's memory is not kept alive


def test_split_refuses_outputs_not_batched_along_axis_0():
    chunk = Chunk(((3,), (2,)), 4, [(0, 0, 1)])
    with pytest.raises(ValueError, match="output 'y' has shape \\(10,\\), not 4 rows first"):
        split({"y": np.zeros(10)}, chunk, LAYOUT)
