"""`vkc verify --layers`: every intermediate the bundle computes against onnxruntime's value of the
same tensor, in the ONNX graph's order, and the first node outside tolerance (what Polygraphy's
`--mark all` does for TensorRT).

The bundle is compiled with keep_intermediates (compile_model): the fusions are the real ones,
every value a dispatch writes keeps its own arena bytes and comes back from one run, and the
manifest's "intermediates" says which dispatch wrote it. A tensor of the ONNX graph that no
dispatch stores was fused away inside a kernel (or folded at compile time): it is reported as
such, with the kernel that computes its node, and not compared. onnxruntime exposes every tensor
as an extra graph output, with its graph optimizations off so that each is the graph's own.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx

FLOAT16_TOLERANCE = 1e-2  # a value the bundle stores as float16, against float32's reference


@dataclass
class Layer:
    index: int              # the ONNX node's position in the graph
    node: str               # its name (vkc's: "<op>_<index>" for a node without one)
    op: str
    tensor: str             # one of its outputs
    # ok | differs | fused (computed inside a kernel, never stored) | folded (no kernel computes
    # it: folded at compile time, or removed as a no-op) | not compared
    status: str
    error: float | None = None
    detail: str = ""
    dispatch: int | None = None        # the dispatch that computes the node
    kernel: str = ""
    fused: list[str] = field(default_factory=list)   # the ONNX nodes that dispatch computes


def node_name(node: onnx.NodeProto, index: int) -> str:
    """The name vkc gives an ONNX node (compiler/frontend.py), which dispatches list."""
    return node.name or f"{node.op_type}_{index}"


def with_intermediates(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with every node output a graph output too."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    try:
        inferred = onnx.shape_inference.infer_shapes(m).graph
        types = {vi.name: vi for vi in inferred.value_info}
    except Exception:  # noqa: BLE001 - onnxruntime types what onnx cannot
        types = {}
    have = {o.name for o in m.graph.output}
    for n in m.graph.node:
        for o in n.output:
            if o and o not in have:
                have.add(o)
                m.graph.output.append(types.get(o) or onnx.helper.make_empty_tensor_value_info(o))
    return m


def reference_values(model: onnx.ModelProto, feeds: dict) -> dict[str, np.ndarray]:
    """onnxruntime's value of every tensor the graph computes."""
    import onnxruntime as ort  # lazy: optional (the test extra), only verify needs it

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(with_intermediates(model).SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))


def _difference(got: np.ndarray, want: np.ndarray, tolerance: float) -> tuple[float, str]:
    """(relative L2 error, "" or why it is outside tolerance) of a bundle value."""
    if got.dtype.kind not in "fc" or want.dtype.kind not in "fc":
        same = np.array_equal(got, want)
        return (0.0 if same else 1.0), "" if same else f"{int(np.sum(got != want))} elements differ"
    g, w = got.astype(np.float64), want.astype(np.float64)
    odd = ~np.isfinite(g) | ~np.isfinite(w)
    wrong = odd & ~((np.isnan(g) & np.isnan(w)) | (g == w))
    if wrong.any():
        at = tuple(int(i) for i in np.argwhere(wrong)[0])
        return float("inf"), f"NaN/Inf where onnxruntime differs ({int(wrong.sum())}, first at {at}: {g[at]} vs {w[at]})"
    g, w = g[~odd], w[~odd]
    err = float(np.linalg.norm(g - w) / max(float(np.linalg.norm(w)), 1e-30)) if g.size else 0.0
    limit = max(tolerance, FLOAT16_TOLERANCE) if got.dtype == np.float16 else tolerance
    return err, "" if err <= limit else f"rel L2 {err:.2e} > {limit:.0e}"


