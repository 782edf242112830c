"""SPIR-V, as far as a bundle reader needs it (FORMAT.md, "SPIR-V sections" and "Module interface").

Two levels, so that a reader never hands the driver a module that disagrees with its manifest:

- `check_structure`: the container-level rules (also in `vkb_reader.h`): the 5-word header (magic,
  version 1.0 ..= 1.6, id bound, schema 0) and an instruction stream whose word counts are non-zero
  and add up exactly to the section's length.
- `check_interface`: the manifest-level rules: an entry point `main` of the GLCompute model; every
  descriptor is a storage buffer in set 0 below the module's `bindings`; no push constants; the
  local size (literal, or resolved through each kernel's specialization) equals `local_size`; the
  shared memory it declares fits `shared_memory_bytes`; every specialized constant is 32 bits; the
  SPIR-V version is one that `requirements.vulkan_api` guarantees.
- `Module.written_bindings`: the bindings a module may write (storage buffers not decorated
  NonWritable), which the barrier rule (`hazards.py`) takes from the SPIR-V, never from the manifest.

This is not `spirv-val`: a structurally sound module with a consistent interface can still hold
wrong code. The reader's promise is that every index, range and interface the runtime hands Vulkan
is consistent; a bundle's code is trusted as much as its producer.
"""
from __future__ import annotations

import struct
import sys
from array import array

from .manifest import BundleError, texel_formats, used_modules, variant_views

MAGIC = 0x07230203
MAX_ID_BOUND = 0x3FFFFF              # SPIR-V "universal limits": ids are < 4,194,303
MAX_MINOR = 6                        # SPIR-V 1.0 ..= 1.6
HEADER_WORDS = 5

# The newest SPIR-V version each Vulkan version must accept (Vulkan spec, "Versions").
SPIRV_FOR_VULKAN = {(1, 0): (1, 0), (1, 1): (1, 3), (1, 2): (1, 5), (1, 3): (1, 6)}

# Opcodes, enumerants (SPIR-V spec, section 3).
OP_EXTENSION, OP_CAPABILITY, OP_ENTRY_POINT, OP_EXECUTION_MODE, OP_EXECUTION_MODE_ID = 10, 17, 15, 16, 331
OP_TYPE_BOOL, OP_TYPE_INT, OP_TYPE_FLOAT, OP_TYPE_VECTOR, OP_TYPE_MATRIX = 20, 21, 22, 23, 24
OP_TYPE_ARRAY, OP_TYPE_RUNTIME_ARRAY, OP_TYPE_STRUCT, OP_TYPE_POINTER = 28, 29, 30, 32
OP_TYPE_IMAGE, OP_TYPE_SAMPLED_IMAGE, DIM_BUFFER = 25, 27, 5
OP_CONSTANT, OP_CONSTANT_COMPOSITE, OP_SPEC_CONSTANT_TRUE, OP_SPEC_CONSTANT_FALSE = 43, 44, 48, 49
OP_SPEC_CONSTANT, OP_SPEC_CONSTANT_COMPOSITE, OP_SPEC_CONSTANT_OP, OP_VARIABLE, OP_DECORATE = 50, 51, 52, 59, 71
OP_MEMBER_DECORATE = 72
OP_TYPE_COOPERATIVE_MATRIX, SCOPE_WORKGROUP = 4456, 2
GL_COMPUTE = 5
MODE_LOCAL_SIZE, MODE_LOCAL_SIZE_ID = 17, 38
DEC_SPEC_ID, DEC_BLOCK, DEC_BUFFER_BLOCK, DEC_BUILTIN, DEC_BINDING, DEC_SET = 1, 2, 3, 11, 33, 34
DEC_NON_WRITABLE = 24
BUILTIN_WORKGROUP_SIZE = 25
SC_UNIFORM_CONSTANT, SC_UNIFORM, SC_WORKGROUP, SC_PUSH_CONSTANT, SC_ATOMIC_COUNTER = 0, 2, 4, 9, 10
SC_IMAGE, SC_STORAGE_BUFFER = 11, 12
DESCRIPTOR_CLASSES = {SC_UNIFORM_CONSTANT: "UniformConstant (an image or sampler)", SC_UNIFORM: "Uniform",
                      SC_PUSH_CONSTANT: "PushConstant", SC_ATOMIC_COUNTER: "AtomicCounter",
                      SC_IMAGE: "Image", SC_STORAGE_BUFFER: "StorageBuffer"}

