"""The onnx wheel's "light" models with random weights, and the weight initializers they use:
what `make demo` and the benchmarks run, and the test builders share."""
from __future__ import annotations

import os
from typing import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

TINY = 1e-30


def rel_l2(got: np.ndarray, ref: np.ndarray) -> float:
    """||got - ref|| / ||ref|| over every element, in float64."""
    got = np.asarray(got, np.float64).ravel()
    ref = np.asarray(ref, np.float64).ravel()
    return float(np.linalg.norm(got - ref) / max(float(np.linalg.norm(ref)), TINY))


def init(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def tensor_info(name: str, shape: Sequence[int]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [int(s) for s in shape])


def he_normal(rng: np.random.Generator, shape: Sequence[int], fan_in: int | None = None) -> np.ndarray:
    """He (Kaiming) normal init; fan_in defaults to prod(shape[1:]) (conv OIHW / linear [out, in])."""
    shape = tuple(int(s) for s in shape)
    if fan_in is None:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else int(shape[0])
    std = np.sqrt(2.0 / max(fan_in, 1))
    return (rng.standard_normal(shape) * std).astype(np.float32)


def small_normal(rng: np.random.Generator, shape: Sequence[int], scale: float = 0.1) -> np.ndarray:
    return (rng.standard_normal(tuple(shape)) * scale).astype(np.float32)


def bn_params(rng: np.random.Generator, channels: int, gamma_scale: float = 1.0) -> dict[str, np.ndarray]:
    """Random but well-conditioned BatchNormalization parameters (var strictly positive)."""
    return {
        "scale": (gamma_scale * (1.0 + 0.2 * rng.standard_normal(channels))).astype(np.float32),
        "bias": (0.1 * rng.standard_normal(channels)).astype(np.float32),
        "mean": (0.1 * rng.standard_normal(channels)).astype(np.float32),
        "var": rng.uniform(0.5, 1.5, channels).astype(np.float32),
    }


def light_model_path(name: str) -> str:
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", f"light_{name}.onnx")


def randomize_light_model(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """The light models ship every weight as ``ConstantOfShape(0.02)`` (and a few constant
    initializers). Constant weights make every channel identical, which hides indexing bugs, so:
    every float weight becomes a random initializer (He init by role: Conv/Gemm weight, bias,
    BatchNorm statistics), the ConstantOfShape nodes that produced them are dropped, and the last
    linear layer before the final Softmax is rescaled so that the logits have a moderate spread
    (a saturated softmax would make float32 rounding differences look like errors)."""
    rng = np.random.default_rng(seed)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}

    # shape of every weight tensor: initializer, or ConstantOfShape(shape initializer)
    weight_shapes: dict[str, tuple[int, ...]] = {}
    drop_nodes = []
    for node in g.node:
        if node.op_type == "ConstantOfShape" and node.input and node.input[0] in inits:
            weight_shapes[node.output[0]] = tuple(int(s) for s in inits[node.input[0]])
            drop_nodes.append(node)
    for name, arr in inits.items():
        if arr.dtype == np.float32:
            weight_shapes.setdefault(name, arr.shape)

    consumers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for node in g.node:
        for i, name in enumerate(node.input):
            consumers.setdefault(name, []).append((node, i))
    producer = {o: n for n in g.node for o in n.output}

    def feeds_residual(tensor: str) -> bool:
        return any(n.op_type in ("Sum", "Add") for n, _ in consumers.get(tensor, []))

    new_values: dict[str, np.ndarray] = {}
    for name, shape in weight_shapes.items():
        uses = consumers.get(name, [])
        if not uses:
            continue
        node, idx = uses[0]
        if node.op_type == "Conv" and idx == 1:
            value = he_normal(rng, shape)
        elif node.op_type == "Gemm" and idx == 1:
            trans_b = any(a.name == "transB" and a.i for a in node.attribute)
            value = he_normal(rng, shape, fan_in=shape[1] if trans_b else shape[0])
        elif node.op_type == "BatchNormalization" and idx in (1, 2, 3, 4):
            c = shape[0]
            # the BN closing a residual branch gets a small gamma so that activations do not
            # double at every residual Add
            p = bn_params(rng, c, gamma_scale=0.3 if feeds_residual(node.output[0]) else 1.0)
            value = p[["scale", "bias", "mean", "var"][idx - 1]]
        else:
            value = small_normal(rng, shape)
        new_values[name] = value.reshape(shape).astype(np.float32)

    for node in drop_nodes:
        g.node.remove(node)
    keep = [t for t in g.initializer if t.name not in new_values and
            any(t.name in n.input for n in g.node)]
    del g.initializer[:]
    g.initializer.extend(keep)
    g.initializer.extend(init(n, v) for n, v in new_values.items())
    # IR < 4: every initializer must also be a graph input
    if m.ir_version < 4:
        declared = {vi.name for vi in g.input}
        live_inits = {t.name for t in g.initializer}
        stale = [vi for vi in g.input if vi.name not in live_inits and
                 not any(vi.name in n.input for n in g.node)]
        for vi in stale:
            g.input.remove(vi)
        for name, v in new_values.items():
            if name not in declared:
                g.input.append(tensor_info(name, v.shape))

    _rescale_logits(m, producer, seed)
    return m


def _rescale_logits(m: onnx.ModelProto, producer: dict, seed: int, target_std: float = 2.0) -> None:
    """Scale the weight and bias of the linear layer that feeds the last Softmax (through
    positively homogeneous ops only) so that the Softmax input has std ~ target_std."""
    import onnxruntime as ort

    g = m.graph
    softmaxes = [n for n in g.node if n.op_type == "Softmax"]
    if not softmaxes:
        return
    logits = softmaxes[-1].input[0]
    node = producer.get(logits)
    while node is not None and node.op_type in ("Relu", "GlobalAveragePool", "AveragePool", "Reshape",
                                                   "Flatten", "Dropout", "MaxPool"):
        node = producer.get(node.input[0])
    if node is None or node.op_type not in ("Conv", "Gemm"):
        return
    probe = onnx.ModelProto()
    probe.CopyFrom(m)
    probe.graph.output.append(helper.make_tensor_value_info(logits, TensorProto.FLOAT, None))
    sess = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    init_names = {t.name for t in g.initializer}
    feeds = {}
    rng = np.random.default_rng(seed + 1)
    for vi in g.input:
        if vi.name in init_names:
            continue
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    value = sess.run([logits], feeds)[0]
    std = float(np.std(value))
    if not np.isfinite(std) or std == 0.0:
        return
    factor = np.float32(target_std / std)
    scaled = set(node.input[1:3])
    for t in g.initializer:
        if t.name in scaled:
            t.CopyFrom(init(t.name, numpy_helper.to_array(t) * factor))


def light_model(name: str, seed: int = 0) -> onnx.ModelProto:
    return randomize_light_model(onnx.load(light_model_path(name)), seed=seed)
