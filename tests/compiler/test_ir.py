"""compiler/ir.py: producer and consumer links follow the node list."""
import numpy as np

from compiler.ir import Graph, Node, Value


def _value(name, data=None):
    return Value(name, np.dtype(np.float32), (2,), data=data)


def test_relink_clears_the_producer_of_a_value_no_listed_node_produces():
    x, y, z = _value("x"), _value("y"), _value("z")
    first, second = Node("Relu", "first", [x], [y]), Node("Neg", "second", [y], [z])
    graph = Graph([first, second], [x], [z], opset=17)
    assert y.producer is first and y.consumers == [second]
    y.data = np.zeros(2, np.float32)   # folded: y is a constant now
    graph.nodes.remove(first)
    graph.relink()
    assert y.producer is None and y.consumers == [second] and x.consumers == []
