"""ONNX -> IR: load, check the opset, pin dynamic dims, infer static shapes."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from .errors import CompileError
from .ir import Graph, Node, Value
from .registry import ONNX_DOMAINS, find_rule

# Opsets 23 to 28 (onnx 1.23 knows 28) are read with the schema check of compiler/registry.py's
# find_rule: an op whose schema changed there in more than its element types is refused by name
# unless its declaration implements the new version.
MIN_OPSET, MAX_OPSET = 7, 28


def load_model(source: onnx.ModelProto | str | Path | bytes) -> onnx.ModelProto:
    if isinstance(source, onnx.ModelProto):
        return source
    try:
        if isinstance(source, bytes):
            return onnx.load_from_string(source)
        return onnx.load(str(source))
    except (OSError, onnx.onnx_cpp2py_export.checker.ValidationError, Exception) as exc:  # noqa: BLE001
        raise CompileError(f"cannot read ONNX model {source!r:.200}: {exc}") from exc


def model_opset(model: onnx.ModelProto) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return imp.version
    raise CompileError("the model imports no default-domain ONNX opset; vkc needs one "
                       f"({MIN_OPSET} to {MAX_OPSET}).")


def pin_input_shapes(model: onnx.ModelProto, input_shapes: dict[str, list[int]] | None) -> onnx.ModelProto:
    """Write the user's --input-shape values into the graph inputs before shape inference."""
    if not input_shapes:
        return model
    model = onnx.ModelProto.FromString(model.SerializeToString())
    by_name = {i.name: i for i in model.graph.input}
    for name, shape in input_shapes.items():
        if name not in by_name:
            raise CompileError(f"--input-shape names '{name}', but the model's inputs are "
                               f"{sorted(by_name)}.")
        dims = by_name[name].type.tensor_type.shape.dim
        if len(dims) and len(dims) != len(shape):
            raise CompileError(f"--input-shape {name}={'x'.join(map(str, shape))} has rank "
                               f"{len(shape)} but input '{name}' has rank {len(dims)}.")
        del dims[:]
        for d in shape:
            by_name[name].type.tensor_type.shape.dim.add().dim_value = int(d)
    return model


def _value_from_type(name: str, tp: onnx.TypeProto) -> Value:
    tt = tp.tensor_type
    dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)) if tt.elem_type else None
    shape = None
    if tt.HasField("shape"):
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        shape = None if any(d is None for d in dims) else tuple(dims)
    return Value(name, dtype, shape)


def _infer_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    try:
        return onnx.shape_inference.infer_shapes(model, check_type=True, data_prop=True)
    except Exception as exc:  # noqa: BLE001 - onnx raises several types here
        raise CompileError(f"ONNX shape inference failed: {exc}") from exc


def _dims(tp) -> tuple | None:
    """A tensor type's static shape, or None."""
    tt = tp.tensor_type if tp is not None else None
    if tt is None or not tt.elem_type or not tt.HasField("shape") or \
            any(not d.HasField("dim_value") for d in tt.shape.dim):
        return None
    return tuple(d.dim_value for d in tt.shape.dim)


def _type_other_domains(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    """onnx infers no types for other domains' ops (com.microsoft's), nor for anything downstream
    of them: give each such op's first output the shape its declaration computes (output_shape in
    compiler/registry.py) and infer again, until no more is learned."""
    for _ in range(len(model.graph.node)):
        g = model.graph
        known = {vi.name: vi.type for vi in [*g.input, *g.value_info, *g.output]}
        known.update({t.name: onnx.helper.make_tensor_type_proto(t.data_type, list(t.dims))
                      for t in g.initializer})
        added = []
        for n in g.node:
            rule = find_rule(n.op_type, n.domain, opset) if n.domain not in ONNX_DOMAINS else None
            if rule is None or rule.output_shape is None or not n.input or not n.output or \
                    _dims(known.get(n.output[0])) is not None or _dims(known.get(n.input[0])) is None:
                continue
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
            shape = rule.output_shape([_dims(known.get(x)) for x in n.input], attrs)
            if shape is not None:
                elem = known[n.input[0]].tensor_type.elem_type
                added.append(onnx.helper.make_tensor_value_info(n.output[0], elem, list(shape)))
        if not added:
            return model
        g.value_info.extend(added)
        model = _infer_shapes(model)
    return model


def to_ir(model: onnx.ModelProto, input_shapes: dict[str, list[int]] | None = None) -> Graph:
    opset = model_opset(model)
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise CompileError(f"the model uses opset {opset}; vkc supports opsets {MIN_OPSET} to "
                           f"{MAX_OPSET}. Convert it with onnx.version_converter.")
    model = pin_input_shapes(model, input_shapes)
    model = _infer_shapes(model)
    model = _type_other_domains(model, opset)
    g = model.graph
    values: dict[str, Value] = {}
    for init in g.initializer:
        data = numpy_helper.to_array(init)
        values[init.name] = Value(init.name, data.dtype, tuple(data.shape), data=data)
    for vi in [*g.input, *g.value_info, *g.output]:
        if vi.name not in values:
            values[vi.name] = _value_from_type(vi.name, vi.type)

    def get(name: str) -> Value:
        if name not in values:  # an output shape inference could not type
            values[name] = Value(name, None, None)
        return values[name]

    # Initializers listed as graph inputs (old exporters do this) are weights, not inputs.
    inputs = [values[i.name] for i in g.input if not values[i.name].is_constant]
    for v in inputs:
        if v.shape is None:
            raise CompileError(f"input '{v.name}' has a dynamic shape; pin it with "
                               f"--input-shape {v.name}=1x3x224x224 (your real sizes).")
    nodes = []
    for i, n in enumerate(g.node):
        name = n.name or f"{n.op_type}_{i}"
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        nodes.append(Node(n.op_type, name, [get(x) if x else None for x in n.input],
                          [get(x) for x in n.output], attrs, n.domain, [name]))
    outputs = [get(o.name) for o in g.output]
    producer = f"{model.producer_name} {model.producer_version}".strip()
    return Graph(nodes, inputs, outputs, opset, g.name or "model", producer)
