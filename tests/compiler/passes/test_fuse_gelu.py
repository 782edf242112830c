"""The tanh GELU as exporters write it becomes one FastGelu node (compiler/passes/fuse_gelu.py)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import helper, numpy_helper

from tests.harness import check_against_onnxruntime
from tests.onnx_builders import make_model, tensor_info

from compiler.frontend import to_ir
from compiler.passes import fold_constants, run_passes
from compiler.passes.fuse_gelu import fuse_gelu

C1, C2 = math.sqrt(2 / math.pi), 0.044715


def _gelu_model(form: str, c2: float = C2):
    """`gpt2`: GPT-2's gelu_new (Pow, 0.5 * x first); `torch`: torch's gelu(approximate="tanh")
    (x * (x * x), 0.5 applied last)."""
    consts = {"c1": C1, "c2": c2, "one": 1.0, "half": 0.5, "three": 3.0}
    inits = [numpy_helper.from_array(np.array(v, np.float32), k) for k, v in consts.items()]
    mk = helper.make_node
    if form == "gpt2":
        nodes = [mk("Mul", ["x", "half"], ["hx"]), mk("Pow", ["x", "three"], ["x3"]),
                 mk("Mul", ["x3", "c2"], ["cx3"]), mk("Add", ["x", "cx3"], ["s"]),
                 mk("Mul", ["s", "c1"], ["u"]), mk("Tanh", ["u"], ["t"]),
                 mk("Add", ["t", "one"], ["a"]), mk("Mul", ["hx", "a"], ["y"])]
    else:
        nodes = [mk("Mul", ["x", "x"], ["xx"]), mk("Mul", ["x", "xx"], ["x3"]),
                 mk("Mul", ["c2", "x3"], ["cx3"]), mk("Add", ["x", "cx3"], ["s"]),
                 mk("Mul", ["c1", "s"], ["u"]), mk("Tanh", ["u"], ["t"]),
                 mk("Add", ["one", "t"], ["a"]), mk("Mul", ["x", "a"], ["xa"]),
                 mk("Mul", ["half", "xa"], ["y"])]
    for i, n in enumerate(nodes):
        n.name = f"{n.op_type}_{i}"
    graph = helper.make_graph(nodes, "gelu", [tensor_info("x", [4, 64])], [tensor_info("y", [4, 64])],
                              initializer=inits)
    return make_model(graph)


@pytest.mark.parametrize("form", ["gpt2", "torch"])
def test_tanh_gelu_is_one_node(form):
    model = _gelu_model(form)
    graph = run_passes(fold_constants(to_ir(model)))
    [node] = graph.nodes
    assert node.attrs["expr"][0] == "gelu_tanh"
    feeds = {"x": (np.random.default_rng(1).standard_normal((4, 64)) * 60).astype(np.float32)}
    check_against_onnxruntime(model, feeds=feeds, target="lavapipe")
    # |x| up to ~250: x^3 is past float16's range, the fused node stores none of it
    result = check_against_onnxruntime(model, feeds=feeds, target="generic", precision="fp16",
                                       rtol_l2=1e-2, rtol=1e-2, atol=1e-2)
    assert not result["manifest"].get("float32_nodes")


def test_other_constants_stay():
    graph = fuse_gelu(fold_constants(to_ir(_gelu_model("gpt2", c2=0.05))))
    assert "FastGelu" not in [n.op_type for n in graph.nodes]
