"""Elementwise ops become `vkc.Elementwise` nodes holding an expression tree; chains of them
fuse into one kernel when the intermediate has no other reader and either has the consumer's
dtype or is bool (a comparison feeding a Where, a Not, a Cast). Every subtree of a fused tree
computes in its own type and is brought back into it after every op (expr.py), so a fused chain
computes exactly what the ops one by one would. Which ONNX ops are elementwise, and as which tree
op, is elementwise_ops.py's table (Mod's and BitShift's attribute chooses between its entries);
Cast, CastLike, IsInf, Gelu and the com.microsoft GELUs choose their tree from their attributes
(and CastLike from its second input's dtype) here."""
from __future__ import annotations

import numpy as np
import onnx

from .. import expr as E
from ..dtypes import E8M0_ROUND_MODES, TYPES
from ..elementwise_ops import OPS, ONNX_ATTRS, ONNX_BINARY, ONNX_CHOSEN, ONNX_UNARY, ONNX_VARIADIC
from ..errors import CompileError
from ..frontend import MAX_OPSET
from ..ir import Graph, Node
from ..noops import same_dtype
from ..registry import REVIEWED_OPSET, declare, shape_of_input0
from ..rows import broadcasting_rows, unary_rows

# ONNX ops whose attributes choose their tree (_attribute_tree), and com.microsoft's GELUs.
ATTRIBUTE_OPS = {"Clip": "clip", "Cast": "cast", "CastLike": "cast", "IsInf": "isinf",
                 "Gelu": "gelu"}
MICROSOFT_OPS = {"Gelu": "gelu", "FastGelu": "gelu_tanh", "BiasGelu": "gelu"}
ELEMENTWISE_OPS = (set(ONNX_BINARY) | set(ONNX_UNARY) | set(ONNX_VARIADIC) | set(ATTRIBUTE_OPS)
                   | set(ONNX_CHOSEN))
# Declarations that implement a newer schema than REVIEWED_OPSET: Cast-24's round_mode
# (float8e8m0) and Cast-25's int2 / uint2; Mod-28's floored remainder of floats and BitShift-28's
# signed integers.
SCHEMAS = {"Cast": 25, "CastLike": 25, "Mod": 28, "BitShift": 28}
# Fusion stops before a kernel's expression passes this many characters of GLSL: ops that read
# their operand twice (Elu, PRelu, HardSwish) repeat its text, so a long chain would grow
# exponentially.
MAX_EXPR_CHARS = 4000


def _tree_ops(op: str) -> list[str]:
    """The tree ops an ONNX elementwise op can become."""
    if op in ONNX_CHOSEN:
        return list(ONNX_CHOSEN[op][1].values())
    return [ONNX_BINARY.get(op) or ONNX_UNARY.get(op) or ONNX_VARIADIC.get(op) or ATTRIBUTE_OPS[op]]


def _dtypes_doc(op: str) -> str:
    """The dtypes vkc computes an elementwise op on: those ONNX allows (its input's type
    constraint: T where it has one) that the expression renderer has texts for."""
    kinds = sorted({k for name in _tree_ops(op) for k in OPS[name].kinds})
    # ONNX's names: float is float32; bfloat16 computes in float32 like float16
    vkc = {"float", "float16", "bfloat16"} if "float" in kinds else set()
    if "double" in kinds:
        vkc.add("double")
    if "int" in kinds and "uint" in kinds:
        vkc |= {f"{u}int{b}" for u in ("", "u") for b in (8, 16, 32, 64)}
    if "bool" in kinds:
        vkc.add("bool")
    schema = onnx.defs.get_schema(op, max_inclusive_version=MAX_OPSET)
    constraint = next((c for c in schema.type_constraints if c.type_param_str == "T"),
                      schema.type_constraints[0])
    allowed = {t[len("tensor("):-1] for t in constraint.allowed_type_strs}
    have = vkc & allowed
    names = [n for n in ("float", "float16", "bfloat16", "double", "bool") if n in have]
    for u in ("int", "uint"):
        ints = [f"{u}{b}" for b in (8, 16, 32, 64) if f"{u}{b}" in have]
        names += [f"{u}8-64"] if len(ints) == 4 else ints
    text = ", ".join("float64" if n == "double" else "float32" if n == "float" else n for n in names)
    return text + ("; any numeric exponent" if op == "Pow" else "")


_LIMITS = {"Clip": "min and max computed at run time",
           "Pow": "float64 base with a floating-point exponent tensor or a fractional constant",
           "Cast": "to or from string; NaN, inf and out-of-range floats to integers "
                   "(undefined in ONNX)"}
