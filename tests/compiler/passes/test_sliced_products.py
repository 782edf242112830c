"""slice_products: a product read only by Slices of its columns (Phi-3's qkv_proj and
gate_up_proj) becomes a product per Slice, so no copy runs: gate and up then pair into one GEMV
that stores silu(gate) * up. Against onnxruntime; where a Slice steps, overlaps another or the
product is read elsewhere, the product stays whole."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler.compile import compile_with_kernels, lower_model
from tests.harness import check_against_onnxruntime


def sliced_model(*, rows=1, k=64, f=48, slices=((0, 48), (48, 96)), gated=True, steps=1, extra_reader=False):
    """x [1, rows, k] -> y = x W [1, rows, 2f] -> Slices of y's columns (gated: silu(first) * second)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.normal(size=(k, 2 * f)) / np.sqrt(k)).astype(np.float32), "w")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
    parts = []
    for i, (start, stop) in enumerate(slices):
        for name, value in (("starts", start), ("ends", stop), ("axes", -1), ("steps", steps)):
            inits.append(numpy_helper.from_array(np.array([value], np.int64), f"{name}{i}"))
        nodes.append(helper.make_node("Slice", ["y", f"starts{i}", f"ends{i}", f"axes{i}", f"steps{i}"], [f"part{i}"]))
        parts.append(f"part{i}")
    if gated:
        nodes += [helper.make_node("Sigmoid", [parts[0]], ["sig"]), helper.make_node("Mul", [parts[0], "sig"], ["silu"]),
                  helper.make_node("Mul", ["silu", parts[1]], ["out"])]
        outputs = [("out", len(range(2 * f)[slice(*slices[0], steps)]))]
    else:
        outputs = [(p, len(range(2 * f)[slice(start, stop, steps)])) for p, (start, stop) in zip(parts, slices)]
    outputs += [("y", 2 * f)] if extra_reader else []
    graph = helper.make_graph(nodes, "sliced", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, rows, k])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, rows, c]) for n, c in outputs],
                              inits)
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 17)])


def products(model):
    return [n for n in lower_model(model, input_shapes=None, target="generic")[1].nodes if n.op_type == "MatMul"]


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_gate_and_up_pair(precision):
    model = sliced_model()
    kernels = [k for k in compile_with_kernels(model, target="generic", precision=precision)[1]
               if not k.template.startswith("elementwise")]   # fp16: the input's and output's casts
    assert [k.template for k in kernels] == ["matmul_gemv"] and kernels[0].params["PAIRED"]
    tol = dict(rtol_l2=1e-5, rtol=1e-4, atol=1e-5) if precision == "fp32" else dict(rtol_l2=1e-2, rtol=1e9, atol=1e9)
    check_against_onnxruntime(model, target="generic", precision=precision, **tol)


@pytest.mark.parametrize("slices", [((0, 40), (40, 64), (64, 96)), ((-32, 96), (0, 16))])
def test_a_product_per_slice(slices):
    """Three Slices (q, k, v widths), negative and clamped bounds, columns left unread."""
    model = sliced_model(slices=slices, gated=False)
    assert len(products(model)) == len(slices)
    assert "strided_copy" not in [k.template for k in compile_with_kernels(model, target="generic")[1]]
    check_against_onnxruntime(model, target="generic")


@pytest.mark.parametrize("kw", [dict(steps=2, gated=False), dict(slices=((0, 60), (40, 96)), gated=False),
                                dict(extra_reader=True)])
def test_product_stays_whole(kw):
    """A stepped Slice, overlapping columns, the product also an output: one product, as written."""
    model = sliced_model(**kw)
    assert len(products(model)) == 1
    check_against_onnxruntime(model, target="generic")
