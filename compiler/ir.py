"""The compiler's IR: a Graph of Nodes over Values with static shapes.

Values carry numpy data when they are constants. A view (Reshape, Flatten, ...) is a Value whose
`alias_of` points at the Value that owns its bytes; views never produce a kernel. A Concat input
written in place (passes/concat_slices.py) is a view too: its bytes sit `alias_offset` bytes into
the Concat's output.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bundles.dtypes import dtype_of

# Edits that can change which values a graph holds or how they alias: a graph's or a node's value
# lists, and a value's alias_of. Graph's value index (Graph.values, Graph.family) is kept until
# the next one, so passes that ask of every value between edits pay one walk, not one per question.
_edits = [0]


def _edited() -> None:
    _edits[0] += 1


class _EditedList(list):
    """A list that counts its edits in _edits."""

    def _edit(method):
        def edit(self, *args):
            _edited()
            return method(self, *args)
        return edit

    __setitem__ = _edit(list.__setitem__)
    __delitem__ = _edit(list.__delitem__)
    __iadd__ = _edit(list.__iadd__)
    __imul__ = _edit(list.__imul__)
    append, extend, insert = _edit(list.append), _edit(list.extend), _edit(list.insert)
    pop, remove, clear = _edit(list.pop), _edit(list.remove), _edit(list.clear)
    sort, reverse = _edit(list.sort), _edit(list.reverse)
    del _edit


def _edited_list(values) -> _EditedList:
    _edited()
    return values if type(values) is _EditedList else _EditedList(values)


@dataclass(eq=False)
class Value:
    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    data: np.ndarray | None = None          # set for constants
    producer: "Node | None" = None
    consumers: list["Node"] = field(default_factory=list)
    alias_of: "Value | None" = None         # set for views: the value owning the bytes
    alias_offset: int = 0                   # where a view's bytes start in alias_of's

    def __setattr__(self, name, value):
        if name == "alias_of":
            _edited()
        object.__setattr__(self, name, value)

    @property
    def is_constant(self) -> bool:
        return self.data is not None

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        """Bytes in memory: the 4- and 2-bit dtypes pack several elements per byte (bundles/dtypes.py)."""
        d = dtype_of(self.dtype)
        return d.nbytes(self.size) if d is not None else self.size * np.dtype(self.dtype).itemsize

    def root(self) -> "Value":
        v = self
        while v.alias_of is not None:
            v = v.alias_of
        return v

    def root_offset(self) -> int:
        """Where this value's bytes start in its root's."""
        v, offset = self, 0
        while v.alias_of is not None:
            v, offset = v.alias_of, offset + v.alias_offset
        return offset

    def __repr__(self) -> str:
        kind = "const " if self.is_constant else ""
        return f"<{kind}{self.name}: {np.dtype(self.dtype).name}{list(self.shape)}>"


@dataclass(eq=False)
class Node:
    op_type: str
    name: str
    inputs: list[Value | None]
    outputs: list[Value]
    attrs: dict[str, Any] = field(default_factory=dict)
    domain: str = ""
    # Names of the ONNX nodes this node stands for after fusion (for profiling and errors).
    sources: list[str] = field(default_factory=list)

    def __setattr__(self, name, value):
        if name in ("inputs", "outputs"):
            value = _edited_list(value)
        object.__setattr__(self, name, value)

    def text(self, name: str, default: str | None = None) -> str | None:
        """A string attribute as str (onnx gives its bytes), or `default` where the node has none."""
        value = self.attrs.get(name, default)
        return value.decode() if isinstance(value, bytes) else value

    def input(self, i: int) -> Value | None:
        """The op's own i-th input, or None when absent. Operands a fused epilogue appended
        (after `n_op_inputs`) are not the op's inputs."""
        own = self.attrs.get("n_op_inputs", len(self.inputs))
        return self.inputs[i] if i < own else None

    def __repr__(self) -> str:
        return f"<{self.op_type} {self.name}: {self.inputs} -> {self.outputs}>"


def is_onnx(node: Node | None, *ops: str) -> bool:
    """Whether `node` is one of `ops` of the standard ONNX domain (what pattern passes match)."""
    return node is not None and node.op_type in ops and node.domain in ("", "ai.onnx")


