"""A decoder whose KV cache grows, as optimum exports it (`optimum-cli export onnx --task
text-generation-with-past`), compiled to a cache of fixed capacity kept on the device.

The form: inputs input_ids [B, S], attention_mask [B, P + S], position_ids [B, S] (where the
model takes them) and past_key_values.N.key / .value [B, kv heads, P, head size]; outputs logits
and present.N.key / .value = Concat(past, new) on the sequence axis. P, the past's length, grows
by S each run, and every shape computed from it (the causal mask) with it.

compile_model(..., max_context=N) compiles it for N cache rows, for each shape variant S
(input_ids [1, S]):
- each past/present pair becomes one cache [1, kv heads, N, head size], bundle state
  (state.py): Concat(past, new) becomes a vkc.TensorScatter of the S new rows at the run-time
  `position` (a new input, int64 [1]: the rows already filled), written in place;
- attention_mask is all ones (one sequence, no padding: a padded batch is not supported) and
  position_ids is position + arange(S), both computed in the graph, so that the bundle's inputs
  are input_ids and position (runtime_min/generate.py's contract);
- the graph is built at a full cache (P = N - S), where its causal mask covers all N rows, and
  passes/cache_reads.py makes every attention over a cache read its first position + S rows
  (a count read at run time: one bundle serves every position);
- a value computed from position_ids and constants alone (the rotary cos and sin) is computed
  here for positions 0..N-1 and its rows gathered at run time (fuse_rotary then makes
  rotate_half over such rows one rotary kernel reading the positions);
- an export without position_ids (Gemma's) counts them from the past's length with a Range,
  proven arange(P, P + S) at two past lengths: the rotary angles read position + arange(S)
  instead, and the causal mask keeps the Range.

What makes it provably that form: the graph is also built at a past of another length, and
each value computed from the past's length (a constant that differs between the two) may only
be a causal mask at both lengths (causal within a sliding window of the same W keys at both, where
the model has one: Mistral's, Gemma-2's sliding layers; at a past too short for it to hide a key,
causal), which fuse_attention makes the attention kernel's causal mode (with its window) at the
run-time key count, or the shape of a cache read (repeat_kv's Expand and Reshape), which
fuse_attention must absorb (passes/cache_reads.py checks). Anything else is refused, naming the
node and the fix.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx

from .errors import CompileError
from .frontend import to_ir
from .ir import Graph, Node, Value, is_onnx
from .passes.fold_constants import fold_constants
from .passes.fuse_attention import causal_window
from .passes.onnx_node import evaluate

IDS, MASK, POSITIONS, POSITION = "input_ids", "attention_mask", "position_ids", "position"
FIX = ("export the model with optimum-cli's text-generation-with-past task as it writes it, or compile it "
       "without --max-context, every input pinned with --input-shape")


@dataclass
class GrowingCache:
    """What passes/cache_reads.py needs of the rewrite (graph.growing)."""
    position: Value                 # the run-time input: cache rows already filled
    rows: int                       # S: new rows a run
    capacity: int                   # N
    caches: list[Value] = field(default_factory=list)          # the present outputs
    past_dependent: dict[int, str] = field(default_factory=dict)   # id(value) -> what it is


@dataclass
class Form:
    """The growing-cache form of an ONNX model: its past -> present pairs (Concat nodes)."""
    pairs: list[tuple[str, str, str]]     # (past input, present output, Concat node)
    inputs: dict[str, onnx.ValueInfoProto]

    @classmethod
    def of(cls, model: onnx.ModelProto) -> "Form | None":
        g = model.graph
        weights = {t.name for t in g.initializer}
        inputs = {i.name: i for i in g.input if i.name not in weights}
        outputs = {o.name for o in g.output}
        pairs = []
        for i, n in enumerate(g.node):
            if n.op_type == "Concat" and n.domain in ("", "ai.onnx") and len(n.input) == 2 and \
                    n.input[0] in inputs and n.output[0] in outputs and \
                    len(inputs[n.input[0]].type.tensor_type.shape.dim) == 4:
                axis = next((a.i for a in n.attribute if a.name == "axis"), None)
                if axis in (2, -2):
                    pairs.append((n.input[0], n.output[0], n.name or f"Concat_{i}"))
        return cls(pairs, inputs) if pairs else None

    def unpinned(self, shapes: dict | None) -> str | None:
        """A past input whose dims the given shapes leave dynamic, or None."""
        for past, _, _ in self.pairs:
            dims = self.inputs[past].type.tensor_type.shape.dim
            if past not in (shapes or {}) and any(not d.HasField("dim_value") for d in dims):
                return past
        return None

    def describe(self) -> str:
        past, present, _ = self.pairs[0]
        return f"{present} = Concat({past} [{_dims(self.inputs[past].type.tensor_type.shape.dim)}], new rows)"

    def shapes(self, given: dict | None, capacity: int, past: int) -> dict[str, list[int]]:
        """Every input's shape for a run of input_ids' S tokens after `past` cache rows."""
        given = dict(given or {})
        if IDS not in given or IDS not in self.inputs:
            raise CompileError(f"--max-context needs the run lengths as {IDS} shapes: --variant {IDS}=1x16 "
                               f"--variant {IDS}=1x1 (the prefill chunks and the decode step)."
                               if IDS in self.inputs else
                               f"--max-context: the model has no input '{IDS}'; vkc compiles optimum's form, whose "
                               f"tokens come as {IDS} [batch, sequence].")
        ids = given.pop(IDS)
        if given:
            raise CompileError(f"--max-context derives {', '.join(sorted(given))} from {IDS}'s shape and the "
                               f"context; give {IDS} alone (--variant {IDS}=1xS).")
        if len(ids) != 2 or ids[0] != 1:
            raise CompileError(f"--variant {IDS}={'x'.join(map(str, ids))}: a growing cache compiles for one "
                               f"sequence, {IDS}=1xS (batch 1; a padded batch is not supported).")
        rows = ids[1]
        if capacity - rows < 1:
            raise CompileError(f"--max-context {capacity} leaves no cache row before a run of {rows} tokens; "
                               f"give a context longer than the longest {IDS} length.")
        shapes = {IDS: [1, rows]}
        for name, vi in self.inputs.items():
            if name == IDS:
                continue
            if name == MASK:
                shapes[name] = [1, past + rows]
            elif name == POSITIONS:
                shapes[name] = [1, rows]
            elif name in {p for p, _, _ in self.pairs}:
                dims = vi.type.tensor_type.shape.dim
                if not dims[1].HasField("dim_value") or not dims[3].HasField("dim_value"):
                    raise CompileError(f"input '{name}' [{_dims(dims)}] leaves its heads or head size dynamic; "
                                       "vkc needs them fixed, as optimum exports them.")
                shapes[name] = [1, dims[1].dim_value, past, dims[3].dim_value]
            else:
                raise CompileError(f"input '{name}': with --max-context vkc feeds {IDS} and derives "
                                   f"{MASK} and {POSITIONS}; it cannot derive '{name}' ({FIX}).")
        return shapes


def _dims(dims) -> str:
    return ", ".join(d.dim_param or str(d.dim_value) for d in dims)


def fixed_capacity(model: onnx.ModelProto, given: dict | None, capacity: int, front,
                   arrays: dict | None = None) -> Graph:
    """The IR graph of `model` (growing-cache form) for a cache of `capacity` rows and the
    variant's input_ids shape in `given`; `front(graph)` folds constants (frontend passes);
    arrays: the initializers' arrays, where the caller has them (frontend.to_ir)."""
    if not isinstance(capacity, (int, np.integer)) or isinstance(capacity, bool) or capacity < 2:
        raise CompileError(f"--max-context must be a whole number of cache rows, 2 or more, not {capacity!r:.40}.")
    form = Form.of(model)
    if form is None:
        raise CompileError("--max-context applies to a decoder whose cache grows (present = Concat(past, new) on "
                           "the sequence axis, optimum's text-generation-with-past export); this model has no "
                           "such Concat of an input into an output. Compile it without --max-context.")
    shapes = form.shapes(given, capacity, 0)
    rows = shapes[IDS][1]
    full = capacity - rows
    other = 1 if full != 1 else 2   # a second past length, to prove what is computed from it
    graph = to_ir(model, form.shapes(given, capacity, full), arrays)
    names = {t.name for t in model.graph.initializer}
    weights = {v.name: v.data for v in graph.values() if v.is_constant and v.name in names}
    counted = None if POSITIONS in form.inputs else _counted_positions(model, form, given, capacity, (full, other),
                                                                        weights)
    graph = front(_derive_inputs(graph, form, counted))
    # the same graph after a past of `other` rows, sharing the weights: what differs is computed
    # from the past's length
    reference = to_ir(model, form.shapes(given, capacity, other), weights)
    reference = front(_derive_inputs(reference, form, counted))
    growing = GrowingCache(_input(graph, POSITION), rows, capacity)
    growing.past_dependent = _past_dependent(graph, reference, rows, form, set(weights))
    wide = None
    if counted is None:
        def wide() -> Graph:
            """The graph for a run of `capacity` tokens, its shapes computed from the run's length
            computed for N (the weights shared)."""
            built = to_ir(model, form.shapes({IDS: [1, capacity]}, capacity + 1, 1), weights)
            return front(_derive_inputs(built, form))
    _tabulate_positions(graph, capacity, rows, wide)
    growing.caches = _write_in_place(graph, form, growing)
    graph.growing = growing
    return graph


