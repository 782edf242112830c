"""fuse_attention: the chains exporters write become one vkc.Attention node (Transposes of Q, K,
V and the output absorbed as strides, and the split of a packed projection as offsets);
chains that differ in any checked condition stay as they are. The fused bundle agrees with the
unfused one."""
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from tests.attention_models import (causal_mask, core_attention, padding_mask, self_attention_block,
                                    window_attention)
from tests.harness import random_feeds, run_bundle, run_onnxruntime
from tests.onnx_builders import _fill_output_shapes, make_model, tensor_info

from compiler import compile_model, passes
from compiler.compile import compile_with_kernels
from compiler.frontend import to_ir
from compiler.passes import fold_constants, run_passes


def _ops(model):
    return [n.op_type for n in run_passes(fold_constants(to_ir(model))).nodes]


def _templates(model, target="generic"):
    return [k.template for k in compile_with_kernels(model, target=target)[1]]


def _unfused_bundle(model, monkeypatch, target="generic"):
    with monkeypatch.context() as m:
        m.setattr(passes, "PIPELINE", [p for p in passes.PIPELINE if p not in
                                       (passes.fuse_attention, passes.merge_projections)])
        return compile_model(model, target=target)


def test_core_chain_is_one_node():
    graph = run_passes(fold_constants(to_ir(core_attention(2, 4, 7, 16, mask_shape=[2, 1, 1, 7]))))
    [node] = graph.nodes
    assert node.op_type == "vkc.Attention"
    assert node.sources == ["qk", "scale", "add_mask", "softmax", "pv"]
    assert node.attrs["dims"] == [2, 4, 7, 7, 16, 16]
    assert node.attrs["scale"] == pytest.approx(0.25)
    assert node.attrs["mask_kind"] == "add"
    # Kᵀ [B, H, D, S] contiguous: keys at stride 1, D at stride S.
    assert node.attrs["layouts"]["k"] == (0, [4 * 16 * 7, 16 * 7, 1, 7])
    assert node.attrs["layouts"]["mask"] == (0, [7, 0, 0, 1])


def test_block_absorbs_head_transposes():
    """BERT-style block: the Q/K/V projections are merged into one (merge_projections), the
    head-split Transposes and the head-merge Transpose become strides, and Q, K and V are read
    in place from the packed projection; what is left is that projection (bias fused), the
    attention kernel and the output projection."""
    model = self_attention_block(2, 7, 2, 16)
    assert _ops(model) == ["MatMul", "vkc.Attention", "MatMul"]
    graph = run_passes(fold_constants(to_ir(model)))
    att = graph.nodes[1]
    hidden = 32
    packed = [7 * 3 * hidden, 16, 3 * hidden, 1]
    assert att.attrs["layouts"]["q"] == (0, packed)
    assert att.attrs["layouts"]["k"] == (hidden, packed)
    assert att.attrs["layouts"]["v"] == (2 * hidden, packed)
    assert att.attrs["layouts"]["out"] == (0, [7 * hidden, 16, hidden, 1])
    assert {"q_t", "k_t", "v_t", "ctx_t"} <= set(att.sources)


FIXTURES = Path(__file__).resolve().parents[2] / "models" / "fixtures"


@pytest.mark.parametrize("name,split_ops,left", [
    # GPT-2: Split of the [B*S, 3E] c_attn Gemm; the Gathers left are the embeddings'
    ("gpt2_tiny", {"Split": 0, "Transpose": 0, "Gather": 2}, (16, 192)),
    # torchvision ViT (nn.MultiheadAttention): Unsqueeze, a 5-D Transpose, Squeeze, Gathers of
    # index 0, 1, 2 (batch 1's [B, S, E] <-> [S, B, E] around each block are views); the
    # Transpose left is the patch embedding's (the class token's Gather moved up the last layer:
    # sink_row_selection, a view where it stood)
    ("vit_tiny", {"Transpose": 1, "Gather": 0}, (17, 1, 192)),
])
def test_packed_projection_read_in_place(name, split_ops, left):
    """Exporters split Q, K and V out of one [.., 3E] projection: the kernel reads them from
    the projection at offsets 0, E, 2E, and the split's nodes go."""
    graph = run_passes(fold_constants(to_ir(onnx.load(str(FIXTURES / f"{name}.onnx")))))
    ops = [n.op_type for n in graph.nodes]
    assert ops.count("vkc.Attention") == 2
    assert {op: ops.count(op) for op in split_ops} == split_ops
    att = next(n for n in graph.nodes if n.op_type == "vkc.Attention")
    assert att.attrs["dims"][1:] == [4, att.attrs["dims"][2], att.attrs["dims"][2], 16, 16]
    packed = att.inputs[0]
    assert packed.shape == left and att.inputs[1] is packed and att.inputs[2] is packed
    # (batch, head, token, d) of Q, K and V in the projection (batch 1: stride 0)
    layouts = att.attrs["layouts"]
    assert [layouts[n] for n in "qkv"] == [(e, [0, 16, 192, 1]) for e in (0, 64, 128)]


