"""A growing cache (optimum's past/present Concat) compiled to a fixed capacity
(compiler/growing_cache.py): the graph it becomes, and every form it cannot prove refused on one
line naming the node and the fix. The model is optimum's export of a tiny Llama
(tests/models/fixtures/make_optimum.py), edited where a test needs another form; the tokens are
tested in tests/models/test_optimum.py."""
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from compiler.check import check_model
from compiler.compile import compile_model, lower_model
from compiler.errors import CompileError

from tests.llm_models import tiny_llama

FIXTURES = Path(__file__).resolve().parents[1] / "models" / "fixtures"
LLAMA = FIXTURES / "llama_tiny_optimum.onnx"
DECODE = {"input_ids": [1, 1]}


def llama() -> onnx.ModelProto:
    return onnx.load(LLAMA)


def node(model: onnx.ModelProto, name: str) -> onnx.NodeProto:
    return next(n for n in model.graph.node if n.name == name)


def read_instead(model: onnx.ModelProto, reader: str, old: str, new: str) -> None:
    """Node `reader` reads `new` where it read `old`."""
    n = node(model, reader)
    n.input[list(n.input).index(old)] = new


def refused(model, match: str, shapes=None, context=16) -> str:
    with pytest.raises(CompileError, match=match) as info:
        lower_model(model, input_shapes={"input_ids": [1, 4]} if shapes is None else shapes, target="lavapipe",
                    max_context=context)
    text = str(info.value)
    assert "\n" not in text and "Traceback" not in text
    return text


def test_the_graph_it_becomes():
    """Inputs input_ids and position; each cache a state of N rows written in place by the
    kernel rotating the layer's Q and K (K's rows stored, V's carried: passes/cache_row_stores.py,
    where the TensorScatters went); attention over it with the run-time key count; the rotary cos
    and sin one table each of positions 0..N-1, shared by the layers, which the rotary kernels
    read at the run's positions (no Cos or Sin left)."""
    _, graph, _, kernels = lower_model(llama(), input_shapes={"input_ids": [1, 4]}, target="lavapipe", max_context=16)
    assert [(v.name, v.shape) for v in graph.inputs] == [("input_ids", (1, 4)), ("position", (1,))] + [
        (f"past_key_values.{i}.{kv}", (1, 2, 16, 16)) for i in range(2) for kv in ("key", "value")]
    assert [(i.name, o.name) for i, o in graph.state] == [
        (f"past_key_values.{i}.{kv}", f"present.{i}.{kv}") for i in range(2) for kv in ("key", "value")]
    ops = [n.op_type for n in graph.nodes]
    assert ops.count("vkc.TensorScatter") == 0 and ops.count("vkc.Attention") == 2
    assert not {"Cos", "Sin", "Range"} & set(ops)
    caches = {i.name: i for i, _ in graph.state}
    for write in (n for n in graph.nodes if n.op_type == "RotaryEmbedding"):
        written = [o for o in write.outputs if o.root().name in caches]
        assert [o.root() for o in written] == [caches[o.root().name] for o in written] and len(written) == 2
    counts = {id(n.inputs[4]) for n in graph.nodes if n.op_type == "vkc.Attention"}
    assert len(counts) == 1
    rotary = [n for n in graph.nodes if n.op_type == "RotaryEmbedding"]
    # a layer's Q and K rotated by one kernel (passes/split_parts.py), from tables of positions:
    # Q's result and the two caches
    assert [len(n.outputs) for n in rotary] == [3, 3] and len({id(n.inputs[2].data) for n in rotary}) == 1
    assert all(n.inputs[2].shape == (16, 8) and n.inputs[1].shape == (1, 4) for n in rotary)
    assert {n.inputs[1].root().name for n in rotary} == {"position_ids"}
    assert sum(k.template in ("tensor_scatter", "strided_copy") for k in kernels) == 0


def test_check_with_max_context():
    assert check_model(llama(), {"input_ids": [1, 4]}, "lavapipe", max_context=16).ok


def test_a_growing_cache_without_max_context_says_how():
    text = str(pytest.raises(CompileError, compile_model, llama(), input_shapes=DECODE, target="lavapipe").value)
    assert "past_key_values.0.key" in text and "--max-context N" in text and "present.0.key = Concat" in text


def test_max_context_needs_a_growing_cache():
    refused(tiny_llama(), "no such Concat of an input into an output")


@pytest.mark.parametrize("shapes, match", [
    ({"input_ids": [2, 4]}, "batch 1; a padded batch is not supported"),
    ({}, "--variant input_ids=1x16 --variant input_ids=1x1"),
    ({"input_ids": [1, 4], "attention_mask": [1, 16]}, "give input_ids alone"),
    ({"input_ids": [1, 16]}, "leaves no cache row before a run of 16 tokens"),
])
def test_shapes_refused(shapes, match):
    refused(llama(), match, shapes=shapes)


def test_another_input_refused():
    model = llama()
    model.graph.input.append(helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, [1, "s"]))
    refused(model, "cannot derive 'token_type_ids'")


def test_positions_from_the_past_length_refused():
    """Rotary positions computed from the past's length (cache_position = Range(P, P + S)) instead
    of the position_ids input: constant at each length, and different."""
    model = llama()
    model.graph.node.append(helper.make_node("Unsqueeze", ["/model/Range_output_0", "/model/Constant_axes0"],
                                             ["cache_positions"], name="cache_positions"))
    model.graph.initializer.append(helper.make_tensor("/model/Constant_axes0", TensorProto.INT64, [1], [0]))
    read_instead(model, "/model/rotary_emb/Unsqueeze_1", "position_ids", "cache_positions")
    _sort(model)
    print(refused(model, "computed from the past's length"))


