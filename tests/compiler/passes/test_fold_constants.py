"""Constant folding: BERT's embedding subgraph (position and token-type id buffers sliced,
expanded and gathered) folds; a node the reference evaluator cannot compute runs on the device,
or is reported by name when no kernel computes it; Range folds, or is refused clearly."""

import importlib

import numpy as np
import onnx
import pytest

from tests.harness import check_against_onnxruntime, run_bundle, run_onnxruntime
from tests.onnx_builders import GraphBuilder

from compiler import compile_model
from compiler.errors import CompileError, UnsupportedOpsError

# The module (compiler.passes re-exports a function of the same name).
fold_module = importlib.import_module("compiler.passes.fold_constants")


def bert_embeddings(seq=64, hidden=32, seed=12):
    """HF BertEmbeddings as exported: the [1, 512] position_ids and token_type_ids buffers are
    sliced to the sequence length, the token types gathered by position (torch.gather, i.e.
    GatherElements over an axis of 512) and expanded to the batch."""
    g = GraphBuilder("bert_embeddings", seed=seed)
    ids = g.input("input_ids", [2, seq], np.int64)
    shape = g.node("Shape", [ids])
    length = g.node("Unsqueeze", [g.node("Gather", [shape, g.const("one", np.array(1, np.int64))],
                                         axis=0), g.const("axes", np.array([0], np.int64))])
    positions = g.const("position_ids", np.arange(512, dtype=np.int64)[None])
    types = g.const("token_type_ids", g.rng.integers(0, 2, [1, 512]).astype(np.int64))
    pos = g.node("Slice", [positions, g.const("zero", np.array([0], np.int64)), length,
                           g.const("axis1", np.array([1], np.int64))])
    types = g.node("Expand", [types, g.const("batch1", np.array([1, 1], np.int64))])
    types = g.node("GatherElements", [types, pos], axis=1)
    types = g.node("Expand", [types, shape])

    def table(name, rows):
        return g.const(name, (g.rng.standard_normal([rows, hidden]) * 0.02).astype(np.float32))

    words = g.node("Gather", [table("word_embeddings", 1000), ids])
    summed = g.node("Add", [words, g.node("Gather", [table("token_type_embeddings", 2), types])])
    g.node("Add", [summed, g.node("Gather", [table("position_embeddings", 512), pos])],
           out="embeddings")
    return g.build(["embeddings"])


def test_bert_embeddings_fold_and_match():
    model = bert_embeddings()
    ids = np.random.default_rng(1).integers(0, 1000, [2, 64])
    result = check_against_onnxruntime(model, feeds={"input_ids": ids})
    ran = " ".join(str(d["nodes"]) for d in result["manifest"]["dispatches"])
    for folded in ("/gatherelements", "/slice", "/expand"):
        assert folded not in ran, f"{folded} was not folded: {ran}"


def test_gather_elements_folds_over_long_axes():
    """onnx.reference's GatherElements fails past 64 entries along the axis (np.choose)."""
    data = np.random.default_rng(2).standard_normal([3, 300]).astype(np.float32)
    idx = np.random.default_rng(3).integers(-300, 300, [3, 40])
    g = GraphBuilder("ge", seed=0)
    x = g.input("x", [3, 40])
    gathered = g.node("GatherElements", [g.const("data", data), g.const("idx", idx)], axis=1)
    g.node("Add", [x, gathered], out="y")
    model = g.build(["y"])
    check_against_onnxruntime(model)


def _refusing_evaluator(op_type):
    real = fold_module.evaluate

    def evaluate(node, opset):
        if node.op_type == op_type:
            raise ValueError("the reference evaluator cannot compute this")
        return real(node, opset)
    return evaluate