for _op in sorted(ELEMENTWISE_OPS):
    # The elementwise kernel checks dtypes per expression (lower/elementwise.py).
    name = _tree_ops(_op)[0]
    declare(_op, handled_by="fused elementwise", module=__name__, dtypes=None,
            float16="float" in OPS[name].kinds, magnitude=OPS[name].magnitude,
            dtypes_doc=(_dtypes_doc(_op) if _op not in ("Cast", "CastLike") else
                        "bool, float16-64, int8-64, uint8-64, bfloat16, float8 (e4m3fn, e4m3fnuz, "
                        "e5m2, e5m2fnuz, e8m0fnu), float4e2m1, int4, uint4, int2, uint2 to any "
                        "of them"),
            constant_inputs=(1, 2) if _op == "Clip" else (),
            limits=_LIMITS.get("Cast" if _op == "CastLike" else _op, "-"),
            schema=SCHEMAS.get(_op, REVIEWED_OPSET),
            noop=same_dtype if _op in ("Cast", "CastLike") else None,
            row_wise=unary_rows if _op in ONNX_UNARY or _op in ATTRIBUTE_OPS else broadcasting_rows)
_MICROSOFT_DOCS = {"Gelu": "x Phi(x) (erf form)", "FastGelu": "tanh form, optional bias",
                   "BiasGelu": "erf form of x + bias"}
for _op, _doc in _MICROSOFT_DOCS.items():
    declare(_op, domain="com.microsoft", handled_by=f"fused elementwise ({_doc})",
            module=__name__, dtypes=None, dtypes_doc="float32, float16", float16=True,
            output_shape=shape_of_input0)


def _clip_bounds(node: Node) -> tuple[float | None, float | None]:
    if "min" in node.attrs or "max" in node.attrs or len(node.inputs) == 1:  # opset < 11
        return node.attrs.get("min"), node.attrs.get("max")
    bounds = []
    for v in (node.input(1), node.input(2)):
        if v is None:
            bounds.append(None)
        elif not v.is_constant:
            raise CompileError(f"Clip '{node.name}': min/max come from the computation "
                               f"('{v.name}'); vkc needs them constant.")
        else:
            bounds.append(v.data.reshape(-1)[0].item())  # exact: an int64 bound stays an int
    return bounds[0], bounds[1]


def _attribute_tree(node: Node):
    """The tree of an op whose attributes choose it, over operand ("in", 0)."""
    x = ("in", 0)
    if node.op_type == "Clip":
        lo, hi = _clip_bounds(node)
        return ("clip", x, lo, hi)
    if node.op_type in ("Cast", "CastLike"):  # CastLike: to its second input's dtype
        to = node.outputs[0].dtype
        if np.dtype(to).name not in TYPES:
            raise CompileError(f"{node.op_type} '{node.name}' converts to {np.dtype(to).name}, "
                               f"which vkc's kernels do not compute.")
        mode = node.text("round_mode", "up")  # opset 24+: for float8e8m0
        if mode not in E8M0_ROUND_MODES:
            raise CompileError(f"{node.op_type} '{node.name}' has round_mode='{mode}'; ONNX "
                               f"defines {', '.join(E8M0_ROUND_MODES)}.")
        return ("cast", x, np.dtype(to).name, bool(node.attrs.get("saturate", 1)), mode)
    if node.op_type == "IsInf":
        negative, positive = (node.attrs.get(a, 1) for a in ("detect_negative", "detect_positive"))
        if negative and positive:
            return ("isinf", x)
        if negative or positive:
            return ("equal", x, ("const", float("-inf") if negative else float("inf")))
        return ("less", x, ("const", float("-inf")))  # detects nothing: never true, not for NaN
    approximate = node.text("approximate", "none")  # Gelu
    if approximate not in ("none", "tanh"):
        raise CompileError(f"Gelu '{node.name}' has approximate='{approximate}'; ONNX defines "
                           "'none' and 'tanh'.")
    return ("gelu_tanh" if approximate == "tanh" else "gelu", x)


def _microsoft_tree(node: Node):
    """com.microsoft's Gelu (x), FastGelu (x, optional bias) and BiasGelu (x, bias) as trees:
    the GELU of x, or of x + bias where the node has a bias."""
    bias = len(node.inputs) > 1 and node.inputs[1] is not None
    x = ("add", ("in", 0), ("in", 1)) if bias else ("in", 0)
    return (MICROSOFT_OPS[node.op_type], x), node.inputs[:2] if bias else node.inputs[:1]


def _leaves(inputs) -> tuple[list, list]:
    """The leaves of a tree over `inputs` and the operands they read: a scalar constant becomes a
    literal in the kernel, the same value twice (x * x) one operand."""
    leaves, operands = [], []
    for v in inputs:
        if v.is_constant and v.size == 1:
            leaves.append(("const", v.data.reshape(-1)[0].item()))
        else:
            same = [i for i, o in enumerate(operands) if o is v]
            leaves.append(("in", same[0] if same else len(operands)))
            if not same:
                operands.append(v)
    return leaves, operands


def _chosen_op(node: Node) -> str:
    """The tree op an attribute chooses (elementwise_ops.ONNX_CHOSEN); a missing attribute has
    its schema's default."""
    name, ops = ONNX_CHOSEN[node.op_type]
    value = node.attrs.get(name)
    if value is None:
        schema = onnx.defs.get_schema(node.op_type, max_inclusive_version=MAX_OPSET)
        default = schema.attributes[name].default_value
        value = onnx.helper.get_attribute_value(default) if default.name else None
    value = value.decode() if isinstance(value, bytes) else value
    if value not in ops:
        raise CompileError(f"{node.op_type} '{node.name}' has {name}={value!r}; ONNX defines "
                           f"{', '.join(map(repr, ops))}.")
    return ops[value]


