"""compile_model's inputs: a ModelProto, a str path, a pathlib.Path; and the bundle it returns."""

import numpy as np
import onnx
import pytest

from tests.harness import run_bundle
from tests.onnx_builders import single_op_model


@pytest.mark.parametrize("kind", ["proto", "str", "path"])
def test_compile_model_accepts(kind, tmp_path):
    from bundles import read_bundle
    from compiler import compile_model
    from compiler.targets import DEFAULT_TARGETS

    model = single_op_model("Sigmoid", {"x": [3, 5]})
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    arg = {"proto": model, "str": str(path), "path": path}[kind]
    bundle = compile_model(arg)  # the portable default: a variant per profile of DEFAULT_TARGETS
    assert isinstance(bundle, (bytes, bytearray))
    b = read_bundle(bytes(bundle))
    assert [v["target"]["name"] for v in b.manifest["variants"]] == list(DEFAULT_TARGETS)
    for v in b.manifest["variants"]:
        assert [i["name"] for i in v["inputs"]] == ["x"]
        assert [o["name"] for o in v["outputs"]] == ["y"]
    x = np.random.default_rng(32).standard_normal((3, 5)).astype(np.float32)
    got, _ = run_bundle(bytes(bundle), {"x": x})
    np.testing.assert_allclose(got["y"], 1 / (1 + np.exp(-x)), rtol=1e-5, atol=1e-6)
