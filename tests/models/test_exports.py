"""Exports as users make them (tests/models/fixtures/exports, made by tools/zoo/make_fixtures.py:
library classes, default init unless named random, the TorchScript exporter at opset 17, the
graph untouched: Identity nodes between equal initializers, tied weights, shifted windows, a
static declared output), compiled fp32 and fp16 for lavapipe with the fixture's batch variants
and checked against onnxruntime on fresh inputs at every batch.

fp32: rel L2 <= 1e-4 and every element within 1e-3 * |ref| + 1e-4 * max|ref| (tests/harness.py).
fp16 (float16 storage) against the fp32 reference: rel L2 <= 1e-2 (as the zoo, docs/ZOO.md; an
unwritten element is NaN, so it shows). A graph exported at batch 1 is referenced sample by sample.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from compiler import compile_model
from tests.harness import close_problem, run_bundle, run_onnxruntime, spirv_validate
from tools.zoo.recipe import make_feed

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "exports"
RECIPES = json.loads((FIXTURES / "recipes.json").read_text())
RTOL_L2 = {"fp32": 1e-4, "fp16": 1e-2}
# fp16 where its forms differ from the fp32 run's (windows, tiny default-init activations, random
# weights, audio, batch variants); the rest run fp32 only, to keep the suite's time.
FP16 = {"swin_default", "mobilenet_v3_default", "bert_random", "whisper_encoder_default", "mlp_static_out",
        "mha_seq_first_default"}
# (fixture, precision) -> the open bug it hits. strict: the test fails once the bug is fixed, so
# the mark goes with the fix.
KNOWN: dict[tuple[str, str], str] = {}


def cases() -> list:
    params = []
    for name in sorted(RECIPES):
        for precision in ("fp32", "fp16") if name in FP16 else ("fp32",):
            bug = KNOWN.get((name, precision))
            marks = [pytest.mark.xfail(strict=True, reason=bug)] if bug else []
            params.append(pytest.param(name, precision, marks=marks, id=f"{name}-{precision}"))
    return params


def reference(model: onnx.ModelProto, feeds: dict) -> dict:
    """onnxruntime's outputs; for a graph whose inputs are declared at batch 1, run sample by
    sample and stacked (what a batch-variant bundle of it must return)."""
    declared = model.graph.input[0].type.tensor_type.shape.dim[0].dim_value
    batch = next(iter(feeds.values())).shape[0]
    if declared != 1 or batch == 1:
        return run_onnxruntime(model, feeds)
    rows = [run_onnxruntime(model, {k: v[i:i + 1] for k, v in feeds.items()}) for i in range(batch)]
    return {k: np.concatenate([r[k] for r in rows]) for k in rows[0]}


@pytest.mark.parametrize("name,precision", cases())
def test_export_matches_onnxruntime(name, precision, rng):
    recipe = RECIPES[name]
    model = onnx.load(str(FIXTURES / f"{name}.onnx"))
    shapes = [{s["name"]: [b, *s["shape"][1:]] for s in recipe["inputs"]} for b in recipe["variants"]]
    bundle = compile_model(model, target="lavapipe", precision=precision,
                           **({"variants": shapes} if len(shapes) > 1 else {"input_shapes": shapes[0]}))
    spirv_validate(bundle)
    problems = []
    for batch in recipe["variants"]:
        feeds = {s["name"]: make_feed(s, batch, rng) for s in recipe["inputs"]}
        ref = reference(model, feeds)
        got, _ = run_bundle(bundle, feeds)
        for out, want in ref.items():
            have = np.asarray(got[out])
            if have.shape != want.shape:
                problems.append(f"batch {batch}: {out}: shape {list(have.shape)}, onnxruntime {list(want.shape)}")
                continue
            stats, problem = close_problem(f"batch {batch}: {out}", have, want, rtol_l2=RTOL_L2[precision])
            if precision == "fp16" and stats["rel_l2"] <= RTOL_L2["fp16"]:
                problem = None  # judged on rel L2 alone
            if problem:
                problems.append(problem)
    assert not problems, f"{name} ({recipe['covers']}), {precision}:\n  " + "\n  ".join(problems)
