"""Signed remainders made unsigned (compiler/spirv_modulo.py): no OpSRem or OpSMod in any module
the compiler writes, the rewritten modules validate, and a kernel that took `%` of a negative
index fails on lavapipe as it did on an NVIDIA GPU (the ONNX wrap-pad case, a Swin roll)."""
import numpy as np
import pytest
from tests.harness import check_against_onnxruntime, spirv_val
from tests.onnx_builders import single_op_model

from compiler import codegen
from compiler.spirv_modulo import OP_SMOD, OP_SREM, OP_UMOD, unsigned_modulo

REMAINDERS = """#version 450
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) readonly buffer A { int a[]; };
layout(set = 0, binding = 1) writeonly buffer B { int b[]; };
layout(set = 0, binding = 2) writeonly buffer C { ivec2 c[]; };
layout(set = 0, binding = 3) writeonly buffer D { int64_t d[]; };
void main() {
    const int i = int(gl_GlobalInvocationID.x);
    b[i] = a[i] % 7;
    c[i] = ivec2(a[i], i) % ivec2(5, a[0] + 3);
    d[i] = int64_t(a[i]) % int64_t(11);
}
"""


def opcodes(module: bytes) -> list[int]:
    words = memoryview(module).cast("I")
    found, i = [], 5
    while i < len(words):
        found.append(words[i] & 0xFFFF)
        i += words[i] >> 16
    return found


def test_compiled_modules_have_only_unsigned_remainders():
    module = codegen.compile_glsl(REMAINDERS, "remainders")
    ops = opcodes(module)
    assert OP_SREM not in ops and OP_SMOD not in ops
    assert ops.count(OP_UMOD) >= 3   # int, ivec2 and int64 remainders
    assert spirv_val(module) is None


def test_a_module_without_signed_remainders_is_unchanged():
    module = codegen.compile_glsl(REMAINDERS.replace("%", "/"), "quotients")
    assert unsigned_modulo(module) == module


@pytest.mark.parametrize("module", [b"\x03\x02\x23\x07", b"\x03\x02\x23\x07" + bytes(15)])
def test_malformed_modules_are_refused(module):
    with pytest.raises(ValueError, match="malformed SPIR-V"):
        unsigned_modulo(module)


@pytest.mark.parametrize("pads", [[0, 3, 0, 2], [1, 4, 0, 0], [0, 0, 1, 5]])
def test_wrap_pad_with_begin_pads(pads, rng):
    """Output column c reads input column c - P, negative for c < P (as in a Swin roll); 3 and 5
    columns, as 2^32 is no multiple of either (a power of two would hide an unsigned remainder)."""
    model = single_op_model("Pad", {"x": [3, 5]}, {"mode": "wrap"},
                            initializers={"pads": np.array(pads, np.int64)})
    check_against_onnxruntime(model, feeds={"x": rng.standard_normal((3, 5)).astype(np.float32)})
