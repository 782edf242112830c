"""vkc as an `onnx.backend.base.Backend`, so ONNX's own test cases (and any code written for
onnxruntime.backend) can drive it: `prepare(model)` returns a rep whose `run(inputs)` returns the
outputs in graph order.

Two things differ from an interpreter, because vkc compiles ahead of time with static shapes:

- Inputs that decide shapes or fixed parameters (Reshape's shape, Slice's starts, Pad's pads,
  Resize's scales, Clip's bounds, ...) must be constants. When a model takes them as graph inputs
  (ONNX's node tests do), the rep compiles on the first run() with those inputs frozen into the
  model as initializers, and recompiles only if their values change. Every other input stays a
  run-time input of the bundle.
- A model whose ops vkc does not implement, or that computes at run time on a dtype the op's
  kernel does not take (most kernels are float32 only; elementwise arithmetic takes every numeric
  type), raises `BackendIsNotSupposedToImplementIt`, which ONNX's runners count as skipped.

A model of an opset above MAX_OPSET runs at MAX_OPSET when every one of its ops has the same
definition there (compared through onnx.defs); likewise a model of an opset below 7 (Not's cases
are opset 1) runs at opset 7 when its ops are defined there as they were.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.backend.base import Backend, BackendRep
from onnx.backend.test.runner import BackendIsNotSupposedToImplementIt

from runtime_min import load

from .compile import compile_model
from .errors import CompileError, UnsupportedOpsError
from .frontend import MAX_OPSET, MIN_OPSET, load_model, to_ir
from .ops import constant_inputs, is_supported, unsupported_ops
from .passes import fold_constants

# CompileErrors that mean "not implemented" rather than "wrong": a dtype a kernel does not compute
# (registry.check_dtypes and unsupported_dtype, strided_copy.element_words), and an opset newer
# than vkc reads (frontend) whose ops changed there, so normalize_opset could not relabel it.
_NOT_IMPLEMENTED_PHRASES = ("vkc's kernels do not compute",
                            "data-movement kernels handle 32- and 64-bit", "vkc supports opsets")


def _schema_signature(op: str, domain: str, opset: int):
    s = onnx.defs.get_schema(op, max_inclusive_version=opset, domain=domain)
    attrs = sorted((a.name, a.type, a.default_value.SerializeToString())
                   for a in s.attributes.values())
    return (s.doc, attrs, [(i.name, i.option) for i in s.inputs],
            [(o.name, o.option) for o in s.outputs])


def _type_str(elem_type: int) -> str:
    """An ONNX element type as schemas write it: 1 -> "tensor(float)", 10 -> "tensor(float16)"."""
    name = onnx.TensorProto.DataType.Name(elem_type)
    return f"tensor({ {'FLOAT': 'float', 'DOUBLE': 'double'}.get(name, name.lower()) })"


def _tensor_types(model: onnx.ModelProto) -> dict[str, str]:
    """Every typed tensor of the graph -> its type string as schemas write it."""
    found = {t.name: t.data_type for t in model.graph.initializer}
    for vi in [*model.graph.input, *model.graph.output, *model.graph.value_info]:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            found[vi.name] = vi.type.tensor_type.elem_type
    return {n: _type_str(t) for n, t in found.items()}


def _same_use(node: onnx.NodeProto, version: int, target: int, types: dict[str, str]) -> bool:
    """Whether `node` means the same at `target` although its schema changed since: the change
    only added types or attributes, the node uses none of them (its attributes and tensor types
    are all there at `target`), and its inputs and outputs are as at `target` (Cast from opset 23
    to 25 gained float4/float8/int2 types and a round_mode attribute; a float Cast is unchanged)."""
    if _schema_signature(node.op_type, node.domain, version)[2:] != \
            _schema_signature(node.op_type, node.domain, target)[2:]:  # inputs and outputs
        return False
    old = onnx.defs.get_schema(node.op_type, max_inclusive_version=target, domain=node.domain)
    if any(a.name not in old.attributes or old.attributes[a.name].type != a.type
           for a in node.attribute):
        return False
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in old.type_constraints}
    for formal, names in ((old.inputs, node.input), (old.outputs, node.output)):
        for param, name in zip(formal, names):
            if name and param.type_str in allowed and types.get(name) not in allowed[param.type_str]:
                return False
    to = next((a.i for a in node.attribute if a.name == "to"), None)
    if to is not None and "to" in old.attributes:  # Cast's target type is an attribute
        return _type_str(to) in allowed.get(old.outputs[0].type_str, set())
    return True


def normalize_opset(model: onnx.ModelProto) -> onnx.ModelProto:
    """Relabel a model above MAX_OPSET as MAX_OPSET (an opset<7 one as 7) when all its ops mean the
    same there: an unchanged schema, or a change the node does not use (_same_use)."""
    imports = [i for i in model.opset_import if i.domain in ("", "ai.onnx")]
    if not imports or MIN_OPSET <= imports[0].version <= MAX_OPSET:
        return model
    version = imports[0].version
    target = MAX_OPSET if version > MAX_OPSET else MIN_OPSET
    types = _tensor_types(model)
    for node in model.graph.node:
        try:
            same = _schema_signature(node.op_type, node.domain, version) == \
                _schema_signature(node.op_type, node.domain, target) or \
                (version > MAX_OPSET and _same_use(node, version, target, types))
        except onnx.defs.SchemaError:
            same = False
        if not same:
            return model  # the frontend reports the opset with its usual message
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            imp.version = target
    return model


def static_input_names(model: onnx.ModelProto) -> list[str]:
    """Graph inputs whose values reach a slot that must be constant, through any chain of nodes
    (Shape and Size read only shapes, so the walk does not pass through them)."""
    inits = {t.name for t in model.graph.initializer}
    inputs = [i.name for i in model.graph.input if i.name not in inits]
    producer = {o: n for n in model.graph.node for o in n.output}
    todo = [n.input[k] for n in model.graph.node for k in constant_inputs(n.op_type)
            if k < len(n.input) and n.input[k]]
    seen = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        node = producer.get(name)
        if node is not None and node.op_type not in ("Shape", "Size"):
            todo.extend(i for i in node.input if i)
    return [n for n in inputs if n in seen]


def freeze_inputs(model: onnx.ModelProto, values: dict[str, np.ndarray]) -> onnx.ModelProto:
    """The model with the named graph inputs turned into initializers holding `values`."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    kept = [i for i in model.graph.input if i.name not in values]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    model.graph.initializer.extend(numpy_helper.from_array(np.asarray(v), n)
                                   for n, v in values.items())
    return model


