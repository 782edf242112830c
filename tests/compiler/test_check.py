"""`vkc check` and `vkc compile` agree: check says supported exactly when compile succeeds, and
a node check refuses carries compile's reason."""
from __future__ import annotations
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper
from typer.testing import CliRunner

from compiler import compile_model
from compiler.check import check_model
from compiler.cli import app
from compiler.errors import CompileError
from compiler.onnx_backend import freeze_inputs, normalize_opset, static_input_names
from tests.onnx_builders import single_op_model

from tests.conformance import cases  # noqa: E402

# Every 8th selected ONNX node case: a spread of ops, dtypes, ranks and attributes.
SAMPLE = cases.selected_cases()[::8]


def _frozen(case) -> onnx.ModelProto:
    """The case's model with its shape-deciding inputs frozen, as the ONNX backend compiles it."""
    model = normalize_opset(case.model)
    static = static_input_names(model)
    if not static:
        return model
    inits = {t.name for t in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in inits]
    values = dict(zip(names, case.data_sets[0][0]))
    return freeze_inputs(model, {n: cases._normalize(values[n]) for n in static})  # TensorProto too


@pytest.mark.parametrize("name", SAMPLE)
def test_check_agrees_with_compile(name):
    model = _frozen(cases.all_cases()[name])
    try:
        report = check_model(model)
    except CompileError as exc:  # the frontend's refusals are compile's too
        with pytest.raises(CompileError, match=str(exc)[:40].replace("(", r"\(").replace("[", r"\[")):
            compile_model(model)
        return
    try:
        compile_model(model)
        compiled, why = True, ""
    except CompileError as exc:
        compiled, why = False, str(exc)
    assert report.ok == compiled, (f"check says {'ok' if report.ok else 'not ok'} "
                                   f"({[v.refused for v in report.ops]}, {report.error!r}); "
                                   f"compile {'succeeded' if compiled else 'failed: ' + why}")
    if not compiled and not report.error:
        reasons = [r for v in report.ops for r in v.refused.values()]
        missing = [v.op for v in report.ops if not v.supported]
        assert missing or why in reasons, f"compile's reason {why!r} is not among check's {reasons}"


def test_check_names_the_node_and_the_kernel_limit(tmp_path):
    """An op vkc supports, on a dtype its kernel does not compute: check refuses that node with
    the same words compile uses."""
    model = single_op_model("Softmax", {"x": [2, 8]}, input_dtypes={"x": np.float64},
                            output_dtypes=[np.float64], node_name="softmax")
    path = tmp_path / "softmax64.onnx"
    onnx.save(model, path)
    report = check_model(model)
    (verdict,) = [v for v in report.ops if v.op == "Softmax"]
    assert verdict.supported and not verdict.ok
    (reason,) = verdict.refused.values()
    assert "float64" in reason and "float32, float16 only" in reason
    with pytest.raises(CompileError, match="float32, float16 only"):
        compile_model(model)
    out = CliRunner().invoke(app, ["check", str(path)])
    assert out.exit_code == 1 and "float32, float16 only" in " ".join(out.output.split())  # rich wraps


def test_check_reports_folded_and_supported_nodes():
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4, 6])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Reshape", ["x", "s"], ["r"], name="reshape"),
             helper.make_node("Relu", ["r"], ["y"], name="relu")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    report = check_model(model)
    by_op = {v.op: v for v in report.ops}
    assert report.ok
    assert by_op["Shape"].folded == ["shape"] and not by_op["Relu"].folded


def test_an_op_without_a_kernel_is_fine_when_every_node_of_it_folds():
    """ConstantOfShape has no kernel; fed by a constant shape it folds, and the model compiles."""
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 3])
    shape = helper.make_tensor("shape", onnx.TensorProto.INT64, [2], [2, 3])
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["c"], name="fill",
                              value=helper.make_tensor("v", onnx.TensorProto.FLOAT, [1], [0.5])),
             helper.make_node("Add", ["x", "c"], ["y"], name="add")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], [shape]),
                              opset_imports=[helper.make_opsetid("", 17)])
    report = check_model(model)
    (fill,) = [v for v in report.ops if v.op == "ConstantOfShape"]
    assert not fill.supported and fill.all_folded and report.ok
    compile_model(model)
