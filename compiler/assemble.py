"""Kernels + memory plan -> manifest, SPIR-V modules and weights (written by compile.py: one bundle,
or several combined into variants)."""
from __future__ import annotations

import hashlib

import numpy as np

from bundles.dtypes import DTYPES, pack
from bundles.manifest import TEXEL_BYTES
from bundles.spirv import api_and_extensions, capability_features
from bundles.variants import Part

from .codegen import compile_glsl, module_name, render
from .errors import CompileError
from .memory import ALIGNMENT, MemoryPlan, align
from .schedule import place_barriers


class TensorTable:
    """Manifest tensors: one entry per Value a dispatch or the IO binds; views share offsets."""

    def __init__(self, plan: MemoryPlan):
        self.plan = plan
        self.entries: list[dict] = []
        self.ids: dict[int, int] = {}
        self.weight_offsets: dict[int, int] = {}
        self.weight_chunks: list[bytes] = []
        self.weights_bytes = 0

    def id_of(self, v) -> int:
        if id(v) in self.ids:
            return self.ids[id(v)]
        if np.dtype(v.dtype).name not in DTYPES:
            raise CompileError(f"tensor '{v.name}' is {np.dtype(v.dtype).name}, a dtype bundles cannot "
                               f"hold; they hold {', '.join(DTYPES)}.")
        root = v.root()
        if root.is_constant:   # a view of a weight (rows of it) binds from where it starts
            memory, offset = "weights", self._place_weight(root) + v.root_offset()
        else:
            memory, offset = self.plan.memory_of(v), self.plan.offset_of(v)
        self.entries.append({"name": v.name, "dtype": np.dtype(v.dtype).name,
                             "shape": [int(d) for d in v.shape], "memory": memory,
                             "offset": offset, "nbytes": int(v.nbytes)})
        self.ids[id(v)] = len(self.entries) - 1
        return self.ids[id(v)]

    def _place_weight(self, root) -> int:
        if id(root) not in self.weight_offsets:
            data = pack(root.data).tobytes()
            self.weight_offsets[id(root)] = self.weights_bytes
            padded = align(max(len(data), 4))
            self.weight_chunks.append(data + bytes(padded - len(data)))
            self.weights_bytes += padded
        return self.weight_offsets[id(root)]

    def weights(self) -> bytes:
        return b"".join(self.weight_chunks)