def _not_supported(exc: CompileError) -> bool:
    return isinstance(exc, UnsupportedOpsError) or any(p in str(exc) for p in _NOT_IMPLEMENTED_PHRASES)


def _compile(model: onnx.ModelProto, target: str) -> bytes:
    try:  # the backend API runs a model as a function of its inputs: no state kept between runs
        return compile_model(model, target=target, state="none")
    except CompileError as exc:
        if _not_supported(exc):
            raise BackendIsNotSupposedToImplementIt(str(exc)) from exc
        raise


class VkcBackendRep(BackendRep):
    """A compiled model on a Vulkan device (compiled lazily when some inputs must be frozen)."""

    def __init__(self, model: onnx.ModelProto, device=None, *, target: str = "generic",
                 validation: bool | None = None):
        self.model = model
        self.device = device
        self.target = target
        self.validation = validation
        inits = {t.name for t in model.graph.initializer}
        self.input_names = [i.name for i in model.graph.input if i.name not in inits]
        self.output_names = [o.name for o in model.graph.output]
        self.static = static_input_names(model)
        self._frozen_key: bytes | None = None
        self._runtime = None
        if not self.static:
            self._load(_compile(model, target), b"")

    def _load(self, bundle: bytes, key: bytes) -> None:
        self.close()
        self.bundle = bundle
        self._runtime = load(bundle, device=self.device, validation=self.validation)
        self._frozen_key = key

    def run(self, inputs: Any, **kwargs: Any) -> list[np.ndarray]:  # noqa: ARG002
        feeds = self._feeds(inputs)
        frozen = {n: np.asarray(feeds.pop(n)) for n in self.static}
        key = b"".join(n.encode() + str(a.dtype).encode() + str(a.shape).encode() + a.tobytes()
                       for n, a in frozen.items())
        if self._runtime is None or key != self._frozen_key:
            self._load(_compile(freeze_inputs(self.model, frozen), self.target), key)
        outputs = self._runtime.run(feeds)
        return [outputs[n] for n in self.output_names]

    def _feeds(self, inputs) -> dict[str, np.ndarray]:
        if isinstance(inputs, dict):
            return dict(inputs)
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        if len(inputs) != len(self.input_names):
            raise ValueError(f"the model takes {len(self.input_names)} inputs "
                             f"({', '.join(self.input_names)}), got {len(inputs)}.")
        return dict(zip(self.input_names, inputs))

    def close(self) -> None:
        if self._runtime is not None:
            self._runtime.close()
            self._runtime = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class VkcBackend(Backend):
    """`onnx.backend.base.Backend` over compile_model + runtime_min."""

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        try:
            return not unsupported_ops(fold_constants(to_ir(normalize_opset(model))))
        except CompileError:
            return False

    @classmethod
    def prepare(cls, model: onnx.ModelProto | str | bytes, device: str | None = None,
                **kwargs: Any) -> VkcBackendRep:
        """Compile `model`. kwargs: target (a vkc profile name), validation (the Khronos layer)."""
        model = normalize_opset(load_model(model))
        _reject_unsupported_ops(model)
        return VkcBackendRep(model, _vulkan_device(device), target=kwargs.get("target", "generic"),
                             validation=kwargs.get("validation"))

    @classmethod
    def run_model(cls, model, inputs: Any, device: str | None = None, **kwargs: Any):
        rep = cls.prepare(model, device, **kwargs)
        try:
            return rep.run(inputs)
        finally:
            rep.close()

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Sequence[np.ndarray], device: str | None = None,
                 outputs_info=None, **kwargs: Any):
        """One node as a one-node model; its inputs get the given arrays' dtypes and shapes."""
        opset = kwargs.pop("opset_version", MAX_OPSET)
        names = [n for n in node.input if n]
        graph_inputs = [helper.make_tensor_value_info(
            n, helper.np_dtype_to_tensor_dtype(np.asarray(a).dtype), np.asarray(a).shape)
            for n, a in zip(names, inputs)]
        graph_outputs = [helper.make_tensor_value_info(n, 0, None) for n in node.output]
        graph = helper.make_graph([node], "run_node", graph_inputs, graph_outputs)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model = onnx.shape_inference.infer_shapes(model)
        return cls.run_model(model, list(inputs), device, **kwargs)

    @classmethod
    def supports_device(cls, device: str | None) -> bool:
        """vkc runs on any Vulkan device: 'CPU' means a CPU implementation (lavapipe), 'GPU' or
        None the first suitable GPU."""
        return device is None or str(device).upper() in ("CPU", "GPU", "VULKAN")


