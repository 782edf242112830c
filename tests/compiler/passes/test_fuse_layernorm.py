"""passes/fuse_layernorm.py: the LayerNorm op chains of older exporters and residual Adds become one
layernorm kernel. Every model runs fused and unfused (the pass taken out of PIPELINE), both
against onnxruntime; the graphs that must not fuse still compile through the unfused path."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests import harness
from tests.harness import check_against_onnxruntime

from compiler import passes
from compiler.compile import compile_with_kernels
from compiler.frontend import to_ir
from compiler.passes import fold_constants, fuse_layernorm, run_passes

SHAPE = [2, 8, 32]


def _const(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def chain_nodes(x, out, *, opset=13, axes=(-1,), form="pow", eps=1e-5, eps_input=None,
                scale_shape=(32,), bias=True, order="xs", rng=None, prefix="ln"):
    """The nodes and initializers of a normalization chain over `axes` of value `x`, as
    exporters write it. form: "pow" (torch: Sub once, Pow 2, Div), "mul" (Mul(d, d)),
    "sub-twice" (x - mean computed twice, Mul, Div), "reciprocal" (Mul by Reciprocal(Sqrt)).
    order "sx" puts the constant first in every binary op (eps + v, scale * n, bias + y).
    eps_input: a graph-input name for eps (not a constant). scale_shape None: no scale."""
    rng = rng or np.random.default_rng(0)
    p = prefix + "_"
    inits = []
    # the reduced axes: an input from opset 18 on, an attribute before
    axes_input, axes_attr = ([p + "axes"], {}) if opset >= 18 else ([], {"axes": list(axes)})
    if opset >= 18:
        inits.append(_const(p + "axes", np.array(axes, np.int64)))

    def op(op_type, inputs, output, **attrs):
        return helper.make_node(op_type, inputs, [output], name=p + output.split("_", 1)[-1],
                                **attrs)

    def binary(op_type, value, const, output):
        return op(op_type, [const, value] if order == "sx" else [value, const], output)

    nodes = [op("ReduceMean", [x, *axes_input], p + "mean", **axes_attr)]
    nodes.append(op("Sub", [x, p + "mean"], p + "d"))
    d2 = p + "d"
    if form == "sub-twice":
        nodes.append(op("Sub", [x, p + "mean"], p + "d2"))
        d2 = p + "d2"
    if form == "pow":
        inits.append(_const(p + "two", np.array(2.0, np.float32)))
        nodes.append(op("Pow", [p + "d", p + "two"], p + "sq"))
    else:
        nodes.append(op("Mul", [p + "d", p + "d"], p + "sq"))
    nodes.append(op("ReduceMean", [p + "sq", *axes_input], p + "var", **axes_attr))
    if eps_input is None:
        inits.append(_const(p + "eps", np.array(eps, np.float32)))
    nodes.append(binary("Add", p + "var", eps_input or p + "eps", p + "vareps"))
    nodes.append(op("Sqrt", [p + "vareps"], p + "std"))
    norm_out = out if scale_shape is None and not bias else p + "norm"
    if form == "reciprocal":
        nodes.append(op("Reciprocal", [p + "std"], p + "inv"))
        nodes.append(binary("Mul", d2, p + "inv", norm_out))
    else:
        nodes.append(op("Div", [d2, p + "std"], norm_out))
    y = norm_out
    if scale_shape is not None:
        scale = 1 + 0.2 * rng.standard_normal(scale_shape)
        inits.append(_const(p + "scale", scale.astype(np.float32)))
        nodes.append(binary("Mul", y, p + "scale", out if not bias else p + "scaled"))
        y = out if not bias else p + "scaled"
    if bias:
        bias_data = 0.1 * rng.standard_normal(scale_shape or (32,))
        inits.append(_const(p + "bias", bias_data.astype(np.float32)))
        nodes.append(binary("Add", y, p + "bias", out))
    return nodes, inits


def model_of(nodes, inits, inputs, outputs, opset=13):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                                           for n, s in inputs.items()],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                               for n, s in outputs.items()], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def chain_model(shape=SHAPE, opset=13, **kw):
    nodes, inits = chain_nodes("x", "y", opset=opset, **kw)
    inputs = {"x": shape}
    if kw.get("eps_input"):
        inputs[kw["eps_input"]] = []
    return model_of(nodes, inits, inputs, {"y": shape}, opset)


def residual_model(shape=SHAPE, skip_shape=None, sum_used_twice=False, opset=13, **kw):
    """LN(a + b); with sum_used_twice the sum also continues the residual stream (out2 = s + y)."""
    nodes = [helper.make_node("Add", ["a", "b"], ["s"], name="residual")]
    ln, inits = chain_nodes("s", "y", opset=opset, **kw)
    nodes += ln
    outputs = {"y": shape}
    if sum_used_twice:
        nodes.append(helper.make_node("Add", ["s", "y"], ["out2"], name="next_residual"))
        outputs["out2"] = shape
    return model_of(nodes, inits, {"a": shape, "b": skip_shape or shape}, outputs, opset)


def templates(model):
    return [k.template for k in compile_with_kernels(model)[1]]


def check_both(model, monkeypatch, target="generic"):
    """Fused and unfused both match onnxruntime; returns (fused, unfused) kernel templates."""
    check_against_onnxruntime(model, target=target)
    fused = templates(model)
    with monkeypatch.context() as m:
        m.setattr(passes, "PIPELINE", [p for p in passes.PIPELINE if p is not fuse_layernorm])
        m.setattr(harness, "_BUNDLE_CACHE", {})
        check_against_onnxruntime(model, target=target)
        plain = templates(model)
    return fused, plain


CHAIN_CASES = [
    pytest.param({}, id="torch-opset13"),
    pytest.param({"opset": 18}, id="torch-opset18-axes-input"),
    pytest.param({"form": "mul"}, id="mul-square"),
    pytest.param({"form": "sub-twice"}, id="sub-twice"),
    pytest.param({"form": "reciprocal"}, id="reciprocal-sqrt"),
    pytest.param({"form": "reciprocal", "order": "sx", "opset": 18}, id="constants-first"),
    pytest.param({"scale_shape": None, "bias": False}, id="no-scale-no-bias"),
    pytest.param({"bias": False}, id="scale-only"),
    pytest.param({"scale_shape": None}, id="bias-only"),
    pytest.param({"eps": 1e-12}, id="eps-1e-12"),
    pytest.param({"eps": 0.1}, id="eps-0.1"),
    pytest.param({"scale_shape": (1, 1, 32)}, id="scale-rank3"),
    pytest.param({"axes": (1, 2), "scale_shape": (8, 32)}, id="two-trailing-axes"),
    pytest.param({"axes": (-2, -1), "scale_shape": (8, 1)}, id="two-axes-scale-broadcast"),
]


@pytest.mark.parametrize("kw", CHAIN_CASES)
def test_chain_fuses(kw, monkeypatch):
    fused, plain = check_both(chain_model(**kw), monkeypatch)
    assert fused == ["layernorm"]
    assert "layernorm" not in plain and plain.count("reduce") == 2


def rms_model(form="pow", *, residual=False, opset=13):
    """RMS normalization as T5 (x * Reciprocal(Sqrt(mean(x^2) + eps)) * w) and LLaMA exports
    (x / Sqrt(...) * w) write it; with residual, of a + b whose sum also continues the stream."""
    rng = np.random.default_rng(0)
    axes = [_const("axes", np.array([-1], np.int64))] if opset >= 18 else []
    mean_in, mean_attrs = (["axes"], {}) if opset >= 18 else ([], {"axes": [-1]})
    nodes = [helper.make_node("Add", ["a", "b"], ["x"], name="residual")] if residual else []
    square = (helper.make_node("Pow", ["x", "two"], ["sq"]) if form == "pow"
              else helper.make_node("Mul", ["x", "x"], ["sq"]))
    nodes += [square, helper.make_node("ReduceMean", ["sq"] + mean_in, ["var"], **mean_attrs),
              helper.make_node("Add", ["var", "eps"], ["vareps"]),
              helper.make_node("Sqrt", ["vareps"], ["std"])]
    if form == "pow":
        nodes += [helper.make_node("Reciprocal", ["std"], ["inv"]),
                  helper.make_node("Mul", ["x", "inv"], ["n"])]
    else:
        nodes.append(helper.make_node("Div", ["x", "std"], ["n"]))
    nodes.append(helper.make_node("Mul", ["w", "n"], ["y"]))
    inits = axes + [_const("two", np.array(2.0, np.float32)),
                    _const("eps", np.array(1e-6, np.float32)),
                    _const("w", (1 + 0.2 * rng.standard_normal(32)).astype(np.float32))]
    outputs = {"y": SHAPE}
    if residual:
        nodes.append(helper.make_node("Add", ["x", "y"], ["out2"]))
        outputs["out2"] = SHAPE
    inputs = {"a": SHAPE, "b": SHAPE} if residual else {"x": SHAPE}
    return model_of(nodes, inits, inputs, outputs, opset)


@pytest.mark.parametrize("form,opset", [("pow", 13), ("mul-div", 18)], ids=["t5", "llama-opset18"])
def test_rms_chain_fuses(form, opset, monkeypatch):
    fused, plain = check_both(rms_model(form, opset=opset), monkeypatch)
    assert fused == ["layernorm"] and plain.count("reduce") == 1
    graph = run_passes(fold_constants(to_ir(rms_model(form, opset=opset))))
    assert graph.nodes[0].attrs["simplified"] == 1


def test_rms_residual_folds(monkeypatch):
    fused, _ = check_both(rms_model(residual=True), monkeypatch)
    assert fused == ["layernorm", "elementwise"]


def test_chain_fuses_on_lavapipe(monkeypatch):
    fused, _ = check_both(chain_model(form="reciprocal"), monkeypatch, target="lavapipe")
    assert fused == ["layernorm"]


def test_fused_node_keeps_the_onnx_names():
    graph = run_passes(fold_constants(to_ir(chain_model())))
    (node,) = graph.nodes
    assert node.op_type == "vkc.LayerNorm"
    assert node.sources == ["ln_mean", "ln_d", "ln_sq", "ln_var", "ln_vareps", "ln_std",
                            "ln_norm", "ln_scaled", "ln_y"]


def test_large_mean_offset():
    """Rows around 100: the kernel's two passes keep the variance's digits."""
    model = chain_model()
    feeds = harness.random_feeds(model, seed=1)
    feeds["x"] = (feeds["x"] + 100.0).astype(np.float32)
    check_against_onnxruntime(model, feeds=feeds)


# Graphs that are not a layer normalization the kernel computes: nothing fuses (or only what
# is one), and the unfused kernels still match onnxruntime.
def test_axes_not_trailing_do_not_fuse(monkeypatch):
    fused, plain = check_both(chain_model(axes=(1,), scale_shape=(32,)), monkeypatch)
    assert "layernorm" not in fused and fused == plain


def test_non_constant_eps_does_not_fuse(monkeypatch):
    fused, plain = check_both(chain_model(eps_input="eps"), monkeypatch)
    assert "layernorm" not in fused and fused == plain


def test_intermediate_read_elsewhere_does_not_fuse(monkeypatch):
    """The mean is also a graph output: the chain's kernels must compute it."""
    nodes, inits = chain_nodes("x", "y")
    model = model_of(nodes, inits, {"x": SHAPE}, {"y": SHAPE, "ln_mean": [2, 8, 1]})
    fused, _ = check_both(model, monkeypatch)
    assert "layernorm" not in fused


