"""The model zoo (tests/models/zoo.py) against onnxruntime, at small resolutions.

Tolerance: rel L2 < 1e-4 for every model. onnxruntime's own float32 result differs from a
float64 evaluation of the same graph (onnx.reference on zoo.to_float64) by ~3e-7 to ~8e-7 rel L2
on every case below (test_float32_headroom checks < 1e-5), so accumulated float32 rounding leaves
two orders of magnitude of room; no model needs a looser bound:

    mobilenet_v2 8e-7, mobilenet_v3_small 4e-7, resnet18 4e-7, resnet50 4e-7,
    efficientnet_b0 3e-7, shufflenet_v2 5e-7, unet_small 4e-7   (64x64, seed 0)
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest

from tests.models import zoo  # noqa: E402

from tests.harness import (CLOSE_TOLERANCES, assert_close, check_against_onnxruntime, random_feeds,  # noqa: E402
                     run_onnxruntime)

RTOL_L2 = 1e-4

# name -> (builder, kwargs): small variants, each covering one export form
CASES = {
    "mobilenet_v2-64": (zoo.mobilenet_v2, dict(resolution=64)),
    "mobilenet_v2-w0.5-foldbn-reshape-op17-b2": (zoo.mobilenet_v2, dict(
        width=0.5, resolution=64, batch=2, opset=17, fold_bn=True, flatten="reshape", seed=1)),
    "mobilenet_v3_small-64-op14-hardswish": (zoo.mobilenet_v3_small, dict(resolution=64, opset=14)),
    "mobilenet_v3_small-64-op13-hardsigmoid-mul": (zoo.mobilenet_v3_small, dict(
        resolution=64, opset=13, fold_bn=True, flatten="reshape", seed=1)),
    "resnet18-64": (zoo.resnet18, dict(resolution=64)),
    "resnet18-64-foldbn-reshape-op15": (zoo.resnet18, dict(
        resolution=64, opset=15, fold_bn=True, flatten="reshape", seed=1)),
    "resnet50-64": (zoo.resnet50, dict(resolution=64)),
    "efficientnet_b0-64": (zoo.efficientnet_b0, dict(resolution=64)),
    "shufflenet_v2-64-split-shapeops": (zoo.shufflenet_v2, dict(resolution=64)),
    "shufflenet_v2-64-slice-constshapes-foldbn-op16": (zoo.shufflenet_v2, dict(
        resolution=64, opset=16, channel_split="slice", shape_subgraph=False, fold_bn=True, seed=1)),
    "unet_small-64": (zoo.unet_small, dict(resolution=64)),
    "unet_small-64-foldbn-op17-b2": (zoo.unet_small, dict(resolution=64, batch=2, opset=17, fold_bn=True,
                                                          seed=1)),
}

_MODELS: dict[str, onnx.ModelProto] = {}


def _model(case: str) -> onnx.ModelProto:
    if case not in _MODELS:
        fn, kw = CASES[case]
        _MODELS[case] = fn(**kw)
    return _MODELS[case]


# ---------------------------------------------------------------------------------------------
# the builders on their own (no Vulkan): valid ONNX, sane outputs, torchvision's sizes
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", list(CASES))
def test_builder_valid(case):
    model = _model(case)
    onnx.checker.check_model(model, full_check=True)
    assert 13 <= model.opset_import[0].version <= 17
    out = run_onnxruntime(model, random_feeds(model, seed=3))["output"]
    declared = [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]
    assert list(out.shape) == declared
    assert np.all(np.isfinite(out))
    assert 1.0 < float(np.std(out)) < 4.0, "the final layer should give outputs of std ~2"


# trainable parameter counts of torchvision's models (num_params in their weight metadata)
TORCHVISION_PARAMS = {
    "mobilenet_v2": 3_504_872, "mobilenet_v3_small": 2_542_856, "resnet18": 11_689_512,
    "resnet50": 25_557_032, "efficientnet_b0": 5_288_548, "shufflenet_v2": 2_278_604,
}


@pytest.mark.parametrize("name", list(TORCHVISION_PARAMS))
def test_full_size_matches_torchvision(name):
    """At 224x224 the layer configuration is torchvision's: same parameter count (BN running
    statistics excluded), 1000 logits."""
    model = zoo.ZOO[name](resolution=224, target_std=None)
    n = sum(int(np.prod(t.dims)) for t in model.graph.initializer
            if not t.name.endswith(("running_mean", "running_var")))
    assert n == TORCHVISION_PARAMS[name]
    assert [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim] == [1, 1000]


@pytest.mark.parametrize("name", list(zoo.ZOO))
def test_fold_bn_same_function(name):
    """fold_bn=True folds the very same random BatchNormalization into the Conv weights."""
    kw = dict(resolution=64 if name != "unet_small" else 32, opset=14)
    a, b = zoo.ZOO[name](**kw), zoo.ZOO[name](fold_bn=True, **kw)
    assert not any(n.op_type == "BatchNormalization" for n in b.graph.node)
    assert any(n.op_type == "BatchNormalization" for n in a.graph.node)
    feeds = random_feeds(a, seed=4)
    assert_close("output", run_onnxruntime(b, feeds)["output"], run_onnxruntime(a, feeds)["output"], rtol_l2=1e-5)


def test_export_forms():
    ops = lambda m: {n.op_type for n in m.graph.node}  # noqa: E731
    assert "HardSwish" in ops(_model("mobilenet_v3_small-64-op14-hardswish"))
    m13 = ops(_model("mobilenet_v3_small-64-op13-hardsigmoid-mul"))
    assert "HardSwish" not in m13 and {"HardSigmoid", "Mul"} <= m13
    assert {"Shape", "Gather", "Unsqueeze", "Concat", "Reshape"} <= ops(_model("resnet18-64-foldbn-reshape-op15"))
    s = ops(_model("shufflenet_v2-64-split-shapeops"))
    assert {"Split", "Transpose", "Shape", "Gather", "Reshape", "ReduceMean"} <= s
    s = ops(_model("shufflenet_v2-64-slice-constshapes-foldbn-op16"))
    assert "Slice" in s and "Split" not in s and "Shape" not in s
    assert {"ConvTranspose", "Resize", "Concat"} <= ops(_model("unet_small-64"))
    assert {"Sigmoid", "Mul", "GlobalAveragePool"} <= ops(_model("efficientnet_b0-64"))
    assert "Clip" in ops(_model("mobilenet_v2-64"))


@pytest.mark.parametrize("case", ["mobilenet_v2-64", "mobilenet_v3_small-64-op14-hardswish", "resnet18-64",
                                  "resnet50-64", "efficientnet_b0-64", "shufflenet_v2-64-split-shapeops",
                                  "unet_small-64"])
def test_float32_headroom(case):
    """onnxruntime float32 vs a float64 evaluation: the float32 error is a tenth of what the
    vkc comparison allows, in rel L2 (RTOL_L2) and per element (float32 CLOSE_TOLERANCES)."""
    from onnx.reference import ReferenceEvaluator

    model = _model(case)
    feeds = random_feeds(model, seed=0)
    ref32 = run_onnxruntime(model, feeds)["output"]
    ref64 = ReferenceEvaluator(zoo.to_float64(model)).run(
        None, {k: v.astype(np.float64) for k, v in feeds.items()})[0]
    rtol, atol_frac = CLOSE_TOLERANCES[np.dtype(np.float32)]
    assert_close("output", ref32, ref64, rtol_l2=RTOL_L2 / 10, rtol=rtol / 10,
                 atol=atol_frac / 10 * float(np.abs(ref64).max()))


# ---------------------------------------------------------------------------------------------
# vkc against onnxruntime
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", list(CASES))
def test_zoo_vs_onnxruntime(case):
    result = check_against_onnxruntime(_model(case), rtol_l2=RTOL_L2)
    mem = result["manifest"]["memory"]
    assert mem["lower_bound_bytes"] <= mem["arena_bytes"] <= mem["intermediates_sum_bytes"]


def _one_per_architecture() -> list[str]:
    first = {}
    for case, (build, _) in CASES.items():
        first.setdefault(build, case)
    return list(first.values())


@pytest.mark.parametrize("case", _one_per_architecture())
def test_zoo_vs_onnxruntime_on_lavapipe_profile(case):
    """The lavapipe profile: texel-buffer matmul and convolution, Winograd F(2x2, 3x3); each
    architecture once (its graph forms, which the frontend undoes, run on generic above)."""
    check_against_onnxruntime(_model(case), rtol_l2=RTOL_L2, target="lavapipe")
