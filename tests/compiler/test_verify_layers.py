"""compile_model(keep_intermediates=True) and `vkc verify --layers` (compiler/verify_layers.py)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from bundles import read_bundle
from compiler import compile_model
from compiler.cli import app
from compiler.verify_layers import compare_layers, first_bad, reference_values, report
from tests.harness import run_bundle


def _model() -> onnx.ModelProto:
    """LayerNorm -> |.| + 1 -> Log -> Clip -> MatMul + bias -> Relu, a Reshape (a view) beside."""
    rng = np.random.default_rng(3)
    const = lambda name, a: numpy_helper.from_array(np.asarray(a, np.float32), name)
    nodes = [helper.make_node("LayerNormalization", ["x", "gamma"], ["ln"], name="ln", axis=-1),
             helper.make_node("Abs", ["ln"], ["abs"], name="abs"),
             helper.make_node("Add", ["abs", "one"], ["pos"], name="pos"),
             helper.make_node("Log", ["pos"], ["log"], name="log"),
             helper.make_node("Clip", ["log", "lo", "hi"], ["clip"], name="clip"),
             helper.make_node("MatMul", ["clip", "w"], ["mm"], name="proj"),
             helper.make_node("Add", ["mm", "b"], ["biased"], name="bias"),
             helper.make_node("Relu", ["biased"], ["y"], name="relu"),
             helper.make_node("Reshape", ["clip", "flat"], ["flat_clip"], name="flatten"),
             helper.make_node("Sigmoid", ["flat_clip"], ["z"], name="gate")]
    inits = [const("gamma", np.ones(16)), const("one", 1.0), const("lo", 0.1), const("hi", 2.0),
             const("w", rng.standard_normal((16, 8)) / 4), const("b", rng.standard_normal(8)),
             numpy_helper.from_array(np.array([8, 16], np.int64), "flat")]
    graph = helper.make_graph(nodes, "layers", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 8]),
                               helper.make_tensor_value_info("z", TensorProto.FLOAT, [8, 16])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _run(model, **kw):
    bundle = compile_model(model, target="lavapipe", **kw)
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 4, 16)).astype(np.float32)}
    got, _ = run_bundle(bundle, feeds)
    return read_bundle(bundle).manifest, got, feeds


def test_kept_intermediates_change_no_fusion_and_get_their_own_bytes():
    model = _model()
    plain, _, _ = _run(model)
    kept, got, _ = _run(model, keep_intermediates=True)
    assert [d["nodes"] for d in kept["dispatches"]] == [d["nodes"] for d in plain["dispatches"]]
    names = {e["name"] for e in kept["intermediates"]}
    assert {"ln", "clip", "flat_clip"} <= names and not names & {"y", "z"}
    assert {o["name"] for o in kept["outputs"]} == names | {"y", "z"}
    roots = {}   # a view shares its root's bytes; distinct roots never overlap
    for e in kept["intermediates"]:
        t = kept["tensors"][e["tensor"]]
        roots.setdefault(t["offset"], t["offset"] + t["nbytes"])
    spans = sorted(roots.items())
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:]))
    assert all(np.isfinite(got[n]).all() for n in names)  # written, not the arena's NaN poison


def test_layers_agree_and_fused_values_are_named():
    model = _model()
    manifest, got, feeds = _run(model, keep_intermediates=True)
    layers = compare_layers(model, manifest, got, reference_values(model, feeds), 1e-4)
    status = {layer.tensor: layer.status for layer in layers}
    assert first_bad(layers) is None, report(model, layers, {}, feeds)
    assert status["ln"] == status["clip"] == status["y"] == "ok"
    assert status["abs"] == status["log"] == "fused"   # inside the elementwise kernel that stores clip
    clip = next(layer for layer in layers if layer.tensor == "clip")
    assert {"abs", "pos", "log", "clip"} <= set(clip.fused)


def test_the_first_wrong_value_is_named_with_its_kernel():
    model = _model()
    manifest, got, feeds = _run(model, keep_intermediates=True)
    want = reference_values(model, feeds)
    got = dict(got, clip=got["clip"] * 1.01, y=got["y"] + 1.0)   # as a wrong kernel would leave them
    layers = compare_layers(model, manifest, got, want, 1e-4)
    bad = first_bad(layers)
    assert (bad.op, bad.node, bad.tensor) == ("Clip", "clip", "clip")
    text = "\n".join(report(model, layers, want, feeds))
    assert "first node outside tolerance: Clip 'clip'" in text and "input log: float32[2, 4, 16]" in text
    assert f"computed by dispatch {bad.dispatch} (elementwise)" in text


def test_cli_verify_layers(tmp_path):
    path = tmp_path / "layers.onnx"
    onnx.save(_model(), path)
    result = CliRunner().invoke(app, ["verify", str(path), "--layers", "--target", "lavapipe"])
    assert result.exit_code == 0, result.output
    assert "fused" in result.output and "Clip 'clip' -> clip" in result.output
    assert "0 differ" in result.output
