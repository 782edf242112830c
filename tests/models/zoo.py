"""Model-zoo builders: torchvision architectures as PyTorch's ONNX exporter writes them, with
random weights.

Every builder returns an ``onnx.ModelProto`` (IR version 8, one default-domain opset between 13
and 17) with a single float32 input ``input`` [batch, 3, resolution, resolution] and a single
output ``output``. Layer configurations follow torchvision's definitions exactly at full size:

    mobilenet_v2        torchvision.models.mobilenet_v2 (width_mult ``width``)
    mobilenet_v3_small  torchvision.models.mobilenet_v3_small (width_mult ``width``)
    resnet18, resnet50  torchvision.models.resnet18 / resnet50 (v1.5: stride on the 3x3 conv)
    efficientnet_b0     torchvision.models.efficientnet_b0
    shufflenet_v2       torchvision.models.shufflenet_v2_x1_0 (``width`` 0.5/1.0/1.5/2.0)
    unet_small          a 3-level UNet (not torchvision): ConvTranspose for one up-step,
                        Resize (nearest, scale 2) for the other, Concat skips

The graph form is that of ``torch.onnx.export`` (TorchScript exporter) in eval mode:

  * ``fold_bn=False`` (default): Conv (no bias) followed by BatchNormalization, as with
    ``training=TrainingMode.PRESERVE`` / no Conv-BN fusion; ``fold_bn=True``: BN folded into the
    Conv weight and bias, as the exporter's eval-mode fusion writes it. For the same seed both
    variants compute the same function (the folded weights are computed from the same draw).
  * ReLU6 -> ``Clip(x, min, max)`` with min/max as Constant inputs; Hardswish -> ``HardSwish`` at
    opset >= 14, ``Mul(x, HardSigmoid(x, alpha=1/6, beta=0.5))`` below; Hardsigmoid ->
    ``HardSigmoid(alpha=1/6, beta=0.5)``; SiLU -> ``Mul(x, Sigmoid(x))``.
  * ``flatten="flatten"``: ``Flatten(axis=1)`` before the classifier Gemm (``torch.flatten(x, 1)``);
    ``flatten="reshape"``: ``x.view(x.size(0), -1)``, i.e. the shape subgraph
    Shape -> Gather -> Unsqueeze -> Concat -> Reshape.
  * ``shape_subgraph=True`` (default): ShuffleNet's channel shuffle (``x.view`` / ``transpose`` /
    ``view``) with its shapes computed from ``Shape`` of the input (Shape, Gather, Div,
    Unsqueeze, Concat), as exported without constant folding; ``False``: constant shapes, as
    with ``do_constant_folding=True``.
  * ShuffleNet's ``x.chunk(2, dim=1)``: ``Split`` with a constant ``split`` input
    (``channel_split="split"``) or two ``Slice`` nodes (``channel_split="slice"``).
  * Linear -> ``Gemm(transB=1)``; Dropout vanishes in eval mode; adaptive average pooling to 1x1
    -> ``GlobalAveragePool``; ``x.mean([2, 3])`` -> ``ReduceMean(axes=[2, 3], keepdims=0)``.

Weights are drawn from ``np.random.default_rng(seed)``: He-normal conv/linear weights, small
normal biases, well-conditioned BatchNorm statistics; the BN that closes a residual branch gets a
smaller gamma (as zero_init_residual would, but not zero) so activations do not grow at every
residual Add. Finally the last linear layer (weight and bias) is rescaled so that the output has
std ~ ``target_std`` (2 by default) on a standard-normal input, measured with onnxruntime.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from benchmarks.light_models import bn_params, small_normal

IR_VERSION = 8
MIN_OPSET, MAX_OPSET = 13, 17
DEFAULT_OPSET = 13
TARGET_STD = 2.0
HARDSIGMOID_ALPHA = float(np.float32(1.0 / 6.0))  # torch exports alpha=0.1666666716337204

__all__ = ["mobilenet_v2", "mobilenet_v3_small", "resnet18", "resnet50", "efficientnet_b0",
           "shufflenet_v2", "unet_small", "ZOO", "to_float64"]


# ---------------------------------------------------------------------------------------------
# random weights
# ---------------------------------------------------------------------------------------------

def _he_normal(rng: np.random.Generator, shape: Sequence[int], fan_in: int, gain: float = 2.0) -> np.ndarray:
    """He normal (gain 2, before a ReLU-like activation); gain 1 (LeCun) before a linear output,
    so that chains without activations (depthwise -> BN in ShuffleNet) keep their scale."""
    return (rng.standard_normal(tuple(shape)) * np.sqrt(gain / max(fan_in, 1))).astype(np.float32)


def _bn_params(rng: np.random.Generator, c: int, gamma_scale: float = 1.0) -> dict[str, np.ndarray]:
    """bn_params under the names torch's BatchNorm2d gives its parameters."""
    p = bn_params(rng, c, gamma_scale)
    return {"weight": p["scale"], "bias": p["bias"], "running_mean": p["mean"], "running_var": p["var"]}


def _make_divisible(v: float, divisor: int = 8, min_value: int | None = None) -> int:
    """torchvision.models._utils._make_divisible."""
    if min_value is None:
        min_value = divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


# ---------------------------------------------------------------------------------------------
# an exporter-style graph builder
# ---------------------------------------------------------------------------------------------

