"""LRN against onnxruntime."""

import pytest

from tests.harness import check_against_onnxruntime
from tests.onnx_builders import single_op_model


@pytest.mark.parametrize("attrs", [
    pytest.param(dict(size=5, alpha=1e-4, beta=0.75, bias=1.0), id="alexnet"),
    pytest.param(dict(size=3), id="defaults-odd"),
    pytest.param(dict(size=7, alpha=0.01, beta=0.5, bias=2.0), id="beta-half-bias2"),  # onnxruntime rejects even sizes
    pytest.param(dict(size=1, alpha=0.5, beta=1.0), id="size1"),
    pytest.param(dict(size=9, alpha=0.1), id="wider-than-channels"),
])
def test_lrn(attrs):
    check_against_onnxruntime(single_op_model("LRN", {"x": [2, 7, 5, 6]}, attrs))
