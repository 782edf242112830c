"""serving/engine.py on lavapipe, validated, without Ray: a batch packed and padded into a variant
gives each request what running it alone gives."""
import numpy as np
import pytest

import runtime_min
from runtime_min import load
from serving.batching import plan, split
from serving.engine import VkcEngine


@pytest.fixture
def engine(bundle):
    runtime_min.clear_validation_messages()
    e = VkcEngine(bundle, validation=True)
    yield e
    e.close()
    assert runtime_min.validation_messages() == []


def test_a_padded_batch_matches_each_request_run_alone(engine, bundle, rng):
    assert engine.layout.groups == {((16,),): (1, 4)} and engine.layout.outputs == ("y",)
    feeds = [{"x": rng.standard_normal((n, 16)).astype(np.float32)} for n in (1, 2)]
    reqs = [engine.layout.check(f) for f in feeds]
    (chunk,) = plan(reqs, engine.layout)
    assert chunk.batch == 4 and chunk.rows == 3
    outputs, device_s = engine.run(chunk, reqs)
    assert device_s is not None and device_s > 0
    got = dict(split(outputs, chunk, engine.layout))
    with load(bundle, validation=True) as alone:
        for i, f in enumerate(feeds):
            for row in range(f["x"].shape[0]):
                ref = alone.run({"x": f["x"][row:row + 1]})["y"]
                np.testing.assert_allclose(got[i]["y"][row:row + 1], ref, rtol=1e-6, atol=1e-7)


def test_the_engine_reports_a_device_failure(engine):
    engine.model.close()
    chunk = plan([engine.layout.check({"x": np.zeros((1, 16), np.float32)})], engine.layout)[0]
    with pytest.raises(runtime_min.VkcRuntimeError, match="closed"):
        engine.run(chunk, [engine.layout.check({"x": np.zeros((1, 16), np.float32)})])
    assert "closed" in engine.failure
