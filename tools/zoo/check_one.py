"""Compile one exported model in every configuration of the zoo, run it on the local Vulkan device
and compare with onnxruntime on fresh random inputs. Prints one JSON object (the result).

    PYTHONPATH=<vkc checkout> python tools/zoo/check_one.py MODEL.onnx RECIPE.json [--seed N]

Configurations: precision fp32 and fp16 x target default (every profile in one bundle; the
runtime picks the device's) and host. A model exported with a dynamic batch axis is compiled
with two shape variants (batch 1 and 2) and run at both.

Tolerances (the test suite's, tests/harness.py): fp32: rel L2 <= 1e-4 and every element
|got - ref| <= atol + rtol*|ref| with rtol 1e-3, atol 1e-4 * max|ref|; fp16 (inputs and outputs
float32, storage float16) against the fp32 reference: rel L2 <= 1e-2 (the per-element ratio at
rtol 1e-2, atol 1e-3 * max|ref| is recorded, not judged). The reference's own spread is
recorded too, the larger of two: onnxruntime with its graph optimizations on against off (another
order of the same float32 sums), and onnxruntime on the model with every float32 weight one
float32 step away, up or down at random (a rounding as large as one float32 operation's, which
the first misses where onnxruntime's optimizations leave the arithmetic as it was). Where it
passes the fp32 limit, the model amplifies rounding past what any float32 implementation can
meet, and fp32 is judged on rel L2 <= twice that spread; an element's fp32 atol is at least
twice the largest |difference| of an element between those runs. Where that
spread reaches ILL_CONDITIONED (float32's rounding alone moves the reference by fp16's whole
tolerance), a result outside tolerance is "ill-conditioned", not "wrong": the reference does not
determine the answer to that tolerance, for vkc or any other implementation. An element that is
NaN where onnxruntime's is NaN, or the same infinity where onnxruntime's is, agrees (random
weights can overflow a model's float32 arithmetic; onnxruntime's NaN is then the answer).
"""
from __future__ import annotations

import argparse
import json
import time
import traceback
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from tools.zoo.recipe import make_feed  # the vkc checkout on PYTHONPATH, as tests.harness below
from tests.harness import close_problem, close_stats  # the suite's comparison, from the vkc checkout on PYTHONPATH

RTOL_L2 = {"fp32": 1e-4, "fp16": 1e-2}
ILL_CONDITIONED = RTOL_L2["fp16"]
CONFIGS = [("fp32", "default"), ("fp32", "host"), ("fp16", "default"), ("fp16", "host")]


def first_line(exc: BaseException) -> str:
    lines = f"{type(exc).__name__}: {exc}".strip().splitlines()
    return lines[0][:400] if lines else type(exc).__name__


def where(exc: BaseException) -> str:
    """file:line of the innermost frame in vkc's code (the place a crash happened)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if any(part in f.filename for part in ("/compiler/", "/runtime_min/", "/bundles/"))]
    f = frames[-1] if frames else traceback.extract_tb(exc.__traceback__)[-1]
    return f"{'/'.join(Path(f.filename).parts[-2:])}:{f.lineno} {f.name}"


def spread(a: list, b: list) -> float:
    """The largest rel L2 between two runs' float outputs."""
    pairs = [agreeing_nonfinite_as_zero(x, y) for x, y in zip(a, b) if x.dtype.kind == "f" and x.size]
    return max((float(np.linalg.norm(x.astype(np.float64) - y) / max(float(np.linalg.norm(y)), 1e-30))
                for x, y in pairs), default=0.0)


def element_spreads(a: list, b: list) -> list:
    """Per output, the largest |difference| of an element finite in both runs (0 for non-floats)."""
    spreads = []
    for x, y in zip(a, b):
        finite = np.isfinite(x) & np.isfinite(y) if x.dtype.kind == "f" else np.zeros(0, bool)
        spreads.append(float(np.abs(x[finite].astype(np.float64) - y[finite]).max()) if finite.any() else 0.0)
    return spreads