def test_batch2_multihead_attention_read_in_place():
    """Batch 2 nn.MultiheadAttention: Q is [S, B*H, D] viewed from every third E-block of the
    [S, B, 3E] projection, so B*H is two strides; the kernel runs (B, H) = (2, 4) and reads Q, K
    and V where the projection wrote them. move_row_transposes has the projection run over the
    [B, S, E] rows and the out-projection read [B, S, E] rows, so the kernel reads Q, K and V in
    [B, S, 3E] and writes [B, S, H, D]. The 5-D Transpose, the three Gathers and the
    [B, S, E] <-> [S, B, E] Transposes around each block go; the patch embedding's stays. The
    class token's Gather moved up the last layer (sink_row_selection): that layer's attention
    reads the query of token 0 alone, in place too."""
    graph = run_passes(fold_constants(to_ir(onnx.load(str(FIXTURES / "vit_tiny_b2.onnx")))))
    ops = [n.op_type for n in graph.nodes]
    assert {op: ops.count(op) for op in ("vkc.Attention", "Transpose", "Gather")} == \
        {"vkc.Attention": 2, "Transpose": 1, "Gather": 0}
    last = [n for n in graph.nodes if n.op_type == "vkc.Attention"][-1]
    assert last.attrs["dims"] == [2, 4, 1, 17, 16, 16]
    assert last.attrs["layouts"]["q"] == (0, [17 * 192, 16, 0, 1])
    att = next(n for n in graph.nodes if n.op_type == "vkc.Attention")
    assert att.attrs["dims"] == [2, 4, 17, 17, 16, 16]
    assert att.inputs[0].shape == (2, 17, 192) and att.inputs[1] is att.inputs[0] is att.inputs[2]
    layouts = att.attrs["layouts"]  # (batch, head, token, d) strides in [B, S, 3E] and [B, S, E]
    assert [layouts[n] for n in "qkv"] == [(e, [17 * 192, 16, 192, 1]) for e in (0, 64, 128)]
    assert layouts["out"] == (0, [17 * 64, 16, 64, 1])


@pytest.mark.parametrize("kw,scale", [
    (dict(scale="div"), 0.25), (dict(scale="mul"), 0.25), (dict(scale="pre"), 0.25),
    (dict(scale=None), 1.0), (dict(k_transposed=False), 0.25), (dict(out_transpose=True), 0.25),
])
def test_scale_forms(kw, scale):
    graph = run_passes(fold_constants(to_ir(core_attention(1, 2, 5, 16, **kw))))
    [node] = graph.nodes
    assert node.op_type == "vkc.Attention" and node.attrs["scale"] == pytest.approx(scale)


def _chain(nodes, inputs, inits=(), outputs=("y",), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, [tensor_info(o, None) for o in outputs],
                              initializer=[numpy_helper.from_array(np.asarray(a, np.float32), n)
                                           for n, a in inits])
    model = make_model(graph, infer_shapes=False)
    model.opset_import[0].version = opset
    return _fill_output_shapes(model)


QKV = [tensor_info("q", [1, 2, 5, 8]), tensor_info("k", [1, 2, 8, 5]),
       tensor_info("v", [1, 2, 5, 8])]


def _mm(a, b, out, name):
    return helper.make_node("MatMul", [a, b], [out], name=name)