def _input(graph: Graph, name: str) -> Value:
    return next(v for v in graph.inputs if v.name == name)


def _counted_positions(model: onnx.ModelProto, form: Form, given: dict | None, capacity: int, pasts: tuple,
                       weights: dict) -> str | None:
    """Where an export takes no position_ids, the Range it counts the positions with from the
    past's length (transformers' cache_position = arange(P, P + S)): its output's name, where
    it is arange(P, P + S) at both past lengths; None if no Range is."""
    ranges = [n.output[0] for n in model.graph.node if n.op_type == "Range"]
    for past in pasts if ranges else ():
        graph = to_ir(model, form.shapes(given, capacity, past), weights)
        graph.outputs += [v for v in graph.values() if v.name in ranges]   # kept through folding
        values = {v.name: v for v in fold_constants(graph).outputs}
        rows = form.shapes(given, capacity, past)[IDS][1]
        want = np.arange(past, past + rows)
        ranges = [r for r in ranges if r in values and values[r].is_constant
                  and np.array_equal(np.asarray(values[r].data).reshape(-1), want)]
    if len(ranges) > 1:
        raise CompileError(f"the positions are counted from the past's length by {len(ranges)} Ranges "
                           f"({', '.join(ranges[:3])}); vkc derives one ({FIX}).")
    return ranges[0] if ranges else None


