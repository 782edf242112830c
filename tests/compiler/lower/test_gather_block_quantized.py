"""com.microsoft GatherBlockQuantized against onnxruntime: uint8 tables of 4- and 8-bit values,
int4 and uint4 tables, with and without zero points, int32 and int64 (negative) indices,
float32 and float16 scales."""

import numpy as np
import onnx
import pytest

from compiler import compile_model
from compiler.compile import compile_with_kernels
from compiler.errors import CompileError
from tests.harness import check_against_onnxruntime
from tests.onnx_builders import init, tensor_info

MS = "com.microsoft"
INT4 = {"int4": (onnx.TensorProto.INT4, -8, 8), "uint4": (onnx.TensorProto.UINT4, 0, 16)}


def table(name, kind, shape, bits, rng):
    """A packed table: uint8 bytes ([rows, K * bits / 8]) or int4 / uint4 of `shape`."""
    if kind == "uint8":
        return init(name, rng.integers(0, 256, (shape[0], shape[1] * bits // 8), dtype=np.uint8))
    elem, lo, hi = INT4[kind]
    return onnx.helper.make_tensor(name, elem, shape, rng.integers(lo, hi, shape).flatten().tolist())


def gbq_model(kind="uint8", *, rows=50, k=64, bits=4, block_size=16, zero_points=False,
              idx_shape=(2, 3), idx_dtype=np.int64, **attrs):
    rng = np.random.default_rng(0)
    blocks = -(-k // block_size)
    weights = [table("data", kind, [rows, k], bits, rng),
               init("scales", (rng.random((rows, blocks)) / 8 + 1 / 64).astype(np.float32))]
    names = ["data", "idx", "scales"]
    if zero_points:  # uint8: whole bytes a row; int4 / uint4: one value a block
        weights.append(init("zp", rng.integers(0, 256, (rows, -(-blocks * bits // 8)), dtype=np.uint8))
                       if kind == "uint8" else table("zp", kind, [rows, blocks], bits, rng))
        names.append("zp")
    node = onnx.helper.make_node("GatherBlockQuantized", names, ["y"], domain=MS, bits=bits,
                                 block_size=block_size, **attrs)
    graph = onnx.helper.make_graph([node], "gbq", [tensor_info("idx", idx_shape, idx_dtype)],
                                   [tensor_info("y", [*idx_shape, k])], initializer=weights)
    return onnx.helper.make_model(graph, ir_version=10, opset_imports=[
        onnx.helper.make_opsetid("", 21), onnx.helper.make_opsetid(MS, 1)])


def feeds(model, rows=50):
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    dtype = np.int64 if model.graph.input[0].type.tensor_type.elem_type == 7 else np.int32
    return {"idx": np.random.default_rng(1).integers(-rows, rows, shape).astype(dtype)}


CASES = [
    pytest.param({}, id="uint8-4bit"),
    pytest.param({"zero_points": True}, id="uint8-4bit-zp"),
    pytest.param({"bits": 8, "block_size": 32}, id="uint8-8bit"),
    pytest.param({"bits": 8, "zero_points": True, "idx_dtype": np.int32}, id="uint8-8bit-zp-int32"),
    pytest.param({"block_size": 32, "k": 96, "zero_points": True}, id="uint8-4bit-odd-blocks-zp"),
    pytest.param({"kind": "int4", "zero_points": True, "quantize_axis": -1}, id="int4-zp"),
    pytest.param({"kind": "int4"}, id="int4"),
    pytest.param({"kind": "uint4", "zero_points": True, "idx_shape": (1, 1)}, id="uint4-zp-decode"),
]


@pytest.mark.parametrize("kw", CASES)
def test_gather_block_quantized(kw):
    model = gbq_model(**kw)
    check_against_onnxruntime(model, feeds=feeds(model))


def test_gather_block_quantized_fp16():
    """float16 rows out of float32 scales (a constant input keeps its type)."""
    model = gbq_model(zero_points=True)
    kernels = compile_with_kernels(model, precision="fp16")[1]
    assert [k.params["TY"].name for k in kernels if k.template == "gather_block_quantized"] == ["float16"]
    check_against_onnxruntime(model, feeds=feeds(model), precision="fp16", rtol_l2=1e-2,
                              rtol=1e-2, atol=1e-2)


def test_other_axes_are_refused():
    with pytest.raises(CompileError, match="gather_axis 0"):
        compile_model(gbq_model(quantize_axis=0))