# Capabilities a compute kernel may declare, and the device feature each needs (beyond Vulkan 1.0
# core `Shader`). Names are VkPhysicalDevice*Features fields; reported by `device_requirements`.
CM2 = "VkPhysicalDeviceCooperativeMatrix2FeaturesNV."
CAPABILITIES = {
    1: ("Shader", None), 9: ("Float16", "VkPhysicalDeviceVulkan12Features.shaderFloat16"),
    10: ("Float64", "VkPhysicalDeviceFeatures.shaderFloat64"),
    11: ("Int64", "VkPhysicalDeviceFeatures.shaderInt64"),
    12: ("Int64Atomics", "VkPhysicalDeviceVulkan12Features.shaderBufferInt64Atomics"),
    22: ("Int16", "VkPhysicalDeviceFeatures.shaderInt16"),
    46: ("SampledBuffer", None),  # uniform texel buffers: core in Vulkan
    39: ("Int8", "VkPhysicalDeviceVulkan12Features.shaderInt8"),
    61: ("GroupNonUniform", "subgroup:basic"), 62: ("GroupNonUniformVote", "subgroup:vote"),
    63: ("GroupNonUniformArithmetic", "subgroup:arithmetic"), 64: ("GroupNonUniformBallot", "subgroup:ballot"),
    65: ("GroupNonUniformShuffle", "subgroup:shuffle"),
    66: ("GroupNonUniformShuffleRelative", "subgroup:shuffle_relative"),
    67: ("GroupNonUniformClustered", "subgroup:clustered"), 68: ("GroupNonUniformQuad", "subgroup:quad"),
    4433: ("StorageBuffer16BitAccess", "VkPhysicalDeviceVulkan11Features.storageBuffer16BitAccess"),
    4434: ("UniformAndStorageBuffer16BitAccess",
           "VkPhysicalDeviceVulkan11Features.uniformAndStorageBuffer16BitAccess"),
    4448: ("StorageBuffer8BitAccess", "VkPhysicalDeviceVulkan12Features.storageBuffer8BitAccess"),
    4449: ("UniformAndStorageBuffer8BitAccess",
           "VkPhysicalDeviceVulkan12Features.uniformAndStorageBuffer8BitAccess"),
    5345: ("VulkanMemoryModel", "VkPhysicalDeviceVulkan12Features.vulkanMemoryModel"),
    6016: ("DotProductInputAll", "VkPhysicalDeviceVulkan13Features.shaderIntegerDotProduct"),
    6017: ("DotProductInput4x8Bit", "VkPhysicalDeviceVulkan13Features.shaderIntegerDotProduct"),
    6018: ("DotProductInput4x8BitPacked", "VkPhysicalDeviceVulkan13Features.shaderIntegerDotProduct"),
    6019: ("DotProduct", "VkPhysicalDeviceVulkan13Features.shaderIntegerDotProduct"),
    6022: ("CooperativeMatrixKHR", "VkPhysicalDeviceCooperativeMatrixFeaturesKHR.cooperativeMatrix"),
    # Not emitted by vkc's kernels; known so that a runtime can name what a module needs.
    0: ("Matrix", None), 4441: ("VariablePointersStorageBuffer", "VkPhysicalDeviceVulkan11Features.variablePointersStorageBuffer"),
    4442: ("VariablePointers", "VkPhysicalDeviceVulkan11Features.variablePointers"),
    5347: ("PhysicalStorageBufferAddresses", "VkPhysicalDeviceVulkan12Features.bufferDeviceAddress"),
    5357: ("CooperativeMatrixNV", "VkPhysicalDeviceCooperativeMatrixFeaturesNV.cooperativeMatrix"),
    # VK_NV_cooperative_matrix2
    5430: ("CooperativeMatrixReductionsNV", CM2 + "cooperativeMatrixReductions"),
    5431: ("CooperativeMatrixConversionsNV", CM2 + "cooperativeMatrixConversions"),
    5432: ("CooperativeMatrixPerElementOperationsNV", CM2 + "cooperativeMatrixPerElementOperations"),
    5433: ("CooperativeMatrixTensorAddressingNV", CM2 + "cooperativeMatrixTensorAddressing"),
    5434: ("CooperativeMatrixBlockLoadsNV", CM2 + "cooperativeMatrixBlockLoads"),
    5439: ("TensorAddressingNV", CM2 + "cooperativeMatrixTensorAddressing"),
}
# What cooperative matrices at workgroup scope need beyond their capabilities (they have none of
# their own): the scope, and shapes past the device's fixed list (multiples of its granularities).
WORKGROUP_MATRIX_FEATURES = (CM2 + "cooperativeMatrixWorkgroupScope", CM2 + "cooperativeMatrixFlexibleDimensions")