def test_unfoldable_node_runs_on_the_device(monkeypatch):
    monkeypatch.setattr(fold_module, "evaluate", _refusing_evaluator("GatherElements"))
    model = bert_embeddings(seq=16, seed=13)
    ids = np.random.default_rng(4).integers(-1000, 1000, [2, 16])
    bundle = compile_model(model, target="generic")  # not compile_cached: the folded bundle must not be reused
    got, _ = run_bundle(bundle, {"input_ids": ids})
    want = run_onnxruntime(model, {"input_ids": ids})["embeddings"]
    np.testing.assert_allclose(got["embeddings"], want, rtol=1e-5, atol=1e-6)
    from bundles import read_bundle
    ran = " ".join(str(d["nodes"]) for d in read_bundle(bundle).manifest["dispatches"])
    assert "/gatherelements" in ran


def test_unfoldable_node_without_kernel_is_reported_by_name(monkeypatch):
    monkeypatch.setattr(fold_module, "evaluate", _refusing_evaluator("Det"))
    g = GraphBuilder("det", seed=0)
    x = g.input("x", [])
    det = g.node("Det", [g.const("m", np.eye(3, dtype=np.float32) * 2)], name="the_det")
    g.node("Add", [x, det], out="y")
    with pytest.raises(UnsupportedOpsError, match="Det: the_det"):
        compile_model(g.build(["y"]))


def range_model(constant: bool):
    g = GraphBuilder("range", seed=0)
    x = g.input("x", [7])
    if constant:
        start, limit = g.const("start", np.array(2.0, np.float32)), g.const("limit", np.array(9.0, np.float32))
    else:
        start, limit = g.input("start", []), g.input("limit", [])
    steps = g.node("Range", [start, limit, g.const("delta", np.array(1.0, np.float32))], name="steps")
    g.node("Mul", [x, steps], out="y")
    return g.build(["y"])


def test_constant_range_folds():
    result = check_against_onnxruntime(range_model(constant=True))
    assert "steps" not in " ".join(str(d["nodes"]) for d in result["manifest"]["dispatches"])


def test_runtime_range_is_refused_clearly():
    with pytest.raises(CompileError, match="Range 'steps'.*'start', 'limit' come from the computation"):
        compile_model(range_model(constant=False))


def test_vkc_check_says_range_folds(tmp_path):
    from typer.testing import CliRunner

    from compiler.cli import app

    path = tmp_path / "m.onnx"
    onnx.save(range_model(constant=True), path)
    result = CliRunner().invoke(app, ["check", str(path)])
    assert result.exit_code == 0, result.output
    assert "Range" in result.output and "folded" in result.output


def test_noops_go_before_the_passes_and_leave_initializers_shared():
    """Identity, an inference Dropout, a same-dtype Cast, a same-shape Reshape or Expand and an
    identity Transpose hand their readers their input: an Identity of an initializer leaves the
    initializer itself, read by both nodes; the one whose output is a graph output stays."""
    from compiler.frontend import to_ir
    from compiler.passes import fold_constants

    g = GraphBuilder("noops", seed=3)
    x = g.node("Identity", [g.input("x", [2, 4])])
    w = g.const("w", g.rng.standard_normal([4, 4]).astype(np.float32))
    a = g.node("MatMul", [x, w])
    b = g.node("MatMul", [a, g.node("Identity", [w])])
    b = g.node("Cast", [g.node("Dropout", [b])], to=onnx.TensorProto.FLOAT)
    b = g.node("Reshape", [b, g.const("shape", np.array([2, 4], np.int64))])
    b = g.node("Expand", [b, g.const("shape", np.array([2, 4], np.int64))])
    g.node("Identity", [g.node("Relu", [g.node("Transpose", [b], perm=[0, 1])])], out="y")
    graph = fold_constants(to_ir(g.build(["y"])))
    assert [n.op_type for n in graph.nodes] == ["MatMul", "MatMul", "Relu", "Identity"]
    first, second, relu, _ = graph.nodes
    assert first.inputs[0] is graph.inputs[0]
    assert second.inputs[1] is first.inputs[1] and first.inputs[1].consumers == [first, second]
    assert relu.inputs[0] is second.outputs[0]
    assert all(v.producer is None for v in graph.values() if v.is_constant)