def _derive_inputs(graph: Graph, form: Form, counted: str | None = None) -> Graph:
    """attention_mask all ones and position_ids = position + arange(S), computed in the graph
    from the new input `position`; where the export counts positions from the past's length
    instead (`counted`, a Range's output), that Range becomes position + arange(S)."""
    by_name = {v.name: v for v in graph.inputs}
    if POSITION in by_name:
        raise CompileError(f"the model has an input '{POSITION}' already; vkc adds that input for the cache's "
                           f"filled rows ({FIX}).")
    position = Value(POSITION, np.dtype(np.int64), (1,))
    derived = []
    if MASK in by_name:
        mask = by_name[MASK]
        mask.data = np.ones(mask.shape, mask.dtype)
    if POSITIONS in by_name:
        ids = by_name[POSITIONS]
        if np.dtype(ids.dtype) != np.int64:
            raise CompileError(f"input '{POSITIONS}' is {np.dtype(ids.dtype).name}; optimum's form has int64 "
                               f"positions ({FIX}).")
        steps = np.arange(ids.shape[1], dtype=np.int64)[None]
        arange = Value(f"{POSITIONS}/steps", steps.dtype, steps.shape, data=steps)
        derived.append(Node("Add", f"{POSITIONS}/from_position", [position, arange], [ids],
                            sources=[f"{POSITIONS} = {POSITION} + arange"]))
    if counted is not None:
        _angles_at_position(graph, next(v for v in graph.values() if v.name == counted), position, derived)
    graph.inputs = [v for v in graph.inputs if v.name not in (MASK, POSITIONS)]
    graph.inputs.insert(1, position)
    graph.nodes = derived + graph.nodes
    graph.relink()
    return graph


