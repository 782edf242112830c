"""ONNX -> IR: load, check the opset, pin dynamic dims, infer static shapes."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import onnx
from onnx import external_data_helper, numpy_helper

from .errors import CompileError
from .ir import Graph, Node, Value
from .registry import ONNX_DOMAINS, find_rule
from .topology import ordered_nodes

# Opsets 23 to 28 (onnx 1.23 knows 28) are read with the schema check of compiler/registry.py's
# find_rule: an op whose schema changed there in more than its element types is refused by name
# unless its declaration implements the new version.
MIN_OPSET, MAX_OPSET = 7, 28


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (onnx's span several)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def load_model(source: onnx.ModelProto | str | os.PathLike | bytes) -> onnx.ModelProto:
    """The model of a proto, an .onnx path (with its external weights) or serialized bytes."""
    if isinstance(source, onnx.ModelProto):
        return source
    if isinstance(source, (bytes, bytearray, memoryview)):
        return _parse(bytes(source), "the model bytes")
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"model must be an onnx.ModelProto, a path to an .onnx file or its bytes, "
                        f"not {type(source).__name__}.")
    path = Path(source)
    if not path.exists():
        raise CompileError(f"{path}: no such file; give the path of an .onnx model.")
    if path.is_dir():
        raise CompileError(f"{path} is a folder; give the path of the .onnx model in it.")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CompileError(f"cannot read {path}: {exc.strerror or one_line(exc)}.") from exc
    model = _parse(data, str(path))
    try:
        external_data_helper.load_external_data_for_model(model, str(path.parent))
    except Exception as exc:  # noqa: BLE001 - onnx raises several types here
        missing = sorted({external_data_helper.ExternalDataInfo(t).location for t in _tensors(model)
                          if external_data_helper.uses_external_data(t)
                          and not (path.parent / external_data_helper.ExternalDataInfo(t).location).is_file()})
        if missing:
            raise CompileError(f"{path} keeps its weights in {', '.join(missing)}, which is not beside it "
                               f"in {path.parent}; copy the file(s) the exporter wrote next to the "
                               "model.") from exc
        raise CompileError(f"cannot read the external weights of {path}: {one_line(exc)}") from exc
    return model


def _parse(data: bytes, what: str) -> onnx.ModelProto:
    try:
        model = onnx.load_from_string(data)
    except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError and others
        raise CompileError(f"{what} is not an ONNX model (protobuf cannot parse it as one: "
                           f"{one_line(exc)}); give an .onnx file as exported.") from exc
    if not model.HasField("graph"):
        raise CompileError(f"{what} is not an ONNX model (it has no graph); give an .onnx file "
                           "as exported.")
    return model


def _tensors(model: onnx.ModelProto):
    """The initializers and Constant values of the main graph."""
    yield from model.graph.initializer
    for node in model.graph.node:
        for a in node.attribute:
            if a.HasField("t"):
                yield a.t


def model_opset(model: onnx.ModelProto) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return imp.version
    raise CompileError("the model imports no default-domain ONNX opset; vkc needs one "
                       f"({MIN_OPSET} to {MAX_OPSET}).")


def pin_input_shapes(model: onnx.ModelProto, input_shapes: dict[str, list[int]] | None) -> onnx.ModelProto:
    """Write the user's --input-shape values into the graph inputs before shape inference. They
    may change a dim the model fixes (a batch-1 export run at batch 4): every shape is inferred
    from the inputs, and a node that cannot follow (a Reshape to a hard-coded batch) is refused."""
    if not input_shapes:
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)  # the caller's model stays as it is (a copy, not a serialization: past 2 GiB)
    model = copy
    weights = {t.name for t in model.graph.initializer}
    by_name = {i.name: i for i in model.graph.input if i.name not in weights}
    for name, shape in input_shapes.items():
        given = f"--input-shape {name}={'x'.join(map(str, shape))}"
        if name not in by_name:
            what = "a weight (initializer), not an input" if name in weights else "not an input"
            raise CompileError(f"{given}: '{name}' is {what}; the model's inputs are "
                               f"{', '.join(sorted(by_name)) or 'none'}.")
        if any(d < 1 for d in shape):
            raise CompileError(f"{given}: every dim must be 1 or more.")
        dims = by_name[name].type.tensor_type.shape.dim
        if len(dims) and len(dims) != len(shape):
            raise CompileError(f"{given} has rank {len(shape)} but input '{name}' has rank "
                               f"{len(dims)} ({_dims_text(dims)}).")
        del dims[:]
        for d in shape:
            by_name[name].type.tensor_type.shape.dim.add().dim_value = int(d)
    return model


def _dims_text(dims) -> str:
    return "x".join(str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in dims)


def _value_from_type(name: str, tp: onnx.TypeProto) -> Value:
    tt = tp.tensor_type
    dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)) if tt.elem_type else None
    shape = None
    if tt.HasField("shape"):
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        shape = None if any(d is None for d in dims) else tuple(dims)
    return Value(name, dtype, shape)


# Weights past this size leave the copies the frontend works on (shape inference serializes its
# copy, and a message past 2 GiB cannot be serialized; every copy of the weights costs time and
# memory): their name, dims and type are all it needs, their arrays are read once.
SKELETON_BYTES = 1 << 20


def skeleton(model: onnx.ModelProto, limit: int = SKELETON_BYTES) -> onnx.ModelProto:
    """A copy of `model` whose initializers past `limit` bytes keep their name, dims and type but
    no data. Their bytes are never copied."""
    copy = onnx.ModelProto()
    for field, value in model.ListFields():
        if field.name != "graph":
            _copy_field(copy, field, value)
    copy.graph.SetInParent()
    for field, value in model.graph.ListFields():
        if field.name != "initializer":
            _copy_field(copy.graph, field, value)
    for t in model.graph.initializer:
        kept = copy.graph.initializer.add()
        if data_bytes(t) > limit:
            kept.name, kept.data_type, kept.data_location = t.name, t.data_type, onnx.TensorProto.EXTERNAL
            kept.dims.extend(t.dims)
            kept.external_data.add(key="location", value="vkc-skeleton")
        else:
            kept.CopyFrom(t)
    return copy


def data_bytes(t: onnx.TensorProto) -> int:
    """A tensor's data size from its dims and type (protobuf's ByteSize serializes it)."""
    try:
        itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
    except (KeyError, TypeError, ValueError):
        itemsize = 1
    return int(np.prod(t.dims, dtype=np.int64)) * itemsize


def _copy_field(message, field, value) -> None:
    # protobuf 7 has is_repeated only, protobuf 3 label only
    if field.is_repeated if hasattr(field, "is_repeated") else field.label == field.LABEL_REPEATED:
        getattr(message, field.name).extend(value)
    elif field.message_type is not None:
        getattr(message, field.name).CopyFrom(value)
    else:
        setattr(message, field.name, value)


def _infer_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with onnx's inferred types written into it (inferred on its skeleton)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(skeleton(model), check_type=True, data_prop=True)
    except Exception as exc:  # noqa: BLE001 - onnx raises several types here
        raise CompileError(f"ONNX shape inference failed: {one_line(exc)}") from exc
    del model.graph.value_info[:]
    model.graph.value_info.extend(inferred.graph.value_info)
    for out, typed in zip(model.graph.output, inferred.graph.output):
        out.type.CopyFrom(typed.type)
    return model


def initializer_arrays(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The main graph's initializers as arrays, by name (to_ir's `arrays`)."""
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def model_digest(model: onnx.ModelProto) -> str:
    """SHA-256 identifying the model: of its serialization with no initializer's data, then of
    each initializer's data in order (no copy of the whole model is serialized: past protobuf's
    2 GiB none can be)."""
    h = hashlib.sha256(skeleton(model, limit=-1).SerializeToString())
    for t in model.graph.initializer:
        h.update(t.raw_data if t.HasField("raw_data") else t.SerializeToString())
    return h.hexdigest()


