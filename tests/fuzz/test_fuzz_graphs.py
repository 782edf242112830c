"""The fuzzer in CI: a few hundred seeded random graphs compiled, run and compared with
onnxruntime (VKC_FUZZ_GRAPHS seeds from VKC_FUZZ_START; `python -m tests.fuzz` runs thousands),
and the generator's own promises."""
import os

import onnx

from .generate import generate, op_pool, unfuzzed_ops
from .run import run_seeds

SEEDS = int(os.environ.get("VKC_FUZZ_GRAPHS", "240"))
START = int(os.environ.get("VKC_FUZZ_START", "0"))
NOT_FUZZED = sorted([
    "Upsample",  # deprecated before every opset the generator draws (18, 20, 21)
    "Attention", "RMSNormalization", "RotaryEmbedding",  # since opset 23, past those
    "TensorScatter",  # since opset 24 (tests/compiler/test_state.py holds its cases)
    "SimplifiedLayerNormalization",  # onnxruntime's, no ONNX schema: onnx.checker refuses it
    # folded, or packed from constants into MatMulNBits (which is drawn): no builder of its own
    "DequantizeLinear",
    "GatherND",  # constant indices only, rewritten to Gather (drawn); tests/compiler/passes/test_gather_nd.py
    "com.microsoft.GroupQueryAttention",  # a decoder cache (tests/compiler/passes/test_group_query_attention.py)
])


def test_random_graphs_agree_with_onnxruntime():
    lines = []
    summary = run_seeds(range(START, START + SEEDS), batch=40, log=lines.append)
    assert not summary.bugs, summary.line() + "\n" + "\n".join(lines) + \
        "\n(reproduce and shrink: python -m tests.fuzz --start SEED --seeds 1 --reduce --out out/fuzz)"
    # Most graphs must compile: a generator whose graphs vkc refuses tests nothing.
    assert summary.verdicts["ok"] >= 0.85 * SEEDS, summary.line()


def test_every_supported_op_is_drawn():
    assert unfuzzed_ops() == NOT_FUZZED


def test_graphs_are_valid_and_seeded():
    for seed in range(30):
        case = generate(seed)
        onnx.checker.check_model(case.model, full_check=True)
        assert case.model.SerializeToString() == generate(seed).model.SerializeToString()


def test_patterns_are_drawn():
    assert {"pattern:layernorm", "pattern:attention"} <= set(op_pool(20))
