"""The oracle of `compile_model(weights=...)`: the same quantization written into the ONNX model as
com.microsoft MatMulNBits and GatherBlockQuantized nodes, for onnxruntime to run. The nodes
quantized are those the bundle's manifest lists (`quantized_weights`), each with the numbers
compiler/passes/quantize_weights.py computes, so onnxruntime checks the kernels and the packing,
not a second quantizer."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from compiler.passes.quantize_weights import WeightQuantization, pack_weight

MS = "com.microsoft"


def quantized_onnx(model: onnx.ModelProto, manifest: dict) -> onnx.ModelProto:
    """`model` with every node the manifest's quantized_weights lists replaced by its quantized
    form (a Gemm's C added after it); B may be an initializer or a Transpose of one (a tied head)."""
    info = manifest.get("quantized_weights") or manifest["variants"][0]["quantized_weights"]
    q = WeightQuantization.parse(info["scheme"], info["block_size"])
    names = {e["node"] for e in info["quantized"]}
    model = onnx.ModelProto.FromString(model.SerializeToString())
    g = model.graph
    if missing := names - {n.name for n in g.node}:   # vkc named an unnamed node: the oracle would stay float
        raise ValueError(f"test bug: quantized nodes {sorted(missing)} have no name in the model; name its nodes")
    inits = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    transposed = {n.output[0]: n.input[0] for n in g.node if n.op_type == "Transpose" and n.input[0] in inits}
    nodes, extra = [], []

    def weight(name):
        return inits[name] if name in inits else np.ascontiguousarray(inits[transposed[name]].T)

    for node in g.node:
        if node.name not in names:
            nodes.append(node)
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type == "Gather":
            table = inits[node.input[0]]
            p = pack_weight(node.name, np.ascontiguousarray(table.T), q)
            ins = _add(extra, node.name, [p.data.data, p.scales.data.reshape(table.shape[0], -1)],
                       p.zero_points, table.shape[0])
            nodes.append(helper.make_node("GatherBlockQuantized", [ins[0], node.input[1], *ins[1:]],
                                          list(node.output), name=node.name, domain=MS, bits=q.bits,
                                          block_size=q.block_size, gather_axis=0, quantize_axis=1))
            continue
        w = weight(node.input[1])
        if node.op_type == "Gemm":
            w = w.T if attrs.get("transB", 0) else w
            w = np.ascontiguousarray(w * np.float32(attrs.get("alpha", 1.0))).astype(w.dtype)
        k, n = w.shape
        p = pack_weight(node.name, w, q)
        blocks = -(-k // q.block_size)
        ins = _add(extra, node.name, [p.data.data.reshape(n, blocks, -1), p.scales.data.reshape(n, blocks)],
                   p.zero_points, n)
        product = node.output[0] if node.op_type == "MatMul" or len(node.input) < 3 or not node.input[2] \
            else f"{node.output[0]}/product"
        nodes.append(helper.make_node("MatMulNBits", [node.input[0], *ins], [product], name=node.name,
                                      domain=MS, K=k, N=n, bits=q.bits, block_size=q.block_size))
        if product != node.output[0]:
            c = node.input[2]
            beta = attrs.get("beta", 1.0)
            if beta != 1.0:
                extra.append(numpy_helper.from_array((inits[c] * np.float32(beta)).astype(inits[c].dtype),
                                                     f"{node.name}/beta_c"))
                c = f"{node.name}/beta_c"
            nodes.append(helper.make_node("Add", [product, c], list(node.output), name=f"{node.name}/bias"))
    del g.node[:]
    g.node.extend(nodes)
    g.initializer.extend(extra)
    if not any(o.domain == MS for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(MS, 1))
    return model


def _add(extra: list, name: str, arrays: list, zero_points, rows: int) -> list[str]:
    """Initializers for the packed weight, its scales and zero points ([rows, bytes]); their names."""
    out = []
    for suffix, a in zip(("q", "scales"), arrays):
        extra.append(numpy_helper.from_array(np.ascontiguousarray(a), f"{name}/{suffix}"))
        out.append(f"{name}/{suffix}")
    if zero_points is not None:
        extra.append(numpy_helper.from_array(zero_points.data.reshape(rows, -1), f"{name}/zero_points"))
        out.append(f"{name}/zero_points")
    return out


def int8_cache_onnx(model: onnx.ModelProto) -> onnx.ModelProto:
    """The oracle of `compile_model(kv_cache="int8")`: every cache output (`present*`: a
    TensorScatter's, or optimum's Concat) rounded as the int8 cache holds it, per row of the last
    axis, q = Round(x * 127 / max|x|) clipped to +-127, read back as q * max|x| / 127; the
    attention reads the rounded cache, as vkc's does. Fed back, the rows round to themselves."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    g = model.graph
    caches = {o.name for o in g.output if o.name.startswith("present")}
    consts = [numpy_helper.from_array(np.array(x, np.float32), name)
              for name, x in (("int8/127", 127.0), ("int8/-127", -127.0), ("int8/0", 0.0))]
    consts.append(numpy_helper.from_array(np.array([-1], np.int64), "int8/last_axis"))
    nodes = []
    for node in g.node:
        nodes.append(node)
        for i, out in enumerate(node.output):
            if out not in caches:
                continue
            x = node.output[i] = f"{out}/exact"
            p = f"{out}/int8"
            nodes += [helper.make_node("Abs", [x], [f"{p}/abs"]),
                      helper.make_node("ReduceMax", [f"{p}/abs", "int8/last_axis"], [f"{p}/max"], keepdims=1),
                      helper.make_node("Greater", [f"{p}/max", "int8/0"], [f"{p}/some"]),
                      helper.make_node("Div", ["int8/127", f"{p}/max"], [f"{p}/inv_any"]),
                      helper.make_node("Where", [f"{p}/some", f"{p}/inv_any", "int8/0"], [f"{p}/inv"]),
                      helper.make_node("Mul", [x, f"{p}/inv"], [f"{p}/scaled"]),
                      helper.make_node("Round", [f"{p}/scaled"], [f"{p}/round"]),
                      helper.make_node("Clip", [f"{p}/round", "int8/-127", "int8/127"], [f"{p}/q"]),
                      helper.make_node("Div", [f"{p}/max", "int8/127"], [f"{p}/scale"]),
                      helper.make_node("Mul", [f"{p}/q", f"{p}/scale"], [out])]
    del g.node[:]
    g.node.extend(nodes)
    g.initializer.extend(consts)
    return model
