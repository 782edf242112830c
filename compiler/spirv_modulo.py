"""Every signed integer remainder of a SPIR-V module made unsigned.

Vulkan leaves OpSRem and OpSMod (GLSL's `%` on int) undefined when an operand is negative (its
SPIR-V environment: "if either operand is negative the result is undefined"), and drivers differ
there: lavapipe computes the floored modulo, an NVIDIA H100 gave other numbers, and a Swin roll was
right on one and wrong on the other. OpUMod equals both wherever they are defined, and is wrong the
same way on every device where they are not, so a kernel that takes `%` of a negative index fails
its tests on lavapipe as it would on a GPU. A kernel that needs a negative operand's remainder
spells it out.

    %r = OpSMod %int %a %b   ->   %ua = OpBitcast %uint %a
                                  %ub = OpBitcast %uint %b
                                  %ur = OpUMod %uint %ua %ub
                                  %r  = OpBitcast %int %ur

The unsigned types are the module's own where it declares them, else declared after its other
types. Specialization-constant expressions (OpSpecConstantOp) are left as they are: the compiler
sets their operands.
"""
from __future__ import annotations

import sys
from array import array

from bundles.spirv import HEADER_WORDS, OP_TYPE_INT, OP_TYPE_VECTOR, words_of

# The SPIR-V specification's opcodes (bundles.spirv names those a bundle reader needs).
OP_FUNCTION, OP_BITCAST, OP_UMOD, OP_SREM, OP_SMOD = 54, 124, 137, 138, 139


def _instructions(words: list[int]):
    """(offset, opcode, operands) of every instruction after the header."""
    at = HEADER_WORDS
    while at < len(words):
        count, opcode = words[at] >> 16, words[at] & 0xFFFF
        if count == 0 or at + count > len(words):
            raise ValueError(f"malformed SPIR-V: instruction at word {at} has length {count}")
        yield at, opcode, words[at + 1:at + count]
        at += count


def _encode(opcode: int, *operands: int) -> list[int]:
    return [((1 + len(operands)) << 16) | opcode, *operands]


def unsigned_modulo(spirv: bytes) -> bytes:
    """`spirv` with OpSRem and OpSMod computed as OpUMod (the module docstring)."""
    if len(spirv) % 4 or len(spirv) < 4 * HEADER_WORDS:
        raise ValueError("malformed SPIR-V: not a whole number of words")
    words = list(words_of(spirv))
    instructions = list(_instructions(words))
    if not any(op in (OP_SREM, OP_SMOD) for _, op, _ in instructions):
        return spirv
    ints = {}      # id -> (width, signedness)
    vectors = {}   # id -> (component id, count)
    for _, op, args in instructions:
        if op == OP_TYPE_INT:
            ints[args[0]] = (args[1], args[2])
        elif op == OP_TYPE_VECTOR:
            vectors[args[0]] = (args[1], args[2])
    unsigned = {(w, 0): i for i, (w, s) in ints.items() if s == 0}            # (width, 0) -> id
    unsigned_vectors = {(ints[c][0], n): i for i, (c, n) in vectors.items() if ints.get(c, (0, 1))[1] == 0}
    bound = words[3]
    declared: list[int] = []   # the types this pass adds, in declaration order

    def new_id() -> int:
        nonlocal bound
        bound += 1
        return bound - 1

    def unsigned_of(type_id: int) -> int:
        if type_id in ints:
            width = ints[type_id][0]
            if (width, 0) not in unsigned:
                unsigned[(width, 0)] = new_id()
                declared.extend(_encode(OP_TYPE_INT, unsigned[(width, 0)], width, 0))
            return unsigned[(width, 0)]
        component, count = vectors[type_id]
        width = ints[component][0]
        if (width, count) not in unsigned_vectors:
            scalar = unsigned_of(component)
            unsigned_vectors[(width, count)] = new_id()
            declared.extend(_encode(OP_TYPE_VECTOR, unsigned_vectors[(width, count)], scalar, count))
        return unsigned_vectors[(width, count)]

    out = words[:HEADER_WORDS]
    first_function = None
    for at, op, args in instructions:
        if op == OP_FUNCTION and first_function is None:
            first_function = len(out)
        if op in (OP_SREM, OP_SMOD):
            result_type, result, a, b = args
            u = unsigned_of(result_type)
            ua, ub, ur = new_id(), new_id(), new_id()
            out += _encode(OP_BITCAST, u, ua, a) + _encode(OP_BITCAST, u, ub, b)
            out += _encode(OP_UMOD, u, ur, ua, ub) + _encode(OP_BITCAST, result_type, result, ur)
        else:
            out += words[at:at + 1 + len(args)]
    out[first_function:first_function] = declared
    out[3] = bound
    packed = array("I", out)
    if sys.byteorder == "big":
        packed.byteswap()
    return packed.tobytes()
