"""The float16 check (compiler/float16_check.py): a model whose outputs float16 weights move past
float16's tolerance is refused, naming the node where the difference passes it; one they barely
move compiles and records how far; where the check cannot run, the manifest says why."""

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from bundles import read_bundle
from compiler import float16_check
from compiler.cli import app
from compiler.compile import compile_model
from compiler.errors import CompileError
from compiler.passes.precision import Precision
from runtime_min import load


def recurrence(gain: float, steps: int = 48, width: int = 16):
    """h = tanh(h @ W), `steps` times with one shared W of this gain: past a gain of about 3 each
    step enlarges a perturbation (chaos), below it the steps forget it."""
    w = (np.random.default_rng(0).standard_normal((width, width)) * gain / np.sqrt(width)).astype(np.float32)
    nodes, h = [], "x"
    for i in range(steps):
        nodes += [helper.make_node("MatMul", [h, "w"], [f"p{i}"], name=f"step{i}"),
                  helper.make_node("Tanh", [f"p{i}"], [f"h{i}"], name=f"tanh{i}")]
        h = f"h{i}"
    graph = helper.make_graph(nodes, "recurrence", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
                              [helper.make_tensor_value_info(h, TensorProto.FLOAT, [1, width])],
                              [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("precision", ["fp16", "fp16-matmul"])
def test_a_model_that_amplifies_rounding_is_refused_naming_where(precision):
    with pytest.raises(CompileError, match=r"float16 cannot compute this model: .* output 'h47' moves by "
                       r".* first passes it at (Tanh|MatMul) '(tanh|step)\d+' .* --precision fp32"):
        compile_model(recurrence(4.0), target="lavapipe", precision=precision)
    compile_model(recurrence(4.0), target="lavapipe")   # float32 is not refused


def test_a_model_that_forgets_rounding_compiles_and_records_how_far_it_moved():
    bundle = compile_model(recurrence(1.0), target="lavapipe", precision="fp16")
    check = read_bundle(bundle).manifest["float16_check"]
    assert check["output"] == "h47" and 0 < check["moved"] < 1e-3
    x = np.random.default_rng(1).standard_normal((1, 16)).astype(np.float32)
    want = x
    w = numpy_helper.to_array(recurrence(1.0).graph.initializer[0])
    for _ in range(48):
        want = np.tanh(want @ w)
    with load(bundle) as model:
        got = model.run({"x": x})["h47"]
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-2


def test_constants_past_float16s_range_are_not_rounded():
    """A 1e5 scale stays float32 (float16 range's rule 1), so the check leaves it as it is: rounded,
    it would overflow and the model would be refused."""
    graph = helper.make_graph([helper.make_node("Mul", ["x", "c"], ["m"]), helper.make_node("Tanh", ["m"], ["y"])],
                              "scale", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                              [numpy_helper.from_array(np.array([1e5, 1e-4, 1, 2], np.float32), "c")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    manifest = read_bundle(compile_model(model, target="lavapipe", precision="fp16")).manifest
    assert manifest["float16_check"]["moved"] < 1e-3


def test_every_variant_shares_one_check_at_the_smallest(monkeypatch):
    calls = []
    real = float16_check.float16_check
    monkeypatch.setattr("compiler.compile.float16_check", lambda *a: calls.append(a) or real(*a))
    model = recurrence(1.0)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    bundle = compile_model(model, target="lavapipe,generic", precision="fp16",
                           variants=[{"x": [2, 16]}, {"x": [1, 16]}])
    assert len(calls) == 1 and calls[0][1] == {"x": [1, 16]}   # the smallest variant
    assert all("moved" in v["float16_check"] for v in read_bundle(bundle).manifest["variants"])


def test_where_it_cannot_run_the_manifest_and_inspect_say_why(monkeypatch, tmp_path):
    monkeypatch.setattr(float16_check, "MAX_WEIGHT_BYTES", 0)
    path = tmp_path / "m.vkb"
    path.write_bytes(compile_model(recurrence(1.0), target="lavapipe", precision="fp16"))
    assert read_bundle(path.read_bytes()).manifest["float16_check"] == {
        "not_run": "the weights (0.0 GiB) are past the check's limit of 0.0 GiB (an eighth of this machine's memory)"}
    out = CliRunner().invoke(app, ["inspect", str(path)]).output
    assert "float16 check: not run: the weights" in out


def test_ops_onnxs_reference_computes_wrongly_run_as_declared():
    """BERT's token-type ids: GatherElements over 100 positions, where onnx's reference fails
    (it picks with np.choose, 64 choices at most); the check runs the op's declared evaluation."""
    table = np.random.default_rng(2).standard_normal([1, 100]).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("GatherElements", ["table", "i"], ["g"], axis=1), helper.make_node("Add", ["x", "g"], ["y"])],
        "token_types", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
        [numpy_helper.from_array(table, "table"), numpy_helper.from_array(np.arange(90, 98)[None], "i")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    check = read_bundle(compile_model(model, target="lavapipe", precision="fp16")).manifest["float16_check"]
    assert check["output"] == "y" and check["moved"] < 1e-3


def test_a_model_that_draws_random_numbers_is_not_checked():
    """Two runs of it differ anyway (ViT-MAE's random masking): a difference is no verdict."""
    graph = helper.make_graph([helper.make_node("RandomNormalLike", ["x"], ["n"]), helper.make_node("Add", ["x", "n"], ["y"])],
                              "noise", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert float16_check.float16_check(model, None, Precision.parse("fp16")) == {
        "not_run": "the model draws random numbers (RandomNormalLike): two runs differ anyway"}


def test_opset_16_grid_sample_runs_as_declared():
    """onnx's reference knows only opset 20's mode names; bilinear (opset 16, as torch exports it)
    runs through the op's declared evaluation."""
    rng = np.random.default_rng(3)
    graph = helper.make_graph([helper.make_node("GridSample", ["x", "grid"], ["y"], mode="bilinear")], "sample",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 3, 4])],
                              [numpy_helper.from_array(rng.uniform(-1, 1, [1, 3, 4, 2]).astype(np.float32), "grid")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    check = read_bundle(compile_model(model, target="lavapipe", precision="fp16")).manifest["float16_check"]
    assert check["output"] == "y" and check["moved"] < 1e-3


def test_a_growing_cache_is_checked_with_one_row_of_past():
    """optimum's export (present = Concat(past, new)) compiled with --max-context: the check feeds
    every input at the shapes the cache form derives, one cached row."""
    fixture = Path(__file__).resolve().parents[1] / "models" / "fixtures" / "llama_tiny_optimum.onnx"
    bundle = compile_model(fixture, target="lavapipe", precision="fp16", max_context=16,
                           variants=[{"input_ids": [1, 4]}, {"input_ids": [1, 1]}])
    checks = [v["float16_check"] for v in read_bundle(bundle).manifest["variants"]]
    assert checks[0] == checks[1] and checks[0]["output"] == "logits" and checks[0]["moved"] < 1e-3


def test_an_evaluation_past_its_time_or_that_dies_leaves_the_check_unrun(monkeypatch):
    """The evaluator runs in a process of its own: a stall or a death (the kernel's OOM killer)
    there costs the compile only the check."""
    import os
    import time
    model = recurrence(1.0)
    monkeypatch.setattr(float16_check, "SECONDS", 0.5)
    monkeypatch.setattr(float16_check, "_run", lambda *a, **k: time.sleep(30))
    assert float16_check.float16_check(model, None, Precision.parse("fp16")) == {
        "not_run": "onnx's reference evaluator took over 0.5 s"}
    monkeypatch.setattr(float16_check, "_run", lambda *a, **k: os._exit(9))
    assert float16_check.float16_check(model, None, Precision.parse("fp16")) == {
        "not_run": "onnx's reference evaluator ran out of memory"}
