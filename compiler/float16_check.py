"""The float16 check: before a float16 compile, how far float16 storage of the weights moves the
model's outputs, measured with onnx's reference evaluator in float32 arithmetic.

The float16 range pass (passes/float16_range.py) judges each node from what it knows statically.
What it cannot see is a model that amplifies small differences as it goes: a deep recurrence
whose every step enlarges a perturbation (a Hierarchical Reasoning Model with random weights
moves its output by 24 % when its embeddings move by 1e-6). float16 holds values to 1 part in
2048, so such a model's float16 result is unrelated to its float32 one, and no choice of nodes
to keep float32 helps. This check measures it: the model (as given, at the compiled shapes) runs
twice on one random input, once with its weights as they are and once with them rounded as
--precision fp16 stores them (--io fp16: its float inputs too). That is only part of float16's
rounding (activations are rounded too), so an output moved by more than float16's tolerance
(TOLERANCE, the bar float16 bundles are held to) means float16 cannot compute the model: the
compile is refused, naming the node where the difference first passes it.

It runs where the reference evaluator can, in a process of its own with a third of the memory
available and SECONDS: a model over MAX_WEIGHT_BYTES of weights, an input whose shape is not
pinned, an op the evaluator lacks, one that draws random numbers, or an evaluation past that
memory or time leave it unrun, which the manifest's `float16_check` says (`vkc inspect`). Ops
onnx.reference computes wrongly run as their declaration says (registry `evaluate`), as constant
folding runs them.
"""
from __future__ import annotations

import multiprocessing
import os

import numpy as np
import onnx
from onnx import numpy_helper

from .errors import CompileError
from .frontend import data_bytes, initializer_arrays, one_line, skeleton
from .ir import Node
from .passes.float16_range import F16_MAX, ROUNDING, constant_magnitude
from .registry import find_rule

TOLERANCE = 1e-2            # float16 bundles are held to rel L2 1e-2 of float32
SECONDS = 120               # the most the check may take
PRODUCTS = ("MatMul", "Gemm", "Conv")   # what --precision fp16-matmul rounds the weights of
RANDOM_OPS = ("RandomUniform", "RandomUniformLike", "RandomNormal", "RandomNormalLike", "Multinomial", "Bernoulli")


def _weight_limit() -> int:
    """The check holds a second copy of the weights and the evaluator's intermediates: models up
    to an eighth of the machine's memory in weights, and at least 1 GiB."""
    try:
        return max(1 << 30, os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 8)
    except (ValueError, OSError, AttributeError):   # no sysconf (Windows) or no such name
        return 1 << 30


MAX_WEIGHT_BYTES = _weight_limit()


def float16_check(proto: onnx.ModelProto, shapes: dict | None, precision, arrays: dict | None = None) -> dict:
    """{"moved": worst relative L2 change of an output, "output": its name}, or {"not_run": why};
    raises CompileError where float16 storage moves an output past TOLERANCE. arrays: the
    initializers' arrays by name (frontend.initializer_arrays), where the caller has them."""
    drawn = sorted({n.op_type for n in proto.graph.node if n.op_type in RANDOM_OPS})
    if drawn:
        return {"not_run": f"the model draws random numbers ({', '.join(drawn)}): two runs differ anyway"}
    weights = sum(data_bytes(t) for t in proto.graph.initializer)
    if weights > MAX_WEIGHT_BYTES:
        return {"not_run": f"the weights ({weights / 2**30:.1f} GiB) are past the check's limit of "
                           f"{MAX_WEIGHT_BYTES / 2**30:.1f} GiB (an eighth of this machine's memory)"}
    feeds = _feeds(proto, shapes or {})
    if isinstance(feeds, str):
        return {"not_run": feeds}
    verdict = _isolated(lambda: _measure(proto, feeds, precision, arrays))
    if "refused" in verdict:
        raise CompileError(verdict["refused"])
    return verdict