class _Export:
    """Builds a graph the way torch.onnx.export names it: node ``/features/features.0/Conv``,
    its output ``/features/features.0/Conv_output_0``, parameters ``features.0.0.weight``
    (``onnx::Conv_<n>`` for exporter-made ones such as folded Conv+BN weights)."""

    def __init__(self, name: str, *, batch: int, opset: int, seed: int, fold_bn: bool,
                 shape_subgraph: bool, flatten: str):
        if not MIN_OPSET <= opset <= MAX_OPSET:
            raise ValueError(f"opset {opset} is outside {MIN_OPSET}..{MAX_OPSET}")
        if flatten not in ("flatten", "reshape"):
            raise ValueError(f"flatten must be 'flatten' or 'reshape', not {flatten!r}")
        self.name = name
        self.batch = batch
        self.opset = opset
        self.rng = np.random.default_rng(seed)
        self.fold_bn = fold_bn
        self.shape_subgraph = shape_subgraph
        self.flatten_mode = flatten
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self._scope: list[str] = []
        self._node_names: dict[str, int] = {}
        self._anon = 0
        self._param_names: set[str] = set()
        self.last_linear: tuple[str, str] | None = None  # (weight, bias) initializer names

    # -- naming ---------------------------------------------------------------------------------
    @contextlib.contextmanager
    def scope(self, *parts: str):
        n = len(self._scope)
        self._scope.extend(parts)
        try:
            yield
        finally:
            del self._scope[n:]

    def _node_name(self, op_type: str) -> str:
        base = "/" + "/".join(self._scope + [op_type]) if self._scope else f"/{op_type}"
        k = self._node_names.get(base, 0)
        self._node_names[base] = k + 1
        return base if k == 0 else f"{base}_{k}"

    def _param_name(self, leaf: str) -> str:
        # module path: the scope parts that name modules (drop the repeated prefixes)
        return ".".join([s.split("/")[-1] for s in self._scope[-1:]] + [leaf]) if self._scope else leaf

    # -- primitives -----------------------------------------------------------------------------
    def input(self, name: str, shape: Sequence[int]) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
        return name

    def param(self, leaf: str | None, array: np.ndarray) -> str:
        if leaf is None:
            self._anon += 1
            name = f"onnx::{self._anon}"
        else:
            name = self._param_name(leaf)
        if name in self._param_names:
            raise ValueError(f"duplicate parameter name {name!r}")
        self._param_names.add(name)
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def node(self, op_type: str, inputs: Sequence[str], n_outputs: int = 1, **attrs) -> str | list[str]:
        name = self._node_name(op_type)
        outs = [f"{name}_output_{i}" for i in range(n_outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=name, **attrs))
        return outs[0] if n_outputs == 1 else outs

    def constant(self, array) -> str:
        """A Constant node (the exporter's form of Python scalars and shape literals)."""
        return self.node("Constant", [], value=numpy_helper.from_array(np.asarray(array)))

    # -- layers ---------------------------------------------------------------------------------
    def conv(self, x: str, c_in: int, c_out: int, k: int, *, stride: int = 1, pad: int | None = None,
             groups: int = 1, bias: bool = True, prefix: str = "") -> str:
        pad = (k - 1) // 2 if pad is None else pad
        w = _he_normal(self.rng, (c_out, c_in // groups, k, k), fan_in=(c_in // groups) * k * k)
        ins = [x, self.param(prefix + "weight", w)]
        if bias:
            ins.append(self.param(prefix + "bias", small_normal(self.rng, (c_out,))))
        return self.node("Conv", ins, dilations=[1, 1], group=groups, kernel_shape=[k, k],
                         pads=[pad, pad, pad, pad], strides=[stride, stride])

    def conv_bn(self, x: str, c_in: int, c_out: int, k: int, *, stride: int = 1, groups: int = 1,
                act: str | None = None, eps: float = 1e-5, momentum: float = 0.1,
                gamma_scale: float = 1.0, conv_name: str = "0", bn_name: str = "1",
                act_name: str = "2", pad: int | None = None) -> str:
        """Conv2d(bias=False) + BatchNorm2d (+ activation), torchvision's Conv2dNormActivation."""
        pad = (k - 1) // 2 if pad is None else pad
        w = _he_normal(self.rng, (c_out, c_in // groups, k, k), fan_in=(c_in // groups) * k * k,
                       gain=1.0 if act is None else 2.0)
        p = _bn_params(self.rng, c_out, gamma_scale)
        conv_attrs = dict(dilations=[1, 1], group=groups, kernel_shape=[k, k],
                          pads=[pad, pad, pad, pad], strides=[stride, stride])
        if self.fold_bn:
            s = p["weight"].astype(np.float64) / np.sqrt(p["running_var"].astype(np.float64) + eps)
            wf = (w.astype(np.float64) * s[:, None, None, None]).astype(np.float32)
            bf = (p["bias"] - p["running_mean"].astype(np.float64) * s).astype(np.float32)
            with self.scope(conv_name):
                y = self.node("Conv", [x, self.param(None, wf), self.param(None, bf)], **conv_attrs)
        else:
            with self.scope(conv_name):
                y = self.node("Conv", [x, self.param("weight", w)], **conv_attrs)
            with self.scope(bn_name):
                y = self.node("BatchNormalization", [y] + [self.param(k_, v) for k_, v in p.items()],
                              epsilon=eps, momentum=1.0 - momentum)
        if act is not None:
            with self.scope(act_name):
                y = self.act(y, act)
        return y

    def act(self, x: str, kind: str) -> str:
        if kind == "relu":
            return self.node("Relu", [x])
        if kind == "relu6":
            return self.node("Clip", [x, self.constant(np.array(0.0, np.float32)),
                                      self.constant(np.array(6.0, np.float32))])
        if kind == "hardsigmoid":
            return self.node("HardSigmoid", [x], alpha=HARDSIGMOID_ALPHA, beta=0.5)
        if kind == "hardswish":
            if self.opset >= 14:
                return self.node("HardSwish", [x])
            return self.node("Mul", [x, self.node("HardSigmoid", [x], alpha=HARDSIGMOID_ALPHA, beta=0.5)])
        if kind == "sigmoid":
            return self.node("Sigmoid", [x])
        if kind == "silu":
            return self.node("Mul", [x, self.node("Sigmoid", [x])])
        raise ValueError(f"unknown activation {kind!r}")

    def squeeze_excite(self, x: str, c: int, c_sq: int, act: str, scale_act: str, path: str) -> str:
        """torchvision.ops.SqueezeExcitation: avgpool, fc1 (1x1 Conv), act, fc2, scale_act, Mul."""
        with self.scope("avgpool"):
            s = self.node("GlobalAveragePool", [x])
        with self.scope(f"{path}.fc1"):
            s = self.conv(s, c, c_sq, 1)
        with self.scope("activation"):
            s = self.act(s, act)
        with self.scope(f"{path}.fc2"):
            s = self.conv(s, c_sq, c, 1)
        with self.scope("scale_activation"):
            s = self.act(s, scale_act)
        return self.node("Mul", [s, x])

    def maxpool(self, x: str, k: int, stride: int, pad: int) -> str:
        return self.node("MaxPool", [x], ceil_mode=0, kernel_shape=[k, k], pads=[pad] * 4,
                         strides=[stride, stride])

    def flatten(self, x: str) -> str:
        if self.flatten_mode == "flatten":
            return self.node("Flatten", [x], axis=1)
        # x.view(x.size(0), -1)
        shape = self.node("Shape", [x])
        n = self.node("Gather", [shape, self.constant(np.array(0, np.int64))], axis=0)
        n = self.node("Unsqueeze", [n, self.constant(np.array([0], np.int64))])
        target = self.node("Concat", [n, self.constant(np.array([-1], np.int64))], axis=0)
        return self.node("Reshape", [x, target])

    def linear(self, x: str, n_in: int, n_out: int, *, last: bool = False) -> str:
        w = _he_normal(self.rng, (n_out, n_in), fan_in=n_in)
        b = small_normal(self.rng, (n_out,))
        wn, bn = self.param("weight", w), self.param("bias", b)
        if last:
            self.last_linear = (wn, bn)
        return self.node("Gemm", [x, wn, bn], alpha=1.0, beta=1.0, transB=1)

    def model(self, output: str) -> onnx.ModelProto:
        # the exporter names the graph output after the user's output name (call once per net)
        for node in self.nodes:
            for i, name in enumerate(node.output):
                if name == output:
                    node.output[i] = "output"
            for i, name in enumerate(node.input):
                if name == output:
                    node.input[i] = "output"
        graph = helper.make_graph(self.nodes, f"main_graph_{self.name}", self.inputs,
                                  [helper.make_tensor_value_info("output", TensorProto.FLOAT, None)],
                                  initializer=self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)],
                              producer_name="pytorch", producer_version="2.1.0")
        m.ir_version = IR_VERSION
        inferred = onnx.shape_inference.infer_shapes(m, strict_mode=True, data_prop=True)
        m.graph.output[0].CopyFrom(inferred.graph.output[0])
        dims = m.graph.output[0].type.tensor_type.shape.dim
        if any(not d.HasField("dim_value") for d in dims):
            # onnx cannot propagate some shape arithmetic (Div at opset 13): ask onnxruntime
            shape = _run_ort(m, np.zeros([d.dim_value for d in self.inputs[0].type.tensor_type.shape.dim],
                                         np.float32)).shape
            m.graph.output[0].CopyFrom(helper.make_tensor_value_info("output", TensorProto.FLOAT, list(shape)))
        return m


def _finish(build: Callable[[int], tuple[_Export, str]], batch: int, target_std: float | None,
            seed: int) -> onnx.ModelProto:
    """Build at ``batch``; rescale the last linear layer so the output has std ~ target_std
    (measured with onnxruntime at batch 1: the factor depends on the weights only)."""
    net, out = build(batch)
    model = net.model(out)
    if not target_std:
        return model
    assert net.last_linear is not None, "builder did not mark its last linear layer"
    probe = model if batch == 1 else build(1)[0].model(out)
    factor = np.float32(target_std / _output_std(probe, seed))
    scaled = set(net.last_linear)
    for t in model.graph.initializer:
        if t.name in scaled:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) * factor, t.name))
    return model


