"""--kv-cache int8 (passes/int8_cache.py, lower/int8_cache_write.py): the caches held as state are
int8 with a float32 scale per row, written by vkc.Int8CacheWrite and read by attention's tiled
kernel, or on tensor cores by its cooperative-matrix kernel. Checked against onnxruntime running the same rounding written into the ONNX model
(tests/quantized_onnx.py int8_cache_onnx): a prompt in chunks, then decode steps fed the oracle's
greedy tokens, logits at every run, on lavapipe's kernels and the generic profile's (the GPUs'
GEMV and split-KV attention); against the float cache, the rounding's own cost. ONNX's in-place
cache form and optimum's growing cache (--max-context). What it refuses, in one line."""
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from compiler.compile import compile_model, compile_with_kernels
from compiler.errors import CompileError
from compiler.targets import TARGETS, emulating_cooperative_matrix
from runtime_min import load
from tests.harness import assert_close, spirv_validate
from tests.llm_models import tiny_llama
from tests.models.onnxruntime_loops import OnnxruntimeLoop
from tests.quantized_onnx import int8_cache_onnx

FIXTURES = Path(__file__).resolve().parents[2] / "models" / "fixtures"
CONTEXT = 64
CHUNKS = [[3, 17, 42, 5], [9], [11], [2]]
VARIANTS = [{"input_ids": [1, 4]}, {"input_ids": [1, 1]}]


class InPlaceLoop:
    """onnxruntime over ONNX's in-place cache form (tests/llm_models.py), the caches fed back."""

    def __init__(self, model):
        self.sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        self.names = [o.name for o in self.sess.get_outputs()]
        self.caches = {i.name: np.zeros(i.shape, np.float32) for i in self.sess.get_inputs() if i.name.startswith("past_")}
        self.filled = 0

    def run(self, ids):
        out = dict(zip(self.names, self.sess.run(None, {"input_ids": np.array([ids], np.int64),
                                                        "position": np.array([self.filled]), **self.caches})))
        self.caches = {k: out[k.replace("past_", "present_")] for k in self.caches}
        self.filled += len(ids)
        return out


def compare(bundle, loops, tolerances, steps=10, chunks=CHUNKS):
    """The bundle's logits against each loop's at every run (tokens: the first loop's greedy),
    the bundle fed the tokens and the cache rows filled before them."""
    filled = 0
    with load(bundle) as model:
        for step in range(steps):
            ids = chunks[step] if step < len(chunks) else [token]
            got = model.run({"input_ids": np.array([ids], np.int64), "position": np.array([filled], np.int64)})["logits"]
            filled += len(ids)
            wants = [loop.run(ids)["logits"] for loop in loops]
            for want, tol in zip(wants, tolerances):
                assert_close("logits", got, want, **tol)
            token = int(np.argmax(wants[0][0, -1]))


@pytest.mark.parametrize("target, precision", [("lavapipe", "fp32"), ("generic", "fp32"), ("lavapipe", "fp16"),
                                               ("generic", "fp16"), ("nvidia-emulated", "fp16")])
def test_in_place_cache_against_onnxruntime(target, precision):
    """float32: within 1e-5 of the same rounding in onnxruntime; float16 (its update rows rounded to
    float16 before int8) within 1e-2; both within 3e-2 of the float cache. nvidia-emulated: the
    nvidia profile's kernels and tiles (its tensor cores emulated) on this device."""
    variants, chunks = VARIANTS, CHUNKS
    if target == "nvidia-emulated":   # (its prefill tiles take more shared memory than lavapipe has)
        target = emulating_cooperative_matrix(TARGETS["nvidia"])
        variants, chunks = VARIANTS[1:], [[t] for chunk in CHUNKS for t in chunk]
    llama = tiny_llama(layers=2, context=CONTEXT)
    bundle = compile_model(llama, variants=variants, target=target, precision=precision, kv_cache="int8")
    same = dict(rtol_l2=1e-5, rtol=1e-3, atol=1e-4) if precision == "fp32" else dict(rtol_l2=1e-2, rtol=1e9, atol=1e9)
    compare(bundle, [InPlaceLoop(int8_cache_onnx(llama)), InPlaceLoop(llama)],
            [same, dict(rtol_l2=3e-2, rtol=1e9, atol=1e9)], chunks=chunks)


def test_growing_cache_against_onnxruntime(tmp_path):
    """optimum's export at --max-context: its Concat's present rounded in the oracle."""
    import onnx
    path = FIXTURES / "llama_tiny_optimum.onnx"
    oracle = tmp_path / "oracle.onnx"
    onnx.save(int8_cache_onnx(onnx.load(path)), oracle)
    bundle = compile_model(path, variants=VARIANTS, target="generic", max_context=CONTEXT, kv_cache="int8")
    compare(bundle, [OnnxruntimeLoop(oracle), OnnxruntimeLoop(path)],
            [dict(rtol_l2=1e-5, rtol=1e-3, atol=1e-4), dict(rtol_l2=3e-2, rtol=1e9, atol=1e9)])