def _masked(model: onnx.ModelProto, nodes: list, kept: str) -> onnx.ModelProto:
    """The causal mask also requires `kept` (a bool of the key and query positions), which
    `nodes` compute from the LessOrEqual's key and query positions kv and q."""
    le = node(model, "/model/LessOrEqual")
    model.graph.node.extend(nodes(*le.input) + [helper.make_node("And", [le.output[0], kept], ["masked"],
                                                                  name="masked")])
    read_instead(model, "/model/Cast_5", le.output[0], "masked")
    _sort(model)
    return model


def sliding_window(model: onnx.ModelProto, window: int) -> onnx.ModelProto:
    """Each query sees its last `window` keys (transformers' sliding attention: kv > q - window)."""
    model.graph.initializer.append(helper.make_tensor("window", TensorProto.INT64, [], [window]))
    return _masked(model, lambda kv, q: [helper.make_node("Sub", [q, "window"], ["oldest"], name="oldest"),
                                         helper.make_node("Greater", [kv, "oldest"], ["recent"], name="recent")],
                   "recent")


@pytest.mark.parametrize("rows", [4, 1])
def test_sliding_window(rows):
    """A mask that also hides the keys 3 or more rows back (a sliding window of 3 keys, Mistral's
    and Gemma-2's sliding layers) at a full cache, and nothing at a past of 1 row, where the
    window hides nothing: the attention's causal mode with a window of 3 keys, counted from the
    run-time key count (the tokens: tests/models/test_optimum.py, Mistral)."""
    _, graph, _, _ = lower_model(sliding_window(llama(), 3), input_shapes={"input_ids": [1, rows]},
                                 target="lavapipe", max_context=16)
    attention = [n for n in graph.nodes if n.op_type == "vkc.Attention"]
    assert len(attention) == 2 and all(n.attrs["causal"] and n.attrs["window"] == 3 for n in attention)


def test_mask_neither_causal_nor_a_window_refused():
    """A mask that also hides the first key from every query: no window hides the same keys at
    both past lengths."""
    model = llama()
    model.graph.initializer.append(helper.make_tensor("first", TensorProto.INT64, [], [0]))
    model = _masked(model, lambda kv, q: [helper.make_node("Greater", [kv, "first"], ["later"], name="later")],
                    "later")
    print(refused(model, r"adds a mask computed from the past's length that is neither causal nor causal within "
                         r"one sliding window"))


def test_past_read_elsewhere_refused():
    model = llama()
    model.graph.initializer.append(helper.make_tensor("rows_axis", TensorProto.INT64, [1], [2]))
    model.graph.node.append(helper.make_node("ReduceSum", ["past_key_values.0.key", "rows_axis"], ["past_sum"],
                                             name="past_sum"))
    model.graph.output.append(helper.make_tensor_value_info("past_sum", TensorProto.FLOAT, None))
    refused(model, "ReduceSum 'past_sum' reads the past 'past_key_values.0.key' itself")


def test_positions_not_row_wise_refused():
    """Rotary angles from a running sum of position_ids: not one row per position, so no table."""
    model = llama()
    model.graph.initializer.append(helper.make_tensor("seq_axis", TensorProto.INT64, [], [1]))
    model.graph.node.insert(0, helper.make_node("CumSum", ["position_ids", "seq_axis"], ["summed"], name="summed"))
    read_instead(model, "/model/rotary_emb/Unsqueeze_1", "position_ids", "summed")
    refused(model, "computed from position_ids but not one row per position")


@pytest.mark.parametrize("rows", [4, 1])
def test_angles_shaped_for_the_run(rows):
    """Cohere's export repeats each rotary angle for its pair (repeat_interleave) through an Expand
    to the run's S rows, a shape its nodes cannot compute N rows with: the cos and sin come from the
    same nodes of the graph built for a run of N tokens, tables of N rows gathered at the run's
    positions (the logits: tests/models/test_optimum.py)."""
    _, graph, _, _ = lower_model(FIXTURES / "cohere_tiny_optimum.onnx", input_shapes={"input_ids": [1, rows]},
                                 target="lavapipe", max_context=16)
    assert not {"Cos", "Sin", "Expand"} & {n.op_type for n in graph.nodes}
    tables = [n for n in graph.nodes if n.name.endswith("/by_position")]
    # the tables: max_context rows of the fixture's head size, 8
    assert len(tables) == 2 and all(n.inputs[0].shape == (1, 1, 16, 8) and n.inputs[1].shape == (rows,)
                                    for n in tables)


def test_max_context_values_refused():
    for bad in (1, 2.5, True):
        with pytest.raises(CompileError, match="whole number of cache rows"):
            lower_model(llama(), input_shapes={"input_ids": [1, 1]}, target="lavapipe", max_context=bad)


def _sort(model: onnx.ModelProto) -> None:
    """The graph's nodes in an order where each reads what is already computed."""
    done = {i.name for i in model.graph.input} | {t.name for t in model.graph.initializer} | {""}
    pending, ordered = list(model.graph.node), []
    while pending:
        ready = [n for n in pending if all(x in done for x in n.input)]
        assert ready, "a cycle"
        for n in ready:
            ordered.append(n)
            done |= set(n.output)
            pending.remove(n)
    del model.graph.node[:]
    model.graph.node.extend(ordered)