def compare_layers(model: onnx.ModelProto, manifest: dict, got: dict, want: dict,
                   tolerance: float) -> list[Layer]:
    """One Layer per output of every ONNX node, in graph order."""
    kept = {e["name"]: e for e in manifest.get("intermediates", [])}
    outputs = {o["name"] for o in manifest["outputs"]}
    kernel_names = [k["name"] for k in manifest["kernels"]]
    computing = {}  # ONNX node name -> the last dispatch computing it
    for i, d in enumerate(manifest["dispatches"]):
        for n in d.get("nodes", []):
            computing[n] = i
    layers = []
    for index, n in enumerate(model.graph.node):
        name = node_name(n, index)
        step = computing.get(name)
        node_where = {}
        if step is not None:
            d = manifest["dispatches"][step]
            node_where = dict(dispatch=step, kernel=kernel_names[d["kernel"]], fused=list(d["nodes"]))
        for t in (o for o in n.output if o):
            entry = kept.get(t)  # the dispatch that stored it (a Concat's, for a slice written in place)
            where = node_where if entry is None else dict(dispatch=entry["dispatch"], kernel=entry["kernel"],
                                                          fused=entry["nodes"])
            if t not in outputs or t not in got:
                status = "fused" if step is not None else "folded"
                layers.append(Layer(index, name, n.op_type, t, status, **where))
                continue
            if t not in want or np.shape(got[t]) != np.shape(want[t]):
                layers.append(Layer(index, name, n.op_type, t, "not compared",
                                    detail="onnxruntime gives another shape" if t in want else
                                    "onnxruntime does not give it", **where))
                continue
            err, why = _difference(np.asarray(got[t]), np.asarray(want[t]), tolerance)
            layers.append(Layer(index, name, n.op_type, t, "differs" if why else "ok", err, why, **where))
    return layers


def first_bad(layers: list[Layer]) -> Layer | None:
    return next((layer for layer in layers if layer.status == "differs"), None)


def statistics(name: str, a: np.ndarray | None) -> str:
    """One line on a tensor: dtype, shape, range, mean, std, NaN and Inf counts."""
    if a is None:
        return f"{name}: (no value)"
    a = np.asarray(a)
    text = f"{name}: {a.dtype}{list(a.shape)}"
    if a.size and a.dtype.kind in "fiub":
        f = a.astype(np.float64)
        fin = f[np.isfinite(f)]
        if fin.size:
            text += f" min {fin.min():.4g} max {fin.max():.4g} mean {fin.mean():.4g} std {fin.std():.4g}"
        bad = int(np.isnan(f).sum()), int(np.isinf(f).sum())
        if any(bad):
            text += f" NaN {bad[0]} Inf {bad[1]}"
    return text


def report(model: onnx.ModelProto, layers: list[Layer], want: dict, feeds: dict) -> list[str]:
    """The lines `vkc verify --layers` prints: every tensor up to the first bad one, a count of
    the rest, and for the first bad node its inputs' statistics and the kernel that computed it."""
    bad = first_bad(layers)
    shown = layers if bad is None else layers[:layers.index(bad) + 1]
    lines = []
    for layer in shown:
        err = f"{layer.error:.2e}" if layer.error is not None else "-"
        where = f"dispatch {layer.dispatch} {layer.kernel}" if layer.dispatch is not None else "-"
        lines.append(f"{layer.status:12} {err:>9}  {layer.op} '{layer.node}' -> {layer.tensor}   [{where}]"
                     + (f"  {layer.detail}" if layer.detail else ""))
    counts = {s: sum(1 for x in layers if x.status == s) for s in
              ("ok", "differs", "fused", "folded", "not compared")}
    lines.append(f"{len(layers)} tensors: {counts['ok']} agree, {counts['differs']} differ, "
                 f"{counts['fused']} fused inside kernels (not stored, not compared), "
                 f"{counts['folded']} folded or removed at compile time, {counts['not compared']} not compared"
                 + (f"; {len(layers) - len(shown)} after the first difference not shown" if bad else ""))
    if bad is None:
        return lines
    node = model.graph.node[bad.index]
    consts = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    lines.append(f"first node outside tolerance: {bad.op} '{bad.node}' -> {bad.tensor}: {bad.detail}")
    for i in node.input:
        if i:
            lines.append("  input " + statistics(i, want.get(i, feeds.get(i, consts.get(i)))))
    lines.append("  output (onnxruntime) " + statistics(bad.tensor, want.get(bad.tensor)))
    if bad.dispatch is not None:
        lines.append(f"  computed by dispatch {bad.dispatch} ({bad.kernel}), which fuses: {', '.join(bad.fused)}")
    return lines
