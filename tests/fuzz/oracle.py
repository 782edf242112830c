"""The differential oracle: compile a graph, run it on the Vulkan device (validation layer on,
outputs poisoned with NaN), compare with onnxruntime.

Verdicts: "ok"; "refused" (a CompileError: the compiler said no, in a sentence: not a bug);
"skip" (onnxruntime cannot run the graph: no reference); "bug" (a traceback from the compiler or
the runtime, a module spirv-val rejects, a validation-layer message, or an output outside
tolerance). A float32 compile of a
float32 graph must agree to rel L2 < 1e-4 and every element within 1e-4*max|ref| + 1e-3*|ref|
(tests/harness.py says why these bounds); a float16 one (a float16 graph, or --precision fp16)
with float32's reference to rel L2 < 1e-2 (a float16 graph's reference rounds each float16 result,
as the graph says: as_float32). NaN and Inf must sit where onnxruntime has them, with
the same signs. A float32 result outside tolerance that agrees with the graph computed in float64
is no bug: onnxruntime's own rounding is then what differs (a LayerNormalization of a constant
row: rounding noise times 1 / sqrt(epsilon)). Nor is one off the float64 result by at most
F32_ROUNDING times onnxruntime's float32 result is (F16_ROUNDING for --precision fp16: float16
rounds 2^13 times coarser): what float32's rounding moves that far is the graph's own
conditioning (a mean of values centered on their mean: rounding noise in any precision), not the
compiler's error; an output that cancels to 0 at the inputs' scale is compared at that scale.
"""
from __future__ import annotations

import hashlib
import traceback
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.harness import CLOSE_TOLERANCES, close_problem, rel_l2, run_bundle, spirv_val

from .generate import Case


@dataclass
class Verdict:
    kind: str            # ok | refused | skip | bug
    signature: str = ""  # what kind of bug: "mismatch", "crash:KeyError", ... (the reducer keeps it)
    detail: str = ""

    def __str__(self):
        return f"{self.kind} {self.signature}: {self.detail}".strip(" :")


def feeds_for(model: onnx.ModelProto, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for vi in model.graph.input:
        tt = vi.type.tensor_type
        dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type)
        out[vi.name] = np.asarray(rng.standard_normal([d.dim_value for d in tt.shape.dim]), dtype)
    return out


def as_float32(model: onnx.ModelProto) -> onnx.ModelProto:
    """A float16 graph computed in float32, each float16 result rounded to float16 as the graph
    says (a Cast to float16 and back after its node): its reference, as ORT's CPU provider lacks
    float16 kernels for many ops. A float32 graph as it is."""
    if not any(i.type.tensor_type.elem_type == TensorProto.FLOAT16 for i in model.graph.input):
        return model
    inferred = onnx.shape_inference.infer_shapes(model).graph
    halves = {vi.name for vi in [*inferred.value_info, *inferred.output]
              if vi.type.tensor_type.elem_type == TensorProto.FLOAT16}
    m = onnx.ModelProto()
    m.CopyFrom(model)

    def retype(tp):
        if tp.tensor_type.elem_type == TensorProto.FLOAT16:
            tp.tensor_type.elem_type = TensorProto.FLOAT

    for vi in [*m.graph.input, *m.graph.output, *m.graph.value_info]:
        retype(vi.type)
    for i, t in enumerate(m.graph.initializer):
        if t.data_type == TensorProto.FLOAT16:
            m.graph.initializer[i].CopyFrom(numpy_helper.from_array(
                numpy_helper.to_array(t).astype(np.float32), t.name))
    for node in m.graph.node:
        for a in node.attribute:
            if a.name in ("to", "value") and a.type == onnx.AttributeProto.INT and a.i == TensorProto.FLOAT16:
                a.i = TensorProto.FLOAT
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == TensorProto.FLOAT16:
                a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float32), a.t.name))
    nodes = []
    for original in m.graph.node:
        node = onnx.NodeProto()
        node.CopyFrom(original)
        nodes.append(node)
        for k, o in enumerate(node.output):
            if o in halves and node.op_type != "Constant":
                node.output[k] = f"{o}/computed"
                nodes += [helper.make_node("Cast", [f"{o}/computed"], [f"{o}/rounded"], to=TensorProto.FLOAT16),
                          helper.make_node("Cast", [f"{o}/rounded"], [o], to=TensorProto.FLOAT)]
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    return m