_M32 = 0xFFFFFFFF
# The integer OpSpecConstantOp operations an array length or a workgroup size may be computed with.
SPEC_OPS = {128: lambda a, b: a + b, 130: lambda a, b: a - b, 132: lambda a, b: a * b,
            134: lambda a, b: a // b if b else None, 137: lambda a, b: a % b if b else None,
            194: lambda a, b: a >> b if b < 32 else 0, 196: lambda a, b: a << b if b < 32 else 0,
            197: lambda a, b: a | b, 198: lambda a, b: a ^ b, 199: lambda a, b: a & b}


def _fail(check: str, where: str, detail: str):
    raise BundleError(check, f"{where} {detail}")


def words_of(data) -> array:
    """The little-endian 32-bit words of `data` (whose length is a multiple of 4)."""
    words = array("I")
    words.frombytes(data)
    if sys.byteorder == "big":
        words.byteswap()
    return words


def check_structure(data, where: str) -> None:
    """Header and instruction framing; `data` is a section already known to be >= 20 bytes, a
    multiple of 4 and to start with the magic. Raises BundleError ('spirv header'/'spirv instructions')."""
    words = words_of(data)
    version, bound, schema = words[1], words[3], words[4]
    major, minor = version >> 16 & 0xFF, version >> 8 & 0xFF
    if version & 0xFF0000FF or major != 1 or minor > MAX_MINOR:
        _fail("spirv header", where, f"has version word 0x{version:08x}; this reader knows SPIR-V 1.0 ..= 1.{MAX_MINOR}")
    if not 1 <= bound <= MAX_ID_BOUND:
        _fail("spirv header", where, f"has id bound {bound}, not in 1..={MAX_ID_BOUND}")
    if schema != 0:
        _fail("spirv header", where, f"has schema word {schema}, not 0")
    i, n = HEADER_WORDS, len(words)
    while i < n:
        count = words[i] >> 16
        if count == 0:
            _fail("spirv instructions", where, f"has an instruction of word count 0 at word {i}")
        i += count
    if i != n:
        _fail("spirv instructions", where, f"has a last instruction that runs {i - n} words past its end")


# ---- reflection -------------------------------------------------------------------------------

def _string(words, start: int, end: int) -> str:
    chunk = array("I", words[start:end])
    if sys.byteorder == "big":
        chunk.byteswap()
    return chunk.tobytes().split(b"\0", 1)[0].decode("utf-8", "replace")