def _run_ort(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


def _output_std(model: onnx.ModelProto, seed: int) -> float:
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    y = _run_ort(model, np.random.default_rng(seed + 7919).standard_normal(shape).astype(np.float32))
    std = float(np.std(y))
    if not np.isfinite(std) or std == 0.0:
        raise RuntimeError(f"output std is {std}: the random model is degenerate")
    return std


def _common(opset: int, fold_bn: bool, shape_subgraph: bool, flatten: str, seed: int):
    return dict(opset=opset, seed=seed, fold_bn=fold_bn, shape_subgraph=shape_subgraph, flatten=flatten)


# ---------------------------------------------------------------------------------------------
# MobileNetV2
# ---------------------------------------------------------------------------------------------

def mobilenet_v2(num_classes: int = 1000, width: float = 1.0, resolution: int = 224, *, batch: int = 1,
                 opset: int = DEFAULT_OPSET, fold_bn: bool = False, flatten: str = "flatten",
                 seed: int = 0, target_std: float | None = TARGET_STD) -> onnx.ModelProto:
    """torchvision mobilenet_v2: ReLU6 (Clip), inverted residuals t,c,n,s as in the paper."""
    setting = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2], [6, 64, 4, 2],
               [6, 96, 3, 1], [6, 160, 3, 2], [6, 320, 1, 1]]

    def build(b: int):
        g = _Export("mobilenet_v2", batch=b, **_common(opset, fold_bn, True, flatten, seed))
        x = g.input("input", [b, 3, resolution, resolution])
        c_in = _make_divisible(32 * width, 8)
        last = _make_divisible(1280 * max(1.0, width), 8)
        with g.scope("features", "features.0"):
            x = g.conv_bn(x, 3, c_in, 3, stride=2, act="relu6",
                          conv_name="features.0.0", bn_name="features.0.1", act_name="features.0.2")
        idx = 1
        for t, c, n, s in setting:
            c_out = _make_divisible(c * width, 8)
            for i in range(n):
                stride = s if i == 0 else 1
                hidden = int(round(c_in * t))
                res = stride == 1 and c_in == c_out
                p = f"features.{idx}"
                with g.scope("features", p, "conv"):
                    y, j = x, 0
                    if t != 1:
                        y = g.conv_bn(y, c_in, hidden, 1, act="relu6", conv_name=f"{p}.conv.0.0",
                                      bn_name=f"{p}.conv.0.1", act_name=f"{p}.conv.0.2")
                        j = 1
                    y = g.conv_bn(y, hidden, hidden, 3, stride=stride, groups=hidden, act="relu6",
                                  conv_name=f"{p}.conv.{j}.0", bn_name=f"{p}.conv.{j}.1",
                                  act_name=f"{p}.conv.{j}.2")
                    y = g.conv_bn(y, hidden, c_out, 1, conv_name=f"{p}.conv.{j + 1}",
                                  bn_name=f"{p}.conv.{j + 2}", gamma_scale=0.5 if res else 1.0)
                if res:
                    with g.scope("features", p):
                        y = g.node("Add", [x, y])
                x, c_in = y, c_out
                idx += 1
        with g.scope("features", f"features.{idx}"):
            x = g.conv_bn(x, c_in, last, 1, act="relu6", conv_name=f"features.{idx}.0",
                          bn_name=f"features.{idx}.1", act_name=f"features.{idx}.2")
        x = g.node("GlobalAveragePool", [x])
        x = g.flatten(x)
        with g.scope("classifier", "classifier.1"):
            x = g.linear(x, last, num_classes, last=True)
        return g, x

    return _finish(build, batch, target_std, seed)


