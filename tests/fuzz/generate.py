"""Random well-typed ONNX graphs over the ops the compiler supports.

The op pool is compiler.ops.supported_ops() at the graph's opset: an op the registry gains is
fuzzed as soon as it fits one of two shapes read from its ONNX schema (one float input -> one
output, or two or more broadcasting float inputs of one type), or has a builder below for what
its schema cannot say (which inputs are constants, which shapes fit, which attributes mean
something). `unfuzzed_ops()` names the supported ops neither covers.

Every node's output types come from onnx's shape inference (a node it rejects is dropped and
another drawn), so graphs are valid by construction; the whole model then passes
onnx.checker with full_check. Structures the passes look for are drawn on purpose: fan-out,
residuals, reused and duplicated constants, Identity nodes, graph outputs that are also consumed,
MatMul + bias + activation, LayerNorm written out in ops, attention written out in ops.

Values: graph inputs are standard normal; weights are scaled by 1/sqrt(fan-in) so that chains of
products stay near unit size. Ops whose result jumps (Floor, comparisons, ...) only take
operands that are exact (graph inputs, constants, and what data movement makes of them): on a
computed value, a last-bit difference between two correct implementations would flip them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, defs, helper, numpy_helper, shape_inference

OPSETS = (18, 20, 21)
MAX_ELEMENTS = 8192
FLOAT_TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16}
MS = "com.microsoft"

# Mathematical facts, not support: operands these ops need positive (a negative one gives NaN,
# whose propagation the fuzzer does not aim at), results that jump, ops that keep values exact.
POSITIVE_OPERAND = {"Log": 0, "Sqrt": 0, "Reciprocal": 0, "Div": 1, "Pow": 0, "ReduceLogSum": 0}
# and operands these need within their domains: Acosh's [1, inf), the inverse sine's, cosine's
# and hyperbolic tangent's (-1, 1) (a NaN from outside reaching a ReduceMin is ranked by the order
# of onnxruntime's loop, not by the op's definition); Tan's away from its poles at +-pi/2, where
# it multiplies its input's last-bit difference without bound (Tan of atanh(x) + 1.18: 1e-4).
AT_LEAST_ONE_OPERAND = {"Acosh": 0}
WITHIN_ONE_OPERAND = {"Asin": 0, "Acos": 0, "Atanh": 0, "Tan": 0}
# Results that jump (not drawn where the compile rounds to float16): steps and comparisons; the
# index of an extreme, which a tie made by rounding moves; NaN past a domain's edge at +-1, which
# rounding moves an input across.
DISCONTINUOUS = {"Round", "Floor", "Ceil", "Sign", "ThresholdedRelu", "IsNaN", "IsInf", "Equal",
                 "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "ArgMax", "ArgMin",
                 "Asin", "Acos", "Acosh", "Atanh"}
KEEPS_EXACT = {"Identity", "Dropout", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose",
               "Slice", "Concat", "Split", "Gather", "GatherElements", "ScatterND", "Tile", "Expand", "Pad",
               "Trilu", "Neg", "Abs", "Relu", "Max", "Min", "MaxPool", "ReduceMax", "ReduceMin",
               "GlobalMaxPool", "Round", "Floor", "Ceil", "Sign", "Where"}
# String attributes worth drawing (the schema gives their type, not their values).
STRING_CHOICES = {("Gelu", "approximate"): ["none", "tanh"]}
DIMS = (1, 1, 2, 3, 4, 5, 7, 8, 16, 17, 33)


class Reject(Exception):
    """The drawn op does not fit here; the generator draws another."""


@dataclass
class Case:
    """One generated graph and how to compile it."""
    seed: int
    model: onnx.ModelProto
    precision: str          # compile_model's precision
    target: str             # compile_model's target profile
    ops: list = field(default_factory=list)

    @property
    def dtype(self) -> np.dtype:
        """float16 for a float16 graph: one whose inputs or constants are (a reduced graph may
        compute from constants only)."""
        g = self.model.graph
        return np.dtype(np.float16) if any(
            i.type.tensor_type.elem_type == TensorProto.FLOAT16 for i in g.input) or \
            any(t.data_type == TensorProto.FLOAT16 for t in g.initializer) else np.dtype(np.float32)


class GraphBuilder:
    def __init__(self, rng: np.random.Generator, opset: int, dtype, exact_ops: bool):
        self.rng, self.opset, self.dtype = rng, opset, np.dtype(dtype)
        self.elem = FLOAT_TYPES[self.dtype]
        self.exact_ops = exact_ops  # discontinuous ops allowed (not in float16-precision compiles)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: dict[str, np.ndarray] = {}
        self.inputs: dict[str, tuple] = {}
        self.types: dict[str, onnx.TypeProto] = {}   # every value's type
        self.data: dict[str, onnx.TensorProto] = {}  # constants, for shape inference
        self.floats: list[str] = []                  # float tensors of self.dtype, in order
        self.exact: set[str] = set()
        self.consumed: set[str] = set()
        self.count = 0

    # ---- values --------------------------------------------------------------------------------
    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def shape(self, name: str) -> tuple:
        return tuple(d.dim_value for d in self.types[name].tensor_type.shape.dim)

    def _record(self, name: str, tp: onnx.TypeProto, exact: bool) -> None:
        self.types[name] = tp
        if tp.tensor_type.elem_type == self.elem:
            self.floats.append(name)
            if exact:
                self.exact.add(name)

    def new_input(self, shape) -> str:
        name = self.name("in")
        self.inputs[name] = tuple(shape)
        self._record(name, helper.make_tensor_type_proto(self.elem, list(shape)), True)
        return name

    def const(self, shape, scale: float = 1.0, positive: bool = False, array=None) -> str:
        """A float constant: fresh, or now and then an existing one of that shape (reused), a
        copy of one under another name (duplicated), or a Constant node."""
        shape = tuple(int(d) for d in shape)
        same = [n for n, a in self.inits.items() if a.shape == shape and a.dtype == self.dtype
                and (not positive or (a > 0).all())]
        r = self.rng.random()
        if array is None and same and r < 0.2:
            return same[int(self.rng.integers(len(same)))]
        if array is None and same and r < 0.3:
            array = self.inits[same[int(self.rng.integers(len(same)))]].copy()
        if array is None:
            array = self.rng.standard_normal(shape) * scale
            array = np.abs(array) + 0.5 if positive else array
        return self.constant(np.asarray(array, self.dtype), node=self.rng.random() < 0.1)

    def constant(self, array: np.ndarray, node: bool = False) -> str:
        name = self.name("c")
        tensor = numpy_helper.from_array(array, name)
        if node:
            self.nodes.append(helper.make_node("Constant", [], [name], value=tensor))
        else:
            self.inits[name] = array
        self.data[name] = tensor
        self._record(name, helper.make_tensor_type_proto(tensor.data_type, list(array.shape)), True)
        return name

    def ints(self, values) -> str:
        return self.constant(np.asarray(values, np.int64), node=self.rng.random() < 0.1)

    def pick(self, min_rank: int = 0, max_rank: int = 6, exact: bool = False, where=None) -> str:
        """An existing float tensor, the most recent one half of the time (chains), else any
        (fan-out, residuals); a new graph input when none fits."""
        fits = [n for n in self.floats if min_rank <= len(self.shape(n)) <= max_rank
                and (not exact or n in self.exact) and (where is None or where(self.shape(n)))]
        if not fits:
            raise Reject()
        if self.rng.random() < 0.5:
            return fits[-1]
        return fits[int(self.rng.integers(len(fits)))]

    def pick_or_new(self, min_rank=1, max_rank=4, exact=False, where=None) -> str:
        try:
            if self.rng.random() < 0.85:
                return self.pick(min_rank, max_rank, exact, where)
        except Reject:
            pass
        if where is not None:
            raise Reject()
        return self.new_input(self.rand_shape(int(self.rng.integers(min_rank, max_rank + 1))))

    def rand_shape(self, rank: int) -> tuple:
        for _ in range(20):
            s = tuple(int(self.rng.choice(DIMS)) for _ in range(rank))
            if math.prod(s) <= 2048:
                return s
        return (2,) * rank

    def positive(self, x: str) -> str:
        """|x| + c, c > 0 (an operand of Log, Sqrt, a divisor, a base of Pow)."""
        if x in self.inits and (self.inits[x] > 0).all():
            return x
        (a,) = self.emit("Abs", [x])
        return self.emit("Add", [a, self.const((), positive=True)])[0]

    # ---- nodes ---------------------------------------------------------------------------------
    def emit(self, op: str, inputs: list, attrs: dict | None = None, n_out: int = 1, domain: str = "",
             out_types: list | None = None) -> list[str]:
        """Add a node; its outputs' types from onnx's shape inference (or `out_types` for another
        domain's op, which onnx has no schema for). Raises Reject when inference refuses it."""
        outs = [self.name(op[:2].lower()) for _ in range(n_out)]
        node = helper.make_node(op, inputs, outs, domain=domain or None, **(attrs or {}))
        if out_types is None:
            try:
                schema = defs.get_schema(op, self.opset, domain)
                got = shape_inference.infer_node_outputs(
                    schema, node, {i: self.types[i] for i in inputs if i},
                    {i: self.data[i] for i in inputs if i in self.data},
                    opset_imports=[helper.make_opsetid("", self.opset)])
            except Exception as exc:  # noqa: BLE001 - onnx raises several types for a bad node
                raise Reject() from exc
            out_types = [got.get(o) for o in outs]
        for o, tp in zip(outs, out_types):
            tt = tp.tensor_type if tp is not None else None
            if tt is None or not tt.HasField("shape") or any(not d.HasField("dim_value") for d in tt.shape.dim):
                raise Reject()
            dims = [d.dim_value for d in tt.shape.dim]
            if any(d <= 0 for d in dims) or math.prod(dims) > MAX_ELEMENTS:   # onnx infers some < 0
                raise Reject()
        exact = op in KEEPS_EXACT and all(i in self.exact or i in self.data or not i for i in inputs
                                          if i and self.types[i].tensor_type.elem_type == self.elem)
        self.nodes.append(node)
        self.consumed.update(i for i in inputs if i)
        for o, tp in zip(outs, out_types):
            self._record(o, tp, exact or op in DISCONTINUOUS)
        return outs

    def to_float(self, name: str) -> str:
        """A float tensor from a bool or integer one: Where for bools, Cast otherwise."""
        elem = self.types[name].tensor_type.elem_type
        if elem == self.elem:
            return name
        if elem == TensorProto.BOOL:
            a = self.pick_or_new(0, 4)
            return self.emit("Where", [name, a, self.const((), positive=False)])[0]
        return self.emit("Cast", [name], {"to": self.elem})[0]

    def model(self, outputs: list[str]) -> onnx.ModelProto:
        vi = lambda n: helper.make_value_info(n, self.types[n])
        graph = helper.make_graph(
            self.nodes, "fuzz", [vi(n) for n in self.inputs], [vi(n) for n in outputs],
            [numpy_helper.from_array(a, n) for n, a in self.inits.items()])
        opsets = [helper.make_opsetid("", self.opset)]
        if any(n.domain == MS for n in self.nodes):
            opsets.append(helper.make_opsetid(MS, 1))
        return helper.make_model(graph, opset_imports=opsets, ir_version=9, producer_name="vkc-fuzz")


# ---- the op pool -------------------------------------------------------------------------------

def _schema(op: str, opset: int):
    domain, _, name = op.rpartition(".")
    try:
        s = defs.get_schema(name, opset, domain)
    except defs.SchemaError:
        return None
    return None if s.deprecated else s


def _float_inputs(schema) -> bool:
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    first = schema.inputs[0].type_str
    return {"tensor(float)", "tensor(float16)"} <= allowed.get(first, set())


def _unary_schema(schema) -> bool:
    return (schema.min_input == 1 and schema.min_output == 1 and _float_inputs(schema)
            and not any(a.required for a in schema.attributes.values()))


def _nary_schema(schema) -> bool:
    ins = schema.inputs
    return (schema.min_input >= 1 and (schema.max_input >= 2) and _float_inputs(schema)
            and len({p.type_str for p in ins[:2]}) == 1 and (len(ins) >= 2 or
            ins[0].option == defs.OpSchema.FormalParameterOption.Variadic)
            and schema.min_input <= 2 and not any(a.required for a in schema.attributes.values())
            and not [p for p in ins[2:] if p.option == defs.OpSchema.FormalParameterOption.Single])


def _random_attrs(g: GraphBuilder, op: str, schema, rank: int) -> dict:
    attrs = {}
    for name, a in schema.attributes.items():
        if g.rng.random() < 0.4:
            continue
        if a.type == defs.OpSchema.AttrType.FLOAT:
            attrs[name] = float(np.round(g.rng.uniform(0.05, 2.0), 3))
        elif a.type == defs.OpSchema.AttrType.INT and name == "axis" and rank:
            attrs[name] = int(g.rng.integers(-rank, rank))
        elif a.type == defs.OpSchema.AttrType.STRING and (op, name) in STRING_CHOICES:
            attrs[name] = str(g.rng.choice(STRING_CHOICES[(op, name)]))
    return attrs


def _operand(g: GraphBuilder, op: str, slot: int, x: str) -> str:
    if POSITIVE_OPERAND.get(op) == slot:
        return g.positive(x)
    if AT_LEAST_ONE_OPERAND.get(op) == slot:   # |x| + c + 0.5, c >= 0.5
        return g.emit("Add", [g.positive(x), g.constant(np.asarray(0.5, g.dtype))])[0]
    if WITHIN_ONE_OPERAND.get(op) == slot:     # 0.9 tanh(x)
        return g.emit("Mul", [g.emit("Tanh", [x])[0], g.constant(np.asarray(0.9, g.dtype))])[0]
    return x


def generic_unary(g: GraphBuilder, op: str) -> None:
    schema = _schema(op, g.opset)
    x = g.pick_or_new(0, 4, exact=op in DISCONTINUOUS)
    out = g.emit(op, [_operand(g, op, 0, x)], _random_attrs(g, op, schema, len(g.shape(x))),
                 n_out=1)[0]
    g.to_float(out)


def broadcast_partner(g: GraphBuilder, shape: tuple, exact: bool, larger: bool = True) -> str:
    """A second operand broadcasting with `shape`: the same tensor, another tensor of a fitting
    shape, or a new constant or input whose shape drops leading dims and sets some to 1."""
    r = g.rng.random()
    if r < 0.25:
        fits = lambda s: len(s) <= len(shape) and all(a in (b, 1) for a, b in zip(s[::-1], shape[::-1]))
        try:
            return g.pick(0, 6, exact, where=fits)
        except Reject:
            pass
    keep = int(g.rng.integers(0, len(shape) + 1))
    sub = tuple(1 if g.rng.random() < 0.3 else d for d in shape[len(shape) - keep:])
    if larger and g.rng.random() < 0.15 and len(sub) < 4:   # the operand is the larger one
        sub = (int(g.rng.choice((1, 2, 3))),) + sub if len(sub) == len(shape) else sub
    return g.const(sub) if r < 0.75 else g.new_input(sub)


def generic_nary(g: GraphBuilder, op: str) -> None:
    schema = _schema(op, g.opset)
    jumps = op in DISCONTINUOUS
    a = g.pick_or_new(0, 4, exact=jumps)
    one_way = op == "PRelu"   # its slope broadcasts to X, not X to it
    args = [a, broadcast_partner(g, g.shape(a), jumps, larger=not one_way)]
    if schema.max_input > 2 and g.rng.random() < 0.3:
        args.append(broadcast_partner(g, g.shape(a), jumps))
    if g.rng.random() < 0.3 and not one_way:
        args[0], args[1] = args[1], args[0]
    if op == "Pow":
        args[1] = g.const((), array=np.asarray(g.rng.choice((2.0, 0.5, 3.0, -1.0, 1.5))))
    args = [_operand(g, op, i, x) for i, x in enumerate(args)]
    out = g.emit(op, args, _random_attrs(g, op, schema, len(g.shape(a))))[0]
    g.to_float(out)


# ---- builders for what a schema cannot say ------------------------------------------------------

def matmul(g: GraphBuilder, op="MatMul", x=None) -> str:
    x = x or g.pick_or_new(1, 4)
    s = g.shape(x)
    k, n = s[-1], int(g.rng.choice(DIMS[2:]))
    r = g.rng.random()
    if r < 0.6 or len(s) < 2:
        w = g.const((k, n), 1 / math.sqrt(k))
    elif r < 0.8:
        w = g.const(tuple(1 if g.rng.random() < 0.5 else d for d in s[:-2]) + (k, n), 1 / math.sqrt(k))
    else:  # both operands computed (attention's scores and context)
        w = g.emit("Transpose", [x], {"perm": list(range(len(s) - 2)) + [len(s) - 1, len(s) - 2]})[0]
    return g.emit("MatMul", [x, w])[0]


def linear(g: GraphBuilder, op: str) -> None:
    """MatMul + bias + activation, the chain the epilogue fusion folds into one kernel."""
    y = matmul(g)
    n = g.shape(y)[-1]
    bias = g.const((n,), 0.1)
    y = g.emit("Add", [y, bias] if g.rng.random() < 0.7 else [bias, y])[0]
    act = g.rng.choice(["Relu", "Gelu", "Tanh", "Sigmoid", "none", "gelu_erf", "Clip"])
    if act == "gelu_erf":
        h = g.emit("Div", [y, g.const((), array=np.asarray(math.sqrt(2)))])[0]
        h = g.emit("Add", [g.emit("Erf", [h])[0], g.const((), array=np.asarray(1.0))])[0]
        g.emit("Mul", [g.emit("Mul", [y, h])[0], g.const((), array=np.asarray(0.5))])
    elif act == "Clip":
        g.emit("Clip", [y, g.const((), array=np.asarray(0.0)), g.const((), array=np.asarray(6.0))])
    elif act != "none" and _schema(act, g.opset) is not None:
        g.emit(act, [y])


def gemm(g: GraphBuilder, op: str) -> None:
    a = g.pick_or_new(2, 2)
    m, k = g.shape(a)
    ta, tb = bool(g.rng.random() < 0.2), bool(g.rng.random() < 0.5)
    if ta:
        a = g.emit("Transpose", [a])[0]
        m, k = k, m
    n = int(g.rng.choice(DIMS[2:]))
    b = g.const((n, k) if tb else (k, n), 1 / math.sqrt(k))
    args = [a, b]
    c = g.rng.choice(["none", "n", "1n", "mn", "scalar", "m1"])
    if c != "none":
        args.append(g.const({"n": (n,), "1n": (1, n), "mn": (m, n), "scalar": (), "m1": (m, 1)}[c], 0.1))
    attrs = {"transA": int(ta), "transB": int(tb)}
    if g.rng.random() < 0.3:
        attrs.update(alpha=float(g.rng.choice((0.5, 2.0))), beta=float(g.rng.choice((0.0, 0.5, 1.0))))
    g.emit("Gemm", args, attrs)


def image(g: GraphBuilder, rank: int = 4) -> str:
    try:
        return g.pick(rank, rank, where=lambda s: s[1] <= 16 and all(d >= 2 for d in s[2:]))
    except Reject:
        spatial = [int(g.rng.integers(3, 11)) for _ in range(rank - 2)]
        return g.new_input([int(g.rng.integers(1, 3)), int(g.rng.choice((1, 2, 3, 4, 8))), *spatial])


def conv(g: GraphBuilder, op: str) -> None:
    rank = 4 if g.rng.random() < 0.8 else 3
    x = image(g, rank)
    _, c, *sp = g.shape(x)
    group = int(g.rng.choice([d for d in range(1, c + 1) if c % d == 0]))
    if g.rng.random() < 0.3:
        group = c   # depthwise
    m = group * int(g.rng.integers(1, 4))
    ks = [int(g.rng.choice((1, 2, 3, 3, 5))) for _ in sp]
    transpose = op == "ConvTranspose"
    wshape = (c, m // group, *ks) if transpose else (m, c // group, *ks)
    args = [x, g.const(wshape, 1 / math.sqrt(c // group * math.prod(ks)))]
    if g.rng.random() < 0.6:
        args.append(g.const((m,), 0.1))
    strides = [int(g.rng.choice((1, 1, 2))) for _ in sp]
    attrs = {"kernel_shape": ks, "strides": strides, "group": group}
    if g.rng.random() < 0.2 and not transpose:
        attrs["auto_pad"] = str(g.rng.choice(("SAME_UPPER", "SAME_LOWER", "VALID")))
    else:
        attrs["pads"] = [int(g.rng.integers(0, k)) for k in ks] * 2
        if g.rng.random() < 0.2:
            attrs["dilations"] = [int(g.rng.choice((1, 2))) for _ in sp]
    if transpose and g.rng.random() < 0.3:
        attrs["output_padding"] = [int(g.rng.integers(0, s)) for s in strides]
    y = g.emit(op, args, attrs)[0]
    if g.rng.random() < 0.4:  # the folds: BatchNormalization, then a clamp
        y = batchnorm(g, "BatchNormalization", y)
    if g.rng.random() < 0.4:
        g.emit(str(g.rng.choice(("Relu", "Sigmoid"))), [y])


def batchnorm(g: GraphBuilder, op: str, x: str | None = None) -> str:
    x = x or g.pick_or_new(2, 4)
    c = g.shape(x)[1]
    args = [x, g.const((c,)), g.const((c,), 0.1), g.const((c,), 0.1), g.const((c,), positive=True)]
    return g.emit("BatchNormalization", args, {"epsilon": float(g.rng.choice((1e-5, 1e-3)))})[0]


def pool(g: GraphBuilder, op: str) -> None:
    x = image(g, 4 if g.rng.random() < 0.8 else 3)
    sp = g.shape(x)[2:]
    ks = [int(g.rng.integers(1, min(4, d + 1))) for d in sp]
    attrs = {"kernel_shape": ks, "strides": [int(g.rng.choice((1, 2))) for _ in sp],
             "pads": [int(g.rng.integers(0, k)) for k in ks] * 2}
    if g.rng.random() < 0.3:
        attrs["ceil_mode"] = 1
    if op == "AveragePool" and g.rng.random() < 0.5:
        attrs["count_include_pad"] = 1
    g.emit(op, [x], attrs)


def lrn(g: GraphBuilder, op: str) -> None:
    x = image(g, 4)
    g.emit("LRN", [x], {"size": int(g.rng.choice((1, 3, 5))), "alpha": 1e-3, "beta": 0.75,
                        "bias": float(g.rng.choice((1.0, 2.0)))})


def reduce(g: GraphBuilder, op: str) -> None:
    x = g.pick_or_new(1, 4)
    rank = len(g.shape(x))
    axes = sorted({int(g.rng.integers(-rank, rank)) % rank for _ in range(int(g.rng.integers(1, rank + 1)))})
    axes = [a - rank if g.rng.random() < 0.3 else a for a in axes]
    keep = int(g.rng.random() < 0.5)
    if op == "ReduceProd" and math.prod(g.shape(x)[a] for a in axes) > 8:
        raise Reject()  # a product of more normals leaves float32's range: every element ~0
    x = _operand(g, op, 0, x)
    schema = _schema(op, g.opset)
    if g.rng.random() < 0.1:
        g.emit(op, [x], {"keepdims": keep})  # every axis
    elif "axes" in schema.attributes:
        g.emit(op, [x], {"axes": axes, "keepdims": keep})
    else:
        g.emit(op, [x, g.ints(axes)], {"keepdims": keep})


def top_k(g: GraphBuilder, op: str) -> None:
    """TopK's values along a drawn axis (its indices are int64: not an output the fuzzer compares,
    and ties between equal values may order them either way)."""
    x = g.pick_or_new(1, 4)
    shape = g.shape(x)
    axis = int(g.rng.integers(-len(shape), len(shape)))
    k = int(g.rng.integers(1, shape[axis] + 1))
    g.emit(op, [x, g.ints([k])], {"axis": axis, "largest": int(g.rng.random() < 0.7), "sorted": 1}, n_out=2)


def layernorm(g: GraphBuilder, op: str) -> None:
    x = g.pick_or_new(2, 4)
    s = g.shape(x)
    axis = int(g.rng.integers(-len(s), 0)) if g.rng.random() < 0.3 else -1
    args = [x, g.const(s[axis:])]
    if g.rng.random() < 0.7:
        args.append(g.const(s[axis:], 0.1))
    g.emit(op, args, {"axis": axis, "epsilon": float(g.rng.choice((1e-5, 1e-12, 1e-3)))})


def instancenorm(g: GraphBuilder, op: str) -> None:
    """Over rows of 2 or more: onnxruntime computes x * (scale * inv_std) + (B - mean * scale *
    inv_std), which cancels to the mean's rounding times 1 / sqrt(epsilon) where a row's variance
    is below epsilon (a row of one element has none): vkc's (x - mean) * inv_std does not."""
    try:
        x = g.pick(3, 4, where=lambda s: math.prod(s[2:]) >= 2)
    except Reject:
        x = g.new_input([int(g.rng.integers(1, 3)), int(g.rng.integers(1, 9)),
                         *(int(g.rng.integers(2, 9)) for _ in range(int(g.rng.integers(1, 3))))])
    c = g.shape(x)[1]
    g.emit(op, [x, g.const((c,)), g.const((c,), 0.1)], {"epsilon": float(g.rng.choice((1e-5, 1e-3)))})


def layernorm_pattern(g: GraphBuilder, op: str) -> None:
    """LayerNorm as exporters write it out, which fuse_layernorm recognises."""
    x = g.pick_or_new(2, 4)
    h = g.shape(x)[-1]
    mean = reduce_last(g, x)
    d = g.emit("Sub", [x, mean])[0]
    sq = g.emit("Pow", [d, g.const((), array=np.asarray(2.0))])[0] if g.rng.random() < 0.5 \
        else g.emit("Mul", [d, d])[0]
    var = g.emit("Add", [reduce_last(g, sq), g.const((), array=np.asarray(1e-5))])[0]
    y = g.emit("Div", [d, g.emit("Sqrt", [var])[0]])[0]
    y = g.emit("Mul", [y, g.const((h,))])[0]
    g.emit("Add", [y, g.const((h,), 0.1)])


def reduce_last(g: GraphBuilder, x: str) -> str:
    if "axes" in _schema("ReduceMean", g.opset).attributes:
        return g.emit("ReduceMean", [x], {"axes": [-1]})[0]
    return g.emit("ReduceMean", [x, g.ints([-1])])[0]


def attention_pattern(g: GraphBuilder, op: str) -> None:
    """Self-attention written out: projections, heads by Reshape + Transpose, scaled scores,
    an optional additive mask, Softmax, the context, heads merged back, an output projection."""
    b, s, heads, hd = (int(g.rng.integers(1, 3)), int(g.rng.integers(1, 10)),
                       int(g.rng.choice((1, 2, 4))), int(g.rng.choice((2, 4, 8))))
    h = heads * hd
    x = g.new_input((b, s, h)) if g.rng.random() < 0.5 else g.pick_or_new(
        3, 3, where=lambda sh: sh[-1] % heads == 0 and sh[-1] // heads in (2, 4, 8, 16))
    b, s, h = g.shape(x)
    hd = h // heads

    def proj(perm):
        y = g.emit("Add", [g.emit("MatMul", [x, g.const((h, h), 1 / math.sqrt(h))])[0], g.const((h,), 0.1)])[0]
        y = g.emit("Reshape", [y, g.ints([b if g.rng.random() < 0.5 else 0, s, heads, hd])])[0]
        return g.emit("Transpose", [y], {"perm": perm})[0]

    q, k, v = proj([0, 2, 1, 3]), proj([0, 2, 3, 1]), proj([0, 2, 1, 3])
    scores = g.emit("MatMul", [q, k])[0]
    scale = 1 / math.sqrt(hd)
    scores = g.emit("Mul", [scores, g.const((), array=np.asarray(scale))])[0] if g.rng.random() < 0.5 \
        else g.emit("Div", [scores, g.const((), array=np.asarray(1 / scale))])[0]
    if g.rng.random() < 0.4:
        mask = np.triu(np.full((s, s), -1e4), 1)[None, None]
        scores = g.emit("Add", [scores, g.const(mask.shape, array=mask)])[0]
    p = g.emit("Softmax", [scores], {"axis": -1})[0]
    ctx = g.emit("Transpose", [g.emit("MatMul", [p, v])[0]], {"perm": [0, 2, 1, 3]})[0]
    ctx = g.emit("Reshape", [ctx, g.ints([b, s, h])])[0]
    if g.rng.random() < 0.5:
        g.emit("MatMul", [ctx, g.const((h, h), 1 / math.sqrt(h))])


def transpose(g: GraphBuilder, op: str) -> None:
    x = g.pick_or_new(2, 5)
    g.emit("Transpose", [x], {"perm": [int(i) for i in g.rng.permutation(len(g.shape(x)))]})


def reshape(g: GraphBuilder, op: str) -> None:
    x = g.pick_or_new(1, 4)
    s = g.shape(x)
    total, dims = math.prod(s), []
    for _ in range(int(g.rng.integers(0, 4))):
        divs = [d for d in range(1, total + 1) if total % d == 0 and d <= 33]
        dims.append(int(g.rng.choice(divs)))
        total //= dims[-1]
    dims.append(total)
    dims = [int(d) for d in g.rng.permutation(dims)]
    if g.rng.random() < 0.3:
        dims[int(g.rng.integers(len(dims)))] = -1
    g.emit("Reshape", [x, g.ints(dims)])


def squeeze(g: GraphBuilder, op: str) -> None:
    x = g.pick_or_new(1, 4)
    s = g.shape(x)
    ones = [i for i, d in enumerate(s) if d == 1]
    if op == "Squeeze" and ones:
        g.emit("Squeeze", [x, g.ints(ones[: int(g.rng.integers(1, len(ones) + 1))])])
    else:
        g.emit("Unsqueeze", [x, g.ints(sorted({int(g.rng.integers(0, len(s) + 1)), 0}) if
                                       g.rng.random() < 0.3 else [int(g.rng.integers(-len(s) - 1, len(s) + 1))])])


def concat(g: GraphBuilder, op: str) -> None:
    x = g.pick_or_new(1, 4)
    s = g.shape(x)
    axis = int(g.rng.integers(-len(s), len(s)))
    parts = [x]
    for _ in range(int(g.rng.integers(1, 4))):
        r = g.rng.random()
        if r < 0.2:
            parts.append(x)
            continue
        shape = list(s)
        shape[axis] = int(g.rng.choice((1, 2, 3, 4, 8)))
        try:
            parts.append(g.pick(len(s), len(s), where=lambda t: all(
                a == b for i, (a, b) in enumerate(zip(t, s)) if i != axis % len(s))) if r < 0.5 else
                g.const(shape) if r < 0.75 else g.new_input(shape))
        except Reject:
            parts.append(g.new_input(shape))
    g.emit("Concat", [str(p) for p in g.rng.permutation(parts)], {"axis": axis})


def split(g: GraphBuilder, op: str) -> None:
    x = g.pick_or_new(1, 4, where=lambda s: max(s) >= 2) if g.floats else g.new_input((2, 6))
    s = g.shape(x)
    axis = int(g.rng.choice([i for i, d in enumerate(s) if d >= 2]))
    n = int(g.rng.integers(2, min(4, s[axis]) + 1))
    cuts = sorted(g.rng.choice(np.arange(1, s[axis]), n - 1, replace=False).tolist())
    sizes = np.diff([0, *cuts, s[axis]]).tolist()
    if g.rng.random() < 0.3 and g.opset >= 18:
        g.emit("Split", [x], {"axis": axis, "num_outputs": n}, n_out=n)
    else:
        g.emit("Split", [x, g.ints(sizes)], {"axis": axis}, n_out=n)


def slice_(g: GraphBuilder, op: str) -> None:
    x = g.pick_or_new(1, 4)
    s = g.shape(x)
    axes = sorted(set(int(a) for a in g.rng.integers(0, len(s), int(g.rng.integers(1, len(s) + 1)))))
    starts, ends, steps = [], [], []
    for a in axes:
        step = int(g.rng.choice((1, 1, 1, 2, -1, -2)))
        lo, hi = sorted(int(v) for v in g.rng.integers(0, s[a] + 1, 2))
        hi = hi if hi > lo else lo + 1
        start, end = (lo, hi) if step > 0 else (hi - 1, lo - 1 if lo > 0 else -s[a] - 5)
        if g.rng.random() < 0.2:
            start -= s[a]
        if g.rng.random() < 0.1 and step > 0:
            end = 2**31
        starts.append(start), ends.append(end), steps.append(step)
    axes = [a - len(s) if g.rng.random() < 0.2 else a for a in axes]
    g.emit("Slice", [x, g.ints(starts), g.ints(ends), g.ints(axes), g.ints(steps)])


def gather(g: GraphBuilder, op: str) -> None:
    x = g.pick_or_new(1, 4)
    s = g.shape(x)
    axis = int(g.rng.integers(-len(s), len(s)))
    d = s[axis]
    if op == "GatherElements":
        shape = list(s)
        shape[axis] = int(g.rng.integers(1, 5))
        g.emit(op, [x, g.ints(g.rng.integers(-d, d, shape))], {"axis": axis})
    else:
        ishape = tuple(int(g.rng.integers(1, 4)) for _ in range(int(g.rng.integers(0, 3))))
        g.emit(op, [x, g.ints(g.rng.integers(-d, d, ishape))], {"axis": axis})


def scatter_nd(g: GraphBuilder, op: str) -> None:
    """Distinct slices of x (negative indices too) replaced by updates: a fresh input or constant;
    add or max over repeated slices now and then on float32."""
    x = g.pick_or_new(1, 4)
    s = g.shape(x)
    k = int(g.rng.integers(1, len(s) + 1))
    places = int(np.prod(s[:k]))
    reduction = str(g.rng.choice(("add", "max"))) if g.dtype == np.float32 and g.rng.random() < 0.3 else None
    n = int(g.rng.integers(1, min(places, 4) + 1))
    picked = g.rng.integers(0, places, n) if reduction else g.rng.choice(places, n, replace=False)
    index = np.stack(np.unravel_index(picked, s[:k]), axis=-1)
    index = np.where(g.rng.random(index.shape) < 0.2, index - np.array(s[:k]), index)   # from the end
    shape = (n, *s[k:])
    updates = g.new_input(shape) if g.rng.random() < 0.5 else g.const(shape)
    g.emit(op, [x, g.ints(index), updates], {"reduction": reduction} if reduction else None)


def scatter_elements(g: GraphBuilder, op: str) -> None:
    """Distinct elements along an axis of x (negative indices too) replaced by updates; add or
    max over repeated ones now and then on float32."""
    x = g.pick_or_new(1, 4)
    s = g.shape(x)
    axis = int(g.rng.integers(len(s)))
    reduction = str(g.rng.choice(("add", "max"))) if g.dtype == np.float32 and g.rng.random() < 0.3 else None
    n = int(g.rng.integers(1, s[axis] + 1))
    shape = tuple(n if d == axis else int(g.rng.integers(1, s[d] + 1)) for d in range(len(s)))
    # along the axis, each index row a draw without repeats (with repeats where a reduction adds them)
    rows = np.moveaxis(np.zeros(shape, np.int64), axis, -1)
    for at in np.ndindex(rows.shape[:-1]):
        rows[at] = g.rng.integers(0, s[axis], n) if reduction else g.rng.choice(s[axis], n, replace=False)
    index = np.moveaxis(rows, -1, axis)
    index = np.where(g.rng.random(index.shape) < 0.2, index - s[axis], index)   # from the end
    updates = g.new_input(shape) if g.rng.random() < 0.5 else g.const(shape)
    attrs = {"axis": axis, **({"reduction": reduction} if reduction else {})}
    g.emit(op, [x, g.ints(index), updates], attrs)


def bitwise(g: GraphBuilder, op: str) -> None:
    """A bitwise op on values turned to integers (x * 16, truncated; BitShift's unsigned, by 0 to
    7 places), the result turned back to floats."""
    if not g.exact_ops:
        raise Reject()
    unsigned = op == "BitShift"
    to = TensorProto.UINT32 if unsigned else TensorProto.INT32

    def integers(x: str) -> str:
        x = g.emit("Abs", [x])[0] if unsigned else x
        return g.emit("Cast", [g.emit("Mul", [x, g.const((), array=np.asarray(16.0))])[0]], {"to": to})[0]
    a = g.pick_or_new(0, 4, exact=True)
    if op == "BitwiseNot":
        y = g.emit(op, [integers(a)])[0]
    elif op == "BitShift":
        places = g.constant(g.rng.integers(0, 8, g.shape(a)[-1:]).astype(np.uint32))
        y = g.emit(op, [integers(a), places], {"direction": str(g.rng.choice(("LEFT", "RIGHT")))})[0]
    else:
        y = g.emit(op, [integers(a), integers(broadcast_partner(g, g.shape(a), True))])[0]
    g.emit("Cast", [y], {"to": g.elem})


def pad(g: GraphBuilder, op: str) -> None:
    x = g.pick_or_new(1, 4)
    s = g.shape(x)
    mode = str(g.rng.choice(("constant", "constant", "reflect", "edge")))
    limit = lambda d: (d - 1) if mode == "reflect" else 3
    pads = [int(g.rng.integers(0, limit(d) + 1)) for d in s] * 2
    args = [x, g.ints(pads)]
    if mode == "constant" and g.rng.random() < 0.5:
        args.append(g.const((), array=np.asarray(g.rng.standard_normal())))
    g.emit("Pad", args, {"mode": mode})


def tile(g: GraphBuilder, op: str) -> None:
    x = g.pick_or_new(1, 4)
    g.emit("Tile", [x, g.ints(g.rng.integers(1, 4, len(g.shape(x))))])


def expand(g: GraphBuilder, op: str) -> None:
    x = g.pick_or_new(0, 4)
    s = g.shape(x)
    target = [int(g.rng.choice((2, 3))) if d == 1 and g.rng.random() < 0.7 else d for d in s]
    target = [int(g.rng.integers(1, 4)) for _ in range(int(g.rng.integers(0, 2)))] + target
    g.emit("Expand", [x, g.ints(target)])


def trilu(g: GraphBuilder, op: str) -> None:
    x = g.pick_or_new(2, 4)
    args = [x] + ([g.ints(int(g.rng.integers(-3, 4)))] if g.rng.random() < 0.6 else [])
    g.emit("Trilu", args, {"upper": int(g.rng.random() < 0.5)})


def cumsum(g: GraphBuilder, op: str) -> None:
    x = g.pick_or_new(1, 4)
    g.emit("CumSum", [x, g.ints(int(g.rng.integers(-len(g.shape(x)), len(g.shape(x)))))],
           {"exclusive": int(g.rng.random() < 0.3), "reverse": int(g.rng.random() < 0.3)})


def dft(g: GraphBuilder, op: str) -> None:
    """A DFT along a drawn signal axis of a real signal (a tensor with a trailing axis of 1) or a
    complex one (a last axis of 2 as the real and imaginary parts): forward, inverse, onesided
    forward of a real signal, onesided inverse (IRFFT) of a complex one at a length whose N/2 + 1
    is the spectrum's; a drawn DFT length may pad or cut the signal. The axis is an attribute
    before opset 20, an input from it."""
    x = g.pick_or_new(1, 3)
    signal = x if len(g.shape(x)) > 1 and g.shape(x)[-1] == 2 and g.rng.random() < 0.6 else \
        g.emit("Unsqueeze", [x, g.ints([-1])])[0]
    shape = g.shape(signal)
    axis = int(g.rng.integers(0, len(shape) - 1))
    axis -= len(shape) if g.rng.random() < 0.5 else 0
    complex_input, inverse = shape[-1] == 2, int(g.rng.random() < 0.4)
    onesided = int(g.rng.random() < 0.3 and (inverse == complex_input) and shape[axis] > inverse)
    if onesided and inverse:   # the spectrum's N/2 + 1 values: N = 2 (L - 1) by default, or 2 L - 1
        length = [2 * shape[axis] - 1] if g.rng.random() < 0.5 else []
    else:
        length = [int(g.rng.integers(1, 2 * shape[axis] + 1))] if g.rng.random() < 0.4 else []
    args = [signal, g.ints(length[0]) if length else ""]
    attrs = {"inverse": inverse, "onesided": onesided}
    if g.opset >= 20:
        args.append(g.ints(axis))
    else:
        attrs["axis"] = axis
    g.emit("DFT", args, attrs)


def clip(g: GraphBuilder, op: str) -> None:
    x = g.pick_or_new(0, 4)
    lo, hi = sorted(g.rng.standard_normal(2).tolist())
    args = [x, g.const((), array=np.asarray(lo)) if g.rng.random() < 0.7 else ""]
    if g.rng.random() < 0.7:
        args.append(g.const((), array=np.asarray(hi)))
    g.emit("Clip", args)


def cast(g: GraphBuilder, op: str) -> None:
    """A round trip through another type: float16 and back in a float32 graph, float32 and back in
    a float16 one, or an integer type (of an exact value: truncation jumps)."""
    x = g.pick_or_new(0, 4, exact=g.exact_ops and g.rng.random() < 0.3)
    other = TensorProto.INT32 if x in g.exact and g.exact_ops else \
        TensorProto.FLOAT16 if g.elem == TensorProto.FLOAT else TensorProto.FLOAT
    y = g.emit("Cast", [x], {"to": other})[0]
    if op == "CastLike":
        g.emit("CastLike", [y, x])
    else:
        g.emit("Cast", [y], {"to": g.elem})


def resize(g: GraphBuilder, op: str) -> None:
    x = image(g, 4)
    mode = str(g.rng.choice(("nearest", "linear")))
    transform = str(g.rng.choice(("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel")))
    # align_corners divides by the output length: onnxruntime takes the whole length, ONNX's test
    # data scale * n_in, and vkc refuses where they differ (cases/resize_align_corners_fractional_length):
    # drawn where they agree.
    fits = lambda s, d: transform != "align_corners" or float(s * d).is_integer()
    scales = [1.0, 1.0] + [float(g.rng.choice([s for s in (0.5, 1.0, 2.0, 3.0) if fits(s, d)]))
                           for d in g.shape(x)[2:]]
    attrs = {"mode": mode, "coordinate_transformation_mode": transform}
    if mode == "nearest":
        attrs["nearest_mode"] = str(g.rng.choice(("round_prefer_floor", "floor", "ceil")))
    scale = g.constant(np.asarray(scales, np.float32))
    g.emit("Resize", [x, "", scale], attrs)


def grid_sample(g: GraphBuilder, op: str) -> None:
    """X sampled at a grid (a constant or an input) reaching past X's edges; nearest sampling
    jumps at pixel boundaries, so it is drawn only where the compile keeps the grid exact."""
    x = image(g, 4)
    shape = (g.shape(x)[0], int(g.rng.integers(1, 7)), int(g.rng.integers(1, 7)), 2)
    grid = g.const(shape, scale=0.7) if g.rng.random() < 0.5 else g.new_input(shape)
    nearest = g.exact_ops and g.rng.random() < 0.3
    g.emit("GridSample", [x, grid], {
        "mode": "nearest" if nearest else "bilinear" if g.opset < 20 else "linear",
        "padding_mode": str(g.rng.choice(("zeros", "border", "reflection"))),
        "align_corners": int(g.rng.integers(0, 2))})


def where(g: GraphBuilder, op: str) -> None:
    if not g.exact_ops:
        raise Reject()
    a = g.pick_or_new(0, 4, exact=True)
    cmp = str(g.rng.choice(("Greater", "Less", "GreaterOrEqual", "LessOrEqual", "Equal")))
    cond = g.emit(cmp, [a, broadcast_partner(g, g.shape(a), True)])[0]
    if g.rng.random() < 0.3:
        other = g.emit("Less", [a, g.const(())])[0]
        cond = g.emit(str(g.rng.choice(("And", "Or", "Xor"))), [cond, other])[0]
    if g.rng.random() < 0.2:
        cond = g.emit("Not", [cond])[0]
    x = g.pick_or_new(0, 4)
    g.emit("Where", [cond, x, broadcast_partner(g, g.shape(x), False)])


def einsum(g: GraphBuilder, op: str) -> None:
    i, j, k, b = (int(g.rng.choice(DIMS[1:8])) for _ in range(4))
    eq, shapes = [("ij,jk->ik", [(i, j), (j, k)]), ("bij,bjk->bik", [(b, i, j), (b, j, k)]),
                  ("bij,bkj->bik", [(b, i, j), (b, k, j)]), ("ij,kj->ik", [(i, j), (k, j)])][
        int(g.rng.integers(4))]
    args = [g.new_input(shapes[0]), g.const(shapes[1], 1 / math.sqrt(j))]
    g.emit("Einsum", args, {"equation": eq})


def folded(g: GraphBuilder, op: str) -> None:
    """Shape, Size and Range: computed from shapes and constants at compile time."""
    x = g.pick_or_new(1, 4)
    if op == "Range":
        n = g.shape(x)[-1]
        r = g.emit("Range", [g.constant(np.asarray(0.0, g.dtype)), g.constant(np.asarray(float(n), g.dtype)),
                             g.constant(np.asarray(1.0, g.dtype))])[0]
        g.emit("Add", [x, r])
        return
    sh = g.emit(op, [x])[0]
    if op == "Size":   # x * (size / size): a large offset would make later normalizations ill-conditioned
        one = g.emit("Div", [g.emit("Cast", [sh], {"to": g.elem})[0],
                             g.constant(np.asarray(math.prod(g.shape(x)), g.dtype))])[0]
        g.emit("Mul", [x, one])
    else:
        g.emit("Add", [g.emit("Reshape", [x, sh])[0], g.const(())])


def ms_gelu(g: GraphBuilder, op: str) -> None:
    x = g.pick_or_new(1, 4)
    s = g.shape(x)
    name = op.rpartition(".")[2]
    args = [x] if name == "Gelu" or (name == "FastGelu" and g.rng.random() < 0.5) else [x, g.const(s[-1:], 0.1)]
    g.emit(name, args, domain=MS, out_types=[g.types[x]])


def ms_skip_layernorm(g: GraphBuilder, op: str) -> None:
    x = g.pick_or_new(3, 3)
    h = g.shape(x)[-1]
    name = op.rpartition(".")[2]
    r = g.rng.random()
    skip = g.const(g.shape(x)[1:]) if r < 0.3 else g.new_input(g.shape(x)) if r < 0.6 else \
        g.pick_or_new(3, 3, where=lambda s: s == g.shape(x))
    args = [x, skip, g.const((h,))]
    if name == "SkipLayerNormalization":
        args.append(g.const((h,), 0.1))
    g.emit(name, args, {"epsilon": 1e-5}, domain=MS, out_types=[g.types[x]])


def ms_attention(g: GraphBuilder, op: str) -> None:
    heads, hd = int(g.rng.choice((1, 2, 4))), int(g.rng.choice((2, 4, 8)))
    b, s, h = int(g.rng.integers(1, 3)), int(g.rng.integers(1, 10)), heads * hd
    x = g.new_input((b, s, h))
    tp = helper.make_tensor_type_proto(g.elem, [b, s, h])
    if op.endswith(".Attention"):
        args = [x, g.const((h, 3 * h), 1 / math.sqrt(h)), g.const((3 * h,), 0.1)]
        attrs = {"num_heads": heads}
        if g.rng.random() < 0.3:
            attrs["unidirectional"] = 1
        g.emit("Attention", args, attrs, domain=MS, out_types=[tp])
    else:
        kv = int(g.rng.integers(1, 10))
        args = [x, g.new_input((b, kv, h)), g.new_input((b, kv, h))]
        if g.rng.random() < 0.5:
            args.append(g.const((3 * h,), 0.1))
        g.emit("MultiHeadAttention", args, {"num_heads": heads}, domain=MS, out_types=[tp])


def ms_rotary(g: GraphBuilder, op: str) -> None:
    """com.microsoft RotaryEmbedding of a [B, S, hidden] tensor: heads of 2 to 16, constant
    positions ([B, S] or one start) into cos and sin tables of S + 16 positions."""
    x = g.pick_or_new(3, 3)
    b, s, hidden = g.shape(x)
    heads = [h for h in (2, 4, 8, 16) if hidden % h == 0]
    if not heads:
        raise Reject()
    head = int(g.rng.choice(heads))
    rot = head // 2 if head % 4 == 0 and g.rng.random() < 0.3 else head
    positions = s + 16
    angles = g.rng.uniform(0, 2 * np.pi, (positions, rot // 2))
    cos, sin = (g.constant(f(angles).astype(g.dtype)) for f in (np.cos, np.sin))
    pos = g.ints(g.rng.integers(0, 17, 1)) if g.rng.random() < 0.3 else \
        g.ints(g.rng.integers(0, positions, (b, s)))
    attrs = {"num_heads": hidden // head, "interleaved": int(g.rng.random() < 0.5)}
    if rot != head:
        attrs["rotary_embedding_dim"] = rot
    g.emit("RotaryEmbedding", [x, pos, cos, sin], attrs, domain=MS, out_types=[g.types[x]])


def ms_matmul_nbits(g: GraphBuilder, op: str) -> None:
    """A product with a constant 4- or 8-bit weight, scales keeping the result an activation."""
    x = g.pick_or_new(2, 3)
    k, n = g.shape(x)[-1], int(g.rng.choice(DIMS[2:]))
    bits, block = int(g.rng.choice((4, 8))), int(g.rng.choice((16, 32)))
    blocks = -(-k // block)
    args = [x, g.constant(g.rng.integers(0, 256, (n, blocks, block * bits // 8), dtype=np.uint8)),
            g.constant(((g.rng.random(n * blocks) + 0.5) / (2 ** (bits - 1) * math.sqrt(k))).astype(g.dtype))]
    if g.rng.random() < 0.5:
        args.append(g.constant(g.rng.integers(0, 256, n * -(-blocks * bits // 8), dtype=np.uint8)))
    tp = helper.make_tensor_type_proto(g.elem, [*g.shape(x)[:-1], n])
    g.emit("MatMulNBits", args, {"K": k, "N": n, "bits": bits, "block_size": block}, domain=MS,
           out_types=[tp])


def ms_gather_block_quantized(g: GraphBuilder, op: str) -> None:
    """Rows of a constant 4- or 8-bit table (an embedding) at constant indices."""
    rows, k, bits = int(g.rng.integers(2, 20)), 16 * int(g.rng.integers(1, 5)), int(g.rng.choice((4, 8)))
    idx = g.rng.integers(-rows, rows, tuple(int(d) for d in g.rng.integers(1, 4, int(g.rng.integers(1, 3)))))
    args = [g.constant(g.rng.integers(0, 256, (rows, k * bits // 8), dtype=np.uint8)), g.ints(idx),
            g.constant((g.rng.random((rows, k // 16)) / 8 + 1 / 64).astype(g.dtype))]
    tp = helper.make_tensor_type_proto(g.elem, [*idx.shape, k])
    g.emit("GatherBlockQuantized", args, {"bits": bits, "block_size": 16}, domain=MS, out_types=[tp])


BUILDERS = {
    "MatMul": linear, "Gemm": gemm, "Conv": conv, "ConvTranspose": conv,
    "BatchNormalization": batchnorm, "MaxPool": pool, "AveragePool": pool, "LRN": lrn,
    **{op: reduce for op in ("ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax",
                             "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare")},
    "LayerNormalization": layernorm, "InstanceNormalization": instancenorm, "Transpose": transpose, "Reshape": reshape,
    "Squeeze": squeeze, "Unsqueeze": squeeze, "Concat": concat, "Split": split, "Slice": slice_,
    "Gather": gather, "GatherElements": gather, "ScatterND": scatter_nd, "ScatterElements": scatter_elements,
    **{op: bitwise for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot", "BitShift")}, "Pad": pad, "Tile": tile, "Expand": expand,
    "Trilu": trilu, "CumSum": cumsum, "DFT": dft, "Clip": clip, "Cast": cast, "CastLike": cast,
    "Resize": resize, "GridSample": grid_sample, "Where": where, "And": where, "Or": where, "Xor": where, "Not": where,
    "Einsum": einsum, "TopK": top_k, "Pow": generic_nary, "Constant": lambda g, op: g.emit("Add", [
        g.pick_or_new(0, 4), g.constant(g.rng.standard_normal(3).astype(g.dtype), node=True)]),
    "Shape": folded, "Size": folded, "Range": folded,
    f"{MS}.Gelu": ms_gelu, f"{MS}.FastGelu": ms_gelu, f"{MS}.BiasGelu": ms_gelu,
    f"{MS}.SkipLayerNormalization": ms_skip_layernorm,
    f"{MS}.SkipSimplifiedLayerNormalization": ms_skip_layernorm,
    f"{MS}.Attention": ms_attention, f"{MS}.MultiHeadAttention": ms_attention,
    f"{MS}.RotaryEmbedding": ms_rotary, f"{MS}.MatMulNBits": ms_matmul_nbits,
    f"{MS}.GatherBlockQuantized": ms_gather_block_quantized,
}
# Patterns the passes recognise, drawn beside the ops (keyed by what they exercise).
PATTERNS = {"pattern:layernorm": layernorm_pattern, "pattern:attention": attention_pattern}


def op_pool(opset: int) -> dict:
    """{op: builder} for every supported op that a builder or its schema's shape covers."""
    from compiler.ops import find_rule, supported_ops

    pool = {}
    for op in supported_ops():
        domain, _, name = op.rpartition(".")
        if find_rule(name, domain, opset) is None:
            continue
        schema = _schema(op, opset) if not domain else None
        if op in BUILDERS:
            pool[op] = BUILDERS[op]
        elif schema is not None and _nary_schema(schema):
            pool[op] = generic_nary
        elif schema is not None and _unary_schema(schema):
            pool[op] = generic_unary
    return {**pool, **PATTERNS}


def unfuzzed_ops() -> list[str]:
    from compiler.ops import supported_ops

    covered = set().union(*(op_pool(o) for o in OPSETS))
    return sorted(set(supported_ops()) - covered)


def generate(seed: int, max_ops: int | None = None) -> Case:
    """The graph of `seed`: its opset, dtype, compile precision and target drawn from it too."""
    rng = np.random.default_rng(seed)
    opset = int(rng.choice(OPSETS))
    r = rng.random()
    precision, dtype = ("fp16", np.float32) if r < 0.2 else ("fp32", np.float16) if r < 0.35 \
        else ("fp32", np.float32)
    target = str(rng.choice(("lavapipe", "generic")))
    g = GraphBuilder(rng, opset, dtype, exact_ops=precision == "fp32")
    pool = op_pool(opset)
    names = sorted(pool)
    drawn = []
    steps = max_ops or int(rng.integers(1, 7))
    for _ in range(steps * 4):
        if len(drawn) >= steps:
            break
        op = names[int(rng.integers(len(names)))]
        if op in DISCONTINUOUS and not g.exact_ops:
            continue
        mark = (len(g.nodes), dict(g.inits), dict(g.inputs), dict(g.types), list(g.floats),
                set(g.exact), set(g.consumed), dict(g.data))
        try:
            pool[op](g, op)
            drawn.append(op)
        except Reject:
            n, g.inits, g.inputs, g.types, g.floats, g.exact, g.consumed, g.data = mark
            del g.nodes[n:]
        if rng.random() < 0.15 and g.floats:   # an Identity, as exporters leave them
            g.emit("Identity", [g.floats[-1]])
    if not g.nodes:
        g.emit("Relu", [g.new_input(g.rand_shape(2))])
    return Case(seed, g.model(choose_outputs(g)), precision, target, drawn)


def choose_outputs(g: GraphBuilder) -> list[str]:
    """Every float tensor nothing consumes (else its node would be dead code), and now and then
    a consumed one too, a graph input, or a constant through an Identity."""
    produced = [o for n in g.nodes for o in n.output if o in g.floats and n.op_type != "Constant"]
    outs = [o for o in produced if o not in g.consumed][-4:]
    extra = [o for o in produced if o in g.consumed]
    for o in extra:
        if g.rng.random() < 0.15:
            outs.append(o)
    if g.rng.random() < 0.05 and g.inputs:
        outs.append(next(iter(g.inputs)))
    if g.rng.random() < 0.05:
        outs.append(g.emit("Identity", [g.const((2, 3))])[0])
    return list(dict.fromkeys(outs)) or [produced[-1]]