def _dims(tp) -> tuple | None:
    """A tensor type's static shape, or None."""
    tt = tp.tensor_type if tp is not None else None
    if tt is None or not tt.elem_type or not tt.HasField("shape") or \
            any(not d.HasField("dim_value") for d in tt.shape.dim):
        return None
    return tuple(d.dim_value for d in tt.shape.dim)


def _unknown_to_onnx(node: onnx.NodeProto) -> bool:
    """An op onnx has no schema for: another domain's (com.microsoft's), or one onnxruntime
    declares in the ONNX domain (SimplifiedLayerNormalization)."""
    return node.domain not in ONNX_DOMAINS or not onnx.defs.has(node.op_type)


def _type_other_domains(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    """onnx infers no types for ops it has no schema for (com.microsoft's), nor for anything
    downstream of them: give each such op's outputs the shapes its declaration computes (output_shape,
    output_shapes in compiler/registry.py) and infer again, until no more is learned."""
    for _ in range(len(model.graph.node)):
        g = model.graph
        known = {vi.name: vi.type for vi in [*g.input, *g.value_info, *g.output]}
        known.update({t.name: onnx.helper.make_tensor_type_proto(t.data_type, list(t.dims))
                      for t in g.initializer})
        added = []
        for n in g.node:
            rule = find_rule(n.op_type, n.domain, opset) if _unknown_to_onnx(n) else None
            declared = rule and (rule.output_shapes or rule.output_shape)
            if declared is None or not n.input or not n.output or _dims(known.get(n.input[0])) is None or \
                    all(not o or _dims(known.get(o)) is not None for o in n.output):
                continue
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
            types = [known[x].tensor_type.elem_type if x in known else 0 for x in n.input]
            shapes = declared([_dims(known.get(x)) for x in n.input], attrs,
                              [np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t)) if t else None for t in types])
            shapes = shapes if rule.output_shapes else [shapes]
            elem = known[n.input[rule.output_dtype_from]].tensor_type.elem_type
            added += [onnx.helper.make_tensor_value_info(out, elem, list(shape))
                      for out, shape in zip(n.output, shapes)
                      if out and shape is not None and _dims(known.get(out)) is None]
        if not added:
            return model
        # a graph output's own entry takes the type: untyped, it would hide it (onnx then infers
        # nothing downstream, and the next round reads it as unknown)
        outputs = {o.name: o for o in g.output}
        for vi in added:
            if vi.name in outputs:
                outputs[vi.name].type.CopyFrom(vi.type)
            else:
                g.value_info.append(vi)
        model = _infer_shapes(model)
    return model


