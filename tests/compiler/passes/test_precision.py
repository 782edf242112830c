"""The precision pass (`--precision fp16`): float16 tensors and weights where the registry says a
node computes float16, Casts around the nodes that do not (and those --keep-fp32 names), float32
inputs and outputs unless --io fp16."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from bundles import read_bundle
from compiler import compile_model
from compiler.errors import CompileError
from compiler.frontend import to_ir
from compiler.passes import PIPELINE, apply_precision, fold_constants
from compiler.passes.precision import Precision, to_float16_weights
from tests.harness import check_against_onnxruntime, compile_cached, run_bundle, run_onnxruntime

F16, F32 = np.dtype(np.float16), np.dtype(np.float32)


def _model():
    """conv1 -> Relu -> LRN (float32 only) -> conv2 -> Softmax over channels."""
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)
    w2 = (rng.standard_normal((4, 8, 1, 1)) * 0.3).astype(np.float32)
    b2 = (rng.standard_normal(4) * 0.1).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("LRN", ["r1"], ["up"], name="up", size=3),
             helper.make_node("Conv", ["up", "w2", "b2"], ["c2"], name="conv2"),
             helper.make_node("Softmax", ["c2"], ["y"], name="softmax", axis=1)]
    graph = helper.make_graph(
        nodes, "precision", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        [numpy_helper.from_array(a, n) for n, a in (("w1", w1), ("w2", w2), ("b2", b2))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _retyped(model, precision="fp16", **options):
    """The graph right after apply_precision (Casts still ONNX Cast nodes)."""
    graph = fold_constants(to_ir(model))
    graph.precision = Precision.parse(precision, **options)
    for p in PIPELINE:
        graph = p(graph)
        if p is apply_precision:
            return graph
    raise AssertionError("apply_precision is not in the PIPELINE")


def _node(graph, op, name=None):
    return next(n for n in graph.nodes if n.op_type == op and (name is None or n.name == name))


def _casts(graph):
    return [(n.inputs[0].name, np.dtype(n.outputs[0].dtype).name)
            for n in graph.nodes if n.op_type == "Cast"]


def test_float16_nodes_weights_and_casts_around_the_fallback():
    g = _retyped(_model())
    conv1, conv2 = _node(g, "Conv", "conv1"), _node(g, "Conv", "conv2")
    # Conv, Relu and Softmax compute float16: their tensors and weights are float16.
    for node in (conv1, conv2, _node(g, "Relu"), _node(g, "Softmax")):
        assert all(v.dtype == F16 for v in [*node.inputs, *node.outputs]), node
    assert conv1.inputs[1].data.dtype == F16 and conv2.inputs[2].data.dtype == F16
    # LRN has no float16 kernel: float32 between two Casts.
    up = _node(g, "LRN")
    assert up.inputs[0].dtype == F32 and up.outputs[0].dtype == F32
    # The input comes in as float32, the output leaves as float32 under its own name.
    assert _casts(g) == [("x", "float16"), ("r1", "float32"), ("up", "float16"),
                         ("y/float16", "float32")]
    assert [v.name for v in g.inputs] == ["x"] and g.inputs[0].dtype == F32
    assert [(v.name, v.dtype) for v in g.outputs] == [("y", F32)]


def test_keep_fp32_keeps_the_named_node_and_its_weights():
    g = _retyped(_model(), keep_fp32=["conv2"])
    conv2 = _node(g, "Conv", "conv2")
    assert all(v.dtype == F32 for v in [*conv2.inputs, *conv2.outputs])
    assert conv2.inputs[1].data.dtype == F32
    assert _node(g, "Conv", "conv1").outputs[0].dtype == F16
    # LRN and conv2 both float32: no Cast between them.
    assert _casts(g) == [("x", "float16"), ("r1", "float32"), ("c2", "float16"),
                         ("y/float16", "float32")]


def test_fp16_matmul_retypes_only_the_matrix_products():
    """--precision fp16-matmul: the Convs and their weights float16, everything else float32, with
    a Cast on each side of each Conv."""
    g = _retyped(_model(), precision="fp16-matmul")
    conv1, conv2 = _node(g, "Conv", "conv1"), _node(g, "Conv", "conv2")
    for conv in (conv1, conv2):
        assert all(v.dtype == F16 for v in [*conv.inputs, *conv.outputs]), conv
    assert conv1.inputs[1].data.dtype == F16 and conv2.inputs[2].data.dtype == F16
    for op in ("Relu", "LRN", "Softmax"):
        node = _node(g, op)
        assert all(v.dtype == F32 for v in [*node.inputs, *node.outputs]), node
    assert _casts(g) == [("x", "float16"), ("c1", "float32"), ("up", "float16"), ("c2", "float32")]
    assert [(v.name, v.dtype) for v in g.outputs] == [("y", F32)]


def test_io_fp16_retypes_inputs_and_outputs():
    g = _retyped(_model(), io="fp16")
    assert g.inputs[0].dtype == F16 and g.outputs[0].dtype == F16
    assert _casts(g) == [("r1", "float32"), ("up", "float16")]


def test_unknown_keep_name_and_options_are_refused():
    with pytest.raises(CompileError, match="--keep-fp32 names nope"):
        _retyped(_model(), keep_fp32=["nope"])
    with pytest.raises(CompileError, match="apply to --precision fp16 and fp16-matmul only"):
        Precision.parse("fp32", io="fp16")
    with pytest.raises(CompileError, match="precision 'fp8'"):
        Precision.parse("fp8")
    with pytest.raises(CompileError, match="--precision fp16-matmul is the opt-in"):
        Precision.parse("tf32")


def test_weights_saturate_instead_of_overflowing():
    w = np.array([-3.4e38, -1.0, 7e4, np.inf], np.float32)
    assert to_float16_weights(w).tolist() == [-65504.0, -1.0, 65504.0, np.inf]


def test_fp16_runs_and_halves_weights():
    """On lavapipe against onnxruntime float32; the bundle needs 16-bit storage."""
    model = _model()
    result = check_against_onnxruntime(model, target="lavapipe", precision="fp16",
                                       rtol_l2=1e-2, rtol=1e-2, atol=1e-2)
    m16 = result["manifest"]
    m32 = read_bundle(compile_cached(model, target="lavapipe")).manifest
    assert "storageBuffer16BitAccess" in m16["requirements"]["features"]
    assert "storageBuffer16BitAccess" not in m32["requirements"]["features"]
    assert m16["memory"]["weights_bytes"] < m32["memory"]["weights_bytes"]
    assert m16["memory"]["arena_bytes"] < m32["memory"]["arena_bytes"]
    assert [t["dtype"] for t in m16["tensors"] if t["name"] in ("x", "y")] == ["float32"] * 2


def test_io_fp16_runs_with_float16_inputs_and_outputs(rng):
    model = _model()
    bundle = compile_model(model, target="lavapipe", precision="fp16", io="fp16")
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    got, io = run_bundle(bundle, {"x": x.astype(np.float16)})
    assert io["inputs"] == [("x", [1, 3, 8, 8], "float16")]
    assert got["y"].dtype == np.float16
    ref = run_onnxruntime(model, {"x": x.astype(np.float16).astype(np.float32)})["y"]
    err = np.linalg.norm(got["y"].astype(np.float64) - ref) / np.linalg.norm(ref)
    assert err < 1e-2, err


def test_cli_compile_fp16_and_inspect(tmp_path):
    import onnx
    from typer.testing import CliRunner

    from compiler.cli import app
    onnx.save(_model(), tmp_path / "m.onnx")
    out = {}
    for precision in ("fp32", "fp16"):
        bundle = tmp_path / f"{precision}.vkb"
        r = CliRunner().invoke(app, ["compile", str(tmp_path / "m.onnx"), "-o", str(bundle),
                                     "--precision", precision, "--target", "lavapipe",
                                     *(["--keep-fp32", "conv2,softmax"] if precision == "fp16" else [])])
        assert r.exit_code == 0, r.output
        r = CliRunner().invoke(app, ["inspect", str(bundle)])
        assert r.exit_code == 0, r.output
        out[precision] = " ".join(r.output.split())
        assert ("storageBuffer16BitAccess" in out[precision]) == (precision == "fp16")
    weights = {p: int(text.split("weights ")[-1].split()[0].rstrip(";").replace(",", ""))
               for p, text in out.items()}
    # conv2 kept float32: conv1's weights halve.
    assert weights["fp32"] > weights["fp16"]
    r = CliRunner().invoke(app, ["compile", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "x.vkb"),
                                 "--precision", "fp16", "--keep-fp32", "conv9"])
    assert r.exit_code == 1 and "conv9" in r.output


def test_device_without_16bit_storage_is_refused(monkeypatch):
    from runtime_min import VkcRuntimeError, load
    from runtime_min import device as rdevice
    bundle = compile_cached(_model(), target="lavapipe", precision="fp16")
    real = rdevice.Instance.describe

    def without_16bit_storage(self, pdev, index):
        info = real(self, pdev, index)
        return dataclasses.replace(info,
                                   all_features=info.all_features - {"storageBuffer16BitAccess"})
    monkeypatch.setattr(rdevice.Instance, "describe", without_16bit_storage)
    with pytest.raises(VkcRuntimeError, match="lacks: feature storageBuffer16BitAccess"):
        load(bundle)


def _w(*shape, seed=1):
    return (np.random.default_rng(seed).standard_normal(shape) * 0.3).astype(np.float32)


# Each kernel family that computes float16, alone: odd sizes (partial tiles, odd element counts
# in 16-bit storage), on the GPU profile's kernels and lavapipe's.
KERNEL_CASES = {
    "gemm_transB_bias": ("Gemm", {"x": [5, 37]}, {"transB": 1}, {"w": _w(19, 37), "b": _w(19)}),
    "matmul_batched": ("MatMul", {"x": [3, 33, 20]}, {}, {"w": _w(20, 67)}),
    "matmul_splitk": ("MatMul", {"x": [16, 1024]}, {}, {"w": _w(1024, 16)}),
    "conv_3x3_stride2": ("Conv", {"x": [1, 5, 13, 11]}, {"pads": [1, 1, 1, 1], "strides": [2, 2]},
                         {"w": _w(7, 5, 3, 3), "b": _w(7)}),
    "conv_depthwise": ("Conv", {"x": [1, 6, 9, 9]}, {"group": 6, "pads": [1, 1, 1, 1]},
                       {"w": _w(6, 1, 3, 3)}),
    "conv_3d": ("Conv", {"x": [1, 3, 4, 5, 5]}, {"pads": [1] * 6}, {"w": _w(4, 3, 3, 3, 3)}),
    "conv_transpose": ("ConvTranspose", {"x": [1, 4, 5, 5]}, {"strides": [2, 2]},
                       {"w": _w(4, 3, 3, 3)}),
    "maxpool": ("MaxPool", {"x": [1, 3, 9, 9]}, {"kernel_shape": [3, 3], "strides": [2, 2]}, {}),
    "avgpool": ("AveragePool", {"x": [1, 3, 9, 9]}, {"kernel_shape": [3, 3], "pads": [1] * 4}, {}),
    "global_avgpool": ("GlobalAveragePool", {"x": [1, 5, 7, 7]}, {}, {}),
    "softmax": ("Softmax", {"x": [3, 7, 11]}, {"axis": 1}, {}),
    "log_softmax": ("LogSoftmax", {"x": [3, 37]}, {"axis": -1}, {}),
    "layernorm": ("LayerNormalization", {"x": [2, 5, 48]}, {"axis": -1},
                  {"scale": _w(48), "bias": _w(48)}),
    "reduce_mean": ("ReduceMean", {"x": [3, 5, 7]}, {"axes": [1]}, {}),
    "reduce_logsumexp": ("ReduceLogSumExp", {"x": [3, 5, 7]}, {"axes": [0, 2]}, {}),
    "concat": ("Concat", {"x0": [2, 3, 5], "x1": [2, 1, 5]}, {"axis": 1}, {}),
    "resize_linear": ("Resize", {"x": [1, 3, 5, 7]}, {"mode": "linear"},
                      {"roi": np.zeros(0, np.float32), "scales": np.array([1, 1, 2, 1.5], np.float32)}),
}


@pytest.mark.parametrize("target", ["generic", "lavapipe"])
@pytest.mark.parametrize("case", list(KERNEL_CASES))
def test_kernel_computes_float16(case, target):
    from tests.onnx_builders import _fill_output_shapes, single_op_model
    op, inputs, attrs, weights = KERNEL_CASES[case]
    model = single_op_model(op, inputs, attrs, initializers=weights)
    if op == "LayerNormalization":
        model.opset_import[0].version = 17
        model = _fill_output_shapes(model)
    g = _retyped(model)
    (node,) = [n for n in g.nodes if n.op_type == op]
    assert node.outputs[0].dtype == F16, "the registry declares this op float16"
    check_against_onnxruntime(model, target=target, precision="fp16", rtol_l2=1e-2,
                              rtol=1e-2, atol=1e-2)