# ---------------------------------------------------------------------------------------------
# MobileNetV3-Small
# ---------------------------------------------------------------------------------------------

def mobilenet_v3_small(num_classes: int = 1000, width: float = 1.0, resolution: int = 224, *,
                       batch: int = 1, opset: int = DEFAULT_OPSET, fold_bn: bool = False,
                       flatten: str = "flatten", seed: int = 0,
                       target_std: float | None = TARGET_STD) -> onnx.ModelProto:
    """torchvision mobilenet_v3_small: Hardswish, SE with Hardsigmoid, BN eps 1e-3."""
    # input_channels, kernel, expanded_channels, out_channels, use_se, activation, stride
    setting = [(16, 3, 16, 16, True, "RE", 2), (16, 3, 72, 24, False, "RE", 2),
               (24, 3, 88, 24, False, "RE", 1), (24, 5, 96, 40, True, "HS", 2),
               (40, 5, 240, 40, True, "HS", 1), (40, 5, 240, 40, True, "HS", 1),
               (40, 5, 120, 48, True, "HS", 1), (48, 5, 144, 48, True, "HS", 1),
               (48, 5, 288, 96, True, "HS", 2), (96, 5, 576, 96, True, "HS", 1),
               (96, 5, 576, 96, True, "HS", 1)]
    adj = lambda c: _make_divisible(c * width, 8)  # noqa: E731
    bn = dict(eps=1e-3, momentum=0.01)

    def build(b: int):
        g = _Export("mobilenet_v3_small", batch=b, **_common(opset, fold_bn, True, flatten, seed))
        x = g.input("input", [b, 3, resolution, resolution])
        first = adj(setting[0][0])
        with g.scope("features", "features.0"):
            x = g.conv_bn(x, 3, first, 3, stride=2, act="hardswish", **bn,
                          conv_name="features.0.0", bn_name="features.0.1", act_name="features.0.2")
        for idx, (ci, k, ce, co, use_se, a, s) in enumerate(setting, start=1):
            ci, ce, co = adj(ci), adj(ce), adj(co)
            act = "hardswish" if a == "HS" else "relu"
            res = s == 1 and ci == co
            p = f"features.{idx}.block"
            with g.scope("features", f"features.{idx}", "block"):
                y, j = x, 0
                if ce != ci:
                    y = g.conv_bn(y, ci, ce, 1, act=act, **bn, conv_name=f"{p}.0.0",
                                  bn_name=f"{p}.0.1", act_name=f"{p}.0.2")
                    j = 1
                y = g.conv_bn(y, ce, ce, k, stride=s, groups=ce, act=act, **bn, conv_name=f"{p}.{j}.0",
                              bn_name=f"{p}.{j}.1", act_name=f"{p}.{j}.2")
                j += 1
                if use_se:
                    with g.scope(f"{p}.{j}"):
                        y = g.squeeze_excite(y, ce, _make_divisible(ce // 4, 8), "relu", "hardsigmoid",
                                             path=f"{p}.{j}")
                    j += 1
                y = g.conv_bn(y, ce, co, 1, **bn, conv_name=f"{p}.{j}.0", bn_name=f"{p}.{j}.1",
                              gamma_scale=0.5 if res else 1.0)
            if res:
                with g.scope("features", f"features.{idx}"):
                    y = g.node("Add", [y, x])
            x = y
        c_last_in = adj(setting[-1][3])
        c_last = 6 * c_last_in
        idx = len(setting) + 1
        with g.scope("features", f"features.{idx}"):
            x = g.conv_bn(x, c_last_in, c_last, 1, act="hardswish", **bn, conv_name=f"features.{idx}.0",
                          bn_name=f"features.{idx}.1", act_name=f"features.{idx}.2")
        with g.scope("avgpool"):
            x = g.node("GlobalAveragePool", [x])
        x = g.flatten(x)
        last_channel = adj(1024)
        with g.scope("classifier", "classifier.0"):
            x = g.linear(x, c_last, last_channel)
        with g.scope("classifier", "classifier.1"):
            x = g.act(x, "hardswish")
        with g.scope("classifier", "classifier.3"):
            x = g.linear(x, last_channel, num_classes, last=True)
        return g, x

    return _finish(build, batch, target_std, seed)


# ---------------------------------------------------------------------------------------------
# ResNet
# ---------------------------------------------------------------------------------------------

def _resnet(name: str, block: str, layers: Sequence[int], num_classes: int, resolution: int, batch: int,
            opset: int, fold_bn: bool, flatten: str, seed: int, target_std: float | None) -> onnx.ModelProto:
    expansion = 1 if block == "basic" else 4

    def build(b: int):
        g = _Export(name, batch=b, **_common(opset, fold_bn, True, flatten, seed))
        x = g.input("input", [b, 3, resolution, resolution])
        x = g.conv_bn(x, 3, 64, 7, stride=2, pad=3, act="relu", conv_name="conv1", bn_name="bn1",
                      act_name="relu")
        with g.scope("maxpool"):
            x = g.maxpool(x, 3, 2, 1)
        inplanes = 64
        for li, (planes, n) in enumerate(zip((64, 128, 256, 512), layers), start=1):
            for bi in range(n):
                stride = (1 if li == 1 else 2) if bi == 0 else 1
                with g.scope(f"layer{li}", f"layer{li}.{bi}"):
                    p = f"layer{li}.{bi}"
                    if block == "basic":
                        y = g.conv_bn(x, inplanes, planes, 3, stride=stride, act="relu", conv_name=f"{p}.conv1",
                                      bn_name=f"{p}.bn1", act_name="relu")
                        y = g.conv_bn(y, planes, planes, 3, conv_name=f"{p}.conv2", bn_name=f"{p}.bn2",
                                      gamma_scale=0.5)
                    else:
                        width = planes
                        y = g.conv_bn(x, inplanes, width, 1, act="relu", conv_name=f"{p}.conv1",
                                      bn_name=f"{p}.bn1", act_name="relu")
                        y = g.conv_bn(y, width, width, 3, stride=stride, act="relu", conv_name=f"{p}.conv2",
                                      bn_name=f"{p}.bn2", act_name="relu_1")
                        y = g.conv_bn(y, width, planes * expansion, 1, conv_name=f"{p}.conv3",
                                      bn_name=f"{p}.bn3", gamma_scale=0.3)
                    identity = x
                    if stride != 1 or inplanes != planes * expansion:
                        with g.scope("downsample"):
                            identity = g.conv_bn(x, inplanes, planes * expansion, 1, stride=stride, pad=0,
                                                 conv_name=f"{p}.downsample.0", bn_name=f"{p}.downsample.1")
                    y = g.node("Add", [y, identity])
                    x = g.node("Relu", [y])
                inplanes = planes * expansion
        with g.scope("avgpool"):
            x = g.node("GlobalAveragePool", [x])
        x = g.flatten(x)
        with g.scope("fc"):
            x = g.linear(x, 512 * expansion, num_classes, last=True)
        return g, x

    return _finish(build, batch, target_std, seed)


def resnet18(num_classes: int = 1000, resolution: int = 224, *, batch: int = 1, opset: int = DEFAULT_OPSET,
             fold_bn: bool = False, flatten: str = "flatten", seed: int = 0,
             target_std: float | None = TARGET_STD) -> onnx.ModelProto:
    """torchvision resnet18: BasicBlock x [2, 2, 2, 2]."""
    return _resnet("resnet18", "basic", [2, 2, 2, 2], num_classes, resolution, batch, opset, fold_bn,
                   flatten, seed, target_std)


def resnet50(num_classes: int = 1000, resolution: int = 224, *, batch: int = 1, opset: int = DEFAULT_OPSET,
             fold_bn: bool = False, flatten: str = "flatten", seed: int = 0,
             target_std: float | None = TARGET_STD) -> onnx.ModelProto:
    """torchvision resnet50 (v1.5): Bottleneck x [3, 4, 6, 3], stride on the 3x3 conv."""
    return _resnet("resnet50", "bottleneck", [3, 4, 6, 3], num_classes, resolution, batch, opset, fold_bn,
                   flatten, seed, target_std)


# ---------------------------------------------------------------------------------------------
# EfficientNet-B0
# ---------------------------------------------------------------------------------------------

def efficientnet_b0(num_classes: int = 1000, resolution: int = 224, *, batch: int = 1,
                    opset: int = DEFAULT_OPSET, fold_bn: bool = False, flatten: str = "flatten",
                    seed: int = 0, target_std: float | None = TARGET_STD) -> onnx.ModelProto:
    """torchvision efficientnet_b0: MBConv with SiLU and squeeze-excite (SiLU, Sigmoid), BN eps 1e-5."""
    # expand_ratio, kernel, stride, input_channels, out_channels, num_layers
    setting = [(1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3),
               (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1)]

    def build(b: int):
        g = _Export("efficientnet_b0", batch=b, **_common(opset, fold_bn, True, flatten, seed))
        x = g.input("input", [b, 3, resolution, resolution])
        with g.scope("features", "features.0"):
            x = g.conv_bn(x, 3, 32, 3, stride=2, act="silu", conv_name="features.0.0",
                          bn_name="features.0.1", act_name="features.0.2")
        for si, (e, k, s, cin, cout, n) in enumerate(setting, start=1):
            for bi in range(n):
                ci, st = (cin, s) if bi == 0 else (cout, 1)
                ce = _make_divisible(ci * e, 8)
                res = st == 1 and ci == cout
                p = f"features.{si}.{bi}.block"
                with g.scope("features", f"features.{si}", f"features.{si}.{bi}", "block"):
                    y, j = x, 0
                    if ce != ci:
                        y = g.conv_bn(y, ci, ce, 1, act="silu", conv_name=f"{p}.0.0", bn_name=f"{p}.0.1",
                                      act_name=f"{p}.0.2")
                        j = 1
                    y = g.conv_bn(y, ce, ce, k, stride=st, groups=ce, act="silu", conv_name=f"{p}.{j}.0",
                                  bn_name=f"{p}.{j}.1", act_name=f"{p}.{j}.2")
                    with g.scope(f"{p}.{j + 1}"):
                        y = g.squeeze_excite(y, ce, max(1, ci // 4), "silu", "sigmoid", path=f"{p}.{j + 1}")
                    y = g.conv_bn(y, ce, cout, 1, conv_name=f"{p}.{j + 2}.0", bn_name=f"{p}.{j + 2}.1",
                                  gamma_scale=0.5 if res else 1.0)
                if res:
                    with g.scope("features", f"features.{si}", f"features.{si}.{bi}"):
                        y = g.node("Add", [y, x])
                x = y
        with g.scope("features", "features.8"):
            x = g.conv_bn(x, 320, 1280, 1, act="silu", conv_name="features.8.0", bn_name="features.8.1",
                          act_name="features.8.2")
        with g.scope("avgpool"):
            x = g.node("GlobalAveragePool", [x])
        x = g.flatten(x)
        with g.scope("classifier", "classifier.1"):
            x = g.linear(x, 1280, num_classes, last=True)
        return g, x

    return _finish(build, batch, target_std, seed)


# ---------------------------------------------------------------------------------------------
# ShuffleNetV2
# ---------------------------------------------------------------------------------------------

_SHUFFLENET_CHANNELS = {0.5: [24, 48, 96, 192, 1024], 1.0: [24, 116, 232, 464, 1024],
                        1.5: [24, 176, 352, 704, 1024], 2.0: [24, 244, 488, 976, 2048]}


def shufflenet_v2(num_classes: int = 1000, width: float = 1.0, resolution: int = 224, *, batch: int = 1,
                  opset: int = DEFAULT_OPSET, fold_bn: bool = False, shape_subgraph: bool = True,
                  channel_split: str = "split", seed: int = 0,
                  target_std: float | None = TARGET_STD) -> onnx.ModelProto:
    """torchvision shufflenet_v2_x1_0 (``width`` picks x0.5/x1.0/x1.5/x2.0): channel split
    (chunk), branch convs, Concat, channel shuffle (Reshape, Transpose, Reshape), mean([2, 3])."""
    if width not in _SHUFFLENET_CHANNELS:
        raise ValueError(f"width must be one of {sorted(_SHUFFLENET_CHANNELS)}")
    if channel_split not in ("split", "slice"):
        raise ValueError("channel_split must be 'split' or 'slice'")
    repeats = [4, 8, 4]
    chans = _SHUFFLENET_CHANNELS[width]

    def shuffle(g: _Export, x: str, c: int, h: int, w: int) -> str:
        if g.shape_subgraph:
            shape = g.node("Shape", [x])
            dims = [g.node("Gather", [shape, g.constant(np.array(i, np.int64))], axis=0) for i in range(4)]
            cpg = g.node("Div", [dims[1], g.constant(np.array(2, np.int64))])
            unsq = lambda v: g.node("Unsqueeze", [v, g.constant(np.array([0], np.int64))])  # noqa: E731
            t1 = g.node("Concat", [unsq(dims[0]), g.constant(np.array([2], np.int64)), unsq(cpg),
                                   unsq(dims[2]), unsq(dims[3])], axis=0)
            y = g.node("Reshape", [x, t1])
            y = g.node("Transpose", [y], perm=[0, 2, 1, 3, 4])
            t2 = g.node("Concat", [unsq(dims[0]), g.constant(np.array([-1], np.int64)), unsq(dims[2]),
                                   unsq(dims[3])], axis=0)
            return g.node("Reshape", [y, t2])
        y = g.node("Reshape", [x, g.constant(np.array([g.batch, 2, c // 2, h, w], np.int64))])
        y = g.node("Transpose", [y], perm=[0, 2, 1, 3, 4])
        return g.node("Reshape", [y, g.constant(np.array([g.batch, -1, h, w], np.int64))])

    def build(b: int):
        g = _Export("shufflenet_v2", batch=b, **_common(opset, fold_bn, shape_subgraph, "flatten", seed))
        x = g.input("input", [b, 3, resolution, resolution])
        hw = (resolution + 2 - 3) // 2 + 1
        with g.scope("conv1"):
            x = g.conv_bn(x, 3, chans[0], 3, stride=2, act="relu", conv_name="conv1.0", bn_name="conv1.1",
                          act_name="conv1.2")
        with g.scope("maxpool"):
            x = g.maxpool(x, 3, 2, 1)
        hw = (hw + 2 - 3) // 2 + 1
        c_in = chans[0]
        for si, (n, c_out) in enumerate(zip(repeats, chans[1:4]), start=2):
            bf = c_out // 2
            for bi in range(n):
                p = f"stage{si}.{bi}"
                with g.scope(f"stage{si}", p):
                    if bi == 0:
                        hw = (hw + 2 - 3) // 2 + 1
                        b1 = g.conv_bn(x, c_in, c_in, 3, stride=2, groups=c_in, conv_name=f"{p}.branch1.0",
                                       bn_name=f"{p}.branch1.1")
                        b1 = g.conv_bn(b1, c_in, bf, 1, act="relu", conv_name=f"{p}.branch1.2",
                                       bn_name=f"{p}.branch1.3", act_name=f"{p}.branch1.4")
                        b2 = g.conv_bn(x, c_in, bf, 1, act="relu", conv_name=f"{p}.branch2.0",
                                       bn_name=f"{p}.branch2.1", act_name=f"{p}.branch2.2")
                        b2 = g.conv_bn(b2, bf, bf, 3, stride=2, groups=bf, conv_name=f"{p}.branch2.3",
                                       bn_name=f"{p}.branch2.4")
                        b2 = g.conv_bn(b2, bf, bf, 1, act="relu", conv_name=f"{p}.branch2.5",
                                       bn_name=f"{p}.branch2.6", act_name=f"{p}.branch2.7")
                        y = g.node("Concat", [b1, b2], axis=1)
                    else:
                        if channel_split == "split":
                            x1, x2 = g.node("Split", [x, g.constant(np.array([bf, bf], np.int64))], 2, axis=1)
                        else:
                            c = lambda v: g.constant(np.array([v], np.int64))  # noqa: E731
                            x1 = g.node("Slice", [x, c(0), c(bf), c(1), c(1)])
                            x2 = g.node("Slice", [x, c(bf), c(2 * bf), c(1), c(1)])
                        b2 = g.conv_bn(x2, bf, bf, 1, act="relu", conv_name=f"{p}.branch2.0",
                                       bn_name=f"{p}.branch2.1", act_name=f"{p}.branch2.2")
                        b2 = g.conv_bn(b2, bf, bf, 3, groups=bf, conv_name=f"{p}.branch2.3",
                                       bn_name=f"{p}.branch2.4")
                        b2 = g.conv_bn(b2, bf, bf, 1, act="relu", conv_name=f"{p}.branch2.5",
                                       bn_name=f"{p}.branch2.6", act_name=f"{p}.branch2.7")
                        y = g.node("Concat", [x1, b2], axis=1)
                    x = shuffle(g, y, c_out, hw, hw)
            c_in = c_out
        with g.scope("conv5"):
            x = g.conv_bn(x, c_in, chans[4], 1, act="relu", conv_name="conv5.0", bn_name="conv5.1",
                          act_name="conv5.2")
        x = g.node("ReduceMean", [x], axes=[2, 3], keepdims=0)
        with g.scope("fc"):
            x = g.linear(x, chans[4], num_classes, last=True)
        return g, x

    return _finish(build, batch, target_std, seed)


# ---------------------------------------------------------------------------------------------
# a small UNet
# ---------------------------------------------------------------------------------------------

def unet_small(num_classes: int = 2, resolution: int = 224, *, batch: int = 1, opset: int = DEFAULT_OPSET,
               fold_bn: bool = False, base: int = 16, in_channels: int = 3, seed: int = 0,
               target_std: float | None = TARGET_STD) -> onnx.ModelProto:
    """A 3-level UNet (resolution divisible by 4), output [batch, num_classes, H, W]:

        inc   DoubleConv(in, b)                       @ H
        down1 MaxPool 2, DoubleConv(b, 2b)            @ H/2
        down2 MaxPool 2, DoubleConv(2b, 4b)           @ H/4
        up1   ConvTranspose(4b, 2b, k2 s2), Concat(skip, up), DoubleConv(4b, 2b)   @ H/2
        up2   Resize(nearest, x2), Concat(skip, up), DoubleConv(3b, b)             @ H
        outc  Conv 1x1 (b, num_classes) with bias

    DoubleConv = (Conv 3x3 no bias, BN, ReLU) x 2. Resize is nn.Upsample(scale_factor=2,
    mode="nearest") as exported at opset 13: asymmetric coordinates, floor rounding, scales input.
    """
    if resolution % 4:
        raise ValueError("unet_small needs a resolution divisible by 4")

    def double_conv(g: _Export, x: str, ci: int, co: int, path: str) -> str:
        p = f"{path}.double_conv"
        with g.scope("double_conv"):
            x = g.conv_bn(x, ci, co, 3, act="relu", conv_name=f"{p}.0", bn_name=f"{p}.1", act_name=f"{p}.2")
            return g.conv_bn(x, co, co, 3, act="relu", conv_name=f"{p}.3", bn_name=f"{p}.4", act_name=f"{p}.5")

    def build(bsz: int):
        b = base
        g = _Export("unet_small", batch=bsz, **_common(opset, fold_bn, True, "flatten", seed))
        x = g.input("input", [bsz, in_channels, resolution, resolution])
        with g.scope("inc"):
            x1 = double_conv(g, x, in_channels, b, "inc")
        with g.scope("down1"):
            x2 = double_conv(g, g.maxpool(x1, 2, 2, 0), b, 2 * b, "down1")
        with g.scope("down2"):
            x3 = double_conv(g, g.maxpool(x2, 2, 2, 0), 2 * b, 4 * b, "down2")
        with g.scope("up1"):
            with g.scope("up1.up"):
                w = _he_normal(g.rng, (4 * b, 2 * b, 2, 2), fan_in=4 * b)
                u = g.node("ConvTranspose", [x3, g.param("weight", w),
                                             g.param("bias", small_normal(g.rng, (2 * b,)))],
                           dilations=[1, 1], group=1, kernel_shape=[2, 2], pads=[0, 0, 0, 0], strides=[2, 2])
            u = g.node("Concat", [x2, u], axis=1)
            y = double_conv(g, u, 4 * b, 2 * b, "up1")
        with g.scope("up2"):
            with g.scope("up"):
                u = g.node("Resize", [y, "", g.constant(np.array([1.0, 1.0, 2.0, 2.0], np.float32))],
                           coordinate_transformation_mode="asymmetric", cubic_coeff_a=-0.75, mode="nearest",
                           nearest_mode="floor")
            u = g.node("Concat", [x1, u], axis=1)
            y = double_conv(g, u, 3 * b, b, "up2")
        with g.scope("outc", "outc.conv"):
            w = _he_normal(g.rng, (num_classes, b, 1, 1), fan_in=b)
            wn = g.param("weight", w)
            bn = g.param("bias", small_normal(g.rng, (num_classes,)))
            g.last_linear = (wn, bn)
            y = g.node("Conv", [y, wn, bn], dilations=[1, 1], group=1, kernel_shape=[1, 1],
                       pads=[0, 0, 0, 0], strides=[1, 1])
        return g, y

    return _finish(build, batch, target_std, seed)


# ---------------------------------------------------------------------------------------------
# registry and a float64 twin for error analysis
# ---------------------------------------------------------------------------------------------

ZOO: dict[str, Callable[..., onnx.ModelProto]] = {
    "mobilenet_v2": mobilenet_v2,
    "mobilenet_v3_small": mobilenet_v3_small,
    "resnet18": resnet18,
    "resnet50": resnet50,
    "efficientnet_b0": efficientnet_b0,
    "shufflenet_v2": shufflenet_v2,
    "unet_small": unet_small,
}


def to_float64(model: onnx.ModelProto) -> onnx.ModelProto:
    """The same model computing in float64 (for onnx.reference): float32 initializers, Constant
    values and graph inputs/outputs become double; Resize's ``scales`` stays float32;
    BatchNormalization becomes Mul + Add (see below)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    keep_f32 = {n.input[2] for n in g.node if n.op_type == "Resize" and len(n.input) > 2}
    for i, t in enumerate(g.initializer):
        if t.data_type == TensorProto.FLOAT and t.name not in keep_f32:
            g.initializer[i].CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float64), t.name))
    for n in g.node:
        if n.op_type == "Constant" and n.output[0] not in keep_f32:
            for a in n.attribute:
                if a.name == "value" and a.t.data_type == TensorProto.FLOAT:
                    a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float64)))
    for vi in list(g.input) + list(g.output):
        if vi.type.tensor_type.elem_type == TensorProto.FLOAT:
            vi.type.tensor_type.elem_type = TensorProto.DOUBLE
    # onnx.reference's BatchNormalization-9 always computes batch statistics (it fills in the
    # schema's default momentum and then takes its training branch), so every BatchNormalization
    # becomes its inference formula, Mul by scale/sqrt(var + eps) then Add, computed in float64
    values = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    nodes = []
    for n in g.node:
        if n.op_type != "BatchNormalization":
            nodes.append(n)
            continue
        eps = next((a.f for a in n.attribute if a.name == "epsilon"), 1e-5)
        gamma, beta, mean, var = (values[i].astype(np.float64) for i in n.input[1:5])
        scale = gamma / np.sqrt(var + np.float64(np.float32(eps)))
        shift = beta - mean * scale
        sn, tn = n.name + "_f64_scale", n.name + "_f64_shift"
        g.initializer.append(numpy_helper.from_array(scale.reshape(-1, 1, 1), sn))
        g.initializer.append(numpy_helper.from_array(shift.reshape(-1, 1, 1), tn))
        nodes.append(helper.make_node("Mul", [n.input[0], sn], [n.output[0] + "_f64"], name=n.name + "_mul"))
        nodes.append(helper.make_node("Add", [n.output[0] + "_f64", tn], [n.output[0]], name=n.name + "_add"))
    del g.node[:]
    g.node.extend(nodes)
    del g.value_info[:]
    return m
