"""Render a kernel's store expression: the op's own tail (bias, Gemm's alpha/beta) followed by
whatever the epilogue-fusion pass attached to the node."""
from __future__ import annotations

import numpy as np

from .. import expr as E
from ..epilogue_operands import epilogue_strides, operand_perm
from ..dtypes import kernel_types
from ..errors import CompileError
from ..ir import Node, Value

# The float types a matrix product's kernel can read an epilogue operand in, each in its own
# (`typed` kernels); the expression is computed in float32 and rounded once, at the store.
EPILOGUE_DTYPES = (np.dtype(np.float32), np.dtype(np.float16))


def build_epilogue(node: Node, kind: str, out_shape, own_tail=("acc",), own_operands=(), typed=False):
    """Returns (GLSL expression over acc_v/e0/e1/e2 (and acc_w, a paired product's second
    column), operand Values, spec entries, op count, the texts of the helper functions the
    expression calls: erf, GELU's tanh). typed: the kernel declares each operand in its own
    float type (operand_types), else every operand must be of the stored type."""
    n_own = node.attrs.get("n_op_inputs", len(node.inputs))
    _check_operand_dtypes(node, n_own, typed)
    fused = node.attrs.get("epilogue", ("acc",))
    shift = len(own_operands)
    # ("acc", 1): the second product's column of a paired product (passes/paired_products.py)
    tree = E.substitute(fused, lambda t: (own_tail if t == ("acc",) else t) if t[0] == "acc" else ("in", t[1] + shift))
    operands: list[Value] = [*own_operands, *node.inputs[n_own:]]
    spec = []
    for j, v in enumerate(operands):
        sb, sm, sn = epilogue_strides(kind, out_shape, v.shape, operand_perm(node, j - shift) if j >= shift else None)
        spec += [(f"EP{j}_SB", "int32", sb), (f"EP{j}_SM", "int32", sm), (f"EP{j}_SN", "int32", sn)]

    def leaf(t):
        if t[0] == "acc":
            return "acc_v" if t == ("acc",) else "acc_w"
        j = t[1]
        return f"EP{j}_AT(e0 * EP{j}_SB + e1 * EP{j}_SM + e2 * EP{j}_SN)"

    renderer = E.Renderer()
    expr = renderer.render(tree, leaf)
    return expr, operands, spec, E.count_ops(tree), list(renderer.helpers.values())


def operand_types(operands: list[Value], out: Value) -> list | None:
    """The ScalarType of each epilogue operand where one is not of `out`'s type (a float16
    residual read by a product that stores float32: fuse_epilogues._widens), for the templates'
    epilogue_buffers; None where all are (each is declared in the stored type T)."""
    if all(np.dtype(v.dtype) == np.dtype(out.dtype) for v in operands):
        return None
    return [kernel_types(v)["T"] for v in operands]


def _check_operand_dtypes(node: Node, n_own: int, typed: bool) -> None:
    """Templates declare a fused operand's buffer in the stored type T, or where the kernel is
    `typed`, in its own float type: one of another type would be read as T's bytes
    (fuse_epilogues keeps them alike)."""
    t = np.dtype(node.outputs[0].dtype)
    for v in node.inputs[n_own:]:
        if np.dtype(v.dtype) != t and not (typed and np.dtype(v.dtype) in EPILOGUE_DTYPES):
            raise CompileError(f"{node.op_type} '{node.name}': its fused epilogue reads "
                               f"{np.dtype(v.dtype).name} tensor '{v.name}' in a kernel that stores "
                               f"{t.name}; vkc cannot compile this fusion (an internal error: "
                               "please report it, with the model).")


def channel_view(v: Value, rank: int) -> Value:
    """A per-channel vector [C] seen as [C, 1, ...] so it broadcasts along axis 1."""
    return Value(v.name + "/per_channel", v.dtype, (v.shape[0],) + (1,) * (rank - 2), alias_of=v)
