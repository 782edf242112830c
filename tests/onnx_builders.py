"""Small ONNX model builders for the vkc test suites.

Every builder returns an ``onnx.ModelProto`` at opset 13, IR version 8. Weights are always drawn
from a seeded ``np.random.default_rng`` (He init for conv/linear weights, small normals for biases,
sane BatchNorm statistics), never constants, so a kernel that ignores a weight, swaps two of them
or reads the wrong element shows up as a numeric mismatch.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from benchmarks.light_models import (bn_params, he_normal, light_model, light_model_path,  # noqa: F401 (re-exported)
                                     randomize_light_model, small_normal)

OPSET = 13
IR_VERSION = 8

_NP_TO_ONNX = {
    np.dtype(np.float32): TensorProto.FLOAT,
    np.dtype(np.float16): TensorProto.FLOAT16,
    np.dtype(np.int64): TensorProto.INT64,
    np.dtype(np.int32): TensorProto.INT32,
    np.dtype(np.bool_): TensorProto.BOOL,
    np.dtype(np.uint8): TensorProto.UINT8,
    np.dtype(np.int8): TensorProto.INT8,
    np.dtype(np.float64): TensorProto.DOUBLE,
    np.dtype(np.int16): TensorProto.INT16,
    np.dtype(np.uint16): TensorProto.UINT16,
    np.dtype(np.uint32): TensorProto.UINT32,
    np.dtype(np.uint64): TensorProto.UINT64,
}


# ---------------------------------------------------------------------------------------------
# random weights
# ---------------------------------------------------------------------------------------------

# ---------------------------------------------------------------------------------------------
# model assembly
# ---------------------------------------------------------------------------------------------

def make_model(graph: onnx.GraphProto, *, infer_shapes: bool = True,
               extra_opsets: Sequence[tuple[str, int]] = (), opset: int = OPSET) -> onnx.ModelProto:
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="vkc-tests")
    model.ir_version = IR_VERSION
    if infer_shapes:
        model = _fill_output_shapes(model)
    return model


def _fill_output_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """Give every graph output the shape onnx shape inference derives (outputs are declared
    with an element type only)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    except Exception:  # an op without shape inference: leave the outputs as declared
        return model
    known = {vi.name: vi for vi in inferred.graph.value_info}
    known.update({vi.name: vi for vi in inferred.graph.output})
    for out in model.graph.output:
        vi = known.get(out.name)
        if vi is not None and vi.type.tensor_type.HasField("shape") and not out.type.tensor_type.HasField("shape"):
            out.type.tensor_type.shape.CopyFrom(vi.type.tensor_type.shape)
    return model


def tensor_info(name: str, shape: Sequence[int] | None, dtype=np.float32) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, _NP_TO_ONNX[np.dtype(dtype)],
                                         None if shape is None else [int(s) for s in shape])