def infer_types(model: onnx.ModelProto, names: list[str]) -> tuple[onnx.ModelProto, dict[str, onnx.TypeProto]]:
    """(the model with onnx's inferred types, the types the model declared for its outputs and
    value_info). The declarations are dropped before inference: shapes come from the inputs
    through the graph, as onnxruntime computes them, never from a declaration written for other
    input shapes (an exporter's `[1, 10]` output of a batch-N model). A declared element type that
    differs from the computed one is refused (onnxruntime refuses the model too)."""
    g = model.graph
    declared = {vi.name: vi.type for vi in [*g.value_info, *g.output]}
    bare = onnx.ModelProto()
    bare.CopyFrom(model)
    del bare.graph.value_info[:]
    given = {i.name for i in g.input} | {t.name for t in g.initializer}
    # outputs onnx infers no type for (a contrib op's, and what is computed from one) keep their
    # element type: an untyped entry fails the inference of the nodes that read it
    keep = {o for n in g.node if _unknown_to_onnx(n) for o in n.output}
    grew = True
    while grew:
        more = {o for n in g.node if keep & set(n.input) for o in n.output} - keep
        keep |= more
        grew = bool(more)
    for out in bare.graph.output:
        if out.name in given:   # an input passed out keeps its type: onnx infers nothing else
            continue
        elem = out.type.tensor_type.elem_type
        out.type.Clear()
        if out.name in keep and elem:
            out.type.tensor_type.elem_type = elem
    inferred = _infer_shapes(bare)
    writer = {out: (n, name) for n, name in zip(g.node, names) for out in n.output}
    for vi in [*inferred.graph.value_info, *inferred.graph.output]:
        want = declared[vi.name].tensor_type.elem_type if vi.name in declared else 0
        got = vi.type.tensor_type.elem_type
        if want and got and want != got and vi.name in writer:
            node, name = writer[vi.name]
            where = "an output" if any(o.name == vi.name for o in g.output) else "a value_info entry"
            raise CompileError(
                f"the model declares '{vi.name}' ({where}) as {_type_name(want)}, but node '{name}' "
                f"({node.op_type}) computes {_type_name(got)}; onnxruntime refuses the model too. "
                f"Fix the declaration to {_type_name(got)} (or re-export the model).")
    return inferred, declared