def test_scale_per_row_is_not_absorbed(monkeypatch):
    """A scale of shape [8, 1] varies over the rows, not the normalized dim: the normalization
    fuses, the multiply stays an elementwise kernel after it (with the bias Add)."""
    fused, _ = check_both(chain_model(scale_shape=(8, 1), bias=False), monkeypatch)
    assert fused == ["layernorm", "elementwise"]


def test_scale_that_broadcasts_x_up_is_not_absorbed(monkeypatch):
    """A [3, 1, 1] scale makes the output [3, 8, 32] from a [1, 8, 32] x."""
    model = chain_model(shape=[1, 8, 32], scale_shape=(3, 1, 1), bias=False)
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_value = 3
    fused, _ = check_both(model, monkeypatch)
    assert fused == ["layernorm", "elementwise"]


def test_non_constant_scale_is_not_absorbed(monkeypatch):
    nodes, inits = chain_nodes("x", "n", scale_shape=None, bias=False)
    nodes.append(helper.make_node("Mul", ["n", "gate"], ["y"]))
    model = model_of(nodes, inits, {"x": SHAPE, "gate": [32]}, {"y": SHAPE})
    fused, _ = check_both(model, monkeypatch)
    assert fused == ["layernorm", "elementwise"]


# Residual Adds folded into the normalization.
@pytest.mark.parametrize("twice", [False, True], ids=["sum-used-once", "sum-used-twice"])
@pytest.mark.parametrize("opset", [13, 18])
def test_residual_add_folds(twice, opset, monkeypatch):
    fused, plain = check_both(residual_model(sum_used_twice=twice, opset=opset), monkeypatch)
    # used twice: the kernel writes the sum, and only the next residual Add remains
    assert fused == ["layernorm"] + (["elementwise"] if twice else [])
    assert "layernorm" not in plain


