"""passes/cache_reads.py: every attention over a growing cache compiled to a fixed capacity reads
its first position + S rows (one run-time count, shared); a cache read any other way, and an
attention that did not fuse, refused on one line naming the node. The model is optimum's tiny
Llama export (tests/models/fixtures), edited where a test needs another form."""
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from compiler.compile import lower_model
from compiler.errors import CompileError

LLAMA = Path(__file__).resolve().parents[2] / "models" / "fixtures" / "llama_tiny_optimum.onnx"


def lower(model, rows=4):
    return lower_model(model, input_shapes={"input_ids": [1, rows]}, target="lavapipe", max_context=16)[1]


@pytest.mark.parametrize("rows", [4, 1])
def test_attention_reads_position_plus_s_rows(rows):
    graph = lower(onnx.load(LLAMA), rows)
    attention = [n for n in graph.nodes if n.op_type == "vkc.Attention"]
    assert len(attention) == 2
    for n in attention:
        assert n.inputs[1].root().name.endswith(".key") and n.inputs[2].root().name.endswith(".value")
        assert n.attrs["dims"][2:4] == [rows, 16] and n.inputs[3] is None
        assert n.inputs[4] is attention[0].inputs[4]
    counts = attention[0].inputs[4]   # int32 position + S (elementwise nodes by now)
    filled = counts.producer.inputs[0]
    assert counts.dtype == "int32" and counts.shape == (1,) and filled.name == "cache/filled"
    assert [v.name for v in filled.producer.inputs if not v.is_constant] == ["position"]


def test_a_cache_read_outside_attention_refused():
    model = onnx.load(LLAMA)
    model.graph.initializer.append(helper.make_tensor("rows_axis", TensorProto.INT64, [1], [2]))
    model.graph.node.append(helper.make_node("ReduceSum", ["present.0.key", "rows_axis"], ["key_sum"], name="key_sum"))
    model.graph.output.append(helper.make_tensor_value_info("key_sum", TensorProto.FLOAT, None))
    with pytest.raises(CompileError, match="'key_sum' reads the cache 'present.0.key' outside an attention"):
        lower(model)


def test_an_attention_that_did_not_fuse_refused():
    """Layer 0's probabilities also an output: the chain stays MatMul, Softmax, MatMul, which
    would read all 16 rows of the cache, most of them not written in this sequence."""
    model = onnx.load(LLAMA)
    model.graph.output.append(helper.make_tensor_value_info("/model/layers.0/self_attn/Softmax_output_0",
                                                            TensorProto.FLOAT, None))
    with pytest.raises(CompileError, match=r"layers\.0.* no attention took in; vkc bounds a growing cache's reads "
                                           "only in the attention it fuses") as info:
        lower(model)
    assert "\n" not in str(info.value)
