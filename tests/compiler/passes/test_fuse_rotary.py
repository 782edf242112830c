"""rotate_half's rotary embedding as transformers exports it becomes one rotary kernel
(compiler/passes/fuse_rotary.py)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from tests.harness import check_against_onnxruntime
from tests.onnx_builders import make_model, tensor_info

from compiler.frontend import to_ir
from compiler.passes import fold_constants, run_passes

B, S, H, D = 2, 5, 3, 8


def _tables(equal_halves=True):
    freqs = np.outer(np.arange(S), 1.0 / 10000 ** (np.arange(0, D, 2) / D)).astype(np.float32)
    other = freqs * 1.5 if not equal_halves else freqs
    angles = np.concatenate([freqs, other], axis=-1)[None, None]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


# y = x * cos + rotate_half(x) * sin, as transformers' apply_rotary_pos_emb is exported
HALVES = [numpy_helper.from_array(np.array([0], np.int64), "zero"),
          numpy_helper.from_array(np.array([D // 2], np.int64), "half"),
          numpy_helper.from_array(np.array([D], np.int64), "end"),
          numpy_helper.from_array(np.array([-1], np.int64), "last")]
ROTATE_HALF = [helper.make_node("Slice", ["x", "zero", "half", "last"], ["x1"], name="slice1"),
               helper.make_node("Slice", ["x", "half", "end", "last"], ["x2"], name="slice2"),
               helper.make_node("Neg", ["x2"], ["nx2"], name="neg"),
               helper.make_node("Concat", ["nx2", "x1"], ["r"], axis=-1, name="concat"),
               helper.make_node("Mul", ["x", "cos"], ["xc"], name="mul_cos"),
               helper.make_node("Mul", ["r", "sin"], ["rs"], name="mul_sin"),
               helper.make_node("Add", ["xc", "rs"], ["y"], name="add")]


def _rope_model(equal_halves=True, head_split=True, extra_reader=False):
    """p [B, S, H*D] -> head split -> x*cos + rotate_half(x)*sin, as Llama's export writes it."""
    cos, sin = _tables(equal_halves)
    inits = [numpy_helper.from_array(cos, "cos"), numpy_helper.from_array(sin, "sin"),
             numpy_helper.from_array(np.array([B, S, H, D], np.int64), "heads"), *HALVES]
    nodes = []
    if head_split:
        nodes += [helper.make_node("Reshape", ["p", "heads"], ["p4"], name="reshape"),
                  helper.make_node("Transpose", ["p4"], ["x"], perm=[0, 2, 1, 3], name="transpose")]
    nodes += ROTATE_HALF
    outputs = [tensor_info("y", [B, H, S, D])]
    if extra_reader:
        outputs.append(tensor_info("x1", [B, H, S, D // 2]))
    x_in = tensor_info("p", [B, S, H * D]) if head_split else tensor_info("x", [B, H, S, D])
    return make_model(helper.make_graph(nodes, "rope", [x_in], outputs, initializer=inits))


N = 12  # positions the gathered tables hold


def _gathered_model(batch: int):
    """x [batch, H, S, D] rotated by rows of [1, 1, N, D] tables gathered at run-time positions
    pos [S] (a growing cache's rotary, compiler/growing_cache.py)."""
    freqs = np.outer(np.arange(N), 1.0 / 10000 ** (np.arange(0, D, 2) / D)).astype(np.float32)
    angles = np.concatenate([freqs, freqs], axis=-1)[None, None]
    inits = [numpy_helper.from_array(np.cos(angles).astype(np.float32), "cos_table"),
             numpy_helper.from_array(np.sin(angles).astype(np.float32), "sin_table"), *HALVES]
    nodes = [helper.make_node("Gather", ["cos_table", "pos"], ["cos"], axis=2, name="cos_rows"),
             helper.make_node("Gather", ["sin_table", "pos"], ["sin"], axis=2, name="sin_rows"), *ROTATE_HALF]
    graph = helper.make_graph(nodes, "rope", [tensor_info("x", [batch, H, S, D]), tensor_info("pos", [S], np.int64)],
                              [tensor_info("y", [batch, H, S, D])], initializer=inits)
    return make_model(graph)


@pytest.mark.parametrize("batch", [1, 2])
def test_tables_gathered_at_run_time_positions(batch):
    """One sequence: one rotary kernel reading the positions; a batch of several (whose rows
    the kernel would read per batch) stays as it is. Both as onnxruntime computes them."""
    model = _gathered_model(batch)
    ops = _ops(model)
    assert (ops.count("RotaryEmbedding") == 1 and not {"Gather", "Mul", "Concat"} & set(ops)) == (batch == 1), ops
    feeds = {"x": np.random.default_rng(0).standard_normal((batch, H, S, D)).astype(np.float32),
             "pos": np.array([7, 8, 9, 10, 11], np.int64)}
    check_against_onnxruntime(model, target="lavapipe", feeds=feeds)


def _ops(model):
    return [n.op_type for n in run_passes(fold_constants(to_ir(model))).nodes]


@pytest.mark.parametrize("head_split", [True, False])
def test_rotate_half_is_one_kernel(head_split):
    model = _rope_model(head_split=head_split)
    ops = _ops(model)
    assert ops.count("RotaryEmbedding") == 1 and not {"Slice", "Neg", "Concat", "Mul"} & set(ops), ops
    check_against_onnxruntime(model, target="lavapipe")
    check_against_onnxruntime(model, target="generic", precision="fp16", rtol_l2=1e-2, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("kw", [dict(equal_halves=False), dict(extra_reader=True)])
def test_other_forms_stay(kw):
    """Tables whose halves differ are no rotation of halves; a slice read elsewhere stays."""
    model = _rope_model(**kw)
    assert "RotaryEmbedding" not in _ops(model)
    check_against_onnxruntime(model, target="lavapipe")


def _partial_rope_model(rot: int, passed_read_elsewhere=False):
    """p [B, S, H*D] -> head split X -> Concat(rotation of X[..., :rot], X[..., rot:]), as
    transformers' StableLM, GPT-NeoX and Phi export their partial rotary."""
    freqs = np.outer(np.arange(S), 1.0 / 10000 ** (np.arange(0, rot, 2) / rot)).astype(np.float32)
    angles = np.concatenate([freqs, freqs], axis=-1)[None, None]
    ints = dict(zero=0, half=rot // 2, rot=rot, end=D, last=-1)
    inits = [numpy_helper.from_array(np.cos(angles), "cos"), numpy_helper.from_array(np.sin(angles), "sin"),
             numpy_helper.from_array(np.array([B, S, H, D], np.int64), "heads"),
             *(numpy_helper.from_array(np.array([v], np.int64), k) for k, v in ints.items())]
    nodes = [helper.make_node("Reshape", ["p", "heads"], ["p4"], name="reshape"),
             helper.make_node("Transpose", ["p4"], ["whole"], perm=[0, 2, 1, 3], name="transpose"),
             helper.make_node("Slice", ["whole", "zero", "rot", "last"], ["x"], name="rotated_part"),
             helper.make_node("Slice", ["whole", "rot", "end", "last"], ["passed"], name="passed_part"),
             helper.make_node("Slice", ["x", "zero", "half", "last"], ["x1"], name="slice1"),
             helper.make_node("Slice", ["x", "half", "rot", "last"], ["x2"], name="slice2"),
             *ROTATE_HALF[2:],
             helper.make_node("Concat", ["y", "passed"], ["out"], axis=-1, name="join")]
    outputs = [tensor_info("out", [B, H, S, D])] + ([tensor_info("passed", None)] if passed_read_elsewhere else [])
    return make_model(helper.make_graph(nodes, "rope", [tensor_info("p", [B, S, H * D])], outputs,
                                        initializer=inits))


def test_partial_rotation_is_one_kernel():
    """A rotation of each head's first 4 of 8 elements, the rest concatenated after it: one rotary
    kernel of the whole head with rotary_embedding_dim 4, no Slice or Concat; where the passed
    part is read elsewhere too, the rotation of the part stays a kernel of its own. Both as
    onnxruntime computes them."""
    model = _partial_rope_model(4)
    graph = run_passes(fold_constants(to_ir(model)))
    [rotary] = [n for n in graph.nodes if n.op_type == "RotaryEmbedding"]
    assert rotary.attrs["rotary_embedding_dim"] == 4 and not {"Slice", "Concat"} & {n.op_type for n in graph.nodes}
    check_against_onnxruntime(model, target="lavapipe")
    check_against_onnxruntime(model, target="generic", precision="fp16", rtol_l2=1e-2, rtol=1e-2, atol=1e-2)
    model = _partial_rope_model(4, passed_read_elsewhere=True)
    graph = run_passes(fold_constants(to_ir(model)))
    assert all("rotary_embedding_dim" not in n.attrs for n in graph.nodes if n.op_type == "RotaryEmbedding")
    check_against_onnxruntime(model, target="lavapipe")


def test_packed_projection_read_in_place():
    """Llama's Q, K and V projections become one product; one rotary kernel a layer reads Q's and
    K's columns of it in place (their rotations share the tables and the start) and the
    attention kernel V's, so no Split copies run."""
    import onnx
    from pathlib import Path
    model = onnx.load(str(Path(__file__).resolve().parents[2] / "models" / "fixtures" / "llama_tiny_sdpa.onnx"))
    graph = run_passes(fold_constants(to_ir(model)))
    rotaries = [n for n in graph.nodes if n.op_type == "RotaryEmbedding"]
    assert len(rotaries) == 2 and all(n.attrs["input_columns"][1] == 64 + 2 * 32 for n in rotaries)
    assert [n.attrs["input_columns"][0] for n in rotaries] == [0, 0]
    assert [len(n.outputs) for n in rotaries] == [2, 2]
    assert not [n for n in graph.nodes if n.op_type == "Split"]
    assert sum(n.op_type == "MatMul" and "q_proj" in n.name for n in graph.nodes) == 2