def reference(model: onnx.ModelProto, feeds: dict) -> dict[str, np.ndarray]:
    """onnxruntime's outputs with its graph optimizations off: they drop Cast round trips and
    reorder arithmetic, and the reference is what the ONNX graph says."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 4
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(as_float32(model).SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    got = sess.run(names, {k: v.astype(np.float32) if v.dtype == np.float16 else v for k, v in feeds.items()})
    return dict(zip(names, got))


def exact_reference(model: onnx.ModelProto, feeds: dict, want: dict) -> dict[str, np.ndarray] | None:
    """A float32 graph's outputs computed in float64: by onnxruntime (its double kernels, the
    global poolings and InstanceNormalization as the reductions they are), else by onnx's
    reference evaluator where its float32 outputs agree with onnxruntime's `want` to rel L2 1e-2
    (the same semantics: the two differ on some of Resize's modes); None where neither serves."""
    import onnxruntime as ort
    from onnx.reference import ReferenceEvaluator
    from tests.models.zoo import to_float64

    wide = {k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in feeds.items()}
    so = ort.SessionOptions()
    so.log_severity_level = 4
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        sess = ort.InferenceSession(_double_kernels(to_float64(model)).SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        return dict(zip(names, sess.run(names, wide)))
    except Exception:  # noqa: BLE001, S110 - onnxruntime raises its own types
        pass
    names = [o.name for o in model.graph.output]
    try:
        with np.errstate(all="ignore"):
            narrow = dict(zip(names, ReferenceEvaluator(model).run(names, feeds)))
            exact = dict(zip(names, ReferenceEvaluator(to_float64(model)).run(names, wide)))
    except Exception:  # noqa: BLE001 - so does the reference evaluator
        return None
    for n, w in want.items():
        a, b = np.asarray(narrow.get(n), np.float64), np.asarray(w, np.float64)
        ok = np.isfinite(a) & np.isfinite(b)
        if a.shape != b.shape or not np.array_equal(np.isfinite(a), np.isfinite(b)) or \
                (ok.any() and rel_l2(a[ok], b[ok]) > 1e-2):
            return None
    return exact


def _double_kernels(model: onnx.ModelProto) -> onnx.ModelProto:
    """The ops onnxruntime has no double kernel for as the reductions they are: GlobalAveragePool
    and GlobalMaxPool as ReduceMean and ReduceMax over the spatial axes, InstanceNormalization
    as (x - mean) / sqrt(mean((x - mean)^2) + epsilon) * scale + B, per channel."""
    ranks = {vi.name: len(vi.type.tensor_type.shape.dim)
             for vi in [*onnx.shape_inference.infer_shapes(model).graph.value_info, *model.graph.input]}
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    g, nodes = model.graph, []

    def const(name, array):
        g.initializer.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def reduce(op, x, axes, out):
        if opset >= 18:
            return helper.make_node(op, [x, const(out + "/axes", np.array(axes, np.int64))], [out], keepdims=1)
        return helper.make_node(op, [x], [out], axes=axes, keepdims=1)

    for n in g.node:
        if n.domain not in ("", "ai.onnx") or n.op_type not in (
                "GlobalAveragePool", "GlobalMaxPool", "InstanceNormalization") or n.input[0] not in ranks:
            nodes.append(n)
            continue
        x, y, rank = n.input[0], n.output[0], ranks[n.input[0]]
        axes = list(range(2, rank))
        if n.op_type != "InstanceNormalization":
            nodes.append(reduce({"GlobalAveragePool": "ReduceMean"}.get(n.op_type, "ReduceMax"), x, axes, y))
            continue
        eps = next((a.f for a in n.attribute if a.name == "epsilon"), 1e-5)
        per_channel = const(y + "/shape", np.array([-1] + [1] * (rank - 2), np.int64))
        nodes += [reduce("ReduceMean", x, axes, y + "/mean"),
                  helper.make_node("Sub", [x, y + "/mean"], [y + "/d"]),
                  helper.make_node("Mul", [y + "/d", y + "/d"], [y + "/d2"]),
                  reduce("ReduceMean", y + "/d2", axes, y + "/var"),
                  helper.make_node("Add", [y + "/var", const(y + "/eps", np.float64(np.float32(eps)))], [y + "/ve"]),
                  helper.make_node("Sqrt", [y + "/ve"], [y + "/std"]),
                  helper.make_node("Div", [y + "/d", y + "/std"], [y + "/n"]),
                  helper.make_node("Reshape", [n.input[1], per_channel], [y + "/scale"]),
                  helper.make_node("Reshape", [n.input[2], per_channel], [y + "/bias"]),
                  helper.make_node("Mul", [y + "/n", y + "/scale"], [y + "/scaled"]),
                  helper.make_node("Add", [y + "/scaled", y + "/bias"], [y])]
    del g.node[:]
    g.node.extend(nodes)
    return model


# How far from the float64 result a result may be, in units of onnxruntime's float32 distance
# from it: float16's unit roundoff over float32's (2^-11 / 2^-24), twice (a few roundings more);
# for float32, a few times (another order of the same float32 sums).
F16_ROUNDING = 2.0 ** 14
F32_ROUNDING = 4.0


def _explained(name: str, got, ref32, exact, case: Case, scale: float) -> bool:
    """Whether `got` is as close to the float64 result as the float32 reference's own rounding
    allows at the case's precision (see the module's docstring); `scale`: the inputs' largest
    |value| (_cancelled_to_zero)."""
    if compare(name, got, exact, case) is None:
        return True
    g, r, e = (np.asarray(a, np.float64) for a in (got, ref32, exact))
    if g.shape != e.shape or r.shape != e.shape or \
            not np.array_equal(np.isfinite(g), np.isfinite(r)) or not np.isfinite(e[np.isfinite(r)]).all():
        return False
    ok = np.isfinite(g)
    if _cancelled_to_zero(got, exact, case, scale):
        return True
    factor = F16_ROUNDING if case.precision == "fp16" else F32_ROUNDING
    return float(np.linalg.norm((g - e)[ok])) <= factor * float(np.linalg.norm((r - e)[ok]))


def _cancelled_to_zero(got, want, case: Case, scale: float) -> bool:
    """Whether `want` is 0 to the precision's roundoff at the inputs' scale (an output that cancels
    to 0, as a mean of values centered on their mean) and `got` as near it as 16 such units (the
    rounding noise of its terms), NaN and Inf where `want` has them."""
    g, w = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if g.shape != w.shape or not np.array_equal(np.isfinite(g), np.isfinite(w)):
        return False
    ok = np.isfinite(g)
    unit = 2.0 ** (-11 if case.precision == "fp16" or case.dtype == np.float16 else -24) * scale
    return bool(ok.any()) and np.abs(w[ok]).max() <= unit and np.abs(g[ok] - w[ok]).max() <= 16 * unit


def _scale(feeds: dict) -> float:
    """The largest finite |value| the graph's float inputs hold, at least 1 (its constants')."""
    tops = [float(np.abs(v[np.isfinite(v)]).max()) for v in feeds.values()
            if np.issubdtype(v.dtype, np.floating) and np.isfinite(v).any()]
    return max([1.0, *tops])


def tolerances(case: Case) -> tuple[float, tuple]:
    """(rel L2 limit, (rtol, atol fraction)) for the case's precision."""
    if case.precision == "fp16" or case.dtype == np.float16:
        return 1e-2, CLOSE_TOLERANCES[np.dtype(np.float16)]
    return 1e-4, CLOSE_TOLERANCES[np.dtype(np.float32)]


def compare(name: str, got: np.ndarray, want: np.ndarray, case: Case) -> str | None:
    """None when `got` agrees with onnxruntime's `want`, else a sentence saying how it does not."""
    got = np.asarray(got)
    if got.shape != want.shape:
        return f"{name}: shape {got.shape} != onnxruntime's {want.shape}"
    g, w = got.astype(np.float64), want.astype(np.float64)
    odd = ~np.isfinite(g) | ~np.isfinite(w)
    differ = odd & ~((np.isnan(g) & np.isnan(w)) | (g == w))
    if differ.any():
        at = tuple(int(i) for i in np.argwhere(differ)[0])
        return (f"{name}: {int(differ.sum())} non-finite element(s) differ, first at {at}: got {g[at]}, "
                f"want {w[at]}")
    if odd.all():
        return None
    l2, (rtol, atol_frac) = tolerances(case)
    ok = ~odd
    if l2 > 1e-4:  # float16: the relative L2 error only (a cancellation leaves single elements few bits)
        err = rel_l2(g[ok], w[ok])
        return None if err <= l2 else f"{name}: rel L2 {err:.3e} > {l2:.0e} (float16 against float32)"
    scale = float(np.abs(w[ok]).max())
    _, problem = close_problem(name, g[ok], w[ok], rtol_l2=l2, rtol=rtol, atol=atol_frac * max(scale, 1e-30))
    return problem


def reference_of(case: Case) -> tuple[dict, dict] | Verdict:
    """(feeds, onnxruntime's outputs) of a case, or the "skip" Verdict when onnxruntime fails."""
    feeds = feeds_for(case.model, case.seed)
    try:
        return feeds, reference(case.model, feeds)
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
        return Verdict("skip", "reference", str(exc).splitlines()[0][:200])


def check(case: Case, feeds_and_reference: tuple | None = None) -> Verdict:
    """The verdict on one case; `feeds_and_reference` as reference_of returns them (computed here
    when not given)."""
    from compiler import compile_model
    from compiler.errors import CompileError

    model = case.model
    given = feeds_and_reference or reference_of(case)
    if isinstance(given, Verdict):
        return given
    feeds, want = given
    try:
        bundle = compile_model(model, target=case.target, precision=case.precision)
    except CompileError as exc:
        return Verdict("refused", "", str(exc).splitlines()[0])
    except Exception as exc:  # noqa: BLE001 - any other exception is a compiler bug
        return Verdict("bug", f"compile:{type(exc).__name__}", _last_frames(exc))
    complaint = _spirv_complaint(bundle)
    if complaint:
        return Verdict("bug", "spirv-val", complaint)
    try:
        got, _ = run_bundle(bundle, feeds)
    except Exception as exc:  # noqa: BLE001 - the runtime or the validation layer
        return Verdict("bug", f"run:{type(exc).__name__}", _last_frames(exc))
    problems = [p for p in (compare(n, got.get(n), w, case) if n in got else f"{n}: missing"
                            for n, w in want.items()) if p]
    if problems and all(n in got and (compare(n, got[n], w, case) is None or
                                      _cancelled_to_zero(got[n], w, case, _scale(feeds)))
                        for n, w in want.items()):
        return Verdict("ok")
    if problems and case.dtype == np.float32:
        exact = exact_reference(model, feeds, want)
        if exact is not None and exact.keys() == want.keys() and all(
                n in got and _explained(n, got[n], want[n], w, case, _scale(feeds)) for n, w in exact.items()):
            return Verdict("ok")
    if problems:
        return Verdict("bug", f"mismatch:{_kind(problems[0])}", "; ".join(problems))
    return Verdict("ok")


def locate(case: Case) -> str:
    """Where a mismatch starts: the first node whose value the bundle computes outside tolerance
    (compiler/verify_layers.py), with the kernel and fusion that computed it."""
    from bundles import read_bundle
    from compiler import compile_model
    from compiler.verify_layers import compare_layers, first_bad, reference_values

    feeds = feeds_for(case.model, case.seed)
    bundle = compile_model(case.model, target=case.target, precision=case.precision, keep_intermediates=True)
    got, _ = run_bundle(bundle, feeds)
    want = reference_values(as_float32(case.model), {k: v.astype(np.float32) if v.dtype == np.float16 else v
                                                     for k, v in feeds.items()})
    layers = compare_layers(case.model, read_bundle(bundle).manifest, got, want, tolerances(case)[0])
    bad = first_bad(layers)
    if bad is None:
        return "no intermediate differs (the outputs' own check failed)"
    return (f"first node outside tolerance: {bad.op} '{bad.node}' -> {bad.tensor} ({bad.detail}); "
            f"dispatch {bad.dispatch} ({bad.kernel}) computes {', '.join(bad.fused)}")


_VALID_MODULES: set[str] = set()  # SPIR-V modules spirv-val passed (kernels recur across graphs)


def _spirv_complaint(bundle: bytes) -> str:
    """spirv-val's complaint about the first module of the bundle it rejects, or ""."""
    from bundles import read_bundle

    b = read_bundle(bundle)
    for module, code in zip(b.manifest["modules"], b.spirv):
        digest = hashlib.sha256(bytes(code)).hexdigest()
        if digest not in _VALID_MODULES:
            complaint = spirv_val(bytes(code))
            if complaint:
                return f"module {module['name']}: {complaint.splitlines()[0]}"
            _VALID_MODULES.add(digest)
    return ""


def _kind(problem: str) -> str:
    """How an output disagrees: its shape, where NaN and Inf are, or its values."""
    return "shape" if ": shape " in problem else "nonfinite" if "non-finite" in problem else \
        "missing" if problem.endswith(": missing") else "values"


def _last_frames(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)[-3:]
    where = " <- ".join(f"{f.filename.rsplit('/', 2)[-2]}/{f.filename.rsplit('/', 1)[-1]}:{f.lineno}"
                        for f in reversed(frames))
    return f"{str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__} [{where}]"