def _measure(proto: onnx.ModelProto, feeds: dict, precision, arrays: dict | None = None) -> dict:
    """The verdict: {"moved", "output"}, {"not_run"} or {"refused": the message}."""
    if precision.io_float16:
        half_feeds = {k: v.astype(np.float16).astype(np.float32) if v.dtype == np.float32 else v
                      for k, v in feeds.items()}
    else:
        half_feeds = dict(feeds)
    # The weights are fed as inputs: no copy of the model holds them, and the rounded run reads
    # its rounded arrays.
    weights = initializer_arrays(proto) if arrays is None else arrays
    proto = _weights_as_inputs(proto)
    rounded, rounded_weights = _rounded(proto, weights, precision)
    feeds, half_feeds = {**weights, **feeds}, {**rounded_weights, **half_feeds}
    try:
        want = _run(proto, feeds)
        got = _run(rounded, half_feeds)
    except Exception as exc:  # noqa: BLE001 - the evaluator raises many types for what it lacks
        return {"not_run": f"onnx's reference evaluator cannot run it ({one_line(exc)[:160]})"}
    moved, output = max(((_moved(got[k], want[k]), k) for k in want), default=(0.0, ""))
    if moved > TOLERANCE:
        return {"refused": _refusal(proto, rounded, feeds, half_feeds, output, moved, precision)}
    return {"moved": float(moved), "output": output}


def _isolated(measure) -> dict:
    """measure() in a forked process with at most a third of the memory available and SECONDS: the
    reference evaluator can take far more of either than the compile (a dilated convolution's
    index arrays reach gigabytes), which must never kill or stall the compiler. Where fork is
    missing (Windows, macOS's default), in this process."""
    if "fork" not in multiprocessing.get_all_start_methods():
        return measure()
    context = multiprocessing.get_context("fork")
    reader, writer = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(writer, measure), daemon=True)
    child.start()
    writer.close()
    try:
        if not reader.poll(SECONDS):
            return {"not_run": f"onnx's reference evaluator took over {SECONDS} s"}
        return reader.recv()
    except (EOFError, OSError):   # the child died: killed for memory
        return {"not_run": "onnx's reference evaluator ran out of memory"}
    finally:
        if child.is_alive():
            child.kill()
        child.join()
        reader.close()