def test_whole_pads_and_slices_are_noops():
    """A Pad of zeros and a Slice that keeps every element in order (Swin's padding to whole
    windows and its crop back, where the map is whole windows already) go; a Slice that reverses
    an axis, or a Pad that adds a row and crops one, keeps its shape but not its elements, and
    stays. The graph agrees with onnxruntime."""
    from compiler.frontend import to_ir
    from compiler.passes import fold_constants

    def ints(name, values):
        return g.const(name, np.array(values, np.int64))
    g = GraphBuilder("whole", seed=5)
    x = g.input("x", [1, 4, 3, 2])
    x = g.node("Pad", [x, ints("zeros", [0] * 8)])
    x = g.node("Slice", [x, ints("s0", [0, 0]), ints("big", [2 ** 62, 2 ** 62]), ints("ax12", [1, 2])])
    x = g.node("Slice", [x, ints("s1", [-1]), ints("e1", [-2 ** 62]), ints("ax0", [0]), ints("m1", [-1])])
    kept = g.node("Slice", [x, ints("s2", [3]), ints("e2", [-2 ** 62]), ints("ax1", [1]), ints("m2", [-1])])
    g.node("Pad", [kept, ints("shift", [0, 1, 0, 0, 0, -1, 0, 0])], out="y")
    model = g.build(["y"])
    graph = fold_constants(to_ir(model))
    assert [n.op_type for n in graph.nodes] == ["Slice", "Pad"]
    assert graph.nodes[0].inputs[0] is graph.inputs[0]
    check_against_onnxruntime(model)


def test_concat_with_empty_rest_is_a_noop():
    """Phi-3's rotary embedding of the whole head joined to the empty rest of it (partial rotary
    at factor 1): Concat(x, empty) is x and goes; Concat(empty, x) stays (its first input is not
    the output). The graph agrees with onnxruntime."""
    from compiler.frontend import to_ir
    from compiler.passes import fold_constants
    g = GraphBuilder("empty_rest", seed=6)
    x = g.input("x", [1, 4, 3, 8])
    zeros = g.const("zeros", np.array([0, 0, 0, 0], np.int64))
    ends = g.const("ends", np.array([1, 4, 3, 0], np.int64))
    empty = g.node("Slice", [x, zeros, ends])
    y = g.node("Concat", [g.node("Relu", [x]), empty], axis=-1)
    g.node("Concat", [empty, y], axis=-1, out="z")
    model = g.build(["z"])
    graph = fold_constants(to_ir(model))
    assert [n.op_type for n in graph.nodes] == ["Slice", "Relu", "Concat"]
    check_against_onnxruntime(model)


def test_training_dropout_is_refused_by_name():
    g = GraphBuilder("training_dropout", seed=4)
    g.node("Dropout", [g.input("x", [2, 4]), g.const("ratio", np.array(0.5, np.float32)),
                       g.const("training", np.array(True))], out="y")
    with pytest.raises(CompileError, match="Dropout '/dropout_0' runs in training mode"):
        compile_model(g.build(["y"]))


def test_float16_constants_fold_in_float32():
    """A LayerNormalization of float16 constants folds as its kernel (and onnxruntime, stash_type
    1) computes it: in float32, its float16 result rounded once. onnx's reference evaluator
    computes in float16: up to 8 float16 units off on these rows (the fuzzer's seed 5177)."""
    from onnx import helper, numpy_helper, TensorProto

    rng = np.random.default_rng(5)
    x = (0.02 + 0.12 * rng.random((5, 4))).astype(np.float16)
    scale = np.array([-0.0735, 0.5234, 0.619, -0.9585], np.float16)
    graph = helper.make_graph(
        [helper.make_node("LayerNormalization", ["x", "s", "s"], ["y"], axis=-1, epsilon=1e-3)], "ln", [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [5, 4])],
        [numpy_helper.from_array(x, "x"), numpy_helper.from_array(scale, "s")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    x64, s64 = x.astype(np.float64), scale.astype(np.float64)
    centered = x64 - x64.mean(-1, keepdims=True)
    exact = (centered / np.sqrt((centered ** 2).mean(-1, keepdims=True) + 1e-3) * s64 + s64).astype(np.float16)
    got, _ = run_bundle(compile_model(model, target="generic"), {})
    np.testing.assert_array_equal(got["y"], exact)