def assemble_parts(graph, kernels, plan: MemoryPlan, target, source_sha256: str, kept=()) -> Part:
    """The manifest, SPIR-V modules and weights of the bundle, not yet written (nor checked:
    write_bundle, or the combined bundle's write, checks them). `kept`: intermediates to copy out
    as extra outputs (compile_model's keep_intermediates), which the plan kept alive."""
    table = TensorTable(plan)
    held = {id(v) for pair in graph.state for v in pair}  # state leaves the API (compiler/state.py)
    inputs = [{"name": v.name, "tensor": table.id_of(v)} for v in graph.inputs if id(v) not in held]
    outputs = [{"name": v.name, "tensor": table.id_of(v)} for v in [*graph.outputs, *kept] if id(v) not in held]
    state = [{"name": i.name, "tensor": table.id_of(i), "output": o.name} for i, o in graph.state]

    modules, module_index, spirv_blobs = [], {}, []
    pipelines, pipeline_index = [], {}
    dispatches, texels = [], 0
    for k in kernels:
        spirv = compile_glsl(render(k), module_name(k))
        digest = hashlib.sha256(spirv).hexdigest()
        if digest not in module_index:  # identical modules are stored once
            module_index[digest] = len(modules)
            modules.append({"name": module_name(k), "bindings": len(k.bindings),
                            "local_size": list(k.local_size),
                            "shared_memory_bytes": k.shared_memory_bytes})
            if k.texel_buffers:
                modules[-1]["texel_buffers"] = [{"binding": b, "format": f}
                                                for b, f in sorted(k.texel_buffers.items())]
            spirv_blobs.append(spirv)
        spec = [{"id": i, "type": t, "value": float(v) if t == "float32" else int(v)}
                for i, (_, t, v) in enumerate(k.spec)]
        key = (module_index[digest], tuple((s["type"], s["value"]) for s in spec))
        if key not in pipeline_index:
            pipeline_index[key] = len(pipelines)
            pipelines.append({"name": module_name(k), "module": key[0], "specialization": spec})
        binding_ids = [table.id_of(v) for v in k.bindings]
        texels = max([texels] + [table.entries[binding_ids[b]]["nbytes"] // TEXEL_BYTES[f]
                                 for b, f in k.texel_buffers.items()])
        dispatches.append({"kernel": pipeline_index[key], "bindings": binding_ids,
                           "groups": list(k.groups), "barrier": False, "nodes": list(k.nodes),
                           "flops": int(k.flops),
                           "bytes": int(sum(table.entries[t]["nbytes"] for t in binding_ids))})
    scheduled = {"tensors": table.entries, "kernels": pipelines, "modules": modules, "dispatches": dispatches}
    for d, barrier in zip(dispatches, place_barriers(scheduled, spirv_blobs)):
        d["barrier"] = barrier

    # Vulkan 1.1 (SPIR-V 1.3), or what newer kernels (cooperative matrix: 1.2) need.
    vulkan_api, extensions = api_and_extensions(spirv_blobs)
    requirements = {
        "vulkan_api": vulkan_api, "extensions": extensions,
        # What the modules' SPIR-V capabilities need enabled (shaderInt64 for int64 arithmetic, ...)
        "features": capability_features(spirv_blobs),
        "max_shared_memory_bytes": max((m["shared_memory_bytes"] for m in modules), default=0),
        "max_workgroup_invocations": max((int(np.prod(m["local_size"])) for m in modules), default=1),
        "max_workgroup_size": [max((m["local_size"][i] for m in modules), default=1) for i in range(3)],
        "max_storage_buffer_range": max((e["nbytes"] for e in table.entries), default=0),
    }
    if texels:
        requirements["max_texel_buffer_elements"] = texels
    manifest = {
        "manifest_version": 1,
        "model": {"name": graph.name, "producer": graph.producer, "opset": graph.opset,
                  "source_sha256": source_sha256},
        "target": {"name": target.name},
        "requirements": requirements,
        "memory": {"alignment": ALIGNMENT, "arena_bytes": plan.arena_bytes,
                   "weights_bytes": table.weights_bytes,
                   "intermediates_sum_bytes": plan.intermediates_sum_bytes,
                   "lower_bound_bytes": plan.lower_bound_bytes},
        "tensors": table.entries, "inputs": inputs, "outputs": outputs,
        "modules": modules, "kernels": pipelines, "dispatches": dispatches,
    }
    if state:
        manifest["memory"]["state_bytes"] = plan.state_bytes
        manifest["state"] = state
    if kept:
        manifest["intermediates"] = _intermediates(kept, kernels, table)
    if graph.float32_nodes:   # --precision fp16: what it kept float32 by itself, and why
        manifest["float32_nodes"] = graph.float32_nodes
    if graph.float16_check:   # how far float16 weights move the outputs, or why that was not measured
        manifest["float16_check"] = graph.float16_check
    if graph.quantized_weights:   # --weights: what was quantized, and what stayed float and why
        manifest["quantized_weights"] = graph.quantized_weights
    return Part(manifest, spirv_blobs, table.weights())


def _intermediates(kept, kernels, table: TensorTable) -> list[dict]:
    """Each kept value: its tensor and the last dispatch writing its bytes, with that dispatch's
    kernel and the ONNX nodes it computes (which say what was fused into it)."""
    writer = {}
    for step, k in enumerate(kernels):
        for i in k.writes:
            writer[id(k.bindings[i].root())] = step
    return [{"name": v.name, "tensor": table.id_of(v), "dispatch": writer[id(v.root())],
             "kernel": module_name(kernels[writer[id(v.root())]]),
             "nodes": list(kernels[writer[id(v.root())]].nodes)} for v in kept]