def _angles_at_position(graph: Graph, counted: Value, position: Value, derived: list[Node]) -> None:
    """The nodes between the counting Range and the Cos and Sin of the rotary angles, copied to
    read position + arange(S) instead (the causal mask keeps the Range: it folds at each past
    length and is proven causal); the Cos and Sin readers read the copies."""
    after = set()
    stack = list(counted.consumers)
    while stack:
        n = stack.pop()
        if id(n) not in after:
            after.add(id(n))
            stack += [c for o in n.outputs for c in o.consumers]
    # in reverse graph order, a node after the Range whose result a Cos or Sin reads, at any depth
    angle_ids: set[int] = set()
    for n in reversed(graph.nodes):
        if id(n) in after and (is_onnx(n, "Cos", "Sin") or any(id(c) in angle_ids for o in n.outputs
                                                               for c in o.consumers)):
            angle_ids.add(id(n))
    angles = [n for n in graph.nodes if id(n) in angle_ids]
    if not angles:
        return
    steps = np.arange(next(v for v in graph.inputs if v.name == IDS).shape[1], dtype=np.int64)   # S
    arange = Value(f"{counted.name}/steps", steps.dtype, steps.shape, data=steps)
    at = Value(f"{counted.name}/at_{POSITION}", np.dtype(np.int64), steps.shape)
    derived.append(Node("Add", f"{POSITIONS}/from_position", [position, arange], [at],
                        sources=[f"{counted.producer.name}: the positions counted from the past's length = "
                                 f"{POSITION} + arange"]))
    copies = {id(counted): at}
    for n in angles:
        outs = [Value(f"{o.name}/at_{POSITION}", o.dtype, o.shape) for o in n.outputs]
        copies.update((id(o), c) for o, c in zip(n.outputs, outs))
        copy = Node(n.op_type, f"{n.name}/at_{POSITION}", [copies.get(id(v), v) if v is not None else None
                                                            for v in n.inputs], outs, n.attrs, n.domain,
                    sources=n.sources)
        graph.nodes.insert(graph.nodes.index(n) + 1, copy)
        if is_onnx(n, "Cos", "Sin"):
            for c in [c for o in n.outputs for c in o.consumers if id(c) not in angle_ids]:
                c.inputs = [copies.get(id(v), v) if v is not None else None for v in c.inputs]


def _past_dependent(graph: Graph, reference: Graph, rows: int, form: Form, weights: set[str]) -> dict[int, str]:
    """Constants of `graph` (built at a full cache) that the same graph built at another past
    length computes otherwise, read by a node still there: {id: what it is}. Each must be a
    causal mask at both lengths (within one sliding window: _causal) or a shape operand of a cache
    read; anything else is refused."""
    other = {v.name: v for v in reference.values()}
    found = {}
    for node in graph.nodes:
        for i, v in enumerate(node.inputs):
            if v is None or not v.is_constant or v.name in weights:
                continue
            w = other.get(v.name)
            if w is not None and w.is_constant and w.data.shape == v.data.shape and np.array_equal(w.data, v.data):
                continue
            if w is None or not w.is_constant:
                raise CompileError(f"{node.op_type} '{node.name}' reads '{v.name}', which is a constant at one past "
                                   f"length but not another: vkc cannot prove this growing cache's form ({FIX}).")
            if is_onnx(node, "Add") and _mask(v, rows) and _mask(w, rows):
                found[id(v)] = _causal(node, v, w, rows)
            elif is_onnx(node, "Expand", "Reshape") and i == 1:
                found[id(v)] = "shape of a cache read"
            else:
                raise CompileError(f"{node.op_type} '{node.name}' reads '{v.name}', computed from the past's length "
                                   f"('{form.pairs[0][0]}' has P rows, P growing each run), which a fixed-capacity "
                                   "cache does not have: vkc takes that length only in a causal attention mask, "
                                   f"and positions from {POSITIONS} or from a Range counting them from it ({FIX}).")
    return found


def _mask(v: Value, rows: int) -> bool:
    return np.dtype(v.dtype).kind == "f" and len(v.shape) >= 2 and v.shape[-2] == rows \
        and v.size == v.shape[-2] * v.shape[-1]