def weights_one_step_away(model: onnx.ModelProto, seed: int) -> dict:
    """Every float32 initializer of the main graph with each finite, nonzero element moved to
    the next float32 up or down at random (seeded; one that would leave the finite range stays),
    as OrtValues for SessionOptions.add_initializer: the weights as another float32 rounding
    would have left them. Scalars stay (an epsilon, a constant the graph compares with)."""
    rng = np.random.default_rng(seed)
    moved = {}
    for t in model.graph.initializer:
        if t.data_type != onnx.TensorProto.FLOAT:
            continue
        a = onnx.numpy_helper.to_array(t)
        if a.size < 2:
            continue
        with np.errstate(over="ignore"):  # the largest finite value stepped up: kept below
            step = np.nextafter(a, np.where(rng.integers(0, 2, a.shape) == 1, np.inf, -np.inf).astype(np.float32))
        keep = (a == 0) | ~np.isfinite(a) | ~np.isfinite(step)
        moved[t.name] = ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(np.where(keep, a, step)))
    return moved


def run_with_weights_one_step_away(onnx_path: Path, model: onnx.ModelProto, seed: int, feeds: list) -> list:
    """onnxruntime's outputs for each feed with weights_one_step_away in place of the weights,
    its graph optimizations off (compare with a run of the model as it is, optimizations off: with
    them on, onnxruntime takes a Conv's weights from the model, not from add_initializer)."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    stepped = weights_one_step_away(model, seed)
    for name, value in stepped.items():
        so.add_initializer(name, value)
    session = ort.InferenceSession(str(onnx_path), so, providers=["CPUExecutionProvider"])
    return [session.run(None, f) for f in feeds]


def agreeing_nonfinite_as_zero(got: np.ndarray, want: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """got and want with 0 in both where they agree on a non-finite element (NaN where
    onnxruntime has NaN, the same infinity where it has that infinity), so such an element counts
    as agreement and the rest are judged as usual (the suite's close_stats takes NaN against NaN
    as a miss, and any non-finite element as an infinite rel L2)."""
    both = (np.isnan(got) & np.isnan(want)) | (np.isinf(want) & (got == want))
    if not both.any():
        return got, want
    return np.where(both, 0, got).astype(got.dtype), np.where(both, 0, want).astype(want.dtype)


def compare(got: dict, ref: dict, names: list[str], precision: str, reference_spread: float = 0.0,
            element_spread: list | None = None) -> dict:
    worst, problems = None, []
    for name, want, moved in zip(names, ref, element_spread or [0.0] * len(ref)):
        if name not in got:
            problems.append(f"{name}: missing from the bundle's outputs")
            continue
        g = np.asarray(got[name])
        if g.shape != want.shape:
            problems.append(f"{name}: shape {list(g.shape)}, onnxruntime {list(want.shape)}")
            continue
        if want.dtype.kind != "f":
            if not np.array_equal(g, want):
                problems.append(f"{name}: {int((g != want).sum())} of {want.size} elements differ")
            continue
        g, want = agreeing_nonfinite_as_zero(g, want)
        if precision == "fp32" and reference_spread > RTOL_L2["fp32"]:
            st, problem = close_problem(name, g, want, rtol_l2=2 * reference_spread)
            if problem and st["rel_l2"] <= 2 * reference_spread:
                problem = None  # judged on rel L2 alone, against what onnxruntime itself moves by
        elif precision == "fp32":
            # An element may miss by what onnxruntime's own element moves by, twice (the atol).
            atol = max(close_stats(g, want)["atol"], 2 * moved)
            st, problem = close_problem(name, g, want, rtol_l2=RTOL_L2["fp32"], atol=atol)
        else:
            st, problem = close_problem(name, g, want, rtol_l2=RTOL_L2["fp16"], rtol=1e-2,
                                        atol=1e-3 * max(float(np.abs(want).max()), 1e-30) if want.size else 0)
            if problem and st["rel_l2"] <= RTOL_L2["fp16"]:
                problem = None  # fp16 is judged on rel L2 only
        if worst is None or st["rel_l2"] > worst["rel_l2"]:
            worst = {"output": name, "rel_l2": st["rel_l2"], "ratio": st["ratio"]}
        if problem:
            problems.append(problem)
    return {"worst": worst, "problems": problems}


def check(onnx_path: Path, recipe: dict, seed: int, configs=CONFIGS) -> dict:
    from compiler import compile_model
    from compiler.errors import CompileError
    from runtime_min import VkcRuntimeError, load

    model = onnx.load(str(onnx_path))
    specs = recipe["inputs"]
    batches = (1, 2) if recipe.get("dynamic_batch") else (1,)
    shapes = [{s["name"]: [b, *s["shape"][1:]] for s in specs} for b in batches]
    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    out_names = [o.name for o in sess.get_outputs()]
    rng = np.random.default_rng(seed)
    feeds = [{s["name"]: make_feed(s, b, rng) for s in specs} for b in batches]
    refs = [sess.run(None, f) for f in feeds]
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    plain = ort.InferenceSession(str(onnx_path), so, providers=["CPUExecutionProvider"])
    plains = [plain.run(None, f) for f in feeds]
    steps = run_with_weights_one_step_away(onnx_path, model, seed, feeds)
    optimization_spreads = [spread(p, r) for p, r in zip(plains, refs)]
    weight_spreads = [spread(s, p) for s, p in zip(steps, plains)]
    spreads = [max(a, b) for a, b in zip(optimization_spreads, weight_spreads)]
    moved = [[max(a, b) for a, b in zip(element_spreads(p, r), element_spreads(s, p))]
             for p, s, r in zip(plains, steps, refs)]
    result = {"configs": {}, "batches": list(batches), "nodes": len(model.graph.node),
              "reference_spread": max(spreads), "optimization_spread": max(optimization_spreads),
              "weight_step_spread": max(weight_spreads)}
    for precision, target in configs:
        key = f"{precision}/{target}"
        row = result["configs"][key] = {}
        start = time.perf_counter()
        try:
            kwargs = {"variants": shapes} if len(shapes) > 1 else {"input_shapes": shapes[0]}
            if target == "host":
                kwargs["target"] = "host"
            bundle = compile_model(model, precision=precision, **kwargs)
        except CompileError as exc:
            ops = getattr(exc, "ops", None)  # UnsupportedOpsError: name the op types on the line
            row.update(status="refused", reason=f"unsupported ops: {', '.join(sorted(ops))}" if ops
                       else first_line(exc))
            continue
        except Exception as exc:  # noqa: BLE001 - a crash is a finding, recorded with its place
            row.update(status="crash", stage="compile", reason=first_line(exc), where=where(exc))
            continue
        finally:
            row["compile_s"] = round(time.perf_counter() - start, 2)
        start = time.perf_counter()
        try:
            with load(bundle) as m:
                runs = [compare(m.run(f), r, out_names, precision, sp, mv)
                        for f, r, sp, mv in zip(feeds, refs, spreads, moved)]
        except VkcRuntimeError as exc:  # the runtime's own one-line refusal (a device limit)
            row.update(status="refused", stage="run", reason=first_line(exc))
            continue
        except Exception as exc:  # noqa: BLE001
            row.update(status="crash", stage="run", reason=first_line(exc), where=where(exc))
            continue
        finally:
            row["run_s"] = round(time.perf_counter() - start, 2)
        problems = [f"batch {b}: {p}" for b, r in zip(batches, runs) for p in r["problems"]]
        worst = max((r["worst"] for r in runs if r["worst"]), key=lambda w: w["rel_l2"], default=None)
        outside = "ill-conditioned" if result["reference_spread"] >= ILL_CONDITIONED else "wrong"
        row.update(status=outside if problems else "matched", worst=worst, problems=problems[:4])
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("recipe")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--configs", nargs="*", default=[f"{p}/{t}" for p, t in CONFIGS],
                    help="PRECISION/TARGET pairs (default: all four)")
    args = ap.parse_args()
    recipe = json.loads(Path(args.recipe).read_text())
    try:
        result = check(Path(args.model), recipe, args.seed, [tuple(c.split("/")) for c in args.configs])
    except Exception as exc:  # noqa: BLE001 - onnxruntime or loading failed before any config
        result = {"error": first_line(exc), "where": where(exc)}
    print("ZOO-RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