def test_state_is_int8_with_scales():
    """Each cache int8 [1, kv heads, N, head size], its scales float32 [1, kv heads, N, 1]: the
    state's bytes 5/16 of the float32 cache's at head size 8 (a sixteenth more than half a
    float16 cache's at 64). generate runs on it."""
    llama = tiny_llama(layers=2, context=CONTEXT)
    with load(compile_model(llama, variants=VARIANTS, target="lavapipe", kv_cache="int8")) as model:
        state = {s.name: (s.shape, s.dtype) for s in model.state}
        assert state["past_key.0"] == ((1, 2, CONTEXT, 8), np.int8)
        assert state["past_key.0.scale"] == ((1, 2, CONTEXT, 1), np.float32)
        assert len(state) == 8
        assert len(list(model.generate([3, 17, 42, 5, 9], 12))) == 12


def test_decode_step_dispatches():
    """nvidia, float16: both caches' writes are int8 kernels (no tensor_scatter, no row store by
    the rotary kernel), and attention is the tiled kernel."""
    kernels = compile_with_kernels(tiny_llama(layers=2, context=CONTEXT), input_shapes={"input_ids": [1, 1]},
                                   target="nvidia", precision="fp16", kv_cache="int8")[1]
    counts = Counter(k.template for k in kernels)
    assert counts["int8_cache_write"] == 4 and counts["attention_tiled"] == 2
    assert "tensor_scatter" not in counts and "attention_coopmat" not in counts


def test_prompt_on_tensor_cores_reads_the_int8_cache():
    """nvidia (tensor cores emulated, shared memory as lavapipe's): a 16-token prompt's attention
    is the cooperative-matrix kernel reading the int8 caches, dequantized to float16 as it fetches
    them; two prompts and decode steps within 1e-2 of onnxruntime's same rounding, 3e-2 of the
    float cache, and every module passes spirv-val."""
    target = replace(emulating_cooperative_matrix(TARGETS["nvidia"]), name="nvidia-emulated-32k",
                     max_shared_memory=32768)
    llama = tiny_llama(layers=1, hidden=64, heads=4, kv_heads=2, ffn=96, context=CONTEXT)   # head size 16
    variants = [{"input_ids": [1, 16]}, {"input_ids": [1, 1]}]
    prompt = compile_with_kernels(llama, input_shapes=variants[0], target=target, precision="fp16", kv_cache="int8")[1]
    [attention] = [k for k in prompt if k.template.startswith("attention")]
    assert attention.template == "attention_coopmat" and attention.params["INT8"] == ["K", "V"]
    bundle = compile_model(llama, variants=variants, target=target, precision="fp16", kv_cache="int8")
    spirv_validate(bundle)
    compare(bundle, [InPlaceLoop(int8_cache_onnx(llama)), InPlaceLoop(llama)],
            [dict(rtol_l2=1e-2, rtol=1e9, atol=1e9), dict(rtol_l2=3e-2, rtol=1e9, atol=1e9)], steps=6,
            chunks=[list(range(3, 19)), list(range(20, 36))])


@pytest.mark.parametrize("options, message", [
    (dict(kv_cache="int4"), "--kv-cache 'int4' is not int8"),
    (dict(kv_cache="int8", state="none"), "keeps no cache on the device"),
])
def test_refused(options, message):
    with pytest.raises(CompileError, match=message):
        compile_model(tiny_llama(layers=1, context=CONTEXT), input_shapes={"input_ids": [1, 1]}, target="lavapipe",
                      **options)


def test_cache_read_by_another_op_is_refused():
    """A cache that is also a graph output read by something other than attention: refused, naming it."""
    import onnx
    from onnx import helper
    llama = tiny_llama(layers=1, context=CONTEXT)
    g = llama.graph
    g.node.append(helper.make_node("ReduceSum", ["present_key.0"], ["key_sum"], keepdims=0))
    g.output.append(helper.make_tensor_value_info("key_sum", onnx.TensorProto.FLOAT, None))
    with pytest.raises(CompileError, match="read by ReduceSum .* which reads no int8 cache"):
        compile_model(llama, input_shapes={"input_ids": [1, 1]}, target="lavapipe", kv_cache="int8")


def test_command_line(tmp_path):
    from typer.testing import CliRunner

    from compiler.cli import app
    path = tmp_path / "llama.onnx"
    import onnx
    onnx.save(tiny_llama(layers=1, context=CONTEXT), path)
    r = CliRunner().invoke(app, ["compile", str(path), "-o", str(tmp_path / "a.vkb"), "--target", "lavapipe",
                                 "--input-shape", "input_ids=1x1", "--kv-cache", "int4"])
    assert r.exit_code != 0 and "--kv-cache 'int4' is not int8" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(app, ["compile", str(path), "-o", str(tmp_path / "a.vkb"), "--target", "lavapipe",
                                 "--input-shape", "input_ids=1x1", "--kv-cache", "int8"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["inspect", str(tmp_path / "a.vkb")], terminal_width=200)
    assert r.exit_code == 0, r.output
    # 2 caches of 2 x 64 x 8 int8 and their 2 x 64 float32 scales
    assert "state: 3,072 bytes (0.00 MiB): past_key.0 int8[1, 2, 64, 8], past_value.0 int8[1, 2, 64, 8], " \
           "past_key.0.scale float32[1, 2, 64, 1]" in r.output, r.output