def test_residual_sum_output_is_written():
    graph = run_passes(fold_constants(to_ir(residual_model(sum_used_twice=True))))
    ln = graph.nodes[0]
    assert ln.op_type == "vkc.LayerNorm" and ln.attrs["outputs"] == ("Y", "SUM")
    assert [v.name for v in ln.inputs[:2]] == ["a", "b"] and ln.outputs[1].name == "s"
    assert ln.sources[0] == "residual"


def test_residual_sum_as_graph_output(monkeypatch):
    nodes = [helper.make_node("Add", ["a", "b"], ["s"])]
    ln, inits = chain_nodes("s", "y")
    model = model_of(nodes + ln, inits, {"a": SHAPE, "b": SHAPE}, {"y": SHAPE, "s": SHAPE})
    fused, _ = check_both(model, monkeypatch)
    assert fused == ["layernorm"]


def test_residual_position_table_repeats_over_batch(monkeypatch):
    """Embeddings + a [1, S, D] position table: the table repeats over the batch."""
    fused, _ = check_both(residual_model(skip_shape=[1, 8, 32]), monkeypatch)
    assert fused == ["layernorm"]
    fused, _ = check_both(residual_model(skip_shape=[8, 32], sum_used_twice=True), monkeypatch)
    assert fused == ["layernorm", "elementwise"]