NOT_FUSED = {
    "softmax-not-last-axis": _chain(
        [_mm("q", "k", "s", "qk"), helper.make_node("Softmax", ["s"], ["p"], axis=2),
         _mm("p", "v", "y", "pv")], QKV),
    "probs-also-an-output": _chain(
        [_mm("q", "k", "s", "qk"), helper.make_node("Softmax", ["s"], ["p"], axis=-1),
         _mm("p", "v", "y", "pv")], QKV, outputs=("y", "p")),
    "scores-read-twice": _chain(
        [_mm("q", "k", "s", "qk"), helper.make_node("Softmax", ["s"], ["p"], axis=-1),
         _mm("p", "v", "pv_out", "pv"), helper.make_node("ReduceMax", ["s"], ["r"], keepdims=1),
         helper.make_node("Add", ["pv_out", "r"], ["y"])], QKV),
    "scale-not-constant": _chain(
        [_mm("q", "k", "s", "qk"), helper.make_node("Div", ["s", "c"], ["t"]),
         helper.make_node("Softmax", ["t"], ["p"], axis=-1), _mm("p", "v", "y", "pv")],
        QKV + [tensor_info("c", [1])]),
    "scale-per-head": _chain(
        [_mm("q", "k", "s", "qk"), helper.make_node("Mul", ["s", "c"], ["t"]),
         helper.make_node("Softmax", ["t"], ["p"], axis=-1), _mm("p", "v", "y", "pv")],
        QKV, inits=[("c", np.array([0.5, 0.25]).reshape(1, 2, 1, 1))]),
    "mask-broadcasts-scores": _chain(
        [_mm("q", "k", "s", "qk"), helper.make_node("Add", ["s", "m"], ["t"]),
         helper.make_node("Softmax", ["t"], ["p"], axis=-1), _mm("p", "v", "y", "pv")],
        QKV + [tensor_info("m", [3, 2, 5, 5])]),
    "probs-on-the-right": _chain(
        [_mm("q", "k", "s", "qk"), helper.make_node("Softmax", ["s"], ["p"], axis=-1),
         _mm("v", "p", "y", "pv")], [QKV[0], QKV[1], tensor_info("v", [1, 2, 8, 5])]),
    # (scores + mask) * scale: the kernel adds its mask after scaling
    "mask-before-scale": _chain(
        [_mm("q", "k", "s", "qk"), helper.make_node("Add", ["s", "m"], ["t"]),
         helper.make_node("Mul", ["t", "c"], ["u"]), helper.make_node("Softmax", ["u"], ["p"], axis=-1),
         _mm("p", "v", "y", "pv")], QKV + [tensor_info("m", [1, 1, 5, 5])], inits=[("c", 0.125)]),
    "three-masks": _chain(
        [_mm("q", "k", "s", "qk")] + [helper.make_node("Add", [x, m], [o]) for x, m, o in
                                      (("s", "m", "t"), ("t", "m", "u"), ("u", "m", "w"))]
        + [helper.make_node("Softmax", ["w"], ["p"], axis=-1), _mm("p", "v", "y", "pv")],
        QKV + [tensor_info("m", [1, 1, 5, 5])]),
    "softmax-of-other-op": _chain(
        [helper.make_node("Add", ["q", "v"], ["s"]), helper.make_node("Softmax", ["s"], ["p"]),
         _mm("p", "k", "y", "pv")], QKV),
}


@pytest.mark.parametrize("name", sorted(NOT_FUSED))
def test_not_fused(name):
    assert "vkc.Attention" not in _ops(NOT_FUSED[name])
    assert "Softmax" in _ops(NOT_FUSED[name])


