"""onnxruntime's com.microsoft Attention and MultiHeadAttention against onnxruntime: packed
QKV projection with bias, raw [B, S] padding masks, unidirectional (causal), unequal V size,
cross attention; what vkc refuses."""

import numpy as np
import pytest

from tests.attention_models import contrib_attention as attention_model
from tests.attention_models import contrib_multi_head_attention as mha_model
from tests.harness import check_against_onnxruntime
from tests.onnx_builders import tensor_info

from compiler.compile import compile_with_kernels
from compiler.errors import CompileError

TARGETS = ["generic", "lavapipe"]


def _feeds(model, b, skv, lengths, seed=0):
    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in model.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        if vi.name == "mask":
            feeds["mask"] = (np.arange(skv)[None] < np.asarray(lengths)[:, None]).astype(np.int32)
        else:
            feeds[vi.name] = rng.normal(size=shape).astype(np.float32)
    return feeds


def _check(model, target, feeds):
    return check_against_onnxruntime(model, target=target, feeds=feeds, full_check=False)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("kw", [
    pytest.param(dict(b=1, s=7, heads=2, head=16), id="b1-s7"),
    pytest.param(dict(b=2, s=19, heads=4, head=16, mask=True), id="b2-s19-padding"),
    pytest.param(dict(b=2, s=12, heads=2, head=32, mask=True, unidirectional=1),
                 id="padding-unidirectional"),
    pytest.param(dict(b=1, s=64, heads=4, head=64, bias=False, unidirectional=1),
                 id="s64-d64-causal-no-bias"),
    pytest.param(dict(b=1, s=9, heads=2, head=16, v_head=8, scale=0.3), id="v-head8-scale"),
])
def test_attention(kw, target):
    model = attention_model(**kw)
    assert compile_with_kernels(model, target=target)[1][-1].template.startswith("attention")
    _check(model, target, _feeds(model, kw["b"], kw["s"], [kw["s"], 5][:kw["b"]]))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("kw", [
    pytest.param(dict(b=1, s=7, heads=2, head=16), id="b1-s7"),
    pytest.param(dict(b=2, s=9, heads=4, head=16, mask=True), id="b2-padding"),
    pytest.param(dict(b=2, s=5, skv=23, heads=2, head=32, mask=True, bias=False),
                 id="cross-attention"),
    pytest.param(dict(b=1, s=16, heads=2, head=16, unidirectional=1), id="unidirectional"),
])
def test_multi_head_attention(kw, target):
    model = mha_model(**kw)
    templates = [k.template for k in compile_with_kernels(model, target=target)[1]]
    assert sum(t.startswith("attention") for t in templates) == 1 and "softmax" not in templates
    skv = kw.get("skv") or kw["s"]
    _check(model, target, _feeds(model, kw["b"], skv, [skv, 3][:kw["b"]]))


def test_refused():
    model = attention_model(1, 4, 2, 8)
    model.graph.node[0].input.extend(["past"])
    model.graph.input.append(tensor_info("past", [2, 1, 2, 0, 8]))
    with pytest.raises(CompileError, match="input 4 \\(past\\)"):
        compile_with_kernels(model)
    lengths = attention_model(2, 4, 2, 8)
    lengths.graph.node[0].input[3] = "lengths"
    lengths.graph.input.append(tensor_info("lengths", [2], np.int32))
    with pytest.raises(CompileError, match="mask_index 'lengths'.*\\[B, S_kv\\]"):
        compile_with_kernels(lengths)
