"""Small models in the forms exporters write around parameters, built with onnx.helper.

torch.onnx's TorchScript exporter writes an Identity wherever two parameters hold equal values (a
fresh LayerNorm's weights are all ones, tied embeddings, equal biases): one initializer, and an
Identity of it for every other parameter. Together with an Identity on a graph input and on a
graph output, an inference Dropout, a Cast to the dtype it has and a Reshape to the shape it has,
those are the forms here; every fusion the compiler has (LayerNorm and its residual, Q/K/V
projections, attention, epilogues, BatchNorm folding) meets them.

`library_init` gives the weights a library's fresh model has (LayerNorm scale ones and bias
zeros, zero biases), which is what makes them equal; otherwise they are random, still shared.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.onnx_builders import he_normal, make_model, small_normal, tensor_info

OPSET = 17


class _Graph:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._n = 0

    def const(self, name: str, array) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(self, op: str, inputs, out: str | None = None, **attrs) -> str:
        self._n += 1
        out = out or f"{op.lower()}_{self._n}"
        self.nodes.append(helper.make_node(op, list(inputs), [out], name=f"{op}_{self._n}", **attrs))
        return out

    def identity(self, x: str) -> str:
        return self.node("Identity", [x])

    def linear(self, x: str, w: str, b: str) -> str:
        return self.node("Add", [self.node("MatMul", [x, w]), b])

    def model(self, name: str, inputs, outputs) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, [tensor_info(o, None) for o in outputs],
                                  initializer=self.inits)
        return make_model(graph, opset=OPSET)


def _bias(g: _Graph, n: int, library_init: bool):
    return np.zeros(n, np.float32) if library_init else small_normal(g.rng, (n,))


def post_ln_block(*, library_init: bool = True, seq: int = 8, hidden: int = 16, heads: int = 2,
                  seed: int = 0) -> onnx.ModelProto:
    """Embeddings + one post-LN encoder layer (BERT, DistilBERT, RoBERTa), as the TorchScript
    exporter writes it: the input goes through an Identity; every LayerNormalization after the
    first takes Identity(first one's scale) and Identity(its bias); the value projection reads
    Identity(the query weight) and the key projection the query's bias itself (tied); attention
    goes through Dropout and a Cast to float32; the output is an Identity of the last
    normalization, and a second output an Identity of the first layer's normalization, which the
    feed-forward block reads too."""
    g = _Graph(seed)
    head = hidden // heads
    x = g.identity("x")
    emb = g.node("Add", [x, g.const("position", small_normal(g.rng, (1, seq, hidden), 1.0))])
    scale = g.const("ln.weight", np.ones(hidden, np.float32) if library_init else
                    (1 + 0.2 * g.rng.standard_normal(hidden)).astype(np.float32))
    shift = g.const("ln.bias", _bias(g, hidden, library_init))

    def layer_norm(v):
        return g.node("LayerNormalization", [v, g.identity(scale), g.identity(shift)], axis=-1,
                      epsilon=1e-12)

    h0 = g.node("LayerNormalization", [emb, scale, shift], axis=-1, epsilon=1e-12)
    wq = g.const("q.weight", he_normal(g.rng, (hidden, hidden)))
    bq = g.const("q.bias", _bias(g, hidden, library_init))
    split = g.const("heads", np.array([1, seq, heads, head], np.int64))

    def heads_of(v, perm):
        return g.node("Transpose", [g.node("Reshape", [v, split])], perm=perm)

    q = heads_of(g.linear(h0, wq, bq), [0, 2, 1, 3])
    k = heads_of(g.linear(h0, g.const("k.weight", he_normal(g.rng, (hidden, hidden))), bq),
                 [0, 2, 3, 1])
    v = heads_of(g.linear(h0, g.identity(wq), g.const("v.bias", _bias(g, hidden, library_init))),
                 [0, 2, 1, 3])
    scores = g.node("Div", [g.node("MatMul", [q, k]), g.const("sqrt_d", np.array(np.sqrt(head), np.float32))])
    probs = g.node("Cast", [g.node("Dropout", [g.node("Softmax", [scores], axis=-1)])],
                   to=TensorProto.FLOAT)
    ctx = g.node("Transpose", [g.node("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    ctx = g.node("Reshape", [ctx, g.const("merged", np.array([1, seq, hidden], np.int64))])
    ctx = g.node("Reshape", [ctx, g.const("same", np.array([1, seq, hidden], np.int64))])
    attn = g.linear(ctx, g.const("o.weight", he_normal(g.rng, (hidden, hidden))),
                    g.const("o.bias", _bias(g, hidden, library_init)))
    h1 = layer_norm(g.node("Add", [attn, h0]))
    up = g.node("Relu", [g.linear(h1, g.const("up.weight", he_normal(g.rng, (hidden, 2 * hidden))),
                                  g.const("up.bias", _bias(g, 2 * hidden, library_init)))])
    down = g.linear(up, g.const("down.weight", he_normal(g.rng, (2 * hidden, hidden))),
                    g.const("down.bias", _bias(g, hidden, library_init)))
    down = g.node("Expand", [down, g.const("shape", np.array([1, seq, hidden], np.int64))])
    down = g.node("Transpose", [down], perm=[0, 1, 2])
    h2 = layer_norm(g.node("Add", [h1, down]))
    g.node("Identity", [h2], out="y")
    g.node("Identity", [h1], out="attention_block")
    return g.model("post_ln_block", [tensor_info("x", [1, seq, hidden])], ["y", "attention_block"])


def tied_embeddings(*, vocab: int = 40, seq: int = 8, hidden: int = 16, seed: int = 0):
    """Token embeddings tied to the output projection (GPT-2, T5): Gather from the table, an
    old-style LayerNorm chain (opset 13's ReduceMean/Sub/Pow/Sqrt/Div) whose scale is an Identity
    of a LayerNormalization's, and a Gemm by Identity(the table), transB."""
    g = _Graph(seed)
    table = g.const("wte.weight", small_normal(g.rng, (vocab, hidden), 1.0))
    h = g.node("Gather", [table, "ids"])
    scale = g.const("ln_f.weight", (1 + 0.2 * g.rng.standard_normal(hidden)).astype(np.float32))
    shift = g.const("ln_f.bias", small_normal(g.rng, (hidden,)))
    h = g.node("LayerNormalization", [h, scale, shift], axis=-1, epsilon=1e-5)
    mean = g.node("ReduceMean", [h], axes=[-1])
    d = g.node("Sub", [h, mean])
    var = g.node("ReduceMean", [g.node("Pow", [d, g.const("two", np.array(2.0, np.float32))])], axes=[-1])
    std = g.node("Sqrt", [g.node("Add", [var, g.const("eps", np.array(1e-5, np.float32))])])
    n = g.node("Add", [g.node("Mul", [g.node("Div", [d, std]), g.identity(scale)]), g.identity(shift)])
    rows = g.node("Reshape", [n, g.const("rows", np.array([seq, hidden], np.int64))])
    g.node("Gemm", [rows, g.identity(table)], out="logits", transB=1)
    return g.model("tied_embeddings", [tensor_info("ids", [1, seq], np.int64)], ["logits"])


def shared_conv_weights(*, channels: int = 8, hw: int = 6, seed: int = 0) -> onnx.ModelProto:
    """One convolution weight read by two Convs (one followed by a BatchNormalization that folds
    into it), and one bias read by two Gemms that take epilogues."""
    g = _Graph(seed)
    w = g.const("conv.weight", he_normal(g.rng, (channels, channels, 3, 3)))
    b = g.const("conv.bias", small_normal(g.rng, (channels,)))
    pads = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    a = g.node("Conv", ["x", w, b], **pads)
    stats = [g.const(f"bn.{k}", v) for k, v in (
        ("scale", (1 + 0.2 * g.rng.standard_normal(channels)).astype(np.float32)),
        ("bias", small_normal(g.rng, (channels,))), ("mean", small_normal(g.rng, (channels,))),
        ("var", g.rng.uniform(0.5, 1.5, channels).astype(np.float32)))]
    a = g.node("Relu", [g.node("BatchNormalization", [a, *stats])])
    c = g.node("Conv", ["x", g.identity(w), b], **pads)
    s = g.node("Add", [a, c])
    flat = g.node("Flatten", [g.node("GlobalAveragePool", [s])], axis=1)
    fc_w = g.const("fc.weight", he_normal(g.rng, (channels, channels)))
    fc_b = g.const("fc.bias", small_normal(g.rng, (channels,)))
    p = g.node("Relu", [g.node("Gemm", [flat, fc_w, fc_b], transB=1)])
    g.node("Sigmoid", [g.node("Gemm", [p, g.identity(fc_w), fc_b], transB=1)], out="y")
    return g.model("shared_conv_weights", [tensor_info("x", [1, channels, hw, hw])], ["y"])
