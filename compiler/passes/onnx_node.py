"""Run onnx's own machinery (reference evaluator, shape inference) on one IR node."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from ..ir import Node, Value
from ..registry import fact


def _value_info(v: Value) -> onnx.ValueInfoProto:
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(v.dtype)) if v.dtype is not None else 0
    return helper.make_tensor_value_info(v.name, elem, list(v.shape) if v.shape is not None else None)


def one_node_model(node: Node, opset: int, constants_as_initializers: bool,
                   max_initializer_size: int | None = None) -> onnx.ModelProto:
    """`node` as a model of its own; its constant inputs (those of at most
    `max_initializer_size` elements, where given) as initializers, or as graph inputs."""
    inputs = [v for v in node.inputs if v is not None]

    def initializer(v):
        return constants_as_initializers and v.is_constant and (
            max_initializer_size is None or v.size <= max_initializer_size)

    inits = [numpy_helper.from_array(v.data, v.name) for v in inputs if initializer(v)]
    graph_inputs = [_value_info(v) for v in inputs if not initializer(v)]
    proto = helper.make_node(node.op_type, [v.name if v else "" for v in node.inputs],
                             [v.name for v in node.outputs], name=node.name, domain=node.domain,
                             **node.attrs)
    graph = helper.make_graph([proto], "one_node", graph_inputs,
                              [helper.make_tensor_value_info(v.name, 0, None) for v in node.outputs],
                              initializer=inits)
    opsets = [helper.make_opsetid("", opset)]
    if node.domain not in ("", "ai.onnx"):  # a contrib op (com.microsoft, version 1)
        opsets.append(helper.make_opsetid(node.domain, 1))
    return helper.make_model(graph, opset_imports=opsets)


F16, F32 = np.dtype(np.float16), np.dtype(np.float32)


def evaluate(node: Node, opset: int) -> list[np.ndarray]:
    """Compute a node whose inputs are all constants with onnx.reference, or where onnx.reference
    computes the op wrongly, as its declaration says (registry `evaluate`). float16 operands are
    computed in float32 and the float16 results rounded once, as vkc's kernels (and onnxruntime's
    normalizations: stash_type 1) compute them: onnx.reference would compute in float16, a
    LayerNormalization's statistics several float16 units off."""
    own = fact(node, "evaluate", opset)
    if own is not None:
        return own(node, *[v.data for v in node.inputs])
    if any(v is not None and np.dtype(v.dtype) == F16 for v in node.inputs) and \
            all(v.dtype is not None for v in node.outputs):
        wide = [Value(v.name, F32, v.shape, data=v.data.astype(F32)) if v is not None and
                np.dtype(v.dtype) == F16 else v for v in node.inputs]
        results = evaluate(Node(node.op_type, node.name, wide, node.outputs, node.attrs,
                                node.domain), opset)
        return [r.astype(F16) if np.dtype(v.dtype) == F16 and r.dtype == F32 else r
                for v, r in zip(node.outputs, results)]
    model = one_node_model(node, opset, constants_as_initializers=False)
    feeds = {v.name: v.data for v in node.inputs if v is not None}
    return [np.asarray(r) for r in ReferenceEvaluator(model).run(None, feeds)]


def infer_output_types(node: Node, opset: int, max_initializer_size: int | None = None
                       ) -> list[tuple[np.dtype | None, tuple | None]]:
    """Static output dtypes and shapes of one node, with constant inputs (those of at most
    `max_initializer_size` elements, where given: shapes and axes) visible to inference."""
    model = one_node_model(node, opset, constants_as_initializers=True,
                           max_initializer_size=max_initializer_size)
    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    by_name = {vi.name: vi.type.tensor_type for vi in inferred.graph.output}
    result = []
    for v in node.outputs:
        tt = by_name.get(v.name)
        if tt is None or not tt.HasField("shape"):
            result.append((None, None))
            continue
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type)) if tt.elem_type else None
        result.append((dtype, None if None in dims else tuple(dims)))
    return result
