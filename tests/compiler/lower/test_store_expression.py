"""The store expression of a kernel with a fused epilogue."""
from __future__ import annotations

import numpy as np
import pytest

from compiler.errors import CompileError
from compiler.ir import Node, Value
from compiler.lower.store_expression import build_epilogue


def _matmul(operand_dtype):
    a = Value("a", np.dtype(np.float16), (4, 8))
    b = Value("b", np.dtype(np.float16), (8, 6), data=np.ones((8, 6), np.float16))
    r = Value("r", np.dtype(operand_dtype), (4, 6))
    c = Value("c", np.dtype(np.float32), (4, 6))
    return Node("MatMul", "mm", [a, b, r], [c],
                {"n_op_inputs": 2, "epilogue": ("add", ("in", 0), ("acc",))})


def test_an_operand_in_the_stored_type_is_read():
    expr, operands, *_ = build_epilogue(_matmul(np.float32), "matmul", (4, 6))
    assert [v.name for v in operands] == ["r"] and "EP0_AT" in expr


def test_an_operand_in_another_type_is_refused():
    """The templates declare epilogue buffers in the stored type: a float16 residual under a
    float32 store would be read as float32 bytes."""
    with pytest.raises(CompileError, match="MatMul 'mm'.*float16 tensor 'r'.*stores float32"):
        build_epilogue(_matmul(np.float16), "matmul", (4, 6))
