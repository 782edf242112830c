"""Whole models against onnxruntime (rel L2 < 1e-4), plus memory-plan sanity."""

import os

import onnx
import pytest

from tests.harness import check_against_onnxruntime
from tests.onnx_builders import (light_model, light_model_path, mlp, mobilenetv2_block, mobilenetv2_block_stride2,
                           small_cnn)

MODELS = {
    "mlp-784-1024-1024-10": lambda: mlp(784, 1024, 1024, 10),
    "mlp-batch4": lambda: mlp(784, 1024, 1024, 10, batch=4, seed=1),
    "small_cnn": lambda: small_cnn(),
    "small_cnn-batch2": lambda: small_cnn(batch=2, seed=1),
    "mobilenetv2-block-s1-residual": lambda: mobilenetv2_block(),
    "mobilenetv2-block-s2": lambda: mobilenetv2_block_stride2(),
    "mobilenetv2-block-s1-32ch-28x28": lambda: mobilenetv2_block(c_in=32, hw=28, seed=2),
}


def _check_model(model):
    result = check_against_onnxruntime(model, rtol_l2=1e-4)
    mem = result["manifest"]["memory"]
    lower, arena, total = mem["lower_bound_bytes"], mem["arena_bytes"], mem["intermediates_sum_bytes"]
    assert lower <= arena <= total, \
        f"memory plan out of order: lower_bound {lower} <= arena {arena} <= intermediates_sum {total} fails"
    return result


@pytest.mark.parametrize("name", list(MODELS))
def test_model(name):
    _check_model(MODELS[name]())


@pytest.mark.slow
@pytest.mark.parametrize("name", ["squeezenet"])
def test_light_model(name):
    """The onnx wheel's light_*.onnx (opset 9, data_0 1x3x224x224), weights made random. (ResNet-50
    runs at 64x64 in test_zoo.)"""
    path = light_model_path(name)
    if not os.path.exists(path):
        pytest.skip(f"{path} is not in this onnx wheel (onnx {onnx.__version__})")
    _check_model(light_model(name))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["densenet121", "inception_v1", "inception_v2", "shufflenet"])
def test_other_light_models_on_the_host_profile(name):
    """Other light models of the wheel, compiled for the local device's profile (on lavapipe:
    texel-buffer kernels and Winograd, several times faster than `generic` there). Not here:
    AlexNet, ZFNet and VGG-19, plain convolution stacks whose classifier weights over 128 MiB
    are split at compile time (tests/compiler/passes/test_split_large_weights.py), at 3 to 10
    times these models' cost."""
    path = light_model_path(name)
    if not os.path.exists(path):
        pytest.skip(f"{path} is not in this onnx wheel (onnx {onnx.__version__})")
    check_against_onnxruntime(light_model(name), target="host")