@pytest.mark.parametrize("images", [1, 2])
def test_shifted_window_masks_are_strides(images):
    """Swin's shifted windows: the relative position bias [1, H, N, N] added to the scores, then
    the window mask [1, nW, 1, N, N] added to them viewed as [images, nW, H, N, N] (and viewed
    back) are two operands the kernel reads at their own strides, the bias at stride 0 over the
    windows, the mask at stride 0 over the heads and, at 2 images, again every nW batches."""
    windows, h, n = 4, 3, 9
    model = window_attention(images, windows, h, n, 16)
    [node] = run_passes(fold_constants(to_ir(model))).nodes
    assert node.op_type == "vkc.Attention"
    assert node.sources == ["k_t", "qk", "scale", "add_bias", "add_mask", "softmax", "pv"]
    assert node.attrs["dims"] == [images * windows, h, n, n, 16, 16]
    mask, bias = node.input(3), node.input(5)
    assert mask.shape == (1, windows, 1, n, n) and bias.shape == (1, h, n, n)
    assert node.attrs["layouts"]["mask"] == (0, [n * n, 0, n, 1])
    assert node.attrs["layouts"]["bias"] == (0, [0, n * n, n, 1])
    # 2 images: the mask's batch is the parts (images, stride 0) and (windows, N * N)
    assert node.attrs.get("parts", {}) == ({"mask": {"batch": (windows, 0)}} if images > 1 else {})


def test_window_mask_per_image():
    """A window mask given at run time is read as the constant is; one that differs per image
    and is the same for every window is the batch parts (images, N * N) and (windows, stride 0)."""
    [node] = run_passes(fold_constants(to_ir(window_attention(2, 4, 2, 4, 8, mask_shape=[1, 4, 1, 4, 4])))).nodes
    assert node.attrs["layouts"]["mask"] == (0, [16, 0, 4, 1])
    [node] = run_passes(fold_constants(to_ir(window_attention(2, 4, 2, 4, 8, mask_shape=[2, 1, 1, 4, 4])))).nodes
    assert node.attrs["layouts"]["mask"] == (0, [0, 0, 4, 1])
    assert node.attrs["parts"] == {"mask": {"batch": (4, 16)}}


def test_transpose_read_elsewhere_stays():
    """A transposed K that another node also reads stays a Transpose kernel; the attention reads
    K in place all the same."""
    k = tensor_info("k", [1, 2, 5, 8])
    model = _chain([helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
                    _mm("q", "kt", "s", "qk"), helper.make_node("Softmax", ["s"], ["p"], axis=-1),
                    _mm("p", "v", "o", "pv"), helper.make_node("ReduceSum", ["kt"], ["r"]),
                    helper.make_node("Add", ["o", "r"], ["y"])],
                   [QKV[0], k, QKV[2]])
    ops = _ops(model)
    assert "vkc.Attention" in ops and "Transpose" in ops


@pytest.mark.parametrize("target", ["generic", "lavapipe"])
@pytest.mark.parametrize("mask", [None, "padding", "causal"])
def test_fused_matches_unfused(mask, target, monkeypatch):
    """The fused kernel against vkc's own unfused kernels (MatMul, epilogues, Softmax,
    Transposes) on one block, and the kernel counts of both."""
    b, s = 2, 19
    model = self_attention_block(b, s, 4, 16, mask=mask)
    feeds = random_feeds(model, 0)
    if mask == "padding":
        feeds["mask"] = padding_mask(b, s, [s, 11])
    fused = compile_model(model, target=target)
    unfused = _unfused_bundle(model, monkeypatch, target)
    got = run_bundle(fused, feeds)[0]["y"]
    want = run_bundle(unfused, feeds)[0]["y"]
    assert np.abs(got - want).max() <= 1e-5 * max(1.0, np.abs(want).max())
    assert sum(t.startswith("attention") for t in _templates(model, target)) == 1
    from bundles import read_bundle
    n_fused = len(read_bundle(fused).manifest["dispatches"])
    n_unfused = len(read_bundle(unfused).manifest["dispatches"])
    assert n_fused == 3 and n_unfused >= 9, (n_fused, n_unfused)


@pytest.mark.parametrize("fill,causal", [(np.finfo(np.float32).min, True), (-np.inf, True),
                                          (-1e4, False)])
def test_constant_causal_mask(fill, causal):
    """A constant causal mask of -inf or finfo.min is the kernel's causal mode (no mask read,
    blocks past the diagonal skipped); one of -10000 stays an added mask (exp(-10000 + s - max)
    is not 0 for every score)."""
    graph = run_passes(fold_constants(to_ir(core_attention(1, 1, 6, 8,
                                                           mask_const=causal_mask(6, 6, fill)))))
    [node] = graph.nodes
    assert node.attrs["causal"] is causal
    assert (node.input(3) is None) is causal
    if not causal:
        assert node.attrs["layouts"]["mask"] == (0, [0, 0, 6, 1])