def test_residual_broadcast_inside_rows_does_not_fold(monkeypatch):
    """b of shape [2, 8, 1] is no residual the kernel reads by row: the Add stays."""
    fused, _ = check_both(residual_model(skip_shape=[2, 8, 1]), monkeypatch)
    assert fused == ["elementwise", "layernorm"]


def test_residual_into_onnx_layernormalization(monkeypatch):
    """Opset 17's own LayerNormalization takes the residual Add too, keeping its Mean output."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Add", ["a", "b"], ["s"], name="residual"),
             helper.make_node("LayerNormalization", ["s", "scale", "bias"], ["y", "mean"],
                              axis=-1, epsilon=1e-5),
             helper.make_node("Add", ["s", "y"], ["out2"])]
    inits = [_const("scale", rng.standard_normal(32).astype(np.float32)),
             _const("bias", rng.standard_normal(32).astype(np.float32))]
    model = model_of(nodes, inits, {"a": SHAPE, "b": SHAPE},
                     {"y": SHAPE, "mean": [2, 8, 1], "out2": SHAPE}, opset=17)
    fused, plain = check_both(model, monkeypatch)
    assert fused == ["layernorm", "elementwise"]
    assert plain == ["elementwise", "layernorm", "elementwise"]


# A 2-layer BERT-like encoder (post-LN) and GPT-2-like decoder (pre-LN) as torch exports them at
# opset 13: the kernel counts with and without the pass.
def transformer(layers=2, seq=8, d=32, pre_ln=False, seed=0):
    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def linear(x, out, n_in, n_out, name):
        w = rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)
        inits.append(_const(name + "_w", w.astype(np.float32)))
        inits.append(_const(name + "_b", (0.1 * rng.standard_normal(n_out)).astype(np.float32)))
        nodes.append(helper.make_node("MatMul", [x, name + "_w"], [name + "_mm"]))
        nodes.append(helper.make_node("Add", [name + "_mm", name + "_b"], [out]))

    def layernorm(x, out, name):
        n, i = chain_nodes(x, out, scale_shape=(d,), rng=rng, prefix=name)
        nodes.extend(n)
        inits.extend(i)

    def attention(x, out, name):
        for t in "qkv":
            linear(x, f"{name}_{t}", d, d, f"{name}_{t}")
        nodes.append(helper.make_node("Transpose", [f"{name}_k"], [f"{name}_kt"], perm=[0, 2, 1]))
        nodes.append(helper.make_node("MatMul", [f"{name}_q", f"{name}_kt"], [f"{name}_s"]))
        inits.append(_const(f"{name}_scale", np.array(1 / np.sqrt(d), np.float32)))
        nodes.append(helper.make_node("Mul", [f"{name}_s", f"{name}_scale"], [f"{name}_ss"]))
        nodes.append(helper.make_node("Softmax", [f"{name}_ss"], [f"{name}_p"], axis=-1))
        nodes.append(helper.make_node("MatMul", [f"{name}_p", f"{name}_v"], [f"{name}_a"]))
        linear(f"{name}_a", out, d, d, f"{name}_o")

    def mlp(x, out, name):
        linear(x, f"{name}_h", d, 4 * d, f"{name}_1")
        nodes.append(helper.make_node("Relu", [f"{name}_h"], [f"{name}_r"]))
        linear(f"{name}_r", out, 4 * d, d, f"{name}_2")

    h = "x"
    for i in range(layers):
        L = f"l{i}"
        if pre_ln:  # s = h + attn(LN(h)); h' = s + mlp(LN(s))
            layernorm(h, f"{L}_ln1", f"{L}_ln1")
            attention(f"{L}_ln1", f"{L}_attn", f"{L}_att")
            nodes.append(helper.make_node("Add", [h, f"{L}_attn"], [f"{L}_s1"]))
            layernorm(f"{L}_s1", f"{L}_ln2", f"{L}_ln2")
            mlp(f"{L}_ln2", f"{L}_mlp", f"{L}_mlp")
            nodes.append(helper.make_node("Add", [f"{L}_s1", f"{L}_mlp"], [f"{L}_out"]))
        else:  # h1 = LN(h + attn(h)); h' = LN(h1 + mlp(h1))
            attention(h, f"{L}_attn", f"{L}_att")
            nodes.append(helper.make_node("Add", [h, f"{L}_attn"], [f"{L}_s1"]))
            layernorm(f"{L}_s1", f"{L}_h1", f"{L}_ln1")
            mlp(f"{L}_h1", f"{L}_mlp", f"{L}_mlp")
            nodes.append(helper.make_node("Add", [f"{L}_h1", f"{L}_mlp"], [f"{L}_s2"]))
            layernorm(f"{L}_s2", f"{L}_out", f"{L}_ln2")
        h = f"{L}_out"
    if pre_ln:
        layernorm(h, "y", "final_ln")
    else:
        nodes.append(helper.make_node("Identity", [h], ["y"]))
    return model_of(nodes, inits, {"x": [1, seq, d]}, {"y": [1, seq, d]})


@pytest.mark.parametrize("pre_ln", [False, True], ids=["bert-post-ln", "gpt2-pre-ln"])
def test_transformer_kernel_counts(pre_ln, monkeypatch):
    fused, plain = check_both(transformer(pre_ln=pre_ln), monkeypatch)
    n_ln = 5 if pre_ln else 4
    assert fused.count("layernorm") == n_ln and "reduce" not in fused
    assert plain.count("reduce") == 2 * n_ln
    # every normalization's residual Add went into it: no elementwise kernel is left in the
    # post-LN encoder (bias adds ride in the matmul epilogues, the score scale too)
    print(f"{'pre' if pre_ln else 'post'}-LN 2 layers: {len(fused)} kernels fused, {len(plain)} "
          f"unfused ({sorted(set(plain))})")
    assert len(fused) < len(plain)