class Graph:
    """Nodes in a valid topological order plus the graph's inputs and outputs."""

    def __init__(self, nodes, inputs, outputs, opset: int, name: str = "model", producer: str = ""):
        self._index: list | None = None   # Graph._indexed
        self.nodes: list[Node] = list(nodes)
        self.inputs: list[Value] = list(inputs)
        self.outputs: list[Value] = list(outputs)
        self.opset = opset
        self.precision = None   # passes/precision.py's Precision, set by compile_model
        self.float32_nodes: list[dict] = []   # what passes/precision.py kept float32 by itself, and why
        self.float16_check: dict | None = None   # compiler/float16_check.py's verdict, of a float16 compile
        self.weights = None     # passes/quantize_weights.py's WeightQuantization, set by compile_model
        self.quantized_weights: dict | None = None   # what that pass quantized, and what it left float
        # (input, output) pairs held on the device between runs (compiler/state.py): the output's
        # value becomes the input's at the next run
        self.state: list[tuple[Value, Value]] = []
        self.growing = None     # compiler/growing_cache.py's GrowingCache, for passes/cache_reads.py
        self.kv_cache = None    # "int8": the caches held as state are int8 (passes/int8_cache.py)
        self.name = name
        self.producer = producer
        self.relink()

    def __setattr__(self, name, value):
        if name in ("nodes", "inputs", "outputs"):
            value = _edited_list(value)
        object.__setattr__(self, name, value)

    def relink(self) -> None:
        """Recompute producer/consumer links from the node list (passes call this after edits).
        A value no node in the list produces (a graph input, a constant, the output of a node
        folded or removed) has no producer."""
        # (links written to the values' __dict__: Value.__setattr__ watches only alias_of)
        for v in self._indexed()[1]:
            d = v.__dict__
            d["producer"], d["consumers"] = None, []
        for node in self.nodes:
            for v in node.outputs:
                v.__dict__["producer"] = node
        for node in self.nodes:
            for v in node.inputs:
                if v is not None:
                    v.consumers.append(node)

    def values(self) -> list[Value]:
        """Every value the graph holds: inputs, what nodes read and write, outputs, and the views
        between (a view of a view that no node touches)."""
        return list(self._indexed()[1])

    def family(self, v: Value) -> list[Value]:
        """The graph's values that share v's bytes: v's root and every view of it."""
        index = self._indexed()
        if index[2] is None:
            families: dict[int, list[Value]] = {}
            for w in index[1]:
                families.setdefault(id(w.root()), []).append(w)
            index[2] = families
        return index[2].get(id(v.root()), [])

    def _indexed(self) -> list:
        """[_edits when built, the values, their families by root (built when first asked)]."""
        if self._index is None or self._index[0] != _edits[0]:
            self._index = [_edits[0], self._walk_values(), None]
        return self._index

    def _walk_values(self) -> list[Value]:
        seen: dict[int, Value] = {}
        for v in self.inputs:
            seen[id(v)] = v
        for node in self.nodes:
            for v in [*node.inputs, *node.outputs]:
                if v is not None:
                    seen.setdefault(id(v), v)
        for v in self.outputs:  # a view can be an output that no node touches
            seen.setdefault(id(v), v)
        for v in list(seen.values()):  # and a view of a view: the one between is no node's
            while v.alias_of is not None:
                v = v.alias_of
                seen.setdefault(id(v), v)
        return list(seen.values())

    def is_output(self, v: Value) -> bool:
        return any(v is o for o in self.outputs)

    def used_only_by(self, v: Value, *nodes: Node) -> bool:
        """True when `nodes` are the only readers of v's bytes: no other consumer, no view of v
        read elsewhere, and neither v nor a view of it is a graph output."""
        for other in self.family(v):
            if self.is_output(other) or any(all(c is not n for n in nodes) for c in other.consumers):
                return False
        return True

    def read_between(self, values, first: int, last: int, *, besides: Node | None = None) -> bool:
        """Whether a node strictly between positions `first` and `last`, other than `besides`,
        reads the bytes of any of `values` (through one of them or a view)."""
        family = {id(w) for v in values for w in self.family(v)}
        return any(n is not besides and any(v is not None and id(v) in family for v in n.inputs)
                   for n in self.nodes[first + 1:last])

    def sole_consumer(self, v: Value) -> Node | None:
        """v's only reader, when v is read by exactly one node and by nothing else (no view of
        it, not a graph output): an intermediate a fusion may take in."""
        if len(v.consumers) != 1 or v.alias_of is not None:
            return None
        node = v.consumers[0]
        return node if self.used_only_by(v, node) else None

    def sole_reader(self, out: Value) -> "tuple[Node, Value] | None":
        """(node, what it reads) when one node alone reads `out`'s bytes, through `out` itself or
        through one view of all of them (a reshape); None otherwise."""
        views = [v for v in self.family(out) if v.alias_of is out]
        readers = [(n, v) for v in [out, *views] for n in v.consumers]
        if len({id(n) for n, _ in readers}) != 1 or len({id(v) for _, v in readers}) != 1:
            return None
        node, read = readers[0]
        if not self.used_only_by(out, node):
            return None
        if read is not out and (read.nbytes != out.nbytes or read.alias_offset != 0):
            return None
        return node, read


