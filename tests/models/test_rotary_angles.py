"""Rotary position embeddings whose angles the graph computes (Sin and Cos at run time, or folded
at compile time), as exporters write them, in float32 and float16 against onnxruntime (float32):
- an LLM's: angles = positions x inv_freq, cat(angles, angles), x cos + rotate_half(x) sin;
- DINOv3 ViT's (transformers' DINOv3ViTRopePositionEmbedding and apply_rotary_pos_emb): patch
  centres on a [-1, 1] grid, angles 2 pi coords x inv_freq over both axes, tiled twice, rotating
  the patch tokens of q and k while the class and register tokens pass unrotated.

Under --precision fp16, angles of hundreds of radians stay float32 with what computes them
(float16 would hold an angle of 1000 rad to 0.5 rad: rel L2 near 1)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.harness import check_against_onnxruntime, passes_graph
from tests.onnx_builders import make_model

FP16 = dict(precision="fp16", rtol_l2=1e-2, rtol=5e-2, atol=2e-2)


def _model(nodes, inputs, outputs, inits):
    graph = helper.make_graph(
        nodes, "rotary", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in inits.items()])
    return make_model(graph, opset=17)


def _rotate(x: str, cos: str, sin: str, half: int, tag: str) -> list:
    """x cos + rotate_half(x) sin, rotate_half(x) = cat(-x[..., half:], x[..., :half])."""
    return [helper.make_node("Split", [x, "halves"], [f"{tag}1", f"{tag}2"], axis=-1),
            helper.make_node("Neg", [f"{tag}2"], [f"{tag}n"]),
            helper.make_node("Concat", [f"{tag}n", f"{tag}1"], [f"{tag}r"], axis=-1),
            helper.make_node("Mul", [x, cos], [f"{tag}c"]),
            helper.make_node("Mul", [f"{tag}r", sin], [f"{tag}s"]),
            helper.make_node("Add", [f"{tag}c", f"{tag}s"], [f"{tag}_rot"])]


def llm_rotary(seq: int = 64, heads: int = 2, dim: int = 32):
    inv_freq = (1.0 / 10000 ** (np.arange(0, dim, 2) / dim)).astype(np.float32)
    nodes = [helper.make_node("Unsqueeze", ["positions", "last"], ["p"]),
             helper.make_node("Mul", ["p", "inv_freq"], ["angles"], name="angles"),
             helper.make_node("Concat", ["angles", "angles"], ["emb"], axis=-1),
             helper.make_node("Cos", ["emb"], ["cos"], name="cos"),
             helper.make_node("Sin", ["emb"], ["sin"], name="sin"),
             *_rotate("x", "cos", "sin", dim // 2, "x"),
             helper.make_node("Identity", ["x_rot"], ["y"])]
    return _model(nodes, [("positions", [seq]), ("x", [1, heads, seq, dim])], ["y"],
                  {"inv_freq": inv_freq, "last": np.array([1], np.int64),
                   "halves": np.array([dim // 2, dim // 2], np.int64)})


def test_llm_rotary_angles_stay_float32_under_fp16():
    kept = {e["node"]: e["why"] for e in passes_graph(llm_rotary(), "fp16").float32_nodes}
    assert "its input 'emb' may reach" in kept["sin"] and "its input 'emb' may reach" in kept["cos"], kept
    assert "computes 'emb', the angle" in kept["angles"], kept
    rng = np.random.default_rng(0)
    feeds = {"positions": np.arange(900, 964, dtype=np.float32),
             "x": rng.standard_normal((1, 2, 64, 32)).astype(np.float32)}
    check_against_onnxruntime(llm_rotary(), feeds=feeds, rtol=1e-4, atol=1e-4)
    check_against_onnxruntime(llm_rotary(), feeds=feeds, **FP16)


def test_angles_from_a_float16_input_are_refused():
    """With --io fp16 the positions arrive rounded to float16 (integers exact up to 2048, then
    every other one) and nothing computed from them can restore that: the model is refused,
    naming Sin or Cos and the input. Without --io fp16 it compiles."""
    from compiler import compile_model
    from compiler.errors import CompileError

    with pytest.raises(CompileError, match=r"^(Sin 'sin'|Cos 'cos') reads an angle that may reach .*computed "
                                           r"from 'positions', float16 at the API.*--io fp16"):
        compile_model(llm_rotary(), precision="fp16", io="fp16", target="lavapipe")
    compile_model(llm_rotary(), precision="fp16", target="lavapipe")


def llama_rotary(seq: int = 64, heads: int = 2, dim: int = 32):
    """transformers' LlamaRotaryEmbedding: angles = (inv_freq[:, None] @ positions[None, :])^T, a
    MatMul that --precision fp16-matmul would otherwise compute in float16."""
    inv_freq = (1.0 / 10000 ** (np.arange(0, dim, 2) / dim)).astype(np.float32).reshape(1, dim // 2, 1)
    nodes = [helper.make_node("Unsqueeze", ["positions", "first_two"], ["p"]),         # [1, 1, S]
             helper.make_node("MatMul", ["inv_freq", "p"], ["freqs"], name="freqs"),  # [1, D/2, S]
             helper.make_node("Transpose", ["freqs"], ["angles"], perm=[0, 2, 1]),
             helper.make_node("Concat", ["angles", "angles"], ["emb"], axis=-1),
             helper.make_node("Unsqueeze", ["emb", "heads_axis"], ["emb4"]),
             helper.make_node("Cos", ["emb4"], ["cos"], name="cos"),
             helper.make_node("Sin", ["emb4"], ["sin"], name="sin"),
             *_rotate("x", "cos", "sin", dim // 2, "x"),
             helper.make_node("Identity", ["x_rot"], ["y"])]
    return _model(nodes, [("positions", [seq]), ("x", [1, heads, seq, dim])], ["y"],
                  {"inv_freq": inv_freq, "first_two": np.array([0, 1], np.int64),
                   "heads_axis": np.array([1], np.int64),
                   "halves": np.array([dim // 2, dim // 2], np.int64)})


@pytest.mark.parametrize("precision", ["fp16", "fp16-matmul"])
def test_llama_rotary_matmul_angles_stay_float32(precision):
    kept = {e["node"]: e["why"] for e in passes_graph(llama_rotary(), precision).float32_nodes}
    assert "computes 'emb4', the angle" in kept["freqs"], kept
    rng = np.random.default_rng(2)
    feeds = {"positions": np.arange(1500, 1564, dtype=np.float32),
             "x": rng.standard_normal((1, 2, 64, 32)).astype(np.float32)}
    check_against_onnxruntime(llama_rotary(), feeds=feeds, **{**FP16, "precision": precision})


def test_small_angles_compute_float16():
    """Sin of a bounded value (tanh's, within +-1): no reason to keep it float32."""
    model = _model([helper.make_node("Tanh", ["x"], ["t"]), helper.make_node("Sin", ["t"], ["y"], name="sin")],
                   [("x", [4, 16])], ["y"], {})
    assert not passes_graph(model, "fp16").float32_nodes
    check_against_onnxruntime(model, **FP16)


def dinov3_rope(patches_h: int = 4, patches_w: int = 6, prefix: int = 5, heads: int = 2,
                dim: int = 32, coords_input: bool = False, base: float = 100.0):
    """q and k [1, heads, prefix + h w, dim] rotated by DINOv3's 2-D rotary embedding. The patch
    centres come from the grid's size (Range, Div, meshgrid as Expand, Concat): folded at compile
    time, as an export with a fixed image size has them; `coords_input` takes them as an input
    instead, so Sin and Cos run on the device."""
    patches = patches_h * patches_w
    inv_freq = (1.0 / base ** np.arange(0, 1, 4 / dim)).astype(np.float32)   # [dim / 4]
    inits = {"inv_freq": inv_freq, "two_pi": np.array(2 * np.pi, np.float32),
             "halves": np.array([dim // 2, dim // 2], np.int64),
             "split_tokens": np.array([prefix, patches], np.int64),
             "flat": np.array([patches, dim // 2], np.int64), "tile": np.array([1, 2], np.int64),
             "coord_axes": np.array([2], np.int64)}
    nodes = []
    if not coords_input:
        inits.update({"h": np.array(patches_h, np.float32), "w": np.array(patches_w, np.float32),
                      "half": np.array(0.5, np.float32), "one": np.array(1.0, np.float32),
                      "two": np.array(2.0, np.float32), "grid": np.array([patches_h, patches_w], np.int64),
                      "col": np.array([1], np.int64), "row": np.array([0], np.int64),
                      "flat_grid": np.array([patches, 1], np.int64)})
        nodes += [helper.make_node("Range", ["half", "h", "one"], ["rh"]),
                  helper.make_node("Range", ["half", "w", "one"], ["rw"]),
                  helper.make_node("Div", ["rh", "h"], ["ch"]), helper.make_node("Div", ["rw", "w"], ["cw"]),
                  helper.make_node("Unsqueeze", ["ch", "col"], ["ch1"]),
                  helper.make_node("Unsqueeze", ["cw", "row"], ["cw1"]),
                  helper.make_node("Expand", ["ch1", "grid"], ["gh"]),
                  helper.make_node("Expand", ["cw1", "grid"], ["gw"]),
                  helper.make_node("Reshape", ["gh", "flat_grid"], ["fh"]),
                  helper.make_node("Reshape", ["gw", "flat_grid"], ["fw"]),
                  helper.make_node("Concat", ["fh", "fw"], ["c01"], axis=1),
                  helper.make_node("Mul", ["c01", "two"], ["c02"]),
                  helper.make_node("Sub", ["c02", "one"], ["coords"])]
    nodes += [helper.make_node("Unsqueeze", ["coords", "coord_axes"], ["c3"]),       # [P, 2, 1]
              helper.make_node("Mul", ["c3", "two_pi"], ["c3pi"]),
              helper.make_node("Mul", ["c3pi", "inv_freq"], ["angles3"], name="angles"),  # [P, 2, dim/4]
              helper.make_node("Reshape", ["angles3", "flat"], ["angles"]),
              helper.make_node("Tile", ["angles", "tile"], ["emb"]),
              helper.make_node("Cos", ["emb"], ["cos"], name="cos"),
              helper.make_node("Sin", ["emb"], ["sin"], name="sin")]
    for t in ("q", "k"):
        nodes += [helper.make_node("Split", [t, "split_tokens"], [f"{t}_prefix", f"{t}_patch"], axis=2),
                  *_rotate(f"{t}_patch", "cos", "sin", dim // 2, f"{t}p"),
                  helper.make_node("Concat", [f"{t}_prefix", f"{t}p_rot"], [f"{t}_out"], axis=2)]
    tokens = prefix + patches
    inputs = [("q", [1, heads, tokens, dim]), ("k", [1, heads, tokens, dim])]
    if coords_input:
        inputs.append(("coords", [patches, 2]))
    return _model(nodes, inputs, ["q_out", "k_out"], inits)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("coords_input", [False, True], ids=["folded", "at-run-time"])
def test_dinov3_rope(precision, coords_input):
    model = dinov3_rope(coords_input=coords_input)
    rng = np.random.default_rng(1)
    feeds = {n: rng.standard_normal((1, 2, 29, 32)).astype(np.float32) for n in ("q", "k")}
    if coords_input:
        centres = lambda n: (np.arange(n) + 0.5) / n * 2 - 1
        h, w = np.meshgrid(centres(4), centres(6), indexing="ij")
        feeds["coords"] = np.stack([h.ravel(), w.ravel()], axis=1).astype(np.float32)
    tolerance = FP16 if precision == "fp16" else dict(precision="fp32", rtol=1e-4, atol=1e-4)
    check_against_onnxruntime(model, feeds=feeds, **tolerance)