def init(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def single_op_model(
    op_type: str,
    input_shapes: Mapping[str, Sequence[int]] | Sequence[Sequence[int]],
    attrs: Mapping[str, object] | None = None,
    *,
    initializers: Mapping[str, np.ndarray] | None = None,
    node_inputs: Sequence[str] | None = None,
    outputs: Sequence[str] = ("y",),
    output_dtypes: Sequence | None = None,
    input_dtypes: Mapping[str, object] | None = None,
    node_name: str | None = None,
    domain: str = "",
) -> onnx.ModelProto:
    """A one-node model.

    input_shapes: graph inputs, ``{name: shape}`` or a list of shapes (named x0, x1, ...; a single
        shape list-of-lists with one entry is named ``x``).
    initializers: ``{name: array}`` constant operands (weights); arrays are stored as given.
    node_inputs: the node's input names in order (``""`` for an absent optional input); by default
        the graph inputs then the initializers, in the order given.
    outputs: the node's output names; all of them become graph outputs (float32 unless
        output_dtypes says otherwise), shapes filled in by onnx shape inference.
    """
    if isinstance(input_shapes, Mapping):
        shapes = dict(input_shapes)
    else:
        input_shapes = list(input_shapes)
        if len(input_shapes) == 1:
            shapes = {"x": input_shapes[0]}
        else:
            shapes = {f"x{i}": s for i, s in enumerate(input_shapes)}
    initializers = dict(initializers or {})
    input_dtypes = dict(input_dtypes or {})
    if node_inputs is None:
        node_inputs = list(shapes) + list(initializers)
    node = helper.make_node(op_type, list(node_inputs), list(outputs),
                            name=node_name or f"{op_type.lower()}_0", domain=domain, **dict(attrs or {}))
    graph_inputs = [tensor_info(n, s, input_dtypes.get(n, np.float32)) for n, s in shapes.items()]
    output_dtypes = list(output_dtypes or [np.float32] * len(outputs))
    graph_outputs = [tensor_info(n, None, d) for n, d in zip(outputs, output_dtypes)]
    graph = helper.make_graph([node], f"single_{op_type}", graph_inputs, graph_outputs,
                              initializer=[init(n, a) for n, a in initializers.items()])
    return make_model(graph)


class GraphBuilder:
    """A tiny helper to chain nodes with automatic names and random weights."""

    def __init__(self, name: str, seed: int = 0):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self._count: dict[str, int] = {}

    def _fresh(self, prefix: str) -> str:
        n = self._count.get(prefix, 0)
        self._count[prefix] = n + 1
        return f"{prefix}_{n}"

    def input(self, name: str, shape: Sequence[int], dtype=np.float32) -> str:
        self.inputs.append(tensor_info(name, shape, dtype))
        return name

    def output(self, name: str, dtype=np.float32) -> str:
        self.outputs.append(tensor_info(name, None, dtype))
        return name

    def const(self, prefix: str, array: np.ndarray) -> str:
        name = self._fresh(prefix)
        self.inits.append(init(name, array))
        return name

    def node(self, op_type: str, inputs: Sequence[str], n_outputs: int = 1, *,
             name: str | None = None, out: str | None = None, **attrs) -> str | list[str]:
        name = name or self._fresh(f"/{op_type.lower()}")
        outs = [out] if (out and n_outputs == 1) else [f"{name}_out{i}" for i in range(n_outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=name, **attrs))
        return outs[0] if n_outputs == 1 else outs

    # -- layers ---------------------------------------------------------------------------------
    def conv(self, x: str, c_in: int, c_out: int, k: int | Sequence[int], *, stride: int = 1,
             pad: int | None = None, group: int = 1, bias: bool = True, name: str | None = None) -> str:
        kh, kw = (k, k) if isinstance(k, int) else tuple(k)
        if pad is None:
            pad_h, pad_w = kh // 2, kw // 2
        else:
            pad_h = pad_w = pad
        w = he_normal(self.rng, (c_out, c_in // group, kh, kw))
        ins = [x, self.const("w", w)]
        if bias:
            ins.append(self.const("b", small_normal(self.rng, (c_out,))))
        return self.node("Conv", ins, name=name, kernel_shape=[kh, kw], strides=[stride, stride],
                         pads=[pad_h, pad_w, pad_h, pad_w], group=group)

    def bn(self, x: str, channels: int, *, gamma_scale: float = 1.0, epsilon: float = 1e-5,
           name: str | None = None) -> str:
        p = bn_params(self.rng, channels, gamma_scale)
        ins = [x] + [self.const(k, v) for k, v in p.items()]
        return self.node("BatchNormalization", ins, name=name, epsilon=epsilon)

    def clip(self, x: str, lo: float | None, hi: float | None, name: str | None = None) -> str:
        ins = [x,
               self.const("clip_min", np.array(lo, np.float32)) if lo is not None else "",
               self.const("clip_max", np.array(hi, np.float32)) if hi is not None else ""]
        while ins and ins[-1] == "":
            ins.pop()
        return self.node("Clip", ins, name=name)

    def gemm(self, x: str, n_in: int, n_out: int, name: str | None = None, w_scale: float = 1.0) -> str:
        """PyTorch nn.Linear export: Gemm(x, W[out, in], b[out]), transB=1."""
        w = he_normal(self.rng, (n_out, n_in)) * np.float32(w_scale)
        b = small_normal(self.rng, (n_out,))
        return self.node("Gemm", [x, self.const("fc_w", w), self.const("fc_b", b)], name=name,
                         alpha=1.0, beta=1.0, transB=1)

    def build(self, outputs: Sequence[str]) -> onnx.ModelProto:
        # rename the final tensors to the declared output names by an Identity-free rewrite
        graph_outputs = []
        for i, o in enumerate(outputs):
            graph_outputs.append(tensor_info(o, None))
        graph = helper.make_graph(self.nodes, self.name, self.inputs, graph_outputs, initializer=self.inits)
        return make_model(graph)


# ---------------------------------------------------------------------------------------------
# models
# ---------------------------------------------------------------------------------------------

def mlp(*sizes: int, batch: int = 1, seed: int = 0) -> onnx.ModelProto:
    """``mlp(784, 1024, 1024, 10)``: Gemm(transB=1)+Relu per hidden layer, a final Gemm."""
    if not sizes:
        sizes = (784, 1024, 1024, 10)
    assert len(sizes) >= 2
    g = GraphBuilder("mlp", seed)
    x = g.input("input", [batch, sizes[0]])
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        last = i == len(sizes) - 2
        x = g.node("Gemm", [x, g.const(f"fc{i}.weight", he_normal(g.rng, (b, a))),
                            g.const(f"fc{i}.bias", small_normal(g.rng, (b,)))],
                   name=f"/fc{i}/Gemm", out="output" if last else None, alpha=1.0, beta=1.0, transB=1)
        if not last:
            x = g.node("Relu", [x], name=f"/relu{i}/Relu")
    return g.build(["output"])


def small_cnn(*, batch: int = 1, hw: int = 32, num_classes: int = 10, seed: int = 0) -> onnx.ModelProto:
    """Conv+BN+Relu stem, a residual block (Conv+BN+Relu, Conv+BN, Add, Relu), MaxPool,
    Conv+BN+Relu, GlobalAveragePool, Flatten, Gemm."""
    g = GraphBuilder("small_cnn", seed)
    x = g.input("input", [batch, 3, hw, hw])
    x = g.node("Relu", [g.bn(g.conv(x, 3, 16, 3, bias=False), 16)])
    skip = x
    y = g.node("Relu", [g.bn(g.conv(x, 16, 16, 3, bias=False), 16)])
    y = g.bn(g.conv(y, 16, 16, 3, bias=True), 16, gamma_scale=0.5)
    x = g.node("Relu", [g.node("Add", [y, skip])])
    x = g.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = g.node("Relu", [g.bn(g.conv(x, 16, 32, 3, stride=2, bias=False), 32)])
    x = g.node("GlobalAveragePool", [x])
    x = g.node("Flatten", [x], axis=1)
    g.node("Gemm", [x, g.const("fc_w", he_normal(g.rng, (num_classes, 32))),
                    g.const("fc_b", small_normal(g.rng, (num_classes,)))],
           name="/fc/Gemm", out="logits", transB=1)
    return g.build(["logits"])


def mobilenetv2_block(*, c_in: int = 16, c_out: int | None = None, expand: int = 6, stride: int = 1,
                      hw: int = 14, batch: int = 1, seed: int = 0) -> onnx.ModelProto:
    """MobileNetV2 inverted residual: 1x1 expand Conv+BN+Clip(0,6), 3x3 depthwise Conv (group=C)
    +BN+Clip(0,6), 1x1 project Conv+BN, and a residual Add when stride == 1 and c_in == c_out.
    Clip takes min/max as inputs (opset >= 11 style)."""
    c_out = c_in if c_out is None else c_out
    hidden = c_in * expand
    g = GraphBuilder(f"mobilenetv2_block_s{stride}", seed)
    x = g.input("input", [batch, c_in, hw, hw])
    y = g.clip(g.bn(g.conv(x, c_in, hidden, 1, bias=False, name="/expand/Conv"), hidden), 0.0, 6.0)
    y = g.clip(g.bn(g.conv(y, hidden, hidden, 3, stride=stride, group=hidden, bias=False,
                           name="/depthwise/Conv"), hidden), 0.0, 6.0)
    y = g.bn(g.conv(y, hidden, c_out, 1, bias=False, name="/project/Conv"), c_out)
    residual = stride == 1 and c_in == c_out
    if residual:
        g.node("Add", [y, x], name="/residual/Add", out="output")
    else:
        g.node("Identity", [y], name="/out/Identity", out="output")
    return g.build(["output"])


def mobilenetv2_block_stride2(**kw) -> onnx.ModelProto:
    """The downsampling variant: stride-2 depthwise conv, more output channels, no residual."""
    kw.setdefault("c_in", 16)
    kw.setdefault("c_out", 24)
    return mobilenetv2_block(stride=2, **kw)


def dynamic_mlp(seed: int = 7) -> onnx.ModelProto:
    """x[n, 16] -> Gemm -> Relu -> Gemm -> Softmax -> y[n, 8], random weights, the batch `n` free
    (pinned per shape variant: compile_model(..., variants=[{"x": [1, 16]}, ...]))."""
    rng = np.random.default_rng(seed)
    w1, b1 = rng.standard_normal((16, 32)).astype(np.float32), rng.standard_normal(32).astype(np.float32)
    w2, b2 = rng.standard_normal((32, 8)).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "W1", "B1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("Gemm", ["r", "W2", "B2"], ["z"]), helper.make_node("Softmax", ["z"], ["y"], axis=1)],
        "dynamic_mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])],
        [init("W1", w1), init("B1", b1), init("W2", w2), init("B2", b2)])
    return make_model(graph)
