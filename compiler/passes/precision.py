"""Precision: `--precision fp16` retypes a float32 model's tensors to float16 (weights converted
here, at compile time), so that weights and activations take half the memory and half the memory
traffic. Kernels compute in float32 and accumulate matmul, conv, reductions, softmax and
normalization in float32 (compiler/dtypes.py): float16 is storage.

`--precision fp16-matmul` (the opt-in for float32 models on tensor cores, as TF32 is on CUDA)
retypes only the matrix products (MatMul, Gemm, Conv) and their weights: their operands are
rounded to float16 (a 10-bit mantissa, as TF32's, but float16's range: magnitudes past 65504
saturate) and they accumulate in float32, on cooperative-matrix kernels where the device has them;
every other node computes and stores in float32 (a product's Cast back to float32 fuses into its
epilogue, fuse_epilogues._widens; a LayerNorm or attention stores the float16 its product
reads, store_casts.py). Never chosen for a model silently.

Which nodes compute in float16 the registry says (OpRule.computes("float16"): Gemm, MatMul,
Conv, pooling, softmax, normalization, reductions, elementwise ops and data movement). Every other
node (Resize, Pad, Concat, LRN...), and every node named in `keep_float32`, stays float32 with
Cast nodes around it, so the fallback is always a correct float32 kernel. So does every node
where float16 storage would overflow or lose too much (passes/float16_range.py): the pass keeps
those by itself and names each, with why, in `graph.float32_nodes` (the manifest's
`float32_nodes`, `vkc inspect`). Graph inputs and outputs stay float32 at the runtime API (a Cast
in, a Cast out) unless `io_float16`.

The pass runs after fuse_layernorm (a normalization is one node by then, taking float16 as a
whole) and before to_elementwise, so that its Casts become elementwise nodes that fuse into their
neighbours' chains and epilogues like any other elementwise op.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..derived import derived
from ..errors import CompileError
from ..ir import Graph, Node, Value
from ..registry import fact, find_rule
from .float16_range import describe, float16_range

F32, F16 = np.dtype(np.float32), np.dtype(np.float16)
F16_MAX = float(np.finfo(np.float16).max)


PRECISIONS = ("fp32", "fp16", "fp16-matmul")


@dataclass(frozen=True)
class Precision:
    """What `compile_model(precision=...)` asks of the pass."""
    float16: bool = False
    io_float16: bool = False                 # graph inputs and outputs float16 at the runtime API
    keep_float32: frozenset[str] = frozenset()   # node names (ONNX names) that stay float32
    matmul_only: bool = False                # only matrix products (registry `product`) compute in float16

    @classmethod
    def parse(cls, precision: str = "fp32", io: str | None = None,
              keep_fp32=()) -> "Precision":
        if precision == "tf32":
            raise CompileError("precision 'tf32': Vulkan has no TF32 type (cooperative matrices take "
                               "float16, bfloat16 or 8-bit integers); --precision fp16-matmul is the "
                               "opt-in for float32 models on tensor cores (float16 operands, float32 "
                               "accumulation).")
        if precision not in PRECISIONS:
            raise CompileError(f"precision '{precision}' is not one of {', '.join(PRECISIONS)}.")
        if io not in (None, "fp32", "fp16"):
            raise CompileError(f"io precision '{io}' is not one of fp32, fp16.")
        if isinstance(keep_fp32, str):  # "conv1,conv2", as the command line writes it
            keep_fp32 = [n for n in keep_fp32.split(",") if n]
        keep = frozenset(keep_fp32 or ())
        if precision == "fp32" and (io == "fp16" or keep):
            raise CompileError("--io fp16 and --keep-fp32 apply to --precision fp16 and fp16-matmul only.")
        return cls(precision != "fp32", io == "fp16", keep, precision == "fp16-matmul")


def to_float16_weights(data: np.ndarray) -> np.ndarray:
    """float32 weights as float16; finite values past float16's range saturate at +-65504
    instead of becoming inf (a -3.4e38 mask constant stays a large finite number)."""
    data = np.asarray(data)
    with np.errstate(over="ignore"):
        half = data.astype(np.float16)
    overflowed = np.isinf(half)
    if overflowed.any():   # rare: found on the float16 copy, fixed where the source was finite
        overflowed &= np.isfinite(data)
        half[overflowed] = np.copysign(F16_MAX, data[overflowed])
    return half


def apply_precision(graph: Graph) -> Graph:
    precision: Precision | None = graph.precision
    if precision is None or not precision.float16:
        return graph
    _check_names(graph, precision.keep_float32)
    retyper = _Retyper(graph, precision)
    kept = float16_range(graph, retyper.computes_float16)
    graph.float32_nodes = describe(kept)
    retyper.kept = set(kept)
    retyper.run()
    graph.relink()
    return graph


def _check_names(graph: Graph, names) -> None:
    known = {n.name for n in graph.nodes} | {s for n in graph.nodes for s in n.sources}
    missing = sorted(set(names) - known)
    if missing:
        raise CompileError(f"--keep-fp32 names {', '.join(missing)}, which the model has no "
                           "node of (after constant folding).")


class _Retyper:
    def __init__(self, graph: Graph, precision: Precision):
        self.graph, self.p = graph, precision
        self.inputs = {id(v) for v in graph.inputs}
        self.converted: dict[tuple[int, str], Value] = {}   # (value, dtype) -> its other version
        self.nodes: list[Node] = []
        self.kept: set[int] = set()   # ids of the nodes float16_range keeps float32

    def computes_float16(self, node: Node) -> bool:
        if id(node) in self.kept or node.name in self.p.keep_float32 or any(s in self.p.keep_float32 for s in node.sources):
            return False
        if self.p.matmul_only and fact(node, "product") is None:
            return False
        rule = find_rule(node.op_type, node.domain, self.graph.opset)
        return rule is not None and rule.computes("float16")

    def run(self) -> None:
        g = self.graph
        # A bundle state (compiler/state.py) is no API tensor: it is kept as the model computes it,
        # float16 under --precision fp16 (a float16 KV cache).
        state = {id(i) for i, _ in g.state} if not self.p.matmul_only else set()
        for v in g.inputs:
            if v.dtype == F32 and (self.p.io_float16 or id(v) in state):
                v.dtype = F16
        for node in g.nodes:
            rule = find_rule(node.op_type, node.domain, g.opset)
            fixed = set(rule.constant_inputs) if rule else set()
            half = self.computes_float16(node)
            want = F16 if half else F32
            n_own = node.attrs.get("n_op_inputs", len(node.inputs))
            for i, v in enumerate(node.inputs):
                if v is not None and v.alias_of is not None and not v.root().is_constant:
                    v.dtype = v.root().dtype  # a view holds its root's bytes
                if v is None or v.dtype not in (F32, F16) or (i < n_own and i in fixed):
                    continue
                if v.dtype == want:
                    continue
                if half and v.is_constant and v.size == 1 and rule and \
                        rule.handled_by == "fused elementwise":
                    continue  # a scalar operand becomes a float32 literal in the kernel
                node.inputs[i] = self.version(v, want)
            if half:
                for v in node.outputs:
                    if v.dtype == F32:
                        v.dtype = F16
            self.nodes.append(node)
        g.nodes = self.nodes
        for v in g.values():  # views no node reads (the middle of a chain) hold their root's bytes too
            if v.alias_of is not None and not v.root().is_constant:
                v.dtype = v.root().dtype
        self._outputs()

    def version(self, v: Value, dtype) -> Value:
        """v in `dtype`: a float16 copy of a constant (or of a view of one), else a Cast."""
        key = (id(v), np.dtype(dtype).name)
        if key in self.converted:
            return self.converted[key]
        suffix = "/" + np.dtype(dtype).name
        if v.is_constant:
            data = v.data
            data = derived(data, "float16", lambda: to_float16_weights(data)) if dtype == F16 else \
                derived(data, "float32", lambda: data.astype(np.float32))
            new = Value(v.name + suffix, np.dtype(dtype), v.shape, data=data)
        elif v.alias_of is not None and v.root().is_constant:
            new = Value(v.name + suffix, np.dtype(dtype), v.shape,
                        alias_of=self.version(v.alias_of, dtype))
        else:
            new = Value(v.name + suffix, np.dtype(dtype), v.shape)
            self.nodes.append(_cast(v, new))
        self.converted[key] = new
        return new

    def _outputs(self) -> None:
        """Outputs keep their names and take the runtime API's dtype: a Cast where the graph
        computed them in the other one."""
        g = self.graph
        state = {id(o): i.dtype for i, o in g.state}  # a state's output takes its input's dtype
        for i, out in enumerate(g.outputs):
            want = state.get(id(out), F16 if self.p.io_float16 else F32)
            if out.alias_of is not None and not out.root().is_constant:
                out.dtype = out.root().dtype
            if out.dtype not in (F32, F16) or out.dtype == want:
                continue
            if id(out) in self.inputs:
                continue  # an input passed through: same dtype as declared at the API
            inner = Value(out.name + "/" + out.dtype.name, out.dtype, out.shape,
                          alias_of=out.alias_of, data=out.data)
            for node in g.nodes:
                node.inputs = [inner if v is out else v for v in node.inputs]
                node.outputs = [inner if v is out else v for v in node.outputs]
            for v in g.values():
                if v.alias_of is out:
                    v.alias_of = inner
            out.alias_of, out.data, out.dtype = None, None, want
            g.nodes.append(_cast(inner, out))


def _cast(src: Value, dst: Value) -> Node:
    return Node("Cast", f"{dst.name}/vkc_cast", [src], [dst],
                {"to": 10 if dst.dtype == F16 else 1},
                sources=[f"cast {src.name} to {np.dtype(dst.dtype).name}"])