def to_elementwise(graph: Graph) -> Graph:
    for node in graph.nodes:
        if node.domain == "com.microsoft" and node.op_type in MICROSOFT_OPS:
            tree, operands = _microsoft_tree(node)
        elif node.op_type not in ELEMENTWISE_OPS or node.domain not in ("", "ai.onnx"):
            continue
        elif node.op_type in ATTRIBUTE_OPS:
            tree, operands = _attribute_tree(node), [node.inputs[0]]
        elif node.op_type in ONNX_CHOSEN:
            leaves, operands = _leaves(node.inputs)
            tree = (_chosen_op(node), *leaves)
        elif node.op_type in ONNX_UNARY:
            # ONNX float attributes are float32, for every dtype the op computes on.
            attrs = [("const", float(np.float32(node.attrs.get(name, default))))
                     for name, default in ONNX_ATTRS.get(node.op_type, ())]
            tree, operands = (ONNX_UNARY[node.op_type], ("in", 0), *attrs), [node.inputs[0]]
        else:
            leaves, operands = _leaves(node.inputs)
            if node.op_type in ONNX_VARIADIC:  # Sum(a, b, c) = add(add(a, b), c)
                tree = leaves[0]
                for leaf in leaves[1:]:
                    tree = (ONNX_VARIADIC[node.op_type], tree, leaf)
                if node.op_type == "Mean":
                    tree = ("div", tree, ("const", float(len(leaves))))
            else:
                tree = (ONNX_BINARY[node.op_type], *leaves)
        node.op_type, node.attrs, node.inputs = "vkc.Elementwise", {"expr": tree}, operands
        node.domain = ""
    graph.relink()
    return graph


def fuse_elementwise_chains(graph: Graph) -> Graph:
    """Merge each elementwise node into its only reader's expression, first consumer first. A
    merge changes what its consumer can take in, not what the nodes before it can, so the scan
    goes on from that consumer instead of from the start."""
    i = 0
    while i < len(graph.nodes):
        consumer = graph.nodes[i]
        found = _mergeable_input(graph, consumer) if consumer.op_type == "vkc.Elementwise" else None
        if found is None:
            i += 1
            continue
        k, prod = found
        consumer.attrs["expr"], consumer.inputs = merged(consumer, k, prod)
        consumer.sources = prod.sources + consumer.sources
        graph.nodes.remove(prod)
        graph.relink()
        i = graph.nodes.index(consumer)
    return graph


def _mergeable_input(graph: Graph, consumer: Node) -> "tuple[int, Node] | None":
    """(k, producer) of consumer's first input whose producer can merge into it."""
    for k, v in enumerate(consumer.inputs):
        prod = v.producer
        # A bool intermediate (a comparison feeding a Where) joins a tree of another
        # type. Joining across other dtype changes (an integer chain feeding a Pow's
        # exponent or a Cast) would be as exact, but is left until a model gains from it:
        # it would change the kernels of integer and float16 models that compile today.
        if (prod is None or prod.op_type != "vkc.Elementwise"
                or not graph.used_only_by(v, consumer) or v.alias_of is not None
                or tuple(v.shape) != tuple(consumer.outputs[0].shape)
                or (v.dtype != consumer.outputs[0].dtype and np.dtype(v.dtype) != np.bool_)
                or _merged_size(consumer, k, prod) > MAX_EXPR_CHARS):
            continue
        return k, prod
    return None


def _merged_size(consumer: Node, k: int, prod: Node) -> float:
    """The GLSL length of the merged tree (infinite where a dtype does not take one of its ops:
    the nodes stay apart and the lowering names the op that is not supported)."""
    tree, operands = merged(consumer, k, prod)
    try:
        return E.render_size(tree, TYPES[np.dtype(consumer.outputs[0].dtype).name],
                             [TYPES[np.dtype(v.dtype).name] for v in operands])
    except (E.Unsupported, KeyError):
        return float("inf")


def merged(consumer: Node, k: int, prod: Node):
    """(tree, operands) of `consumer` with producer `prod`'s expression substituted for its
    operand k, operands shared."""
    operands = [v for i, v in enumerate(consumer.inputs) if i != k]
    old_index = {i: operands.index(v) for i, v in enumerate(consumer.inputs) if i != k}

    def index_of(v):
        for i, o in enumerate(operands):
            if o is v:
                return i
        operands.append(v)
        return len(operands) - 1

    prod_tree = E.substitute(prod.attrs["expr"],
                             lambda t: ("in", index_of(prod.inputs[t[1]])) if t[0] == "in" else None)
    tree = E.substitute(consumer.attrs["expr"],
                        lambda t: prod_tree if t == ("in", k) else ("in", old_index[t[1]]))
    return tree, operands
