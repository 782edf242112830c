"""If nodes decided at compile time (compiler/constant_ifs.py): an If over a shape takes its
branch in each shape variant, a branch holding an If of its own is decided in turn, and an If
over the inputs' values is still refused as unsupported."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler import compile_model
from compiler.errors import UnsupportedOpsError
from runtime_min import load
from tests.harness import run_onnxruntime


def _branch(name, nodes, out, inits=()):
    return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)],
                             list(inits))


def shape_if_model(nested: bool = False):
    """y = x * 2 where x has more than 4 rows, else x + 1 (or, nested, x - 3 below 3 rows)."""
    c = lambda name, v: numpy_helper.from_array(np.array(v, np.float32 if isinstance(v, float) else np.int64), name)
    then = _branch("then", [helper.make_node("Mul", ["x", "two"], ["doubled"])], "doubled", [c("two", 2.0)])
    if nested:
        inner_then = _branch("inner_then", [helper.make_node("Sub", ["x", "three"], ["less"])], "less", [c("three", 3.0)])
        inner_else = _branch("inner_else", [helper.make_node("Add", ["x", "one"], ["more"])], "more", [c("one", 1.0)])
        other = _branch("else", [helper.make_node("Less", ["rows", "three_rows"], ["few"]),
                                 helper.make_node("If", ["few"], ["inner"], then_branch=inner_then,
                                                  else_branch=inner_else)], "inner", [c("three_rows", 3)])
    else:
        other = _branch("else", [helper.make_node("Add", ["x", "one"], ["more"])], "more", [c("one", 1.0)])
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "axis"], ["rows"], axis=0),
             helper.make_node("Greater", ["rows", "four"], ["many"]),
             helper.make_node("If", ["many"], ["y"], then_branch=then, else_branch=other, name="by_rows")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", 8])],
                              [c("axis", 0), c("four", 4)])
    return helper.make_model(graph, ir_version=9, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("nested", [False, True])
def test_shape_condition_takes_its_branch_in_each_variant(nested, rng):
    model = shape_if_model(nested)
    rows = [6, 3, 2]
    bundle = compile_model(model, variants=[{"x": [r, 8]} for r in rows], target="generic")
    with load(bundle) as m:
        for r in rows:
            x = rng.standard_normal((r, 8)).astype(np.float32)
            want = run_onnxruntime(model, {"x": x})["y"]
            np.testing.assert_allclose(m.run({"x": x})["y"], want, rtol=1e-6)


def test_value_condition_is_refused():
    then = _branch("then", [helper.make_node("Neg", ["x"], ["neg"])], "neg")
    other = _branch("else", [helper.make_node("Identity", ["x"], ["same"])], "same")
    nodes = [helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
             helper.make_node("Greater", ["total", "zero"], ["positive"]),
             helper.make_node("If", ["positive"], ["y"], then_branch=then, else_branch=other)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
                              [numpy_helper.from_array(np.array(0.0, np.float32), "zero")])
    model = helper.make_model(graph, ir_version=9, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UnsupportedOpsError, match="If"):
        compile_model(model, target="generic")
