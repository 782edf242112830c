"""The serving suites run validated: VKC_VALIDATION=1 here reaches the Ray replicas too (serving.app
passes VKC_* variables in their runtime_env), and the engine tests load with validation=True.
`bundle`: a small MLP (x[n, 16] -> y[n, 8], rows independent) compiled for lavapipe at batch 1 and 4."""
import pytest


@pytest.fixture(autouse=True, scope="module")
def serving_environment(tmp_path_factory):
    with pytest.MonkeyPatch.context() as env:
        env.setenv("VKC_VALIDATION", "1")
        env.setenv("VKC_CACHE_DIR", str(tmp_path_factory.mktemp("vkc_cache")))
        yield


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    from compiler import compile_model
    from tests.onnx_builders import dynamic_mlp

    path = tmp_path_factory.mktemp("serving") / "mlp.vkb"
    path.write_bytes(compile_model(dynamic_mlp(), target="lavapipe", variants=[{"x": [1, 16]}, {"x": [4, 16]}]))
    return path