def _causal(node: Node, v: Value, w: Value, rows: int) -> str:
    """What the mask `v` (at a full cache) and `w` (the same at another past length) is: causal at
    both lengths, or causal within the same sliding window of W keys at both (the window hides
    nothing at a length of W keys or fewer), which the attention kernel's causal mode does at the
    run-time key count; refused otherwise."""
    planes = [np.asarray(m.data).reshape(rows, -1) for m in (v, w)]
    seen = [causal_window(p) for p in planes]
    windows = {s for s, p in zip(seen, planes) if s is not None and s < p.shape[1]}
    window = min(windows) if windows else None
    if len(windows) > 1 or any(s != (p.shape[1] if window is None else min(window, p.shape[1]))
                               for s, p in zip(seen, planes)):
        raise CompileError(f"{node.op_type} '{node.name}' adds a mask computed from the past's length that is "
                           f"neither causal nor causal within one sliding window ('{v.name}'), while vkc's fixed "
                           f"cache attends to the rows filled by those rules ({FIX}).")
    return "causal mask" if window is None else f"causal mask, a sliding window of {window} keys"


def _tabulate_positions(graph: Graph, capacity: int, rows: int, wide=None) -> None:
    """Values computed from position_ids and constants alone, read elsewhere (the rotary cos
    and sin), become Gathers of their rows for positions 0..N-1, computed here: no kernel
    computes them (Cos, Sin), and float16 would not hold their angles. Where those nodes hold
    shapes computed for the run's S positions (Cohere's repeat_interleave of the angles: an
    Expand to S rows), the table comes from the same nodes of `wide()`, the graph built for a run
    of N tokens."""
    found = _from_positions(graph)
    if found is None:
        return
    positions, nodes = found
    member = {id(n) for n in nodes}
    frontier = [o for n in nodes for o in n.outputs
                if graph.is_output(o) or any(id(c) not in member for c in o.consumers)]
    if not frontier:
        return
    lead = tuple(positions.shape[:-1])   # position_ids [1, S]; a counting Range [S]
    table = _table(graph, nodes, positions, capacity, lead, frontier, wide)
    windows = [_run(graph, nodes, positions, (p + np.arange(rows, dtype=np.int64)).reshape(lead + (rows,)))
               for p in sorted({0, capacity - rows})]
    gathers, tables = [], []
    flat = Value(f"{POSITIONS}/rows", np.dtype(np.int64), (rows,))
    gathers.append(Node("Reshape", f"{POSITIONS}/rows", [positions, _const(f"{POSITIONS}/rows_shape",
                                                                                 np.array([rows], np.int64))], [flat]))
    for v in frontier:
        full = table[id(v)]
        axes = [a for a in range(len(v.shape)) if full.shape[a] == capacity and v.shape[a] == rows
                and full.shape[:a] + full.shape[a + 1:] == v.shape[:a] + v.shape[a + 1:]]
        ok = len(axes) == 1 and all(
            np.allclose(w[id(v)], np.take(full, np.arange(p, p + rows), axis=axes[0]), rtol=1e-6, atol=1e-7)
            for p, w in zip(sorted({0, capacity - rows}), windows))
        if not ok:
            reader = next(c for c in v.consumers if id(c) not in member) if v.consumers else None
            by = f"{reader.op_type} '{reader.name}'" if reader else "an output"
            raise CompileError(f"'{v.name}' (read by {by}) is computed from {POSITIONS} but not one row per "
                               f"position; vkc computes such values for positions 0..{capacity - 1} and gathers "
                               f"their rows ({FIX}).")
        values = next((t for t in tables if t.data.shape == full.shape and np.array_equal(t.data, full)), None)
        if values is None:  # every layer's equal table is one constant
            values = _const(f"{v.name}/by_position", np.ascontiguousarray(full))
            tables.append(values)
        gathers.append(Node("Gather", f"{v.name}/by_position", [values, flat], [v], {"axis": axes[0]},
                            sources=[f"{v.name} tabulated by position"]))
    kept = [n for n in graph.nodes if id(n) not in member]
    at = kept.index(positions.producer) + 1
    graph.nodes = kept[:at] + gathers + kept[at:]
    graph.relink()


def _from_positions(graph: Graph) -> tuple[Value, list[Node]] | None:
    """The positions value (position + arange(S)) and the nodes computed from it and constants
    alone, in graph order; None where the graph derives no positions."""
    positions = next((v for v in graph.values() if v.producer is not None
                      and v.producer.name == f"{POSITIONS}/from_position"), None)
    if positions is None:
        return None
    derived, nodes = {id(positions)}, []
    for node in graph.nodes:
        present = [v for v in node.inputs if v is not None]
        if present and any(id(v) in derived for v in present) and \
                all(v.is_constant or id(v) in derived for v in present):
            nodes.append(node)
            derived |= {id(o) for o in node.outputs}
    return positions, nodes


