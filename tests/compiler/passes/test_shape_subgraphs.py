"""The shape subgraphs exporters emit fold away at compile time (static shapes): no kernel
reads a Shape, and the result still matches onnxruntime."""

import numpy as np
from onnx import helper

from tests.harness import check_against_onnxruntime
from tests.onnx_builders import GraphBuilder


def _flatten_like_pytorch(g, x):
    """torch.flatten(x, 1) as exported: Shape -> Gather(0) -> Unsqueeze -> Concat(-1) -> Reshape."""
    shape = g.node("Shape", [x])
    batch = g.node("Gather", [shape, g.const("zero", np.array(0, np.int64))], axis=0)
    batch = g.node("Unsqueeze", [batch, g.const("axes", np.array([0], np.int64))])
    target = g.node("Concat", [batch, g.const("minus_one", np.array([-1], np.int64))], axis=0)
    return g.node("Reshape", [x, target])


def _model():
    g = GraphBuilder("shape_subgraph", seed=3)
    x = g.input("x", [2, 4, 6, 6])
    y = g.node("Relu", [g.conv(x, 4, 8, 3)])
    flat = _flatten_like_pytorch(g, y)
    # a second, resize-style subgraph: sizes = Shape(y)[2:] * 2, as float scales
    spatial = g.node("Slice", [g.node("Shape", [y]), g.const("s", np.array([2], np.int64)),
                               g.const("e", np.array([4], np.int64))])
    sizes = g.node("Concat", [g.const("nc", np.array([2, 8], np.int64)),
                              g.node("Mul", [spatial, g.const("two", np.array([2], np.int64))])], axis=0)
    g.nodes.append(helper.make_node("Resize", [y, "", "", sizes], ["up"], mode="nearest"))
    g.node("Gemm", [flat, g.const("w", (g.rng.standard_normal((8 * 36, 5)) * 0.05).astype(np.float32))],
           out="logits")
    return g.build(["logits", "up"])


def test_shape_subgraph_folds_and_matches():
    result = check_against_onnxruntime(_model())
    kernels = " ".join(str(d.get("nodes", "")) for d in result["manifest"]["dispatches"])
    for folded in ("/shape", "/gather", "/unsqueeze", "/concat", "/slice", "/mul"):
        assert folded not in kernels, f"a kernel still computes {folded}: {kernels}"


def test_vkc_check_reports_folded_ops(tmp_path):
    import onnx
    from typer.testing import CliRunner

    from compiler.cli import app

    path = tmp_path / "m.onnx"
    onnx.save(_model(), path)
    result = CliRunner().invoke(app, ["check", str(path)])
    assert result.exit_code == 0, result.output
    for op in ("Shape", "Gather", "Unsqueeze", "Concat", "Reshape", "Resize", "Conv"):
        assert op in result.output
    assert "folded" in result.output