def test_offset_causal_mask():
    """Sk > Sq (keys of earlier steps): the diagonal moves right by Sk - Sq; an upper
    triangle is no causal mask."""
    def fused(mask):
        graph = run_passes(fold_constants(to_ir(core_attention(1, 1, 4, 8, sk=6,
                                                               mask_const=mask))))
        return graph.nodes[0].attrs["causal"]
    assert fused(causal_mask(4, 6))
    assert not fused(np.ascontiguousarray(causal_mask(6, 4).transpose(0, 1, 3, 2)))


@pytest.mark.parametrize("target", ["lavapipe", "generic"])
def test_constant_sliding_window_mask(target):
    """A constant causal mask that also hides the keys 3 or more rows back (transformers' sliding
    attention, Mistral's) is the kernel's causal mode with a window of 3 keys: no mask read, and
    the result onnxruntime's; one that also hides a key inside the window stays an added mask."""
    mask = causal_mask(4, 9)
    mask[..., np.triu(np.ones((4, 9), bool), k=9 - 4 - 2) == 0] = np.finfo(np.float32).min
    model = core_attention(1, 2, 4, 8, sk=9, mask_const=mask)
    [node] = run_passes(fold_constants(to_ir(model))).nodes
    assert node.attrs["causal"] and node.attrs["window"] == 3 and node.input(3) is None
    feeds = random_feeds(model, 0)
    got = run_bundle(compile_model(model, target=target), feeds)[0]["y"]
    np.testing.assert_allclose(got, run_onnxruntime(model, feeds)["y"], rtol=1e-5, atol=1e-6)
    mask[..., -1, -2] = np.finfo(np.float32).min
    [node] = run_passes(fold_constants(to_ir(core_attention(1, 2, 4, 8, sk=9, mask_const=mask)))).nodes
    assert not node.attrs["causal"] and "window" not in node.attrs and node.input(3) is not None


@pytest.mark.parametrize("target", ["lavapipe", "generic"])
@pytest.mark.parametrize("scale", ["mul", "pre"])
def test_soft_capped_scores(target, scale):
    """Scores scaled, then soft-capped at 0.5 (Div, Tanh, Mul: Gemma-2's eager attention), then a
    causal mask: one node whose kernel caps the scaled scores, as onnxruntime computes them."""
    model = core_attention(1, 2, 5, 8, scale=scale, softcap=0.5, mask_const=causal_mask(5, 5))
    [node] = run_passes(fold_constants(to_ir(model))).nodes
    assert node.attrs["softcap"] == pytest.approx(0.5) and node.attrs["scale"] == pytest.approx(8 ** -0.5)
    assert node.attrs["causal"] and node.input(3) is None
    feeds = random_feeds(model, 0)
    got = run_bundle(compile_model(model, target=target), feeds)[0]["y"]
    np.testing.assert_allclose(got, run_onnxruntime(model, feeds)["y"], rtol=1e-5, atol=1e-6)


