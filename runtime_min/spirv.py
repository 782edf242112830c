"""Just enough SPIR-V reflection to check a module against its manifest entry and the device before
Vulkan sees it. A mismatch the driver would reject, crash on, or the validation layer would report
(a binding the layout lacks, an unsupported capability, a workgroup too large) is refused here.
Function bodies are framed (every instruction's length checked) but not interpreted."""
from __future__ import annotations

import struct

import numpy as np

from bundles import BundleError

MAGIC = 0x07230203
GL_COMPUTE, LOCAL_SIZE, LOCAL_SIZE_ID, WORKGROUP_SIZE = 5, 17, 38, 25
SPEC_ID, BLOCK, BUFFER_BLOCK, BUILTIN, BINDING, DESCRIPTOR_SET = 1, 2, 3, 11, 33, 34
UNIFORM_CONSTANT, UNIFORM, WORKGROUP, PUSH_CONSTANT, STORAGE_BUFFER = 0, 2, 4, 9, 12

# Capability -> (name, what the device needs: a feature name, "subgroup:OPERATION", or None for
# nothing beyond a compute queue). A capability not listed is refused: the runtime cannot tell
# whether the device supports it, and enabling it blindly would be invalid usage.
CAPABILITIES = {
    0: ("Matrix", None), 1: ("Shader", None), 9: ("Float16", "shaderFloat16"), 10: ("Float64", "shaderFloat64"),
    11: ("Int64", "shaderInt64"), 12: ("Int64Atomics", "shaderBufferInt64Atomics"), 22: ("Int16", "shaderInt16"),
    30: ("StorageBufferArrayDynamicIndexing", "shaderStorageBufferArrayDynamicIndexing"),
    39: ("Int8", "shaderInt8"), 61: ("GroupNonUniform", "subgroup:basic"), 62: ("GroupNonUniformVote", "subgroup:vote"),
    63: ("GroupNonUniformArithmetic", "subgroup:arithmetic"), 64: ("GroupNonUniformBallot", "subgroup:ballot"),
    65: ("GroupNonUniformShuffle", "subgroup:shuffle"), 66: ("GroupNonUniformShuffleRelative", "subgroup:shuffle_relative"),
    67: ("GroupNonUniformClustered", "subgroup:clustered"), 68: ("GroupNonUniformQuad", "subgroup:quad"),
    4433: ("StorageBuffer16BitAccess", "storageBuffer16BitAccess"),
    4434: ("UniformAndStorageBuffer16BitAccess", "uniformAndStorageBuffer16BitAccess"),
    4441: ("VariablePointersStorageBuffer", "variablePointersStorageBuffer"), 4442: ("VariablePointers", "variablePointers"),
    4448: ("StorageBuffer8BitAccess", "storageBuffer8BitAccess"),
    4449: ("UniformAndStorageBuffer8BitAccess", "uniformAndStorageBuffer8BitAccess"),
    5345: ("VulkanMemoryModel", "vulkanMemoryModel"), 5346: ("VulkanMemoryModelDeviceScope", "vulkanMemoryModelDeviceScope"),
    5347: ("PhysicalStorageBufferAddresses", "bufferDeviceAddress"), 5357: ("CooperativeMatrixNV", "cooperativeMatrix"),
    6016: ("DotProductInputAll", "shaderIntegerDotProduct"), 6017: ("DotProductInput4x8Bit", "shaderIntegerDotProduct"),
    6018: ("DotProductInput4x8BitPacked", "shaderIntegerDotProduct"), 6019: ("DotProduct", "shaderIntegerDotProduct"),
    6022: ("CooperativeMatrixKHR", "cooperativeMatrix"),
}
# SPIR-V extension -> (Vulkan version that made it core or None, device extension that provides it).
EXTENSIONS = {
    "SPV_KHR_storage_buffer_storage_class": ((1, 1), "VK_KHR_storage_buffer_storage_class"),
    "SPV_KHR_16bit_storage": ((1, 1), "VK_KHR_16bit_storage"), "SPV_KHR_8bit_storage": ((1, 2), "VK_KHR_8bit_storage"),
    "SPV_KHR_variable_pointers": ((1, 1), "VK_KHR_variable_pointers"),
    "SPV_KHR_vulkan_memory_model": ((1, 2), "VK_KHR_vulkan_memory_model"),
    "SPV_KHR_physical_storage_buffer": ((1, 2), "VK_KHR_buffer_device_address"),
    "SPV_KHR_float_controls": ((1, 2), "VK_KHR_shader_float_controls"),
    "SPV_KHR_non_semantic_info": ((1, 3), "VK_KHR_shader_non_semantic_info"),
    "SPV_KHR_integer_dot_product": ((1, 3), "VK_KHR_shader_integer_dot_product"),
    "SPV_KHR_cooperative_matrix": (None, "VK_KHR_cooperative_matrix"),
    "SPV_NV_cooperative_matrix": (None, "VK_NV_cooperative_matrix"),
}
# Highest SPIR-V version each Vulkan version accepts.
SPIRV_FOR_API = {(1, 0): (1, 0), (1, 1): (1, 3), (1, 2): (1, 5), (1, 3): (1, 6)}
_INT_OPS = {128: lambda a, b: a + b, 130: lambda a, b: a - b, 132: lambda a, b: a * b,
            134: lambda a, b: a // b if b else None, 137: lambda a, b: a % b if b else None,
            196: lambda a, b: a << b if b < 32 else None, 194: lambda a, b: a >> b,
            197: lambda a, b: a | b, 198: lambda a, b: a ^ b, 199: lambda a, b: a & b}