def _type_name(elem_type: int) -> str:
    """numpy's name of an ONNX element type (float32, int64), or ONNX's where numpy has none."""
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).name
    except (KeyError, TypeError, ValueError):
        return onnx.helper.tensor_dtype_to_string(elem_type).removeprefix("TensorProto.").lower()


def to_ir(model: onnx.ModelProto, input_shapes: dict[str, list[int]] | None = None,
          arrays: dict[str, np.ndarray] | None = None) -> Graph:
    """The IR graph of `model` with its inputs pinned to `input_shapes`. arrays: initializers'
    arrays by name, used instead of converting those initializers again (a second graph of the
    same model shares the first one's)."""
    opset = model_opset(model)
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise CompileError(f"the model uses opset {opset}; vkc supports opsets {MIN_OPSET} to "
                           f"{MAX_OPSET}. Convert it with onnx.version_converter.")
    order = ordered_nodes(model.graph) or range(len(model.graph.node))
    names = [n.name or f"{n.op_type}_{i}" for i, n in enumerate(model.graph.node)]
    # Where onnx infers nothing (an op of another domain: no schema), the declarations fill in:
    # the dtype always, the shape only when every input has the static shape the model declares.
    weights = {t.name for t in model.graph.initializer}
    declared_inputs = {i.name: _value_from_type(i.name, i.type).shape for i in model.graph.input
                       if i.name not in weights}
    as_declared = all(shape is not None and tuple((input_shapes or {}).get(name, shape)) == shape
                      for name, shape in declared_inputs.items())
    # The passes below copy the model: they read a skeleton, the large weights' arrays come from
    # their own tensors.
    large = {t.name: t for t in model.graph.initializer if data_bytes(t) > SKELETON_BYTES}
    model = pin_input_shapes(skeleton(model) if large else model, input_shapes)
    model, declared = infer_types(model, names)
    model = _type_other_domains(model, opset)
    g = model.graph
    values: dict[str, Value] = {}
    for init in g.initializer:
        data = (arrays or {}).get(init.name)
        data = numpy_helper.to_array(large.get(init.name, init)) if data is None else data
        values[init.name] = Value(init.name, data.dtype, tuple(data.shape), data=data)
    for vi in [*g.input, *g.value_info, *g.output]:
        if vi.name not in values:
            values[vi.name] = _value_from_type(vi.name, vi.type)
    contrib = {o for n in g.node if _unknown_to_onnx(n) for o in n.output}
    for name, tp in declared.items():
        v, d = values.setdefault(name, Value(name, None, None)), _value_from_type(name, tp)
        v.dtype = v.dtype if v.dtype is not None else d.dtype
        if v.shape is None and name in contrib and as_declared:
            v.shape = d.shape

    def get(name: str) -> Value:
        if name not in values:  # an output shape inference could not type
            values[name] = Value(name, None, None)
        return values[name]

    # Initializers listed as graph inputs (old exporters do this) are weights, not inputs.
    inputs = [values[i.name] for i in g.input if not values[i.name].is_constant]
    for i in g.input:
        if i.name in values and values[i.name].shape is None and not values[i.name].is_constant:
            dims = i.type.tensor_type.shape.dim
            example = "x".join(str(d.dim_value) if d.HasField("dim_value") else "1" for d in dims) or "1x3x224x224"
            raise CompileError(f"input '{i.name}' has a dynamic shape ({_dims_text(dims) or 'no shape given'}); "
                               f"pin it with --input-shape {i.name}={example} (input_shapes={{'{i.name}': "
                               f"[{example.replace('x', ', ')}]}} in Python), your real sizes.")
    nodes = []
    for i in order:
        n = g.node[i]
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        # An absent optional output ('') is a value of its own in every slot, not one shared.
        nodes.append(Node(n.op_type, names[i], [get(x) if x else None for x in n.input],
                          [get(x) if x else Value("", None, None) for x in n.output], attrs,
                          n.domain, [names[i]]))
    for node in nodes:  # outputs onnx cannot type (another domain's op's), as the op declares them
        rule = find_rule(node.op_type, node.domain, opset)
        if rule is not None and rule.output_types is not None:
            rule.output_types(node)
    outputs = [get(o.name) for o in g.output]
    producer = f"{model.producer_name} {model.producer_version}".strip()
    return Graph(nodes, inputs, outputs, opset, g.name or "model", producer)
