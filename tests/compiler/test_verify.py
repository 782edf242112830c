"""compiler/verify.py: the IR verifier names the pass that broke the graph and the node."""
from __future__ import annotations

import numpy as np
import pytest

from tests.onnx_builders import GraphBuilder

from compiler import passes
from compiler.frontend import to_ir
from compiler.ir import Node, Value
from compiler.passes import fold_constants, run_passes
from compiler.verify import InvalidGraph, verify


def _graph():
    g = GraphBuilder("verify", seed=1)
    x = g.input("x", [2, 4])
    h = g.node("Relu", [x])
    g.node("MatMul", [h, g.const("w", g.rng.standard_normal([4, 3]).astype(np.float32))], out="y")
    return fold_constants(to_ir(g.build(["y"])))


def test_a_valid_graph_passes_through_every_pass():
    graph = _graph()
    verify(graph)
    verify(run_passes(graph), dead_nodes=True)


def test_a_producer_removed():
    graph = _graph()
    graph.nodes.remove(graph.nodes[0])
    with pytest.raises(InvalidGraph, match=r"after the test: MatMul node '/matmul_0' reads "
                                           r"'/relu_0_out0', which no node of the graph produces"):
        verify(graph, after="the test")


def test_a_folded_value_that_links_its_removed_producer():
    """What fuse_layernorm tripped over in DistilBERT's export (an Identity of an initializer)."""
    graph = _graph()
    relu = graph.nodes.pop(0)
    relu.outputs[0].data = np.zeros((2, 4), np.float32)
    graph.inputs[0].consumers = []
    with pytest.raises(InvalidGraph, match=r"'/relu_0_out0' links producer Relu node '/relu_0', "
                                           r"which is not in the graph"):
        verify(graph)


def test_a_node_before_its_input():
    graph = _graph()
    graph.nodes.reverse()
    graph.relink()
    with pytest.raises(InvalidGraph, match=r"MatMul node '/matmul_0' reads '/relu_0_out0', which "
                                           r"Relu node '/relu_0', listed after it, produces"):
        verify(graph)


def test_a_cycle():
    graph = _graph()
    relu, matmul = graph.nodes
    relu.inputs = [matmul.outputs[0]]
    graph.relink()
    with pytest.raises(InvalidGraph, match="Relu node '/relu_0' reads 'y', which MatMul node "
                                           "'/matmul_0', listed after it, produces"):
        verify(graph)


def test_a_wrong_shape():
    graph = _graph()
    graph.nodes[1].outputs[0].shape = (2, 4)
    with pytest.raises(InvalidGraph, match=r"MatMul node '/matmul_0' output 'y' is typed "
                                           r"float32\[2, 4\] but ONNX infers float32\[2, 3\]"):
        verify(graph)


def test_a_constant_typed_unlike_its_data():
    graph = _graph()
    w = graph.nodes[1].inputs[1]
    w.shape = (3, 4)
    with pytest.raises(InvalidGraph, match=r"constant 'w_0' is typed float32\[3, 4\] but holds "
                                           r"float32\[4, 3\]"):
        verify(graph)


def test_two_producers_of_one_value():
    graph = _graph()
    relu = graph.nodes[0]
    graph.nodes.insert(1, Node("Relu", "again", list(relu.inputs), list(relu.outputs)))
    graph.relink()
    with pytest.raises(InvalidGraph, match="'/relu_0_out0' is produced by Relu node '/relu_0' and "
                                           "Relu node 'again'"):
        verify(graph)


def test_a_dead_node_once_dead_nodes_are_gone():
    graph = _graph()
    x = graph.inputs[0]
    graph.nodes.insert(0, Node("Neg", "unread", [x], [Value("neg", x.dtype, x.shape)]))
    graph.relink()
    verify(graph)
    with pytest.raises(InvalidGraph, match="nothing reads the outputs of Neg node 'unread'"):
        verify(graph, dead_nodes=True)


def test_an_output_nothing_produces():
    graph = _graph()
    graph.nodes.pop()
    graph.relink()
    with pytest.raises(InvalidGraph, match="graph output 'y' is produced by no node"):
        verify(graph)


def test_run_passes_names_the_pass_that_broke_the_graph(monkeypatch):
    def drop_first_node(graph):
        graph.nodes.pop(0)
        return graph

    monkeypatch.setenv("VKC_VERIFY", "1")
    monkeypatch.setattr(passes, "PIPELINE", [passes.make_views, drop_first_node])
    with pytest.raises(InvalidGraph, match="after drop_first_node: MatMul node '/matmul_0' reads "
                                           "'/relu_0_out0', which no node of the graph produces"):
        run_passes(_graph())