def test_reshape_dims_as_numpy():
    """A reshaped strided view's dims address the elements numpy's reshape holds, in its order;
    where numpy reshapes without a copy they are one part each, at numpy's strides; where it
    must copy, some dim keeps several parts (or the regrouping is refused)."""
    from compiler.passes.fuse_attention import _reshape_dims, _strides
    rng = np.random.default_rng(0)
    refused = many_parts = 0
    for _ in range(300):
        shape = list(rng.integers(1, 5, rng.integers(1, 5)))
        base = np.arange(int(np.prod(shape))).reshape(shape)
        view = base.transpose(rng.permutation(len(shape)))
        if rng.random() < 0.3:  # a strided slice of one dim
            view = view[tuple(slice(None, None, 2) if i == 0 else slice(None)
                              for i in range(view.ndim))]
        new = []  # view's dims, some adjacent ones merged, 4s split in two, 1s inserted
        for n in view.shape:
            if new and rng.random() < 0.4:
                new[-1] *= int(n)
            else:
                new += [2, 2] if n == 4 and rng.random() < 0.5 else [int(n)]
            new += [1] * int(rng.random() < 0.2)
        dims = [[(int(n), s // base.itemsize)] for n, s in zip(view.shape, view.strides)]
        got = _reshape_dims(dims, new)
        if got is None:
            refused += 1
            continue
        offsets = np.zeros(new, np.int64)  # each element's offset in base, from the parts
        for axis, parts in enumerate(got):
            index = np.arange(new[axis])
            along = sum((index // int(np.prod([p[0] for p in parts[k + 1:]], dtype=int)) % n) * st
                        for k, (n, st) in enumerate(parts))
            offsets += np.reshape(along, [-1 if i == axis else 1 for i in range(len(new))])
        assert (base.reshape(-1)[offsets] == view.reshape(new)).all(), (view.shape, new, got)
        try:
            want = view.view()
            want.shape = new  # raises where numpy would have to copy
        except AttributeError:
            assert _strides(got) is None
            many_parts += 1
            continue
        assert _strides(got) == [w // base.itemsize if n != 1 else 0 for w, n in zip(want.strides, new)]
    assert many_parts > 10 and refused < 150  # both kinds of case were drawn


def test_nan_guard_is_the_kernels():
    """SDPA's export guards its Softmax with Where(IsNaN(P), 0, P): the guard goes into the kernel."""
    graph = run_passes(fold_constants(to_ir(core_attention(1, 2, 5, 8, mask_shape=[1, 1, 5, 5],
                                                           scale="pre", nan_guard=True))))
    [node] = graph.nodes
    assert node.op_type == "vkc.Attention" and node.attrs["empty_rows_zero"]
    assert node.sources == ["q_scale", "k_scale", "qk", "add_mask", "softmax", "isnan", "guard", "pv"]


def test_nan_guard_read_elsewhere_stays():
    """Probabilities read past the guard (here: a graph output) leave the chain unfused."""
    model = core_attention(1, 1, 4, 8, nan_guard=True)
    model.graph.output.append(onnx.helper.make_tensor_value_info("probs", onnx.TensorProto.FLOAT, None))
    assert "vkc.Attention" not in _ops(model)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("target", ["generic", "lavapipe"])
def test_nan_guard_matches_onnxruntime(target, precision):
    """Rows that see no key give 0 as the guard does, also where V holds NaN (0 * NaN is NaN
    there, as onnxruntime's 0-weighted sum gives); a row with a NaN or +inf score is NaN where
    onnxruntime's guard zeroes it (the fault shows)."""
    b, h, s, d = 2, 2, 6, 8
    model = core_attention(b, h, s, d, mask_shape=[b, 1, s, s], scale="pre", nan_guard=True)
    feeds = random_feeds(model, 3)
    mask = np.zeros((b, 1, s, s), np.float32)
    mask[:, :, 1, :] = -np.inf         # row 1 sees no key
    mask[1, :, 4, :2] = -np.inf        # partly masked: an ordinary row
    mask[1, :, 2, 3] = np.inf          # a +inf score
    feeds["mask"] = mask
    feeds["q"][0, 1, 3, 0] = np.nan    # a NaN score row
    feeds["v"][1, 0, 5, 1] = np.nan    # NaN in V: column 1 of every row of that head
    got = run_bundle(compile_model(model, target=target, precision=precision), feeds)[0]["y"]
    want = run_onnxruntime(model, feeds)["y"]
    faults = np.zeros(got.shape, bool)
    faults[0, 1, 3] = faults[1, :, 2] = True
    assert np.isnan(got[faults]).all() and (want[0, 1, 3] == 0).all()
    assert (np.isnan(got) == np.isnan(want))[~faults].all()
    assert np.isnan(got[1, 0, 1, 1]) and (got[:, :, 1][~np.isnan(got[:, :, 1])] == 0).all()
    finite = ~np.isnan(want) & ~faults
    tol = 2e-2 if precision == "fp16" else 1e-5
    assert np.abs(got[finite] - want[finite]).max() <= tol
