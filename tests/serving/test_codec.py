"""serving/codec.py: JSON, npz and npy bodies to feeds and outputs back; malformed bodies are 4xx."""
import io
import json

import numpy as np
import pytest

from serving import codec
from serving.batching import Layout, RequestError

ONE = Layout.of([{"x": [1, 2]}], {"x": np.float32})
INT = Layout.of([{"ids": [1, 2]}], {"ids": np.int64})
TWO = Layout.of([{"a": [1, 2], "b": [1, 1]}], {"a": np.float32, "b": np.float32})


def test_json_in_and_out():
    feeds = codec.decode(json.dumps({"inputs": {"x": [[1, 2.5]]}}).encode(), codec.JSON, ONE)
    assert feeds["x"].dtype == np.float32 and feeds["x"].tolist() == [[1.0, 2.5]]
    body, media = codec.encode({"y": np.array([[0.5]], np.float32)}, codec.JSON)
    assert media == codec.JSON and json.loads(body) == {"outputs": {"y": [[0.5]]}}


def test_npz_and_npy_keep_dtypes():
    buf = io.BytesIO()
    np.savez(buf, a=np.ones((1, 2), np.float32), b=np.zeros((1, 1), np.float64))
    feeds = codec.decode(buf.getvalue(), codec.NPZ, TWO)
    assert feeds["b"].dtype == np.float64  # layout.check refuses it, by name
    buf = io.BytesIO()
    np.save(buf, np.ones((3, 2), np.float32))
    assert codec.decode(buf.getvalue(), codec.NPY, ONE)["x"].shape == (3, 2)
    body, media = codec.encode({"y": np.arange(3)}, codec.NPY)
    assert media == codec.NPY and np.load(io.BytesIO(body)).tolist() == [0, 1, 2]
    body, media = codec.encode({"y": np.arange(3), "z": np.ones(1)}, codec.NPY)
    assert media == codec.NPZ and set(np.load(io.BytesIO(body))) == {"y", "z"}


@pytest.mark.parametrize("body, kind, layout, status, message", [
    (b"{", codec.JSON, ONE, 400, "the body is not JSON"),
    (b'{"x": [[1, 2]]}', codec.JSON, ONE, 400, 'a JSON request is {"inputs"'),
    (b'{"inputs": {"x": [[1, 2], [3]]}}', codec.JSON, ONE, 400, "ragged"),
    (b'{"inputs": {"ids": [[1.5, 2]]}}', codec.JSON, INT, 400, "holds fractions but the bundle takes int64"),
    (b'{"inputs": {"x": [["a", "b"]]}}', codec.JSON, ONE, 400, "holds U values"),
    (b"not numpy", codec.NPZ, ONE, 400, "the body is not a readable application/x-npz"),
    (b"not numpy", codec.NPY, ONE, 400, "the body is not a readable application/x-npy"),
])
def test_malformed_bodies(body, kind, layout, status, message):
    with pytest.raises(RequestError) as info:
        codec.decode(body, kind, layout)
    assert message in str(info.value) and info.value.status == status and "\n" not in str(info.value)


def test_npy_for_a_bundle_of_two_inputs_and_unknown_media_types():
    buf = io.BytesIO()
    np.save(buf, np.ones((1, 2), np.float32))
    with pytest.raises(RequestError, match="carries one array, for a bundle of one input"):
        codec.decode(buf.getvalue(), codec.NPY, TWO)
    with pytest.raises(RequestError, match="the body is one array, not an npz"):
        codec.decode(buf.getvalue(), codec.NPZ, TWO)
    assert codec.media_type("application/json; charset=utf-8") == codec.JSON
    assert codec.media_type(None) == codec.JSON
    with pytest.raises(RequestError) as info:
        codec.media_type("text/plain")
    assert info.value.status == 415