def _child(writer, measure) -> None:
    try:
        import resource
        with open("/proc/self/status") as f:   # private data (heap and anonymous maps), as RLIMIT_DATA counts it
            data = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmData:"))
        with open("/proc/meminfo") as f:
            available = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
        resource.setrlimit(resource.RLIMIT_DATA, (data + available // 3, resource.getrlimit(resource.RLIMIT_DATA)[1]))
    except (ImportError, OSError, ValueError, StopIteration):
        pass   # no limit where the system does not say what it has
    try:
        writer.send(measure())
    except MemoryError:
        writer.send({"not_run": "onnx's reference evaluator ran out of memory"})
    writer.close()


def _feeds(proto: onnx.ModelProto, shapes: dict) -> dict | str:
    """One random input (floats standard normal, integers and booleans 0 or 1: valid token ids,
    positions and indices, and a mask of a few padded positions), or why there is none."""
    rng = np.random.default_rng(0)
    known = {t.name for t in proto.graph.initializer}
    feeds = {}
    for value in proto.graph.input:
        if value.name in known:
            continue
        tensor = value.type.tensor_type
        if not value.type.HasField("tensor_type"):
            return f"input '{value.name}' is not a tensor"
        dims = shapes.get(value.name) or [d.dim_value if d.HasField("dim_value") else None
                                           for d in tensor.shape.dim]
        if any(d is None for d in dims):
            return f"input '{value.name}' has a dimension no variant pins"
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)
        if dtype.kind == "f":
            feeds[value.name] = rng.standard_normal(dims).astype(dtype)
        elif dtype.kind in "iub":
            feeds[value.name] = rng.integers(0, 2, dims).astype(dtype)
        else:
            return f"input '{value.name}' is {dtype}"
    return feeds


def _weights_as_inputs(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A copy whose initializers are graph inputs of their type and shape, holding no data."""
    copy = skeleton(proto, limit=-1)
    listed = {i.name for i in copy.graph.input}
    copy.graph.input.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                            for t in copy.graph.initializer if t.name not in listed)
    del copy.graph.initializer[:]
    return copy


def _rounded(proto: onnx.ModelProto, weights: dict, precision) -> tuple[onnx.ModelProto, dict]:
    """(a copy of `proto` whose float32 Constant values are rounded to float16, and `weights`
    with the float32 ones rounded) where the compile stores them as float16."""
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in proto.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)

    def stored_float16(name: str) -> bool:
        nodes = [n for n in readers.get(name, []) if n.name not in precision.keep_float32]
        return bool(nodes) and (not precision.matmul_only or any(n.op_type in PRODUCTS for n in nodes))

    rounded = {name: _rounded_array(data) if data.dtype == np.float32 and stored_float16(name) else data
               for name, data in weights.items()}
    if not precision.matmul_only:
        for node in copy.graph.node:
            if node.op_type == "Constant" and node.name not in precision.keep_float32:
                for a in node.attribute:
                    if a.name == "value" and a.t.data_type == onnx.TensorProto.FLOAT:
                        data = numpy_helper.to_array(a.t)
                        a.t.CopyFrom(numpy_helper.from_array(_rounded_array(data), a.t.name))
    return copy, rounded


def _rounded_array(data: np.ndarray) -> np.ndarray:
    """float32 data rounded to float16, unless float16 range's rule 1 keeps its readers float32
    (values past float16's range, or rounded by over ROUNDING of the largest)."""
    magnitude, rounding = constant_magnitude(data)
    if magnitude.top > F16_MAX or rounding > ROUNDING:
        return data
    return data.astype(np.float16).astype(np.float32)


def _run(model: onnx.ModelProto, feeds: dict, intermediate: bool = False) -> dict:
    from onnx.reference import ReferenceEvaluator   # lazy: only float16 compiles need it
    evaluator = ReferenceEvaluator(model, new_ops=_declared_evaluations(model))
    with np.errstate(all="ignore"):   # an overflow to inf is the model's, compared as such
        if intermediate:
            return evaluator.run(None, feeds, intermediate=True)
        return dict(zip(evaluator.output_names, evaluator.run(None, feeds)))


def _declared_evaluations(model: onnx.ModelProto) -> list[type]:
    """The reference evaluator's ops for the model's ops whose declaration computes them
    (registry `evaluate`: where onnx.reference is wrong, as constant folding computes them)."""
    from onnx.reference.op_run import OpRun
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    ops = []
    for op_type, domain in sorted({(n.op_type, n.domain) for n in model.graph.node}):
        rule = find_rule(op_type, domain, opset)
        if rule is None or rule.evaluate is None:
            continue

        def run(self, *inputs, _evaluate=rule.evaluate, **_attributes):
            node = Node(self.onnx_node.op_type, self.onnx_node.name, [], [], attrs={
                a.name: onnx.helper.get_attribute_value(a) for a in self.onnx_node.attribute})
            return tuple(_evaluate(node, *inputs))
        ops.append(type(op_type, (OpRun,), {"op_domain": domain, "_run": run}))
    return ops


def _moved(got, want) -> float:
    """The relative L2 change of a float result (0 for others); inf where it gained or lost a NaN
    or an infinity."""
    got, want = np.asarray(got), np.asarray(want)
    if want.dtype.kind != "f" or got.shape != want.shape:
        return 0.0
    finite = np.isfinite(want)
    if not np.array_equal(finite, np.isfinite(got)):
        return float("inf")
    g, w = got[finite].astype(np.float64), want[finite].astype(np.float64)
    norm = float(np.linalg.norm(w))
    diff = float(np.linalg.norm(g - w))
    return diff / norm if norm else (0.0 if not diff else float("inf"))


def _refusal(proto, rounded, feeds, half_feeds, output: str, moved: float, precision) -> str:
    """The refusal, naming the first node whose result moves past TOLERANCE."""
    want = _run(proto, feeds, intermediate=True)
    got = _run(rounded, half_feeds, intermediate=True)
    nodes = proto.graph.node
    where = ""
    for i, node in enumerate(nodes):
        if any(_moved(got.get(o), want[o]) > TOLERANCE for o in node.output if o in want and o in got):
            before = max((_moved(got[v], want[v]) for v in node.input if v in want and v in got), default=0.0)
            where = (f"; the difference first passes it at {node.op_type} '{node.name or node.output[0]}' "
                     f"(node {i + 1:,} of {len(nodes):,}), from {before:.2g} at its inputs: the model "
                     "amplifies rounding as it goes")
            break
    if moved == float("inf"):
        how = "gains or loses NaN or infinite values (float32 arithmetic, onnx's reference evaluator on a random input)"
    else:
        how = (f"moves by {moved:.2g} (relative L2, float32 arithmetic, onnx's reference evaluator on a random "
               f"input), past float16's tolerance of {TOLERANCE:.0e}")
    return (f"float16 cannot compute this model: with its weights rounded to float16, as --precision "
            f"{'fp16-matmul' if precision.matmul_only else 'fp16'} stores them, its output '{output}' {how}"
            f"{where}. Compile with --precision fp32.")