def _vulkan_device(device):
    """The onnx backend's device string as runtime_min's `device=` (a name substring or None)."""
    if device is None or str(device).upper() in ("GPU", "VULKAN"):
        return None
    if str(device).upper() == "CPU":
        return "llvmpipe"  # lavapipe names its device after the llvmpipe rasterizer
    return device


def _reject_unsupported_ops(model: onnx.ModelProto) -> None:
    """Unsupported ops and non-tensor values (sequences, optionals, maps) skip the case before
    anything compiles. Ops whose inputs are frozen later (Shape feeding Reshape, ...) may still
    fold, so only ops with no rule at all count here."""
    for vi in [*model.graph.input, *model.graph.output]:
        kind = vi.type.WhichOneof("value")
        if kind != "tensor_type":
            raise BackendIsNotSupposedToImplementIt(
                f"'{vi.name}' has type {kind}; vkc compiles tensor graphs only.")
    opset = max([i.version for i in model.opset_import if i.domain in ("", "ai.onnx")] or [0])
    missing = {}
    for i, n in enumerate(model.graph.node):
        if not is_supported(n.op_type, n.domain, min(opset, MAX_OPSET)) and n.op_type != "Constant":
            missing.setdefault(n.op_type, []).append(n.name or f"{n.op_type}_{i}")
    if missing:
        raise BackendIsNotSupposedToImplementIt(str(UnsupportedOpsError(missing)))


prepare = VkcBackend.prepare
run_model = VkcBackend.run_model
run_node = VkcBackend.run_node
supports_device = VkcBackend.supports_device
is_compatible = VkcBackend.is_compatible