def _fail(module: str, detail: str):
    raise BundleError("spirv", f"SPIR-V module {module}: {detail}")


class Reflection:
    """What one module declares: version, capabilities, extensions, entry point, resources, sizes."""

    def __init__(self, blob, name: str):
        self.name = name
        w = np.frombuffer(blob, dtype="<u4").tolist()
        if len(w) < 5 or w[0] != MAGIC:
            _fail(name, "does not start with the SPIR-V magic number")
        self.version = ((w[1] >> 16) & 0xFF, (w[1] >> 8) & 0xFF)
        self.capabilities, self.extensions, self.entry = set(), set(), None
        self.modes, self.deco, self.types, self.consts, self.spec_ops = {}, {}, {}, {}, {}
        self.variables = []
        i, body = 5, False
        while i < len(w):
            n, op = w[i] >> 16, w[i] & 0xFFFF
            if n == 0 or i + n > len(w):
                _fail(name, f"the instruction at word {i} claims {n} words, past the module's end ({len(w)} words)")
            a, i = w[i + 1:i + n], i + n
            body = body or op == 54  # OpFunction: declarations are over; only framing is checked after it
            if body:
                continue
            if op == 17 and a:
                self.capabilities.add(a[0])
            elif op == 10:
                self.extensions.add(_string(a))
            elif op == 15 and len(a) >= 3 and a[0] == GL_COMPUTE and _string(a[2:]) == "main":
                self.entry = a[1]
            elif op in (16, 331) and len(a) >= 5 and a[1] in (LOCAL_SIZE, LOCAL_SIZE_ID):
                self.modes[(a[0], a[1])] = a[2:5]
            elif op == 71 and len(a) >= 2:
                self.deco.setdefault(a[0], {})[a[1]] = a[2] if len(a) > 2 else True
            elif op == 20 and a:
                self.types[a[0]] = ("bool",)
            elif op in (21, 22) and len(a) >= 2:
                self.types[a[0]] = ("int" if op == 21 else "float", a[1])
            elif op in (23, 24) and len(a) >= 3:
                self.types[a[0]] = ("vec", a[1], a[2])
            elif op in (28, 29, 30, 32) and a:
                self.types[a[0]] = ({28: "array", 29: "rarray", 30: "struct", 32: "ptr"}[op], *a[1:])
            elif op in (43, 50) and len(a) >= 3:
                self.consts[a[1]] = (a[0], a[2])
            elif op in (41, 48, 42, 49) and len(a) >= 2:
                self.consts[a[1]] = (a[0], int(op in (41, 48)))
            elif op in (44, 51) and len(a) >= 2:
                self.consts[a[1]] = (a[0], tuple(a[2:]))
            elif op == 52 and len(a) >= 3:
                self.spec_ops[a[1]] = (a[2], a[3:])
            elif op == 59 and len(a) >= 3:
                self.variables.append((a[0], a[1], a[2]))
        if self.entry is None:
            _fail(name, "has no GLCompute entry point named 'main'")

    def spec_sizes(self) -> dict:
        """Byte size of every specialization constant, by SpecId (a bool counts as a VkBool32)."""
        out = {}
        for cid, d in self.deco.items():
            if SPEC_ID in d and cid in self.consts:
                t = self.types.get(self.consts[cid][0], ("?",))
                out[d[SPEC_ID]] = 4 if t[0] == "bool" else t[1] // 8 if t[0] in ("int", "float") else 0
        return out

    def value(self, cid: int, spec: dict, depth: int = 0):
        """The integer a constant takes with the specialization `spec` ({SpecId: uint32 word}); None if unknown."""
        if depth > 32:
            return None
        if cid in self.spec_ops:
            opcode, args = self.spec_ops[cid]
            vals = [self.value(x, spec, depth + 1) for x in args[:2]]
            fn = _INT_OPS.get(opcode)
            if fn is None or len(vals) != 2 or None in vals:
                return None
            result = fn(*vals)
            return None if result is None else result & 0xFFFFFFFF
        if cid not in self.consts:
            return None
        value = self.consts[cid][1]
        sid = self.deco.get(cid, {}).get(SPEC_ID)
        if sid is not None and sid in spec:
            value = spec[sid]
        return value if isinstance(value, int) else None

    def local_size(self, spec: dict):
        for cid, d in self.deco.items():  # a WorkgroupSize built-in overrides the execution mode
            if d.get(BUILTIN) == WORKGROUP_SIZE and cid in self.consts and isinstance(self.consts[cid][1], tuple):
                return tuple(self.value(x, spec) for x in self.consts[cid][1][:3])
        if (self.entry, LOCAL_SIZE) in self.modes:
            return tuple(self.modes[(self.entry, LOCAL_SIZE)])
        if (self.entry, LOCAL_SIZE_ID) in self.modes:
            return tuple(self.value(x, spec) for x in self.modes[(self.entry, LOCAL_SIZE_ID)])
        return (None, None, None)

    def size_of(self, tid: int, spec: dict, depth: int = 0):
        t = self.types.get(tid, ("?",))
        if depth > 16 or t[0] in ("?", "rarray", "ptr"):
            return None
        if t[0] in ("int", "float"):
            return t[1] // 8
        if t[0] == "bool":
            return 4
        if t[0] == "vec":
            inner = self.size_of(t[1], spec, depth + 1)
            return None if inner is None else inner * t[2]
        parts = [self.size_of(x, spec, depth + 1) for x in t[1:2 if t[0] == "array" else None]]
        if None in parts:
            return None
        return parts[0] * (self.value(t[2], spec) or 0) if t[0] == "array" else sum(parts)

    def shared_bytes(self, spec: dict):
        total = 0
        for ptr, _, storage in self.variables:
            if storage == WORKGROUP:
                size = self.size_of(self.types.get(ptr, ("?", 0, 0))[2] if ptr in self.types else -1, spec)
                if size is None:
                    return None
                total += size
        return total

    def resources(self) -> list:
        """(variable id, set, binding, kind) of every resource variable; kind 'storage' or what it is."""
        out = []
        for ptr, vid, storage in self.variables:
            if storage not in (UNIFORM_CONSTANT, UNIFORM, PUSH_CONSTANT, STORAGE_BUFFER):
                continue
            pointee = self.types.get(ptr, ("ptr", 0, -1))[2] if len(self.types.get(ptr, ())) > 2 else -1
            kind = {UNIFORM_CONSTANT: "an image, sampler or other opaque resource", PUSH_CONSTANT: "push constants"}.get(
                storage, "storage")
            if storage == UNIFORM and BUFFER_BLOCK not in self.deco.get(pointee, {}):
                kind = "a uniform buffer"
            if kind == "storage" and self.types.get(pointee, ("?",))[0] in ("array", "rarray"):
                kind = "an array of buffers"
            d = self.deco.get(vid, {})
            out.append((vid, d.get(DESCRIPTOR_SET), d.get(BINDING), kind))
        return out