def _table(graph: Graph, nodes: list[Node], positions: Value, capacity: int, lead: tuple, frontier: list[Value],
           wide) -> dict[int, np.ndarray]:
    """{id(v): v for positions 0..N-1} of each value of `frontier`, computed by `nodes`, or by
    the nodes of the same names in wide() where `nodes` hold shapes of the run's S positions."""
    feed = np.arange(capacity, dtype=np.int64).reshape(lead + (capacity,))
    try:
        return _run(graph, nodes, positions, feed)
    except CompileError as exc:
        if wide is None:
            raise
        refused = exc
    try:
        other = wide()
        found = _from_positions(other)
        env = _run(other, found[1], found[0], feed) if found and tuple(found[0].shape) == feed.shape else {}
    except CompileError:
        env = {}
    by_name = {o.name: env[id(o)] for n in found[1] for o in n.outputs if id(o) in env} if env else {}
    if any(v.name not in by_name for v in frontier):
        raise refused
    return {id(v): by_name[v.name] for v in frontier}


def _run(graph: Graph, nodes: list[Node], positions: Value, feed: np.ndarray) -> dict[int, np.ndarray]:
    """The values `nodes` compute with position_ids = feed (onnx's reference evaluator)."""
    env = {id(positions): feed}
    for node in nodes:
        ins = [None if v is None else Value(v.name, v.dtype, None, data=v.data if v.is_constant else env[id(v)])
               for v in node.inputs]
        outs = [Value(o.name, o.dtype, None) for o in node.outputs]
        try:
            results = evaluate(Node(node.op_type, node.name, ins, outs, node.attrs, node.domain), graph.opset)
        except Exception as exc:  # noqa: BLE001 - the evaluator raises many types
            raise CompileError(f"{node.op_type} '{node.name}': computing it from {POSITIONS} for positions "
                               f"0..{feed.shape[-1] - 1} failed ({' '.join(str(exc).split())[:200]}); give a "
                               f"--max-context the model's positions cover.") from exc
        for o, r in zip(node.outputs, results):
            env[id(o)] = np.asarray(r)
    return env


def _const(name: str, array: np.ndarray) -> Value:
    return Value(name, array.dtype, tuple(array.shape), data=array)


def _write_in_place(graph: Graph, form: Form, growing: GrowingCache) -> list[Value]:
    """Each Concat(past, new) becomes a vkc.TensorScatter of the new rows into the cache at
    `position`; the past input becomes the cache, of N rows."""
    presents = {v.name: v for v in graph.outputs}
    pasts = {v.name: v for v in graph.inputs}
    caches = []
    for past_name, present_name, concat_name in form.pairs:
        present, past = presents[present_name], pasts[past_name]
        concat = present.producer
        if not is_onnx(concat, "Concat") or concat.inputs[0] is not past:
            raise CompileError(f"'{present_name}' is no longer Concat '{concat_name}' of '{past_name}' after "
                               f"constant folding; vkc cannot prove this growing cache's form ({FIX}).")
        new = concat.inputs[1]
        b, heads, _, size = past.shape
        if tuple(new.shape) != (b, heads, growing.rows, size):
            raise CompileError(f"Concat '{concat_name}' appends {list(new.shape)} to '{past_name}'; a growing "
                               f"cache appends one row per input token, [1, {heads}, {growing.rows}, {size}] ({FIX}).")
        readers = [n for n in past.consumers if n is not concat]
        if readers:
            raise CompileError(f"{readers[0].op_type} '{readers[0].name}' reads the past '{past_name}' itself; vkc "
                               f"keeps it as a cache of {growing.capacity} rows, read only through attention ({FIX}).")
        past.shape = (b, heads, growing.capacity, size)
        write = Node("vkc.TensorScatter", concat.name, [past, new, growing.position], [present], {"axis": 2},
                     sources=concat.sources)
        graph.nodes[graph.nodes.index(concat)] = write
        caches.append(present)
    graph.relink()
    return caches
