"""Einsum rewritten into MatMul + Transpose/Reshape, against onnxruntime, for the forms attention
and bilinear layers export and one-operand transposes and sums; other forms are refused naming
the equation."""

import numpy as np
import pytest

from tests.harness import check_against_onnxruntime
from tests.onnx_builders import single_op_model

from compiler import compile_model
from compiler.errors import CompileError

CASES = [
    pytest.param("bhid,bhjd->bhij", [2, 3, 5, 8], [2, 3, 7, 8], id="attention-scores"),
    pytest.param("bhij,bhjd->bhid", [2, 3, 5, 7], [2, 3, 7, 8], id="attention-values"),
    pytest.param("bid,bjd->bij", [2, 5, 8], [2, 6, 8], id="bid-bjd"),
    pytest.param("bij,bjd->bid", [2, 5, 6], [2, 6, 8], id="bij-bjd"),
    pytest.param("ij,jk->ik", [5, 6], [6, 7], id="matmul"),
    pytest.param("bij,jk->bik", [2, 5, 6], [6, 7], id="linear"),
    pytest.param("i,j->ij", [5], [7], id="outer"),
    pytest.param("bhqd,bkhd->bhqk", [2, 3, 4, 8], [2, 5, 3, 8], id="heads-second"),
    pytest.param("ij,kj->ki", [5, 6], [7, 6], id="transposed-output"),
    pytest.param("i,i", [5], [5], id="implicit-inner-product"),
    pytest.param("bij,bjk", [2, 3, 4], [2, 4, 5], id="implicit-output"),
    pytest.param("...ij,...jk->...ik", [2, 3, 4], [2, 4, 5], id="ellipsis-batch"),
    pytest.param("...qd,...kd->...qk", [2, 3, 4, 8], [2, 3, 5, 8], id="ellipsis-two-batch"),
    pytest.param("b...d,de->b...e", [2, 3, 4, 8], [8, 5], id="ellipsis-middle"),
    pytest.param("...ij,jk->...ik", [2, 3, 4], [4, 5], id="ellipsis-one-side"),
    pytest.param("...ij,...jk", [2, 3, 4], [2, 4, 5], id="ellipsis-implicit-output"),
    pytest.param("...d,...d->...", [3, 8], [3, 8], id="ellipsis-output-only"),
]


@pytest.mark.parametrize("equation,a,b", CASES)
def test_einsum_runtime_operands(equation, a, b):
    model = single_op_model("Einsum", {"a": a, "b": b}, {"equation": equation})
    check_against_onnxruntime(model)


@pytest.mark.parametrize("equation,shape", [
    pytest.param("ij->ji", [3, 4], id="transpose"),
    pytest.param("ij->i", [3, 4], id="row-sums"),
    pytest.param("bhij->bj", [2, 3, 4, 5], id="sum-two-letters"),
    pytest.param("ij->ij", [3, 4], id="identity"),
    pytest.param("...ij->...ji", [2, 3, 4], id="ellipsis-transpose"),
    pytest.param("...ij->...i", [2, 3, 4], id="ellipsis-row-sums"),
])
def test_einsum_one_operand(equation, shape):
    check_against_onnxruntime(single_op_model("Einsum", {"a": shape}, {"equation": equation}))


@pytest.mark.parametrize("equation,a,b", [CASES[5], ("ij,kj->ik", [5, 6], [7, 6])],
                         ids=["linear", "transposed-weight"])
def test_einsum_constant_operand(equation, a, b):
    w = np.random.default_rng(9).standard_normal(b).astype(np.float32)
    model = single_op_model("Einsum", {"a": a}, {"equation": equation}, initializers={"w": w})
    result = check_against_onnxruntime(model, target="lavapipe")
    # The constant's transpose is done at compile time: one kernel, the MatMul.
    assert len(result["manifest"]["dispatches"]) == 1


@pytest.mark.parametrize("equation,shapes", [
    ("ii->i", [[4, 4]]),
    ("...ii->...i", [[2, 4, 4]]),
    ("ij,jk,kl->il", [[2, 3], [3, 4], [4, 5]]),
    ("...ij,...jk->...ik", [[1, 3, 4], [2, 4, 5]]),   # an ellipsis dimension broadcast from 1
    ("ij,jk->i", [[2, 3], [3, 4]]),
    ("bij,bjk->bik", [[2, 3, 4], [1, 4, 5]]),
])
def test_einsum_unhandled_forms_name_the_equation(equation, shapes):
    model = single_op_model("Einsum", shapes, {"equation": equation})
    with pytest.raises(CompileError, match=f"Einsum .* equation '{equation.replace('.', '[.]')}'"):
        compile_model(model)