def _string(words) -> str:
    raw = np.array(words, dtype="<u4").tobytes()
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


def reflect_bundle(manifest: dict, spirv: list) -> tuple[list, list]:
    """(a Reflection per module, (kernel name, workgroup size, shared bytes) per kernel); BundleError when
    a module disagrees with the manifest: bindings outside its layout, specialization constants of the
    wrong size, a workgroup or shared memory size that cannot be worked out."""
    refls, shapes, problems = [], [], []
    for i, (module, words) in enumerate(zip(manifest["modules"], spirv)):
        refls.append(Reflection(words, f"{i} ({module['name']})"))
        for vid, dset, binding, kind in refls[-1].resources():
            if kind != "storage":
                problems.append(f"module {refls[-1].name}: variable %{vid} is {kind}; bundles bind storage buffers only")
            elif dset != 0 or binding is None or not 0 <= binding < module["bindings"]:
                problems.append(f"module {refls[-1].name}: variable %{vid} is at set {dset}, binding {binding}, but "
                                f"the manifest gives the module {module['bindings']} bindings in set 0")
    for k, kernel in enumerate(manifest["kernels"]):
        refl, name = refls[kernel["module"]], f"{k} ({kernel['name']})"
        sizes = refl.spec_sizes()
        for e in kernel.get("specialization", []):
            if e["id"] in sizes and sizes[e["id"]] != 4:
                problems.append(f"kernel {name}: specialization constant {e['id']} is {sizes[e['id']]} bytes in the "
                                "shader but 4 in the bundle")
        spec = spec_words(kernel)
        size, shared = refl.local_size(spec), refl.shared_bytes(spec)
        if None in size or 0 in size:
            problems.append(f"kernel {name}: its workgroup size cannot be worked out ({size})")
        if shared is None:
            problems.append(f"kernel {name}: the size of its shared memory cannot be worked out")
        shapes.append((name, size, shared))
    if problems:
        raise BundleError("spirv", "; ".join(problems[:10]) + (f" (and {len(problems) - 10} more)"
                                                                 if len(problems) > 10 else ""))
    return refls, shapes


def spec_words(kernel: dict) -> dict:
    """{SpecId: the 32-bit word the bundle gives it}, as the driver will see it."""
    entries = kernel.get("specialization", [])
    fmt = {"int32": "<i", "uint32": "<I", "float32": "<f"}
    return {e["id"]: struct.unpack("<I", struct.pack(fmt[e["type"]], e["value"]))[0] for e in entries}
