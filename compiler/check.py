"""`vkc check`: what `vkc compile` would do with every node of a model, without generating code.

It runs the compiler's own front half: the frontend, constant folding, the passes and each node's
lowering rule (dtypes, ranks, attributes: everything a rule checks), and stops before templates
are rendered. So a model `vkc check` calls supported compiles, and a node it refuses carries the
compiler's own reason.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import onnx

from .builder_cache import pinned_for_context
from .compile import require_constant_shape_inputs, require_static_shapes
from .errors import CompileError
from .constant_ifs import take_constant_branches
from .growing_cache import fixed_capacity
from .host import resolve_target
from .lower import lower_node
from .ops import find_rule, unsupported_ops
from .passes import fold_constants, run_passes
from .registry import op_key


@dataclass
class OpVerdict:
    op: str                  # registry key: "Conv", "com.microsoft.Attention"
    since: str               # the op's since-version at the model's opset ("?" without a schema)
    nodes: list[str]
    folded: list[str] = field(default_factory=list)      # computed at compile time
    refused: dict[str, str] = field(default_factory=dict)  # node -> the compiler's reason
    supported: bool = True   # some declaration covers the op at this opset

    @property
    def all_folded(self) -> bool:
        return len(self.folded) == len(self.nodes)

    @property
    def ok(self) -> bool:
        """Compiles: every node folds away, or a declaration covers the op and no rule refuses."""
        return (self.supported or self.all_folded) and not self.refused


@dataclass
class CheckReport:
    opset: int
    ops: list[OpVerdict]
    error: str = ""          # a whole-model problem (a pass refused the graph, a dynamic shape)

    @property
    def ok(self) -> bool:
        return not self.error and all(v.ok for v in self.ops)


def _since(op_type: str, domain: str, opset: int) -> str:
    try:
        return str(onnx.defs.get_schema(op_type, max_inclusive_version=opset,
                                        domain=domain).since_version)
    except onnx.defs.SchemaError:
        return "?"


def check_model(proto: onnx.ModelProto, input_shapes=None, target="generic",
                max_context: int | None = None) -> CheckReport:
    """Every op of the model with what compiling it would do. Errors of the model as a whole
    (the frontend's: opset, shapes) raise CompileError, as compile_model does. max_context: a
    growing cache compiled to that many rows (compile_model's)."""
    built = []   # each graph the frontend builds, before folding
    front = lambda g: built.append(list(g.nodes)) or fold_constants(g)  # noqa: E731
    input_shapes, max_context = pinned_for_context(proto, input_shapes, max_context)
    if max_context is None:
        graph = take_constant_branches(proto, input_shapes, front)[1]
        nodes = built[-1]
    else:
        graph = fixed_capacity(proto, input_shapes, max_context, front)
        nodes = built[0]
    verdicts: dict[str, OpVerdict] = {}
    owner: dict[str, OpVerdict] = {}
    for node in nodes:
        key = op_key(node.op_type, node.domain)
        if key not in verdicts:
            verdicts[key] = OpVerdict(key, _since(node.op_type, node.domain, graph.opset), [],
                                      supported=find_rule(node.op_type, node.domain,
                                                          graph.opset) is not None)
        verdicts[key].nodes.append(node.name)
        owner[node.name] = verdicts[key]
    remaining = {name for n in graph.nodes for name in n.sources}
    for name, verdict in owner.items():
        if name not in remaining:
            verdict.folded.append(name)
    report = CheckReport(graph.opset, sorted(verdicts.values(), key=lambda v: v.op))
    if unsupported_ops(graph):
        return report  # the compiler stops here too, naming them all
    try:
        require_constant_shape_inputs(graph)
        graph = run_passes(graph)
        require_static_shapes(graph)
        tgt = resolve_target(target)
    except CompileError as exc:
        report.error = str(exc)
        return report
    for node in graph.nodes:
        try:
            lower_node(node, tgt, graph.opset)
        except CompileError as exc:
            for name in node.sources:
                if name in owner:
                    owner[name].refused[name] = str(exc)
    return report
