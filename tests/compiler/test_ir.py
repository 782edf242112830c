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


def _chain():
    x, y, z = _value("x"), _value("y"), _value("z")
    first, second = Node("Relu", "first", [x], [y]), Node("Neg", "second", [y], [z])
    return Graph([first, second], [x], [z], opset=17), (x, y, z), (first, second)


def test_values_and_families_follow_edits_made_without_relink():
    graph, (x, y, z), (first, second) = _chain()
    assert graph.family(y) == [y]
    view = _value("y/view")
    second.inputs[0] = view                  # an edit in place of a node's inputs
    assert view in graph.values() and graph.family(view) == [view]
    view.alias_of = y                        # a value made a view
    assert set(map(id, graph.family(y))) == {id(y), id(view)}
    w = _value("w")
    graph.nodes.append(Node("Abs", "third", [z], [w]))   # a node added in place
    assert w in graph.values()
    graph.outputs = [w]
    assert graph.is_output(w) and not graph.is_output(z)


def test_one_walk_answers_every_question_between_edits(monkeypatch):
    graph, (x, y, z), (first, second) = _chain()
    walks = []
    walk = Graph._walk_values
    monkeypatch.setattr(Graph, "_walk_values", lambda self: walks.append(1) or walk(self))
    second.inputs = [y]
    graph.relink()
    for v in (x, y, z):
        graph.used_only_by(v, second)
        graph.sole_consumer(v)
        graph.sole_reader(v)
    assert len(walks) == 1
    second.inputs = [x]
    graph.relink()
    assert graph.used_only_by(x, first, second) and not graph.used_only_by(x, first)
    assert len(walks) == 2


def test_text_attributes_decode_onnx_bytes():
    node = Node("Pad", "pad", [], [], {"mode": b"reflect", "other": "edge"})
    assert node.text("mode") == "reflect" and node.text("other") == "edge"
    assert node.text("missing", "constant") == "constant" and node.text("missing") is None


def test_read_between_sees_views_and_only_the_nodes_strictly_between():
    x, y, z, w = _value("x"), _value("y"), _value("z"), _value("w")
    view = _value("x/view")
    view.alias_of = x
    nodes = [Node("Relu", "a", [x], [y]), Node("Neg", "b", [view], [z]), Node("Abs", "c", [x], [w])]
    graph = Graph(nodes, [x], [z, w], opset=17)
    assert graph.read_between([x], 0, 2)                          # b reads x through its view
    assert not graph.read_between([x], 0, 2, besides=nodes[1])    # ... unless b is set aside
    assert not graph.read_between([x], 0, 1)                      # nothing strictly between
    assert not graph.read_between([y], 0, 3)                      # y's reader is none of them