def expand_nodes(graph: Graph, rewrite) -> Graph:
    """Each node replaced by the nodes `rewrite(node)` returns (None: the node stays), in its
    place, the graph relinked: what passes that expand an op into others do."""
    nodes = []
    for node in graph.nodes:
        replaced = rewrite(node)
        nodes += [node] if replaced is None else replaced
    graph.nodes = nodes
    graph.relink()
    return graph


def constant(name: str, array) -> Value:
    """A constant value holding `array` (a pass's new initializer)."""
    array = np.asarray(array)
    return Value(name, array.dtype, array.shape, data=array)


def ancestors(values: list[Value]) -> set[int]:
    """The ids of the nodes that computed `values`, transitively."""
    seen, todo = set(), [v.producer for v in values if v is not None and v.producer is not None]
    while todo:
        node = todo.pop()
        if id(node) not in seen:
            seen.add(id(node))
            todo += [v.producer for v in node.inputs if v is not None and v.producer is not None]
    return seen


def drop_unread(graph: Graph, candidates: set[int]) -> Graph:
    """Drop the candidates (node ids) whose every output nothing reads any more, repeatedly: what
    only a replaced node read goes with it, up to the first value something else reads."""
    while True:
        unread = {id(n) for n in graph.nodes if id(n) in candidates and all(
            not o.consumers and not graph.is_output(o) for o in n.outputs)}
        if not unread:
            return graph
        graph.nodes = [n for n in graph.nodes if id(n) not in unread]
        graph.relink()


def written_in_shape(y: Value, shape) -> Value:
    """What a kernel that computes `y` through a reshape writes: a value of y's dtype in its own
    `shape`, with y made a view of its bytes."""
    own = Value(f"{y.name}/{'x'.join(map(str, shape))}", y.dtype, tuple(shape))
    y.alias_of, y.alias_offset = own, 0
    return own


def reaches_only(graph: Graph, v: Value, ends, through) -> bool:
    """Whether every reader of v's bytes is a node `ends(node)` accepts, or one `through(node)`
    accepts whose outputs are read that way in turn (views of v count as v). False where v or a
    view of it is a graph output, or nothing reads it."""
    if graph.is_output(v):
        return False
    for reader in v.consumers:
        if through(reader):
            if not all(reaches_only(graph, o, ends, through) for o in reader.outputs if o is not None):
                return False
        elif not ends(reader):
            return False
    # Views of v, and views of views (a chain's middle view that no node reads is in no node's
    # inputs, so only its end is among graph.values()).
    views = [w for w in graph.family(v) if w is not v and _views_of(w, v)]
    return bool(v.consumers or views) and all(reaches_only(graph, w, ends, through) for w in views)


def _views_of(w: Value, v: Value) -> bool:
    while w.alias_of is not None:
        if w.alias_of is v:
            return True
        w = w.alias_of
    return False
