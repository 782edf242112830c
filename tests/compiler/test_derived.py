"""compiler/derived.py: what is computed from a weight is computed once for every graph of the
model, and forgotten with the weight."""
import gc

import numpy as np

from compiler.derived import _KEPT, derived
from tests.llm_models import tiny_llama


def test_a_result_is_kept_while_its_array_lives():
    calls = []
    source = np.arange(6.0)

    def make():
        calls.append(1)
        return source * 2
    first = derived(source, "double", make)
    assert derived(source, "double", make) is first and len(calls) == 1
    assert derived(source, "other", make) is not first and len(calls) == 2
    assert derived(source.copy(), "double", make) is not first and len(calls) == 3
    held = len(_KEPT)
    del source, first
    gc.collect()
    assert len(_KEPT) <= held - 2


def test_a_scalar_source_is_computed_each_time():
    calls = []
    assert derived(np.float32(2), "x", lambda: calls.append(1) or 4) == 4
    assert derived(np.float32(2), "x", lambda: calls.append(1) or 4) == 4
    assert len(calls) == 2


def test_shape_variants_quantize_and_convert_each_weight_once(monkeypatch):
    """Two shape variants of an int4 float16 compile: every weight is quantized once, and the
    bundle is the one compiled with nothing kept."""
    from compiler.compile import compile_model
    import importlib
    qw = importlib.import_module("compiler.passes.quantize_weights")
    model = tiny_llama(layers=1)
    calls = []
    quantize = qw.quantize_blocks

    def counted(w, *args):
        calls.append(w.shape)
        return quantize(w, *args)
    monkeypatch.setattr(qw, "quantize_blocks", counted)
    variants = [{"input_ids": [1, 4]}, {"input_ids": [1, 1]}]
    bundle = compile_model(model, variants=variants, target="generic", precision="fp16", weights="int4")
    weights = len(calls)
    assert weights
    for module in ("compiler.passes.quantize_weights", "compiler.passes.precision",
                   "compiler.passes.float16_range", "compiler.passes.fold_constants"):
        monkeypatch.setattr(importlib.import_module(module), "derived", lambda source, how, make: make())
    calls.clear()
    assert compile_model(model, variants=variants, target="generic", precision="fp16", weights="int4") == bundle
    assert len(calls) == 2 * weights
