"""sink_row_selection: a Gather of one constant index (or a Slice of one axis) moves through the
row-wise ops that produce its data, which then compute only the selected rows; it stops at a value
with another reader, a graph output, or an op that mixes rows (a reduction or a softmax over the
axis, a reshape that scatters the rows). Each case checks the graph (the ops see fewer rows) and
agrees with onnxruntime on random weights and inputs."""
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from tests.harness import check_against_onnxruntime
from tests.onnx_builders import make_model, tensor_info

from compiler.frontend import to_ir
from compiler.passes import fold_constants, run_passes, sink_row_selection

FIXTURES = Path(__file__).resolve().parents[2] / "models" / "fixtures"


def _model(nodes, inputs, outputs, inits, opset=17):
    graph = helper.make_graph(nodes, "rows", [tensor_info(n, s) for n, s in inputs],
                              [tensor_info(o, None) for o in outputs], inits)
    return make_model(graph, opset=opset)


def _n(op, inputs, output, name, **attrs):
    return helper.make_node(op, inputs, [output], name=name, **attrs)


def _w(name, shape, rng, scale=0.3):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def _ints(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _ints_node(name, value):
    """A Constant node of one int64 (torch's exports write indices so)."""
    return helper.make_node("Constant", [], [name],
                            value=numpy_helper.from_array(np.array(value, np.int64)))


def _sunk(model):
    """The IR right after the pass (ONNX nodes, names kept)."""
    return sink_row_selection(fold_constants(to_ir(model)))


def _node(graph, source):
    """The node standing for ONNX node `source` (after fusion: the one whose sources name it)."""
    return next(n for n in graph.nodes if source in n.sources)


def _ffn_tail(select):
    """The end of a pre-norm transformer layer and the final LayerNorm, as torchvision's ViT
    exports it (GELU in its erf form, biases added after the MatMuls), then `select` (nodes
    reading 'y', writing 'out')."""
    rng = np.random.default_rng(0)
    inits = [_w(f"g{i}", (16,), rng) for i in (1, 2)] + [_w(f"b{i}", (16,), rng) for i in (1, 2)]
    inits += [_w("w1", (16, 32), rng), _w("bias1", (32,), rng), _w("w2", (32, 16), rng),
              _w("bias2", (16,), rng)]
    inits += [numpy_helper.from_array(np.array(v, np.float32), n)
              for n, v in (("sqrt2", 1.4142135), ("one", 1.0), ("half", 0.5))]
    nodes = [_n("Add", ["x", "r"], "s", "res1"),
             _n("LayerNormalization", ["s", "g1", "b1"], "ln", "ln_2", axis=-1),
             _n("MatMul", ["ln", "w1"], "h", "fc1"), _n("Add", ["bias1", "h"], "hb", "fc1_bias"),
             _n("Div", ["hb", "sqrt2"], "d", "gelu_div"), _n("Erf", ["d"], "e", "gelu_erf"),
             _n("Add", ["e", "one"], "a", "gelu_add"), _n("Mul", ["hb", "a"], "m", "gelu_mul"),
             _n("Mul", ["m", "half"], "g", "gelu_half"),
             _n("MatMul", ["g", "w2"], "o", "fc2"), _n("Add", ["bias2", "o"], "ob", "fc2_bias"),
             _n("Add", ["s", "ob"], "t", "res2"),
             _n("LayerNormalization", ["t", "g2", "b2"], "y", "ln", axis=-1)]
    inits += [t for t in select if isinstance(t, onnx.TensorProto)]
    nodes += [n for n in select if isinstance(n, onnx.NodeProto)]
    return _model(nodes, [("x", [2, 7, 16]), ("r", [2, 7, 16])], ["out"], inits)


def _check_ffn_rows(model, rows):
    """Every op of the tail runs on `rows` token rows per image, fused as without the pass."""
    graph = run_passes(fold_constants(to_ir(model)))
    assert _node(graph, "fc1").inputs[0].shape == (2, rows, 16)
    assert _node(graph, "fc2").inputs[0].shape == (2, rows, 32)
    for ln in ("ln_2", "ln"):
        assert _node(graph, ln).op_type == "vkc.LayerNorm"
        assert _node(graph, ln).outputs[0].shape == (2, rows, 16)
    check_against_onnxruntime(model, target="generic")


@pytest.mark.parametrize("index", [0, -1, 3])
def test_gather_of_one_token_sinks_through_the_layer(index):
    """Gather(axis 1, scalar index): the axis goes, by a view where the Gather stood."""
    model = _ffn_tail([_ints("idx", index), _n("Gather", ["y", "idx"], "out", "cls", axis=1)])
    _check_ffn_rows(model, 1)
    graph = _sunk(model)
    assert graph.outputs[0].shape == (2, 16)
    selections = [n for n in graph.nodes if n.op_type in ("Gather", "Slice")]
    assert sorted((n.op_type, n.inputs[0].name) for n in selections) == [("Slice", "r"),
                                                                          ("Slice", "x")]


@pytest.mark.parametrize("starts, ends", [([2], [4]), ([-3], [2 ** 62])], ids=["2:4", "-3:"])
def test_slice_of_token_rows_keeps_the_axis(starts, ends):
    model = _ffn_tail([_ints("starts", starts), _ints("ends", ends), _ints("axes", [-2]),
                       _ints("steps", [1]),
                       _n("Slice", ["y", "starts", "ends", "axes", "steps"], "out", "rows")])
    rows = 2 if starts == [2] else 3
    _check_ffn_rows(model, rows)
    assert _sunk(model).outputs[0].shape == (2, rows, 16)


def test_one_element_index_list_keeps_the_axis():
    model = _ffn_tail([_ints("idx", [5]), _n("Gather", ["y", "idx"], "out", "cls", axis=1)])
    _check_ffn_rows(model, 1)
    assert _sunk(model).outputs[0].shape == (2, 1, 16)


def test_sinks_through_a_transpose():
    """[S, B, E] rows projected, transposed to [B, S, E]: token 0 of every image is the
    projection of row 0 of S."""
    rng = np.random.default_rng(1)
    model = _model([_n("MatMul", ["x", "w"], "h", "proj"),
                    _n("Transpose", ["h"], "t", "to_batch_first", perm=[1, 0, 2]),
                    _n("Relu", ["t"], "a", "act"), _ints_node("idx", 0),
                    _n("Gather", ["a", "idx"], "out", "cls", axis=1)],
                   [("x", [7, 2, 16])], ["out"], [_w("w", (16, 24), rng)])
    graph = run_passes(fold_constants(to_ir(model)))
    assert _node(graph, "proj").inputs[0].shape == (1, 2, 16)
    check_against_onnxruntime(model, target="generic")


def test_sinks_through_reshapes_that_merge_and_split_the_leading_axis():
    """nn.MultiheadAttention's out-projection: [S, B, E] -> [S*B, E] -> Gemm -> [S, B, E']. Row s
    of S is rows [s*B, (s+1)*B) of S*B, which are row s of the input again."""
    rng = np.random.default_rng(2)
    model = _model([_n("Relu", ["x"], "a", "act"), _n("Reshape", ["a", "merged"], "m", "merge"),
                    _n("Gemm", ["m", "w", "b"], "g", "out_proj", transB=1),
                    _n("Reshape", ["g", "split"], "u", "unmerge"), _ints_node("idx", 2),
                    _n("Gather", ["u", "idx"], "out", "cls", axis=0)],
                   [("x", [5, 3, 8])], ["out"],
                   [_w("w", (6, 8), rng), _w("b", (6,), rng), _ints("merged", [15, 8]),
                    _ints("split", [5, 3, 6])])
    graph = _sunk(model)
    assert _node(graph, "out_proj").inputs[0].shape == (3, 8)
    assert _node(graph, "act").outputs[0].shape == (1, 3, 8)
    check_against_onnxruntime(model, target="generic")


def test_stops_at_a_reshape_that_scatters_the_rows():
    """Row 0 of [6, 4] viewed as [4, 6] is row 0 and half of row 1 of the input: no rows there."""
    model = _model([_n("Relu", ["x"], "a", "act"), _n("Reshape", ["a", "shape"], "m", "view"),
                    _ints_node("idx", 0), _n("Gather", ["m", "idx"], "out", "first", axis=0)],
                   [("x", [6, 4])], ["out"], [_ints("shape", [4, 6])])
    graph = _sunk(model)
    assert _node(graph, "act").outputs[0].shape == (6, 4)
    assert _node(graph, "first").op_type == "Gather"
    check_against_onnxruntime(model, target="generic")


@pytest.mark.parametrize("bias", ["per-row constant", "per-row input", "per-column"])
def test_sinks_through_gemm_rows(bias):
    """Gemm's rows are A's rows, and those of a bias C that has one per row."""
    rng = np.random.default_rng(3)
    shape = (6,) if bias == "per-column" else (5, 6)
    inputs, inits = [("x", [5, 8])], [_w("w", (6, 8), rng)]
    if bias == "per-row input":
        inputs.append(("c", list(shape)))
    else:
        inits.append(_w("c", shape, rng))
    model = _model([_n("Relu", ["x"], "a", "act"),
                    _n("Gemm", ["a", "w", "c"], "g", "fc", transB=1),
                    _n("Gather", ["g", "idx"], "out", "pick", axis=0)],
                   inputs, ["out"], inits + [_ints("idx", [3])])
    fc = _node(_sunk(model), "fc")
    assert fc.inputs[0].shape == (1, 8)
    assert fc.inputs[2].shape == ((6,) if bias == "per-column" else (1, 6))
    assert (fc.inputs[2].producer is not None) == (bias == "per-row input")  # a Slice of c
    check_against_onnxruntime(model, target="generic")


def test_broadcast_operands_stay_whole():
    """Operands of size 1 on the axis ([2, 1, 16]) or too short to reach it ([16]) are read as
    they are; those spanning it ([7, 16], an input, and a constant) lose the other rows."""
    rng = np.random.default_rng(4)
    model = _model([_n("Relu", ["x"], "a", "act"), _n("Add", ["a", "p"], "s", "add_p"),
                    _n("Mul", ["s", "q"], "s2", "mul_q"), _n("Sub", ["s2", "t"], "s3", "sub_t"),
                    _n("Add", ["c", "s3"], "s4", "add_c"), _ints_node("idx", 4),
                    _n("Gather", ["s4", "idx"], "out", "pick", axis=1)],
                   [("x", [2, 7, 16]), ("p", [2, 1, 16]), ("t", [7, 16])], ["out"],
                   [_w("q", (16,), rng), _w("c", (7, 16), rng)])
    graph = _sunk(model)
    assert [v.name for v in _node(graph, "add_p").inputs][1] == "p"
    assert _node(graph, "mul_q").inputs[1].shape == (16,)
    assert _node(graph, "sub_t").inputs[1].shape == (1, 16)
    assert _node(graph, "add_c").inputs[0].shape == (1, 16)
    assert sorted(n.inputs[0].name for n in graph.nodes if n.op_type == "Slice") == ["t", "x"]
    check_against_onnxruntime(model, target="generic")


def test_value_with_another_reader_keeps_its_rows():
    """The MatMul's result is also read by a Sigmoid: it computes every row, and the selection
    stays on it as one copy of the row, after which the Add runs on that row alone."""
    rng = np.random.default_rng(5)
    model = _model([_n("MatMul", ["x", "w"], "h", "mm"), _n("Add", ["h", "one"], "a", "add1"),
                    _ints_node("idx", 0), _n("Gather", ["a", "idx"], "out", "cls", axis=1),
                    _n("Sigmoid", ["h"], "other", "other")],
                   [("x", [2, 7, 16])], ["out", "other"],
                   [_w("w", (16, 8), rng),
                    numpy_helper.from_array(np.array(1.0, np.float32), "one")])
    graph = _sunk(model)
    assert _node(graph, "mm").outputs[0].shape == (2, 7, 8)
    assert _node(graph, "add1").outputs[0].shape == (2, 1, 8)
    [copy] = [n for n in graph.nodes if n.op_type == "Slice"]
    assert copy.inputs[0].name == "h" and copy.outputs[0].shape == (2, 1, 8)
    check_against_onnxruntime(model, target="generic")


def test_graph_output_keeps_its_rows():
    model = _model([_n("Relu", ["x"], "a", "act"), _ints_node("idx", 0),
                    _n("Gather", ["a", "idx"], "out", "cls", axis=1)],
                   [("x", [2, 7, 16])], ["out", "a"], [])
    graph = _sunk(model)
    assert _node(graph, "act").outputs[0].shape == (2, 7, 16)
    assert _node(graph, "cls").op_type == "Gather"
    check_against_onnxruntime(model, target="generic")


def test_reduce_over_the_selected_axis_keeps_its_rows():
    """x - mean over the tokens: the selected row is centred by the mean of all rows, which the
    ReduceMean still computes from every row."""
    model = _model([_n("Relu", ["x"], "a", "act"),
                    _n("ReduceMean", ["a"], "m", "mean", axes=[1], keepdims=1),
                    _n("Sub", ["a", "m"], "d", "center"), _ints_node("idx", 2),
                    _n("Gather", ["d", "idx"], "out", "pick", axis=1)],
                   [("x", [2, 7, 16])], ["out"], [], opset=13)
    graph = _sunk(model)
    assert _node(graph, "center").outputs[0].shape == (2, 1, 16)
    assert _node(graph, "mean").inputs[0].shape == (2, 7, 16)
    assert _node(graph, "act").outputs[0].shape == (2, 7, 16)
    check_against_onnxruntime(model, target="generic")


@pytest.mark.parametrize("axis", [1, -1])
def test_softmax_moves_only_off_its_axis(axis):
    model = _model([_n("Relu", ["x"], "a", "act"), _n("Softmax", ["a"], "p", "softmax", axis=axis),
                    _ints_node("idx", 3), _n("Gather", ["p", "idx"], "out", "pick", axis=1)],
                   [("x", [2, 7, 16])], ["out"], [])
    rows = 7 if axis == 1 else 1
    assert _node(_sunk(model), "act").outputs[0].shape == (2, rows, 16)
    check_against_onnxruntime(model, target="generic")


def test_decomposed_layernorm_sinks_op_by_op_and_still_fuses():
    """The ReduceMean/Sub/Pow/Sqrt/Div chain older exports write reduces over the last axis only:
    the selection of a token passes through it, and fuse_layernorm still makes one kernel of it."""
    rng = np.random.default_rng(6)
    model = _model([_n("Relu", ["x"], "a", "act"),
                    _n("ReduceMean", ["a"], "m", "mean", axes=[-1]),
                    _n("Sub", ["a", "m"], "d", "sub"), _n("Pow", ["d", "two"], "q", "pow"),
                    _n("ReduceMean", ["q"], "v", "var", axes=[-1]),
                    _n("Add", ["v", "eps"], "ve", "add_eps"), _n("Sqrt", ["ve"], "s", "sqrt"),
                    _n("Div", ["d", "s"], "nrm", "div"), _n("Mul", ["nrm", "g"], "ng", "scale"),
                    _n("Add", ["ng", "b"], "y", "shift"), _ints_node("idx", 0),
                    _n("Gather", ["y", "idx"], "out", "cls", axis=1)],
                   [("x", [2, 7, 16])], ["out"],
                   [_w("g", (16,), rng), _w("b", (16,), rng),
                    numpy_helper.from_array(np.array(2.0, np.float32), "two"),
                    numpy_helper.from_array(np.array(1e-5, np.float32), "eps")], opset=13)
    assert _node(_sunk(model), "act").outputs[0].shape == (2, 1, 16)
    graph = run_passes(fold_constants(to_ir(model)))
    assert not [n for n in graph.nodes if n.op_type.startswith("Reduce")]
    assert _node(graph, "var").op_type == "vkc.LayerNorm"
    assert _node(graph, "var").outputs[0].shape == (2, 1, 16)
    check_against_onnxruntime(model, target="generic")


@pytest.mark.parametrize("axis", [0, 1])
def test_matmul_batch_axis_selects_both_operands_row_axis_only_a(axis):
    """Image 2 of a batched product is the product of image 2 of each operand; row 3 of every
    image needs row 3 of A and all of B."""
    model = _model([_n("Relu", ["x"], "a", "act_a"), _n("Tanh", ["z"], "b", "act_b"),
                    _n("MatMul", ["a", "b"], "p", "bmm"), _ints_node("idx", 2 if axis == 0 else 3),
                    _n("Gather", ["p", "idx"], "out", "pick", axis=axis)],
                   [("x", [4, 7, 8]), ("z", [4, 8, 5])], ["out"], [])
    bmm = _node(_sunk(model), "bmm")
    if axis == 0:
        assert [v.shape for v in bmm.inputs] == [(1, 7, 8), (1, 8, 5)]
    else:
        assert [v.shape for v in bmm.inputs] == [(4, 1, 8), (4, 8, 5)]
    check_against_onnxruntime(model, target="generic")


def test_opset_9_leaves_an_attribute_slice():
    """Before opset 10 Slice takes its bounds as attributes."""
    rng = np.random.default_rng(7)
    model = _model([_n("MatMul", ["x", "w"], "h", "mm"), _n("Relu", ["h"], "a", "act"),
                    _n("Gather", ["a", "idx"], "out", "cls", axis=1),
                    _n("Sigmoid", ["h"], "other", "other")],
                   [("x", [2, 7, 16])], ["out", "other"],
                   [_w("w", (16, 8), rng), _ints("idx", 6)], opset=9)
    graph = _sunk(model)
    [copy] = [n for n in graph.nodes if n.op_type == "Slice"]
    assert copy.attrs == {"starts": [6], "ends": [7], "axes": [1]}
    assert _node(graph, "act").outputs[0].shape == (2, 1, 8)
    check_against_onnxruntime(model, target="generic")


@pytest.mark.parametrize("name, batch", [("vit_tiny", 1), ("vit_tiny_b2", 2)])
def test_vit_last_layer_runs_on_the_class_token(name, batch):
    """torchvision's ViT reads only token 0 of its last layer: that layer's out-projection, FFN
    and LayerNorms, and its attention's query side, run on 1 row per image; the layer before
    stays whole."""
    model = onnx.load(str(FIXTURES / f"{name}.onnx"))
    graph = run_passes(fold_constants(to_ir(model)))
    for i, tokens in ((0, 17), (1, 1)):
        def op(name):
            return _node(graph, f"/encoder/layers/encoder_layer_{i}/{name}")
        assert op("mlp/mlp.0/MatMul").inputs[0].shape == (batch, tokens, 64)
        assert op("mlp/mlp.3/MatMul").inputs[0].shape == (batch, tokens, 128)
        assert op("ln_2/LayerNormalization").outputs[0].shape == (batch, tokens, 64)
        assert op("self_attention/Gemm").inputs[0].shape == (batch * tokens, 64)
        attention = op("self_attention/Softmax")
        assert attention.op_type == "vkc.Attention" and attention.attrs["dims"][2:4] == [tokens, 17]
    # Q, K and V still read in place from the projection: no copy kernel in the attention
    copies = [n for n in graph.nodes if n.op_type in ("Transpose", "Slice")]
    assert not [n for n in copies if "self_attention" in n.name]
    check_against_onnxruntime(model, target="generic")
