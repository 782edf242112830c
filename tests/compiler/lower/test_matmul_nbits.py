"""com.microsoft MatMulNBits against onnxruntime: 2-, 4- and 8-bit weights, block sizes 16 to
256, zero points absent, packed or float, a bias, K past the last full block, N not a multiple of
the rows a workgroup takes, decode (one token) and prompt shapes (on tensor cores, read packed by
the cooperative-matrix GEMM); float32 and float16. The packed weight stays packed in the bundle."""

from dataclasses import replace

import numpy as np
import onnx
import pytest

from bundles import read_bundle
from compiler import compile_model
from compiler.compile import compile_with_kernels
from compiler.errors import CompileError
from compiler.lower import matmul_nbits
from compiler.targets import TARGETS, emulating_cooperative_matrix
from tests.harness import (assert_close, check_against_onnxruntime, compile_cached, random_feeds, run_bundle,
                           run_onnxruntime)
from tests.onnx_builders import init, tensor_info

MS = "com.microsoft"


def nbits_weights(k, n, *, bits=4, block_size=32, zero_points=None, seed=0):
    """(B uint8 [N, n_blocks, blob], scales [N * n_blocks], zero points or None): random
    quantized values and scales around 1/16 (products of a unit-normal A stay near 1)."""
    rng = np.random.default_rng(seed)
    blocks = -(-k // block_size)
    b = rng.integers(0, 256, (n, blocks, block_size * bits // 8), dtype=np.uint8)
    scales = (rng.random(n * blocks) / 8 + 1 / 64).astype(np.float32)
    zp = None
    if zero_points == "packed":
        zp = rng.integers(0, 256, n * -(-blocks * bits // 8), dtype=np.uint8)
    elif zero_points == "float":
        zp = (rng.random(n * blocks) * 2 ** bits).astype(np.float32)
    return b, scales, zp


def nbits_model(a_shape, n, *, bits=4, block_size=32, zero_points=None, bias=False, **attrs):
    k = a_shape[-1]
    b, scales, zp = nbits_weights(k, n, bits=bits, block_size=block_size, zero_points=zero_points)
    weights = [init("b", b), init("scales", scales)]
    names = ["a", "b", "scales"]
    if zp is not None:
        weights.append(init("zp", zp))
        names.append("zp")
    if bias:
        weights.append(init("bias", np.random.default_rng(5).standard_normal(n).astype(np.float32)))
        names += [""] * (5 - len(names)) + ["bias"]
    node = onnx.helper.make_node("MatMulNBits", names, ["y"], domain=MS, K=k, N=n, bits=bits,
                                 block_size=block_size, **attrs)
    graph = onnx.helper.make_graph([node], "nbits", [tensor_info("a", a_shape)],
                                   [tensor_info("y", [*a_shape[:-1], n])], initializer=weights)
    return onnx.helper.make_model(graph, ir_version=10, opset_imports=[
        onnx.helper.make_opsetid("", 21), onnx.helper.make_opsetid(MS, 1)])


CASES = [
    pytest.param([1, 1, 256], 96, {}, id="decode-4bit-bs32"),
    pytest.param([1, 5, 256], 70, {"zero_points": "packed"}, id="prompt-4bit-packed-zp"),
    pytest.param([3, 128], 33, {"block_size": 16, "zero_points": "float"}, id="4bit-bs16-float-zp"),
    pytest.param([2, 512], 40, {"block_size": 256, "bias": True}, id="4bit-bs256-bias"),
    pytest.param([1, 512], 24, {"block_size": 128, "zero_points": "packed"}, id="4bit-bs128"),
    pytest.param([2, 80], 12, {"block_size": 32, "zero_points": "packed"}, id="k-past-last-block"),
    pytest.param([1, 1, 256], 64, {"bits": 8, "zero_points": "packed"}, id="8bit-packed-zp"),
    pytest.param([9, 128], 20, {"bits": 8, "block_size": 64}, id="8bit-nine-rows"),
    pytest.param([2, 128], 16, {"bits": 2, "block_size": 16, "zero_points": "packed"}, id="2bit"),
    # prompts (M >= PROMPT_ROWS): W dequantized into scratch, then the tiled GEMM (without
    # cooperative matrices: test_prompt_on_tensor_cores_reads_the_packed_weights)
    pytest.param([1, 64, 256], 70, {"zero_points": "packed"}, id="prompt-gemm-4bit"),
    pytest.param([2, 32, 80], 12, {"block_size": 32}, id="prompt-gemm-k-past-last-block"),
    pytest.param([64, 128], 20, {"bits": 8, "zero_points": "packed"}, id="prompt-gemm-8bit"),
    pytest.param([64, 128], 20, {"zero_points": "float"}, id="prompt-float-zp-gemv"),
    pytest.param([64, 20], 8, {"block_size": 16, "zero_points": "packed"}, id="prompt-gemm-k-not-words"),
]


@pytest.mark.parametrize("target", ["generic", "lavapipe"])
@pytest.mark.parametrize("a_shape,n,kw", CASES)
def test_matmul_nbits(a_shape, n, kw, target):
    model = nbits_model(a_shape, n, **kw)
    templates = [k.template for k in compile_with_kernels(model, target=target)[1]]
    prompt = np.prod(a_shape[:-1]) >= matmul_nbits.PROMPT_ROWS and kw.get("zero_points") != "float"
    assert ("gather_block_quantized" in templates) == prompt, templates
    check_against_onnxruntime(model, target=target)


TENSOR_CORES = emulating_cooperative_matrix(TARGETS["nvidia"])


@pytest.mark.parametrize("a_shape,n,kw,packed", [
    pytest.param([1, 64, 256], 70, {"zero_points": "packed"}, True, id="4bit-packed-zp"),
    pytest.param([2, 32, 80], 12, {"block_size": 32}, True, id="4bit-k-past-last-block"),
    pytest.param([64, 128], 20, {"bits": 8, "zero_points": "packed"}, True, id="8bit-packed-zp"),
    pytest.param([100, 64], 40, {"bits": 8, "block_size": 16}, True, id="8bit-bs16"),
    pytest.param([64, 128], 16, {"bits": 2, "block_size": 16, "zero_points": "packed"}, False, id="2bit"),
    pytest.param([64, 128], 20, {"zero_points": "float"}, False, id="float-zp"),
])
def test_prompt_on_tensor_cores_reads_the_packed_weights(a_shape, n, kw, packed):
    """A prompt's product on tensor cores: the cooperative-matrix GEMM dequantizes each 4- or
    8-bit word of W as it fetches it, one kernel and no scratch copy of W. 2-bit words (16
    weights, past one fetch) are dequantized into scratch first; float zero points keep the
    GEMV kernel."""
    model = nbits_model(a_shape, n, **kw)
    bundle, kernels = compile_with_kernels(model, target=TENSOR_CORES, precision="fp16")
    modes = [(k.template, k.params.get("b_mode")) for k in kernels if k.template != "elementwise_typed"]  # A's cast
    want = [("matmul_coopmat", "packed")] if packed else \
        [("matmul_nbits", None)] if kw.get("zero_points") == "float" else \
        [("gather_block_quantized", None), ("matmul_coopmat", "strided")]
    assert modes == want
    scratch = [t for t in read_bundle(bundle).manifest["tensors"] if t["name"].endswith("/weights")]
    assert bool(scratch) == (modes[0][0] == "gather_block_quantized"), scratch
    feeds = random_feeds(model)
    got, want = run_bundle(bundle, feeds)[0]["y"], run_onnxruntime(model, feeds)["y"]
    # float16 A and weights: elements within float16's rounding of the largest
    assert_close("y", got, want, rtol_l2=1e-2, rtol=1e-2, atol=2e-3 * np.abs(want).max())


SUBGROUP_SUMS = replace(TARGETS["generic"], name="generic-subgroup-sums", subgroup_reductions=True)


@pytest.mark.parametrize("staged_groups", [4, 0])
@pytest.mark.parametrize("mantissa", [True, False])
@pytest.mark.parametrize("vector_loads", [True, False])
@pytest.mark.parametrize("a_shape,n,kw", [CASES[0], CASES[1], CASES[5], CASES[6]])
def test_matmul_nbits_forms(a_shape, n, kw, vector_loads, mantissa, staged_groups, monkeypatch):
    """Subgroup sums (the nvidia profile's reduction), with A staged in shared memory and a
    subgroup a group of rows or a workgroup's partial sums added in shared memory; B read a word
    at a time; weights converted to floats by integer conversions instead of through a float's
    mantissa."""
    monkeypatch.setattr(matmul_nbits, "VECTOR_LOADS", vector_loads)
    monkeypatch.setattr(matmul_nbits, "MANTISSA_WEIGHTS", mantissa)
    monkeypatch.setattr(matmul_nbits, "STAGED_GROUPS", staged_groups)
    monkeypatch.setattr(matmul_nbits, "STAGED_UNROLL", 2)
    target = replace(SUBGROUP_SUMS, name=f"{SUBGROUP_SUMS.name}-vec{vector_loads}-mantissa{mantissa}"
                     f"-staged{staged_groups}")  # own cache key
    model = nbits_model(a_shape, n, **kw)
    [kernel] = compile_with_kernels(model, target=target)[1]
    assert kernel.params["VEC"] == (4 if vector_loads else 1) and kernel.params["SUBGROUP_SUM"]
    assert kernel.params["MANTISSA"] == mantissa and kernel.params["STAGED"] == bool(staged_groups)
    check_against_onnxruntime(model, target=target)


def test_weights_stay_packed():
    """The bundle's weights are the packed bytes (half a byte a 4-bit weight), the scales and
    the zero points: no dequantized copy."""
    model = nbits_model([1, 1024], 256, zero_points="packed")
    tensors = read_bundle(compile_cached(model)).manifest["tensors"]
    weights = {t["name"]: (t["dtype"], t["nbytes"]) for t in tensors if t["memory"] == "weights"}
    assert weights == {"b": ("uint8", 256 * 1024 // 2), "scales": ("float32", 256 * 32 * 4),
                       "zp": ("uint8", 256 * 32 // 2)}


@pytest.mark.parametrize("a_shape,kw", [([1, 2, 256], {}),
                                        ([1, 2, 256], {"zero_points": "float", "bias": True}),
                                        ([1, 64, 256], {"zero_points": "packed"})])
def test_matmul_nbits_fp16(a_shape, kw):
    model = nbits_model(a_shape, 48, **kw)
    kernels = compile_with_kernels(model, precision="fp16")[1]
    products = [k for k in kernels if k.template.startswith("matmul")]
    # float16 A; the output's cast to float32 is the product's store
    assert [(k.params["AB"].name, k.params["T"].name) for k in products] == [("float16", "float32")]
    assert kernels[-1] is products[0]
    check_against_onnxruntime(model, precision="fp16", rtol_l2=1e-2, rtol=1e-2, atol=1e-2)


def test_g_idx_is_refused():
    model = nbits_model([1, 64], 8, block_size=16)
    g_idx = init("g_idx", np.arange(64, dtype=np.int32) // 16)
    model.graph.initializer.append(g_idx)
    node = model.graph.node[0]
    node.input.extend(["", "g_idx"])
    with pytest.raises(CompileError, match="g_idx"):
        compile_model(model)


# ONNX DequantizeLinear with block_size (opset 21) feeding a MatMul: packed into the same kernel.
# The reference is onnxruntime without graph optimizations: its own fusion of the pair into
# MatMulNBits computes at lower precision (0.13 off outputs near 3 in int4-decode).
INT4 = {"int4": (onnx.TensorProto.INT4, -8, 8), "uint4": (onnx.TensorProto.UINT4, 0, 16),
        "int8": (onnx.TensorProto.INT8, -128, 128), "uint8": (onnx.TensorProto.UINT8, 0, 256)}


def dequantize_matmul_model(a_shape, n, *, kind="int4", block_size=32, zero_points=True,
                            opset=21, readers=1, seed=0):
    """A [.., K] · DequantizeLinear(W [K, N] of `kind`, scales [K / block, N], zero points)."""
    rng = np.random.default_rng(seed)
    k = a_shape[-1]
    blocks = -(-k // block_size)
    elem, lo, hi = INT4[kind]

    def quantized(name, shape):
        return onnx.helper.make_tensor(name, elem, shape, rng.integers(lo, hi, shape).flatten().tolist())
    weights = [quantized("w", [k, n]),
               init("scales", (rng.random((blocks, n)) / 8 + 1 / 64).astype(np.float32))]
    weights += [quantized("zp", [blocks, n])] if zero_points else []
    dq = onnx.helper.make_node("DequantizeLinear", ["w", "scales"] + (["zp"] if zero_points else []),
                               ["w_float"], axis=0, block_size=block_size)
    nodes = [dq] + [onnx.helper.make_node("MatMul", ["a", "w_float"], [f"y{i}"]) for i in range(readers)]
    graph = onnx.helper.make_graph(nodes, "dq_matmul", [tensor_info("a", a_shape)],
                                   [tensor_info(f"y{i}", [*a_shape[:-1], n]) for i in range(readers)],
                                   initializer=weights)
    return onnx.helper.make_model(graph, ir_version=10,
                                  opset_imports=[onnx.helper.make_opsetid("", opset)])


DQ_CASES = [
    pytest.param([1, 1, 256], 96, {}, id="int4-decode"),
    pytest.param([1, 5, 256], 70, {"kind": "uint4", "zero_points": False}, id="uint4-no-zp"),
    pytest.param([3, 80], 12, {"kind": "uint4", "block_size": 16}, id="uint4-k-past-last-block"),
    pytest.param([2, 128], 33, {"kind": "int8", "block_size": 64, "zero_points": False}, id="int8"),
    pytest.param([2, 128], 20, {"kind": "uint8", "block_size": 16}, id="uint8"),
    pytest.param([2, 64], 8, {"readers": 2}, id="two-readers"),
    pytest.param([1, 64, 64], 8, {"kind": "uint4"}, id="uint4-prompt"),
]


@pytest.mark.parametrize("a_shape,n,kw", DQ_CASES)
def test_dequantize_matmul(a_shape, n, kw):
    model = dequantize_matmul_model(a_shape, n, **kw)
    kernels = compile_with_kernels(model)[1]
    assert [k.template for k in kernels].count("matmul_nbits") == \
        (0 if a_shape[-2] >= matmul_nbits.PROMPT_ROWS else kw.get("readers", 1))
    check_against_onnxruntime(model, optimized=False)


def test_dequantize_matmul_weights_stay_packed():
    model = dequantize_matmul_model([1, 1024], 256, kind="int4")
    tensors = read_bundle(compile_cached(model)).manifest["tensors"]
    weights = {t["name"]: (t["dtype"], t["nbytes"]) for t in tensors if t["memory"] == "weights"}
    assert weights == {"w/packed": ("uint8", 256 * 1024 // 2), "scales/rows": ("float32", 256 * 32 * 4),
                       "w/zero_points": ("uint8", 256 * 32 // 2)}


def test_dequantize_matmul_fp16():
    model = dequantize_matmul_model([1, 2, 256], 48)
    kernels = compile_with_kernels(model, precision="fp16")[1]
    assert [(k.params["AB"].name, k.params["T"].name) for k in kernels if k.template == "matmul_nbits"] == \
        [("float16", "float32")]   # float16 A, the output's cast to float32 in the store
    check_against_onnxruntime(model, precision="fp16", rtol_l2=1e-2, rtol=1e-2, atol=1e-2,
                              optimized=False)


def test_other_dequantize_forms_fold_to_float():
    """Blocks of 8 (below MatMulNBits' 16): the weight folds to float32, as before."""
    model = dequantize_matmul_model([2, 64], 8, block_size=8)
    kernels = compile_with_kernels(model)[1]
    assert "matmul_nbits" not in [k.template for k in kernels]
    check_against_onnxruntime(model, optimized=False)


def nbits_epilogue_model(a_shape, n, operand_shape, **kw):
    """z = sigmoid(y) * y + r: MatMulNBits' y through an expression reading an input r (a
    residual, or one broadcast over rows or batches)."""
    model = nbits_model(a_shape, n, **kw)
    g = model.graph
    g.input.append(tensor_info("r", operand_shape))
    g.node.extend([onnx.helper.make_node("Sigmoid", ["y"], ["s"]), onnx.helper.make_node("Mul", ["y", "s"], ["silu"]),
                   onnx.helper.make_node("Add", ["silu", "r"], ["z"])])
    g.output[0].CopyFrom(tensor_info("z", [*a_shape[:-1], n]))
    return model


EPILOGUE_CASES = [
    pytest.param([1, 1, 256], 96, [1, 1, 96], {"zero_points": "packed"}, False, id="decode-residual"),
    pytest.param([2, 3, 128], 40, [2, 1, 40], {"bias": True}, False, id="per-batch-operand-bias"),
    pytest.param([2, 3, 128], 40, [3, 40], {"bits": 8}, False, id="per-row-operand"),
    pytest.param([1, 64, 256], 70, [1, 64, 70], {"zero_points": "packed"}, True, id="prompt-gemm"),
    pytest.param([2, 32, 128], 24, [2, 32, 24], {}, True, id="prompt-gemm-batches"),
    # an operand broadcast over a batch's rows: the GEMV (the tiled GEMM sees one matrix)
    pytest.param([2, 32, 128], 24, [2, 1, 24], {}, False, id="prompt-per-batch-operand"),
]


@pytest.mark.parametrize("target", ["generic", "lavapipe", SUBGROUP_SUMS])
@pytest.mark.parametrize("a_shape,n,operand,kw,tiled", EPILOGUE_CASES)
def test_epilogue(a_shape, n, operand, kw, tiled, target):
    """The expression after the product is its kernel's store (passes/fuse_epilogues.py): one
    dispatch where the product is a GEMV; a prompt's tiled GEMM stores it too."""
    model = nbits_epilogue_model(a_shape, n, operand, **kw)
    templates = [k.template for k in compile_with_kernels(model, target=target)[1]]
    assert not any(t.startswith("elementwise") for t in templates), templates
    assert ("gather_block_quantized" in templates) == tiled, templates
    check_against_onnxruntime(model, target=target)


def test_epilogue_widens_to_float32():
    """--precision fp16 with the residual add kept float32: the float16 product's Cast to float32
    and the add are its store (float16 A, float32 Y), against onnxruntime's float32."""
    from tests.harness import assert_close, random_feeds, run_bundle, run_onnxruntime
    model = nbits_epilogue_model([1, 1, 256], 96, [1, 1, 96], zero_points="packed")
    model.graph.node[-1].name = "residual"
    bundle, kernels = compile_with_kernels(model, target="generic", precision="fp16", keep_fp32=["residual"])
    # the float32 input's cast to float16, then the product
    assert [k.template for k in kernels] == ["elementwise_typed", "matmul_nbits"]
    assert kernels[1].params["T"].name == "float32" and kernels[1].params["AB"].name == "float16"
    feeds = random_feeds(model)
    assert_close("z", run_bundle(bundle, feeds)[0]["z"], run_onnxruntime(model, feeds)["z"],
                 rtol_l2=1e-2, rtol=1e9, atol=1e9)


def test_float16_product_widens_with_its_scales_as_they_are():
    """A float16 model's product read by a Cast to float32 and a float32 add: the kernel stores
    the float32 sum itself, and its float16 scales stay float16 in the bundle (no float32 copy)."""
    from tests.onnx_builders import tensor_info
    model = nbits_model([1, 1, 256], 96, zero_points="packed")
    g = model.graph
    for i, t in enumerate(g.initializer):
        if t.name == "scales":
            g.initializer[i].CopyFrom(init("scales", onnx.numpy_helper.to_array(t).astype(np.float16)))
    g.input[0].CopyFrom(tensor_info("a", [1, 1, 256], np.float16))
    g.input.append(tensor_info("r", [1, 1, 96]))
    g.node.extend([onnx.helper.make_node("Cast", ["y"], ["y32"], to=onnx.TensorProto.FLOAT),
                   onnx.helper.make_node("Add", ["y32", "r"], ["z"])])
    g.output[0].CopyFrom(tensor_info("z", [1, 1, 96]))
    bundle, kernels = compile_with_kernels(model)
    assert [k.template for k in kernels] == ["matmul_nbits"]
    tensors = {t["name"]: t["dtype"] for t in read_bundle(bundle).manifest["tensors"]}
    assert tensors["scales"] == "float16"
    check_against_onnxruntime(model, rtol_l2=1e-3, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("a_shape,n,kw", [
    pytest.param([1, 64, 64], 600, {"zero_points": "packed"}, id="4bit-packed-zp"),
    pytest.param([64, 64], 520, {"bits": 8}, id="8bit"),
])
def test_prompt_product_over_one_binding_runs_in_parts(a_shape, n, kw, monkeypatch):
    """A prompt's product whose dequantized weight would not fit one binding (an LM head) runs
    as row parts of W, each dequantized into scratch and multiplied into its columns of Y; the
    packed weights stay one copy in the bundle (the parts bind views of them)."""
    monkeypatch.setattr(matmul_nbits, "GUARANTEED_BINDING_BYTES", 256 * 64 * 4)   # 256 rows a part
    model = nbits_model(a_shape, n, **kw)
    target = replace(TARGETS["generic"], name="generic-small-bindings")   # own cache key
    bundle, kernels = compile_with_kernels(model, target=target)
    templates = [k.template for k in kernels]
    assert templates.count("gather_block_quantized") == 3 and "matmul_nbits" not in templates, templates
    packed = next(init for init in model.graph.initializer if init.name == "b")
    assert len(read_bundle(bundle).weights) < 1.5 * len(packed.raw_data)
    check_against_onnxruntime(model, target=target)