class Module:
    """What a module declares that the runtime relies on. Built from a structurally checked module."""

    def __init__(self, data):
        words = words_of(data)
        self.version = (words[1] >> 16 & 0xFF, words[1] >> 8 & 0xFF)
        self.capabilities: list[int] = []
        self.extensions: list[str] = []
        self.entry_points: list[tuple[int, int, str]] = []     # (model, function id, name)
        self.modes: dict[int, list[tuple[str, list[int]]]] = {}  # function id -> [("literal"|"id", xyz)]
        self.decorations: dict[int, dict[int, list[int]]] = {}   # id -> {decoration: operands}
        self.member_decorations: dict[int, dict[int, set[int]]] = {}  # struct id -> {member: {decoration}}
        self.defs: dict[int, tuple[int, list[int]]] = {}         # result id -> (opcode, operands after it)
        self.variables: list[tuple[int, int, int]] = []          # (pointer type id, id, storage class)
        self.matrix_scopes: list[int] = []                       # scope ids of cooperative-matrix types
        i, n = HEADER_WORDS, len(words)
        while i < n:
            count, op = words[i] >> 16, words[i] & 0xFFFF
            ops = words[i + 1:i + count]
            i += count
            if op == OP_CAPABILITY and ops:
                self.capabilities.append(ops[0])
            elif op == OP_EXTENSION:
                self.extensions.append(_string(ops, 0, len(ops)))
            elif op == OP_ENTRY_POINT and len(ops) >= 3:
                self.entry_points.append((ops[0], ops[1], _string(ops, 2, len(ops))))
            elif op in (OP_EXECUTION_MODE, OP_EXECUTION_MODE_ID) and len(ops) >= 5 \
                    and ops[1] in (MODE_LOCAL_SIZE, MODE_LOCAL_SIZE_ID):
                kind = "literal" if ops[1] == MODE_LOCAL_SIZE else "id"
                self.modes.setdefault(ops[0], []).append((kind, list(ops[2:5])))
            elif op == OP_DECORATE and len(ops) >= 2:
                self.decorations.setdefault(ops[0], {})[ops[1]] = list(ops[2:])
            elif op == OP_MEMBER_DECORATE and len(ops) >= 3:
                self.member_decorations.setdefault(ops[0], {}).setdefault(ops[1], set()).add(ops[2])
            elif op in (OP_TYPE_BOOL, OP_TYPE_INT, OP_TYPE_FLOAT, OP_TYPE_VECTOR, OP_TYPE_MATRIX, OP_TYPE_ARRAY,
                        OP_TYPE_RUNTIME_ARRAY, OP_TYPE_STRUCT, OP_TYPE_POINTER, OP_TYPE_IMAGE,
                        OP_TYPE_SAMPLED_IMAGE) and ops:
                self.defs[ops[0]] = (op, list(ops[1:]))
            elif op in (OP_CONSTANT, OP_CONSTANT_COMPOSITE, OP_SPEC_CONSTANT_TRUE, OP_SPEC_CONSTANT_FALSE,
                        OP_SPEC_CONSTANT, OP_SPEC_CONSTANT_COMPOSITE, OP_SPEC_CONSTANT_OP) and len(ops) >= 2:
                self.defs[ops[1]] = (op, [ops[0], *ops[2:]])     # (type, operands...)
            elif op == OP_VARIABLE and len(ops) >= 3:
                self.variables.append((ops[0], ops[1], ops[2]))
            elif op == OP_TYPE_COOPERATIVE_MATRIX and len(ops) >= 3:
                self.matrix_scopes.append(ops[2])

    def feature_needs(self, bare: bool = False) -> list[tuple[str, str]]:
        """(need, why) for each device feature its capabilities and workgroup-scope cooperative
        matrices need, need as CAPABILITIES names it ("Vk...Features.field" or "subgroup:OPERATION";
        bare: the field alone), or "unknown" for a capability this reader does not know."""
        out = []
        for cap in sorted(set(self.capabilities)):
            name, need = CAPABILITIES.get(cap, (str(cap), "unknown"))
            if need:
                out.append((need, f"SPIR-V capability {name}"))
        if any(self.constant(s, {}) == SCOPE_WORKGROUP for s in self.matrix_scopes):
            out += [(need, "workgroup-scope cooperative matrices") for need in WORKGROUP_MATRIX_FEATURES]
        return [(need.split(".")[-1], why) for need, why in out] if bare else out

    def needs(self) -> set[str]:
        """The device features (qualified, or "subgroup:OPERATION") it needs, the unknown left out."""
        return {need for need, _ in self.feature_needs() if need != "unknown"}

    # constants, resolved under one kernel's specialization (SpecId -> value bits)
    def constant(self, cid: int, spec: dict[int, int], depth: int = 0) -> int | None:
        """A 32-bit integer constant's value (as an unsigned word), or None if it is not one this
        reader evaluates."""
        op, operands = self.defs.get(cid, (None, []))
        if op == OP_SPEC_CONSTANT_OP and len(operands) == 4 and operands[1] in SPEC_OPS and depth < 16:
            a, b = (self.constant(x, spec, depth + 1) for x in operands[2:])
            result = None if a is None or b is None else SPEC_OPS[operands[1]](a, b)
            return None if result is None else result & _M32
        if op == OP_CONSTANT and len(operands) >= 2:
            return operands[1]  # the low word; sizes and lengths are 32-bit integers here
        if op == OP_SPEC_CONSTANT and len(operands) >= 2:
            sid = self.decorations.get(cid, {}).get(DEC_SPEC_ID)
            return spec.get(sid[0], operands[1]) if sid else operands[1]
        return None

    def composite(self, cid: int, spec: dict[int, int]) -> list[int] | None:
        op, operands = self.defs.get(cid, (None, []))
        if op not in (OP_CONSTANT_COMPOSITE, OP_SPEC_CONSTANT_COMPOSITE) or len(operands) != 4:
            return None
        values = [self.constant(c, spec) for c in operands[1:]]
        return None if None in values else values

    def local_size(self, entry: int, spec: dict[int, int]) -> list[int] | None:
        """The workgroup size: the WorkgroupSize built-in wins over the LocalSize(Id) mode."""
        for cid, decs in self.decorations.items():
            if decs.get(DEC_BUILTIN) == [BUILTIN_WORKGROUP_SIZE] and cid in self.defs:
                return self.composite(cid, spec)
        for kind, xyz in self.modes.get(entry, []):
            if kind == "literal":
                return xyz
            values = [self.constant(c, spec) for c in xyz]
            return None if None in values else values
        return None

    def type_size(self, tid: int, spec: dict[int, int], depth: int = 0) -> int | None:
        """Bytes of a type, packed (no padding): a lower bound of what the device allocates."""
        op, operands = self.defs.get(tid, (None, []))
        if depth > 32:
            return None
        if op == OP_TYPE_BOOL:
            return 1
        if op in (OP_TYPE_INT, OP_TYPE_FLOAT) and operands:
            return max(operands[0] // 8, 1)
        if op in (OP_TYPE_VECTOR, OP_TYPE_MATRIX) and len(operands) >= 2:
            inner = self.type_size(operands[0], spec, depth + 1)
            return None if inner is None else inner * operands[1]
        if op == OP_TYPE_ARRAY and len(operands) >= 2:
            inner, length = self.type_size(operands[0], spec, depth + 1), self.constant(operands[1], spec)
            return None if inner is None or length is None else inner * length
        if op == OP_TYPE_STRUCT:
            sizes = [self.type_size(m, spec, depth + 1) for m in operands]
            return None if None in sizes else sum(sizes)
        return None

    def pointee(self, pointer_type: int) -> int | None:
        op, operands = self.defs.get(pointer_type, (None, []))
        return operands[1] if op == OP_TYPE_POINTER and len(operands) >= 2 else None

    def written_bindings(self) -> set[int]:
        """The set-0 bindings a dispatch of this module may write (FORMAT.md, "Barriers"): every
        storage buffer, unless its variable is decorated NonWritable or every member of its block is
        (GLSL `readonly`). Texel buffers (and anything else in UniformConstant) are read-only. A
        binding declared by several variables is written if any of them is writable."""
        written = set()
        for ptype, vid, storage in self.variables:
            if storage not in (SC_STORAGE_BUFFER, SC_UNIFORM):
                continue
            decs = self.decorations.get(vid, {})
            if decs.get(DEC_SET, [None])[:1] != [0] or not decs.get(DEC_BINDING):
                continue
            target = self.pointee(ptype)
            op, members = self.defs.get(target, (None, []))
            block = self.decorations.get(target, {}) if target is not None else {}
            if op != OP_TYPE_STRUCT or not (DEC_BLOCK in block or DEC_BUFFER_BLOCK in block):
                continue  # not a buffer: check_interface refuses it
            if storage == SC_UNIFORM and DEC_BUFFER_BLOCK not in block:
                continue  # a uniform block is read-only (check_interface refuses it anyway)
            by_member = self.member_decorations.get(target, {})
            readonly = DEC_NON_WRITABLE in decs or (
                bool(members) and all(DEC_NON_WRITABLE in by_member.get(i, ()) for i in range(len(members))))
            if not readonly:
                written.add(decs[DEC_BINDING][0])
        return written


def _spec_bits(entries: list) -> dict[int, int]:
    fmt = {"int32": "<i", "uint32": "<I", "float32": "<f"}
    return {e["id"]: struct.unpack("<I", struct.pack(fmt[e["type"]], e["value"]))[0] for e in entries}


def _is_texel_buffer(m: "Module", type_id) -> bool:
    """A samplerBuffer: OpTypeSampledImage of a sampled OpTypeImage of dimension Buffer."""
    op, operands = m.defs.get(type_id, (None, []))
    if op != OP_TYPE_SAMPLED_IMAGE or not operands:
        return False
    op, image = m.defs.get(operands[0], (None, []))
    # OpTypeImage operands: sampled type, Dim, Depth, Arrayed, MS, Sampled, format
    return op == OP_TYPE_IMAGE and len(image) >= 6 and image[1] == DIM_BUFFER and image[5] == 1


def _newest_spirv(view: dict) -> tuple[tuple[int, int], tuple[int, int]]:
    """(Vulkan API major.minor, the newest SPIR-V version it guarantees) of a (flat) manifest."""
    api = tuple(view["requirements"]["vulkan_api"][:2])
    return api, SPIRV_FOR_VULKAN.get(api, (1, 6) if api > (1, 3) else (1, 0))


def check_interface(manifest: dict, modules: list) -> list[Module]:
    """Check each SPIR-V module against its manifest entry and the kernels built from it.
    `manifest` has passed validate_manifest; `modules` are structurally checked module bytes.
    With variants (format 1.2), a module is checked against the kernels of every variant that
    uses it, and its version against each such variant's vulkan_api."""
    views = variant_views(manifest)
    multi = "variants" in manifest
    # Per module: the strictest (newest SPIR-V, label, api) of the (variant) manifests using it,
    # and (label, kernel id, kernel) of each kernel built from it.
    bound: dict[int, tuple] = {}
    kernels_of: dict[int, list[tuple[str, int, dict]]] = {}
    seen = set()  # a kernel repeated with the same specialization (in any variant) checks the same
    for v, view in enumerate(views):
        label = f"variants[{v}] " if multi else ""
        api, newest = _newest_spirv(view)
        used = {kernel["module"] for kernel in view["kernels"]} if multi else range(len(modules))
        for i in used:
            if i not in bound or newest < bound[i][0]:
                bound[i] = (newest, label, api)
        for k, kernel in enumerate(view["kernels"]):
            key = (kernel["module"], tuple((e["id"], e["type"], e["value"]) for e in kernel["specialization"]))
            if key not in seen:
                seen.add(key)
                kernels_of.setdefault(kernel["module"], []).append((label, k, kernel))
    parsed = []
    for i, (entry, data) in enumerate(zip(manifest["modules"], modules)):
        where = f"module {i} ({entry['name'][:60]!r})"
        m = Module(data)
        parsed.append(m)
        texels = texel_formats(entry)
        if i in bound and m.version > bound[i][0]:
            newest, label, api = bound[i]
            _fail("spirv interface", where, f"is SPIR-V {m.version[0]}.{m.version[1]}, newer than the "
                  f"{newest[0]}.{newest[1]} that {label}requirements.vulkan_api {list(api)} guarantees")
        mains = [fid for model, fid, name in m.entry_points if model == GL_COMPUTE and name == "main"]
        if len(mains) != 1:
            _fail("spirv interface", where, f"has {len(mains)} GLCompute entry points named 'main', not 1")
        main = mains[0]
        for ptype, vid, storage in m.variables:
            if storage == SC_WORKGROUP or storage not in DESCRIPTOR_CLASSES:
                continue
            what = f"declares variable %{vid} in storage class {DESCRIPTOR_CLASSES[storage]}"
            target = m.pointee(ptype)
            decs = m.decorations.get(vid, {})
            dset, binding = decs.get(DEC_SET, [None])[:1], decs.get(DEC_BINDING, [None])[:1]
            if storage == SC_UNIFORM_CONSTANT and _is_texel_buffer(m, target):
                if dset != [0] or binding[0] not in texels:
                    _fail("spirv interface", where, f"binds a texel buffer at set {dset[0]}, binding "
                          f"{binding[0]}; the manifest lists texel buffers at set 0, bindings {sorted(texels)}")
                continue
            block = m.decorations.get(target, {}) if target is not None else {}
            storage_buffer = (storage == SC_STORAGE_BUFFER and DEC_BLOCK in block) or \
                             (storage == SC_UNIFORM and DEC_BUFFER_BLOCK in block)
            if not storage_buffer or m.defs.get(target, (None,))[0] != OP_TYPE_STRUCT:
                _fail("spirv interface", where, f"{what}; the runtime binds only storage buffers "
                      "(a Block struct in StorageBuffer, or a BufferBlock struct in Uniform) and "
                      "the uniform texel buffers the manifest lists")
            if dset != [0] or not binding or binding[0] is None or binding[0] >= entry["bindings"] \
                    or binding[0] in texels:
                _fail("spirv interface", where, f"binds a storage buffer at set {dset[0] if dset else None}, "
                      f"binding {binding[0] if binding else None}; the manifest gives it set 0, bindings "
                      f"0..{entry['bindings'] - 1}")
        spec_ids = {decs[DEC_SPEC_ID][0]: cid for cid, decs in m.decorations.items()
                    if decs.get(DEC_SPEC_ID)}
        for label, k, kernel in kernels_of.get(i, [("", None, {"specialization": []})]):
            kwhere = where if k is None else f"{where} as {label}kernel {k}"
            for e in kernel["specialization"]:
                cid = spec_ids.get(e["id"])
                if cid is None:
                    continue  # Vulkan ignores map entries for ids the module does not declare
                op, operands = m.defs.get(cid, (None, []))
                type_op, type_operands = m.defs.get(operands[0], (None, [])) if operands else (None, [])
                scalar32 = type_op in (OP_TYPE_INT, OP_TYPE_FLOAT) and type_operands[:1] == [32]
                if not (op in (OP_SPEC_CONSTANT_TRUE, OP_SPEC_CONSTANT_FALSE) or
                        (op == OP_SPEC_CONSTANT and scalar32)):
                    _fail("spirv interface", kwhere, f"specializes constant_id {e['id']}, which is not a "
                          "32-bit scalar or a bool in the module (each specialization entry is 4 bytes)")
            spec = _spec_bits(kernel["specialization"])
            size = m.local_size(main, spec)
            if size is None:
                _fail("spirv interface", kwhere, "declares no local size this reader can resolve")
            if list(size) != list(entry["local_size"]):
                _fail("spirv interface", kwhere, f"has local size {list(size)} but the manifest says "
                      f"{list(entry['local_size'])}")
            shared = 0
            for ptype, vid, storage in m.variables:
                if storage == SC_WORKGROUP:
                    n = m.type_size(m.pointee(ptype), spec)
                    if n is None:
                        _fail("spirv interface", kwhere, f"declares shared variable %{vid} of a size "
                              "this reader cannot compute")
                    shared += n
            if shared > entry["shared_memory_bytes"]:
                _fail("spirv interface", kwhere, f"declares {shared} bytes of shared memory but the manifest "
                      f"says shared_memory_bytes = {entry['shared_memory_bytes']}")
    return parsed


# SPIR-V extension -> (the Vulkan version that made it core, or None; the device extension providing it).
SPIRV_EXTENSIONS = {
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
    "SPV_NV_cooperative_matrix2": (None, "VK_NV_cooperative_matrix2"),
    "SPV_NV_tensor_addressing": (None, "VK_NV_cooperative_matrix2"),
}


def api_and_extensions(modules, oldest=(1, 1)) -> tuple[list[int], list[str]]:
    """What `requirements.vulkan_api` and `requirements.extensions` say for these SPIR-V modules
    (bytes): the oldest Vulkan version (at least `oldest`) whose SPIR-V version covers them all,
    and the device extensions their SPIR-V extensions need that this version has not made core
    (VK_KHR_cooperative_matrix for a cooperative-matrix kernel)."""
    parsed = [Module(data) for data in modules]
    newest = max((m.version for m in parsed), default=(1, 0))
    api = min((a for a, v in SPIRV_FOR_VULKAN.items() if v >= newest and a >= oldest),
              default=max(SPIRV_FOR_VULKAN))
    exts = set()
    for ext in {e for m in parsed for e in m.extensions}:
        core, vk_ext = SPIRV_EXTENSIONS.get(ext, (None, None))
        if vk_ext is not None and (core is None or core > api):
            exts.add(vk_ext)
    return [*api, 0], sorted(exts)


def capability_features(modules) -> list[str]:
    """The device features (bare VkPhysicalDevice*Features field names, such as shaderInt64) that
    the capabilities of these SPIR-V modules (bytes) need enabled; what `requirements.features`
    lists. Subgroup operations are properties the runtime compares, not features it enables."""
    needs = set().union(*(Module(data).needs() for data in modules))
    return sorted(n.split(".")[-1] for n in needs if not n.startswith("subgroup:"))


def device_requirements(bundle) -> dict:
    """What a device needs to run a (validated) bundle, in Vulkan's own names, for an app to check
    before loading: API version, extensions, features (from the modules' capabilities), limits.
    A bundle of several variants (format 1.2): {"variants": [{"name", "target", **those}, ...]};
    a device runs the bundle when it meets one of them."""
    if "variants" in bundle.manifest:
        return {"variants": [{"name": v.get("name", ""), "target": v["target"],
                              **_requirements(v, [bundle.spirv[i] for i in used_modules(v)])}
                             for v in variant_views(bundle.manifest)]}
    return _requirements(bundle.manifest, bundle.spirv)


def _requirements(m: dict, spirv: list) -> dict:
    """device_requirements of one flat manifest (or variant) whose kernels use the modules `spirv`."""
    req, mem, tensors = m["requirements"], m["memory"], m["tensors"]
    parsed = [Module(s) for s in spirv]
    caps = sorted({c for p in parsed for c in p.capabilities})
    features = sorted(set().union(*(p.needs() for p in parsed)))
    # requirements.features (format 1.1) names what the capabilities imply, and possibly more.
    features += sorted(set(req.get("features", [])) - {f.split(".")[-1] for f in features})
    io = [tensors[x["tensor"]]["nbytes"] for x in m["inputs"] + m["outputs"]]
    groups = [max((d["groups"][a] for d in m["dispatches"]), default=1) for a in range(3)]
    api = req["vulkan_api"]
    return {
        "vulkan_api": ".".join(map(str, api)),
        "vulkan_api_version": (api[0] << 22) | (api[1] << 12) | api[2],  # VK_MAKE_API_VERSION(0, ...)
        "spirv_version": ".".join(map(str, max((p.version for p in parsed), default=(1, 0)))),
        "extensions": list(req["extensions"]),
        "features": [f for f in features if not f.startswith("subgroup:")],
        "subgroup_operations": [f.split(":")[1] for f in features if f.startswith("subgroup:")],
        "spirv_capabilities": [CAPABILITIES[c][0] if c in CAPABILITIES else str(c) for c in caps],
        "spirv_extensions": sorted({e for p in parsed for e in p.extensions}),
        "limits": {  # VkPhysicalDeviceLimits fields: the device's value must be >= these
            "maxComputeSharedMemorySize": req["max_shared_memory_bytes"],
            "maxComputeWorkGroupInvocations": req["max_workgroup_invocations"],
            "maxComputeWorkGroupSize": list(req["max_workgroup_size"]),
            "maxComputeWorkGroupCount": groups,
            "maxStorageBufferRange": req["max_storage_buffer_range"],
            "maxBoundDescriptorSets": 1,
            "maxPerStageDescriptorStorageBuffers": max((m["modules"][k["module"]]["bindings"] -
                                                        len(texel_formats(m["modules"][k["module"]]))
                                                        for k in m["kernels"]), default=0),
            "maxTexelBufferElements": req.get("max_texel_buffer_elements", 0),
        },
        # ... and the device's minStorageBufferOffsetAlignment (with texel buffers also its
        # minTexelBufferOffsetAlignment) must be <= (divide) this.
        "minStorageBufferOffsetAlignment_at_most": mem["alignment"],
        "memory": {
            "device_local_bytes": mem["arena_bytes"] + mem["weights_bytes"],
            "largest_allocation_bytes": max(mem["arena_bytes"], mem["weights_bytes"]),
            "host_visible_bytes": max(sum(io), mem["weights_bytes"]),
        },
    }
