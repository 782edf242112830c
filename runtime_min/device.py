"""Vulkan instances, device enumeration and choice, and the logical devices that models share.

Models on one physical device with the same settings (validation, robustness, and the extensions
and features enabled: exactly those the bundle needs) share one VkDevice and its queue (counted
references; the last close destroys it), so several models cost one device, and queue submission
is serialized by a lock as Vulkan requires. The VkInstance is created once per process (per
validation setting) and destroyed at exit."""
from __future__ import annotations

import atexit
import os
import threading
from dataclasses import dataclass, field

from bundles.manifest import device_type, variant_views
from bundles.dtypes import COMPONENT_TYPES
from bundles.spirv import SPIRV_EXTENSIONS
from bundles.variants import VariantError, pick_profile, uploaded_weights_bytes, used_modules

from .errors import INSTALL_DRIVER, Cleanup, DeviceLostError, VkcRuntimeError, import_vulkan, step

VALIDATION_LAYER = "VK_LAYER_KHRONOS_validation"
DEBUG_UTILS = "VK_EXT_debug_utils"
EXTENSIONS_OF_INTEREST = (
    "VK_KHR_16bit_storage", "VK_KHR_8bit_storage", "VK_KHR_shader_float16_int8",
    "VK_KHR_shader_integer_dot_product", "VK_KHR_cooperative_matrix", "VK_NV_cooperative_matrix",
    "VK_EXT_subgroup_size_control", "VK_KHR_shader_subgroup_extended_types", "VK_EXT_memory_budget")
FEATURES_OF_INTEREST = (
    "shaderFloat16", "shaderInt8", "shaderInt16", "shaderInt64", "shaderFloat64", "storageBuffer16BitAccess",
    "storageBuffer8BitAccess", "shaderIntegerDotProduct", "subgroupSizeControl", "vulkanMemoryModel",
    "bufferDeviceAddress", "cooperativeMatrix", "robustBufferAccess")
SUBGROUP_OPS = ("basic", "vote", "arithmetic", "ballot", "shuffle", "shuffle_relative", "clustered", "quad")
_TYPE_NAMES = {0: "other", 1: "integrated GPU", 2: "discrete GPU", 3: "virtual GPU", 4: "CPU"}
_TYPE_RANK = {2: 0, 1: 1, 3: 2, 4: 3, 0: 4}  # discrete, integrated, virtual, CPU, other

# Every warning or error the validation layer reported, in order (see validation_messages()).
_messages: list[str] = []
_callback = _ffi = None  # the C callback: created once, never freed, as instances may outlive any one object


def validation_messages() -> list[str]:
    """Warnings and errors reported by the validation layer since the last clear_validation_messages()."""
    return list(_messages)


def clear_validation_messages() -> None:
    _messages.clear()


def new(ffi, ctype: str, **fields):
    """A zeroed `ctype*` with fields set. The caller keeps it (and whatever it points to) alive."""
    p = ffi.new(ctype + "*")
    for k, v in fields.items():
        setattr(p, k, v)
    return p


def cstrings(ffi, names):
    """(char*[] array, the strings it points to): keep both alive until the call returns."""
    keep = [ffi.new("char[]", n.encode()) for n in names]
    return ffi.new("char*[]", keep) if keep else ffi.NULL, keep


# The `vulkan` package defines VK_API_VERSION_1_0 only, and no VK_MAKE_API_VERSION.
API_1_1 = (1 << 22) | (1 << 12)
API_1_2 = (1 << 22) | (2 << 12)
API_1_3 = (1 << 22) | (3 << 12)


def version_tuple(v: int) -> tuple:
    return ((v >> 22) & 0x7F, (v >> 12) & 0x3FF, v & 0xFFF)


@dataclass(frozen=True)
class DeviceInfo:
    index: int
    name: str
    type: str                       # "discrete GPU", "integrated GPU", "virtual GPU", "CPU", "other"
    api_version: tuple
    driver: str
    max_shared_memory_bytes: int
    max_workgroup_invocations: int
    max_workgroup_size: tuple
    subgroup_size: int
    max_storage_buffer_range: int
    min_storage_buffer_offset_alignment: int
    max_memory_allocation_bytes: int
    device_local_bytes: int         # largest device-local heap
    host_visible_bytes: int         # largest heap with a host-visible memory type
    extensions: tuple               # those of EXTENSIONS_OF_INTEREST the device has
    features: tuple = ()            # those of FEATURES_OF_INTEREST the device has
    subgroup_operations: tuple = () # subgroup operations available in compute shaders
    memory_budget_bytes: int = 0    # what this process may still allocate in the largest device-local heap
    max_workgroup_count: tuple = (65535, 65535, 65535)
    max_storage_buffers_per_stage: int = 4
    max_texel_buffer_elements: int = 65536
    min_texel_buffer_offset_alignment: int = 256
    timestamps: bool = False        # the compute queue has timestamp queries (Model.profile)
    timestamp_period_ns: float = 1.0
    device_uuid: str = ""
    driver_uuid: str = ""
    all_extensions: frozenset = field(repr=False, default=frozenset())
    all_features: frozenset = field(repr=False, default=frozenset())
    type_code: int = field(repr=False, default=0)
    vendor_id: int = field(repr=False, default=0)  # VkPhysicalDeviceProperties.vendorID: picks a variant
    cache_header: bytes = field(repr=False, default=b"")  # vendorID, deviceID, pipelineCacheUUID
    # VK_KHR_cooperative_matrix shapes at subgroup scope: (M, N, K, A, B, C, result type), types as
    # numpy dtype names; compiler/host.py records them in the host profile.
    cooperative_matrix: tuple = ()

    def __str__(self):
        return f"{self.index}: {self.name} ({self.type}, Vulkan {'.'.join(map(str, self.api_version))})"


def _on_message(severity, types, data, user_data):
    ffi = _ffi
    error = severity >= 0x1000  # VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT
    # Loader warnings describe the environment (e.g. "env var VK_INSTANCE_LAYERS defined"), not our use of Vulkan.
    if not error and data.pMessageIdName and ffi.string(data.pMessageIdName) == b"Loader Message":
        return 0
    text = ffi.string(data.pMessage).decode("utf-8", "replace") if data.pMessage else "?"
    _messages.append(("ERROR: " if error else "WARNING: ") + text)
    return 0  # VK_FALSE: never abort the call that triggered the message


def _messenger_info(vk):
    global _callback, _ffi
    if _callback is None:
        _ffi = vk.ffi
        _callback = vk.ffi.callback("PFN_vkDebugUtilsMessengerCallbackEXT", _on_message, error=0)
    return new(vk.ffi, "VkDebugUtilsMessengerCreateInfoEXT",
               sType=vk.VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
               messageSeverity=(vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT
                                | vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT),
               messageType=(vk.VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT
                            | vk.VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT
                            | vk.VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT),
               pfnUserCallback=_callback)


class Coopmat2Features:
    """VkPhysicalDeviceCooperativeMatrix2FeaturesNV (VK_NV_cooperative_matrix2), which the `vulkan`
    package predates, as raw words: sType, pNext, then its VkBool32 fields in FIELDS' order."""
    FIELDS = tuple("cooperativeMatrix" + f for f in "WorkgroupScope FlexibleDimensions Reductions Conversions "
                   "PerElementOperations TensorAddressing BlockLoads".split())

    def __init__(self, ffi, nxt):
        self.__dict__["words"] = ffi.new("uint32_t[12]", [1000593000])
        ffi.cast("void**", self.words + 2)[0] = nxt

    def __setattr__(self, name, value):
        self.words[4 + self.FIELDS.index(name)] = value


def _fields(ffi, struct) -> dict:
    """{feature name: bool} of a Vk*Features struct or pointer (every member but sType and pNext)."""
    if isinstance(struct, Coopmat2Features):
        return {k: bool(struct.words[4 + i]) for i, k in enumerate(struct.FIELDS)}
    t = ffi.typeof(struct)
    return {k: bool(getattr(struct, k)) for k, _ in (t.item if t.kind == "pointer" else t).fields
            if k not in ("sType", "pNext")}


class Instance:
    """A VkInstance, with VK_EXT_debug_utils when available (names for tools like RenderDoc) and the
    validation layer with a message collector when asked; validation includes synchronization
    validation (VkValidationFeaturesEXT), so a missing barrier is reported as a SYNC-HAZARD."""

    def __init__(self, validation: bool):
        self.vk = vk = import_vulkan()
        self.cleanup = Cleanup("instances")
        ffi = vk.ffi
        with step("asking the Vulkan loader for its version"):
            loader = vk.vkEnumerateInstanceVersion()
        self.api = min(loader, API_1_3)
        layers = []
        with step("listing Vulkan instance extensions"):
            have_exts = {p.extensionName for p in vk.vkEnumerateInstanceExtensionProperties(None)}
        if validation:
            with step("listing Vulkan layers"):
                have = {p.layerName for p in vk.vkEnumerateInstanceLayerProperties()}
            if VALIDATION_LAYER not in have:
                raise VkcRuntimeError(
                    f"Validation was requested (validation=True or VKC_VALIDATION=1) but {VALIDATION_LAYER} "
                    "is not installed; install it (`apt-get install vulkan-validationlayers`) or turn validation off.")
            layers = [VALIDATION_LAYER]
            have_exts.add(DEBUG_UTILS)  # the layer provides it
        self.debug_utils = DEBUG_UTILS in have_exts
        exts = [DEBUG_UTILS] if self.debug_utils else []
        if validation:
            exts.append("VK_EXT_validation_features")  # the layer provides it; VkValidationFeaturesEXT's extension
        name = ffi.new("char[]", b"vkc runtime_min")
        app = new(ffi, "VkApplicationInfo", sType=vk.VK_STRUCTURE_TYPE_APPLICATION_INFO,
                  pApplicationName=name, pEngineName=name, apiVersion=self.api)
        layer_arr, layer_keep = cstrings(ffi, layers)
        ext_arr, ext_keep = cstrings(ffi, exts)
        # Chained into the create info too, so messages from vkCreate/DestroyInstance are caught.
        dbg = _messenger_info(vk) if validation else ffi.NULL
        # With validation, synchronization validation too: the default checks ignore barriers, and a
        # schedule missing one must show up as a SYNC-HAZARD message. Chain: features -> messenger
        # (the messenger info keeps a NULL pNext, as vkCreateDebugUtilsMessengerEXT gets it below).
        sync, sync_feature = ffi.NULL, None
        if validation:
            sync_feature = ffi.new("VkValidationFeatureEnableEXT[1]",
                                   [vk.VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT])
            sync = new(ffi, "VkValidationFeaturesEXT", sType=vk.VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT,
                       pNext=dbg, enabledValidationFeatureCount=1, pEnabledValidationFeatures=sync_feature)
        info = new(ffi, "VkInstanceCreateInfo", sType=vk.VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                   pNext=sync if validation else dbg, pApplicationInfo=app, enabledLayerCount=len(layers),
                   ppEnabledLayerNames=layer_arr, enabledExtensionCount=len(exts), ppEnabledExtensionNames=ext_arr)
        with step("creating a Vulkan instance"):
            self.handle = vk.vkCreateInstance(info, None)
        self.cleanup.push(vk.vkDestroyInstance, self.handle, None)
        try:
            if validation:
                with step("creating the validation message collector"):
                    create = vk.vkGetInstanceProcAddr(self.handle, "vkCreateDebugUtilsMessengerEXT")
                    destroy = vk.vkGetInstanceProcAddr(self.handle, "vkDestroyDebugUtilsMessengerEXT")
                    messenger = create(self.handle, dbg, None)
                self.cleanup.push(destroy, self.handle, messenger, None)
        except BaseException:
            self.cleanup.release()
            raise
        self._keep = (name, app, layer_keep, ext_keep, dbg, sync, sync_feature)

    def physical_devices(self):
        with step("enumerating Vulkan devices"):
            return list(self.vk.vkEnumeratePhysicalDevices(self.handle))

    def feature_chain(self, pdev, api: int, exts):
        """A VkPhysicalDeviceFeatures2 chain filled with what the device supports, and its structs."""
        vk, ffi = self.vk, self.vk.ffi
        chain = []
        if api >= API_1_2:
            chain += [("VkPhysicalDeviceVulkan11Features", vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES),
                      ("VkPhysicalDeviceVulkan12Features", vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES)]
        else:
            chain.append(("VkPhysicalDevice16BitStorageFeatures",
                          vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES))
        if api >= API_1_3:
            chain.append(("VkPhysicalDeviceVulkan13Features", vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES))
        if "VK_KHR_cooperative_matrix" in exts:
            chain.append(("VkPhysicalDeviceCooperativeMatrixFeaturesKHR",
                          vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR))
        elif "VK_NV_cooperative_matrix" in exts:
            chain.append(("VkPhysicalDeviceCooperativeMatrixFeaturesNV",
                          vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV))
        nxt, keep = ffi.NULL, []
        if "VK_NV_cooperative_matrix2" in exts and api >= API_1_3:
            keep.append(Coopmat2Features(ffi, nxt))
            nxt = ffi.cast("void*", keep[-1].words)
        for ctype, stype in reversed(chain):
            nxt = new(ffi, ctype, sType=stype, pNext=nxt)
            keep.append(nxt)
        feats = new(ffi, "VkPhysicalDeviceFeatures2", sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, pNext=nxt)
        with step("reading device features"):
            vk.vkGetPhysicalDeviceFeatures2(pdev, feats)
        return feats, keep

    def describe(self, pdev, index: int) -> DeviceInfo:
        vk, ffi = self.vk, self.vk.ffi
        with step("reading device properties"):
            base = vk.vkGetPhysicalDeviceProperties(pdev)  # a StrWrap: char arrays read as str
            api = min(base.apiVersion, self.api)
            sub = new(ffi, "VkPhysicalDeviceSubgroupProperties",
                      sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES)
            m3 = new(ffi, "VkPhysicalDeviceMaintenance3Properties",
                     sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES, pNext=sub)
            ids = new(ffi, "VkPhysicalDeviceIDProperties", sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES,
                      pNext=m3)
            drv = new(ffi, "VkPhysicalDeviceDriverProperties",
                      sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES, pNext=ids)
            props2 = new(ffi, "VkPhysicalDeviceProperties2", sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                         pNext=drv if api >= API_1_2 else ids)
            raw = new(ffi, "VkPhysicalDeviceProperties")
            vk.lib.vkGetPhysicalDeviceProperties(pdev, raw)  # the raw struct, for the pipeline cache UUID bytes
            if api >= API_1_1:
                vk.vkGetPhysicalDeviceProperties2(pdev, props2)
            exts = frozenset(e.extensionName for e in vk.vkEnumerateDeviceExtensionProperties(pdev, None))
            mem = vk.vkGetPhysicalDeviceMemoryProperties(pdev)
            families = vk.vkGetPhysicalDeviceQueueFamilyProperties(pdev)
            budget = self._budget(pdev, mem) if api >= API_1_1 and "VK_EXT_memory_budget" in exts else None
            feats, keep = self.feature_chain(pdev, api, exts) if api >= API_1_1 else (None, [])
        lim = base.limits
        driver = (f"{ffi.string(drv.driverName).decode()} {ffi.string(drv.driverInfo).decode()}".strip()
                  if api >= API_1_2 else f"driver version {base.driverVersion:#x}")
        # A feature the device has in any struct of the chain (Vulkan 1.x's and the extensions' overlap).
        features = frozenset(k for s in ([feats.features, *keep] if feats is not None else [])
                             for k, v in _fields(ffi, s).items() if v)
        heaps = [mem.memoryHeaps[i] for i in range(mem.memoryHeapCount)]
        local = [i for i, h in enumerate(heaps) if h.flags & vk.VK_MEMORY_HEAP_DEVICE_LOCAL_BIT] or [0]
        biggest = max(local, key=lambda i: heaps[i].size if heaps else 0)
        host_heaps = {mem.memoryTypes[i].heapIndex for i in range(mem.memoryTypeCount)
                      if mem.memoryTypes[i].propertyFlags & vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT}
        compute = [f for f in families if f.queueFlags & vk.VK_QUEUE_COMPUTE_BIT]
        sub_ops = tuple(n for b, n in enumerate(SUBGROUP_OPS) if api >= API_1_1 and sub.supportedOperations & (1 << b)
                        and sub.supportedStages & vk.VK_SHADER_STAGE_COMPUTE_BIT)
        uuid = lambda arr: bytes(ffi.buffer(arr, 16)).hex() if api >= API_1_1 else ""
        return DeviceInfo(
            index=index, name=base.deviceName, type=_TYPE_NAMES.get(base.deviceType, "other"),
            api_version=version_tuple(base.apiVersion), driver=driver,
            max_shared_memory_bytes=lim.maxComputeSharedMemorySize, max_storage_buffer_range=lim.maxStorageBufferRange,
            max_workgroup_invocations=lim.maxComputeWorkGroupInvocations,
            max_workgroup_size=tuple(lim.maxComputeWorkGroupSize),
            subgroup_size=sub.subgroupSize if api >= API_1_1 else 0,
            min_storage_buffer_offset_alignment=lim.minStorageBufferOffsetAlignment,
            max_memory_allocation_bytes=m3.maxMemoryAllocationSize if api >= API_1_1 else 1 << 31,
            device_local_bytes=heaps[biggest].size if heaps else 0,
            host_visible_bytes=max([heaps[i].size for i in host_heaps] or [0]),
            extensions=tuple(e for e in EXTENSIONS_OF_INTEREST if e in exts),
            features=tuple(f for f in FEATURES_OF_INTEREST if f in features), subgroup_operations=sub_ops,
            memory_budget_bytes=budget[biggest] if budget else (heaps[biggest].size if heaps else 0),
            max_workgroup_count=tuple(lim.maxComputeWorkGroupCount),
            max_storage_buffers_per_stage=min(lim.maxPerStageDescriptorStorageBuffers,
                                              lim.maxDescriptorSetStorageBuffers),
            max_texel_buffer_elements=lim.maxTexelBufferElements,
            min_texel_buffer_offset_alignment=lim.minTexelBufferOffsetAlignment,
            timestamps=bool(compute and compute[0].timestampValidBits), timestamp_period_ns=float(lim.timestampPeriod),
            device_uuid=uuid(ids.deviceUUID), driver_uuid=uuid(ids.driverUUID),
            all_extensions=exts, all_features=features, type_code=base.deviceType, vendor_id=base.vendorID,
            cache_header=bytes(ffi.buffer(ffi.addressof(raw, "vendorID"), 8))
            + bytes(ffi.buffer(raw.pipelineCacheUUID, 16)),
            cooperative_matrix=self._cooperative_matrix(pdev) if "VK_KHR_cooperative_matrix" in exts else ())

    def _cooperative_matrix(self, pdev) -> tuple:
        """The subgroup-scope shapes vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR lists, called
        raw (the package's wrapper leaves the output structs' sType unset)."""
        vk, ffi, name = self.vk, self.vk.ffi, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR"
        fn, count = vk.lib.vkGetInstanceProcAddr(self.handle, name.encode()), ffi.new("uint32_t*")
        with step("listing cooperative matrix shapes"):
            if fn == ffi.NULL or ffi.cast(f"PFN_{name}", fn)(pdev, count, ffi.NULL) != vk.VK_SUCCESS:
                return ()
            props = ffi.new("VkCooperativeMatrixPropertiesKHR[]",
                            [{"sType": vk.VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR}] * count[0])
            if ffi.cast(f"PFN_{name}", fn)(pdev, count, props) not in (vk.VK_SUCCESS, vk.VK_INCOMPLETE):
                return ()
        return tuple((p.MSize, p.NSize, p.KSize, *(COMPONENT_TYPES.get(t, f"component type {t}") for t in (
            p.AType, p.BType, p.CType, p.ResultType))) for p in props if p.scope == 3  # VK_SCOPE_SUBGROUP_KHR
            and not p.saturatingAccumulation)

    def _budget(self, pdev, mem) -> list:
        """Bytes this process may still allocate in each heap (VK_EXT_memory_budget)."""
        vk, ffi = self.vk, self.vk.ffi
        b = new(ffi, "VkPhysicalDeviceMemoryBudgetPropertiesEXT",
                sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT)
        m2 = new(ffi, "VkPhysicalDeviceMemoryProperties2", sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2,
                 pNext=b)
        vk.lib.vkGetPhysicalDeviceMemoryProperties2(pdev, m2)
        return [max(b.heapBudget[i] - b.heapUsage[i], 0) for i in range(mem.memoryHeapCount)]


_lock = threading.RLock()          # guards the two registries below
_instances: dict = {}              # validation flag -> Instance
_devices: dict = {}                # (index, validation, robust, extensions, features) -> Device


def _instance(validation: bool) -> Instance:
    # One instance per validation setting, kept until the process exits: NVIDIA's driver refuses a
    # 31st vkCreateInstance in one process (VK_ERROR_INCOMPATIBLE_DRIVER), which an
    # instance per load reached in processes that load bundle after bundle (vkc tune).
    with _lock:
        if validation not in _instances:
            _instances[validation] = Instance(validation)
        return _instances[validation]


@atexit.register  # registered on import, before model.py's exit handler: so run after it closed the models
def _destroy_instances():
    for inst in list(_instances.values()):
        if not any(d.instance is inst for d in _devices.values()):  # a device left open keeps its instance
            inst.cleanup.release()


def list_devices() -> list[DeviceInfo]:
    """Every Vulkan device the loader sees, in the loader's order (the index `device=` accepts)."""
    inst = _instance(False)
    return [inst.describe(p, i) for i, p in enumerate(inst.physical_devices())]


def choose_device(device=None) -> DeviceInfo:
    """The device load() picks for a bundle that asks for nothing: `device` (index or name
    substring), else VKC_DEVICE, else the best type present. The compiler's --target host uses it."""
    return _candidates(list_devices(), device)[0]


def spirv_needs(info: DeviceInfo, modules) -> tuple[list, set, set]:
    """(what the device lacks for these SPIR-V modules, the device extensions and the features they
    need enabled). `modules` are (name, bundles.spirv.Module) pairs; the reader already matched them
    to the manifest."""
    out = []
    exts = set()
    feats = set()
    for name, module in modules or ():
        for need, why in module.feature_needs(bare=True):
            if need == "unknown":
                out.append(f"{why} (module {name}), which this runtime does not know")
            elif need.startswith("subgroup:"):
                if need[9:] not in info.subgroup_operations:
                    out.append(f"subgroup operation '{need[9:]}' in compute shaders ({why}, module {name})")
            else:
                feats.add(need)
                if need not in info.all_features:
                    out.append(f"feature {need} ({why}, module {name})")
        for ext in sorted(set(module.extensions)):
            core, vk_ext = SPIRV_EXTENSIONS.get(ext, (None, None))
            if core is not None and info.api_version[:2] >= core:
                continue
            if vk_ext is None:
                out.append(f"SPIR-V extension {ext} (module {name}), which this runtime does not know")
            elif vk_ext in info.all_extensions:
                exts.add(vk_ext)
            else:
                out.append(f"extension {vk_ext} (for {ext}, module {name})")
    return out, exts, feats


def needed_features(manifest: dict, info: DeviceInfo, needs) -> set:
    """The device features to enable for a bundle: those `requirements.features` lists (format 1.1)
    and those its modules' capabilities imply (all a format 1.0 bundle says)."""
    return set(manifest.get("requirements", {}).get("features", [])) | spirv_needs(info, needs)[2]


def lacks(info: DeviceInfo, manifest: dict, weights_bytes: int, needs=None, robust: bool = False) -> list[str]:
    """What the device lacks to run the bundle (a variant's view), as short phrases; empty when it
    can run it. weights_bytes: what it uploads of the WEIGHTS section (uploaded_weights_bytes)."""
    req = manifest.get("requirements", {})
    mem = manifest["memory"]
    out = []
    if robust and "robustBufferAccess" not in info.all_features:
        out.append("feature robustBufferAccess (asked for by robust=True; pass robust=False for a trusted bundle)")
    want = tuple(req.get("vulkan_api", (1, 0, 0)))
    if info.api_version < want:
        out.append(f"Vulkan {'.'.join(map(str, want))} (it has {'.'.join(map(str, info.api_version))})")
    out += [f"extension {e}" for e in req.get("extensions", []) if e not in info.all_extensions]
    checks = [("shared memory bytes", req.get("max_shared_memory_bytes", 0), info.max_shared_memory_bytes),
              ("workgroup invocations", req.get("max_workgroup_invocations", 0), info.max_workgroup_invocations),
              ("storage buffer range bytes", req.get("max_storage_buffer_range", 0), info.max_storage_buffer_range),
              ("texel buffer elements", req.get("max_texel_buffer_elements", 0), info.max_texel_buffer_elements)]
    for axis, (w, h) in enumerate(zip(req.get("max_workgroup_size", [1, 1, 1]), info.max_workgroup_size)):
        checks.append((f"workgroup size on axis {'xyz'[axis]}", w, h))
    for what, w, h in checks:
        if w > h:
            out.append(f"{w} {what} (it has {h})")
    spirv_lacks, _, spirv_feats = spirv_needs(info, needs)
    out += [f"feature {f} (requirements.features)" for f in req.get("features", [])
            if f not in info.all_features and f not in spirv_feats]  # those are named just below
    out += spirv_lacks
    # The modules its kernels use (a variant of a format 1.2 bundle shares the list with others).
    modules = [manifest["modules"][i] for i in used_modules(manifest)]
    widest = max((m["bindings"] for m in modules), default=0)
    if widest > info.max_storage_buffers_per_stage:
        out.append(f"{widest} storage buffers in one kernel (it allows {info.max_storage_buffers_per_stage})")
    mib = lambda n: f"{n / 2**20:.1f} MiB"
    for what, size in (("arena", mem["arena_bytes"]), ("weights", weights_bytes)):
        if size > info.max_memory_allocation_bytes:
            out.append(f"one allocation of {mib(size)} for the {what} (it allows {mib(info.max_memory_allocation_bytes)})")
    need = mem["arena_bytes"] + weights_bytes
    if need > info.memory_budget_bytes:
        out.append(f"{mib(need)} of device memory (arena {mib(mem['arena_bytes'])} + weights "
                   f"{mib(weights_bytes)}; its budget is {mib(info.memory_budget_bytes)} of a "
                   f"{mib(info.device_local_bytes)} heap)")
    io = [manifest["tensors"][x["tensor"]]["nbytes"] for x in manifest["inputs"] + manifest["outputs"]]
    if sum(io) > info.host_visible_bytes:
        out.append(f"{mib(sum(io))} of host-visible memory for inputs and outputs "
                   f"(its largest host-visible heap has {mib(info.host_visible_bytes)})")
    align = info.min_storage_buffer_offset_alignment
    if any(m.get("texel_buffers") for m in modules):
        align = max(align, info.min_texel_buffer_offset_alignment)
    bad = [t["name"] for t in manifest["tensors"] if t["offset"] % align]
    if bad:
        out.append(f"tensor offsets aligned to {align} bytes (not so: {', '.join(bad[:5])})")
    for i, d in enumerate(manifest["dispatches"]):
        if any(g > m for g, m in zip(d["groups"], info.max_workgroup_count)):
            out.append(f"{d['groups']} workgroups in dispatch {i} (it allows {list(info.max_workgroup_count)})")
            break
    return out


def _candidates(infos: list[DeviceInfo], device) -> list[DeviceInfo]:
    """The devices `device` (index, name substring, or None: VKC_DEVICE, else all) allows, best
    type first: discrete, integrated, virtual, CPU."""
    listing = "; ".join(map(str, infos))
    if device is None:
        device = os.environ.get("VKC_DEVICE") or None
    if isinstance(device, str) and device.strip().isdigit():
        device = int(device)
    if isinstance(device, bool) or not isinstance(device, (int, str, type(None))):
        raise TypeError(f"device must be an int index, a name substring or None, not {type(device).__name__}")
    if isinstance(device, int):
        if not 0 <= device < len(infos):
            raise VkcRuntimeError(f"Vulkan device {device} does not exist; found {len(infos)}: {listing}. "
                                  "Pass one of those indices or a part of a device name (see `vkc devices`).")
        candidates = [infos[device]]
    elif isinstance(device, str):
        candidates = [i for i in infos if device.lower() in i.name.lower()]
        if not candidates:
            raise VkcRuntimeError(f"No Vulkan device's name contains {device!r}; found {len(infos)}: {listing}. "
                                  "Pass one of those indices or a part of a device name (see `vkc devices`).")
    else:
        candidates = list(infos)
    if not candidates:
        raise VkcRuntimeError(f"The Vulkan loader found no device; {INSTALL_DRIVER}.")
    return sorted(candidates, key=lambda i: (_TYPE_RANK.get(i.type_code, 9), i.index))


def _pick(infos: list[DeviceInfo], manifest: dict, device, needs, robust=False, target=None
          ) -> tuple[DeviceInfo, list[int], dict[int, str]]:
    """(the device, the variants it runs: the chosen profile's shape set, and the profile's other
    variants with what the device lacks for each). The first candidate device (best type first)
    that can run a variant wins; among its variants, the pick rule of FORMAT.md ("Which variant
    runs") chooses. `target` names the profile instead."""
    names = list(dict.fromkeys(v["target"]["name"] for v in variant_views(manifest)))
    if target is not None and target not in names:  # no device can help: say so before trying them
        raise VkcRuntimeError(f"Target {target!r} is not in this bundle; it has {', '.join(map(repr, names))}.")
    problems = []
    for info in _candidates(infos, device):
        def why(view, info=info):
            found = lacks(info, view, uploaded_weights_bytes(manifest, view),
                          needs and [needs[i] for i in used_modules(view)], robust)
            return "; ".join(found) if found else None
        try:
            name, ids = pick_profile(manifest, info.vendor_id, device_type(info.type_code), why, target)
        except VariantError as e:
            problems.append(f"device {info} lacks: {e}")
            continue
        views = variant_views(manifest)
        return info, ids, {i: why(v) for i, v in enumerate(views) if v["target"]["name"] == name and i not in ids}
    who = "No Vulkan device" if device is None else f"The requested Vulkan device ({device!r})"
    raise VkcRuntimeError(f"{who} can run this bundle: {' | '.join(problems)}. Choose another "
                          "device (`vkc devices`) or compile for a profile this device meets (`--target host`).")


def acquire(manifest: dict, device=None, validation=None, robust=False, needs=None, target=None
            ) -> tuple["Device", list[int], dict[int, str]]:
    """(the shared Device that can run this bundle, created on first use, the ids of the variants
    it runs, and the profile's variants it cannot with why); release() the device when done.
    `needs`: (name, SPIR-V Module) per module."""
    if validation is None:
        validation = os.environ.get("VKC_VALIDATION", "") not in ("", "0")
    inst = _instance(bool(validation))
    pdevs = inst.physical_devices()
    if not pdevs:
        raise VkcRuntimeError(f"The Vulkan loader found no device; {INSTALL_DRIVER}.")
    info, ids, unmet = _pick([inst.describe(p, i) for i, p in enumerate(pdevs)], manifest, device, needs, robust, target)
    views = [variant_views(manifest)[i] for i in ids]  # the device serves every variant of the shape set
    used = needs and [needs[j] for j in sorted({k["module"] for v in views for k in v["kernels"]})]
    exts = {e for v in views for e in v["requirements"].get("extensions", [])} | spirv_needs(info, used)[1]
    feats = set().union(*(needed_features(v, info, used) for v in views))
    # Models share a device only when it was created with exactly the same extensions and features.
    key = (info.index, bool(validation), bool(robust), frozenset(exts), frozenset(feats))
    with _lock:
        dev = _devices.get(key)
        if dev is None:
            dev = _devices[key] = Device(inst, pdevs[info.index], info, sorted(exts), robust, key, feats)
        dev.refs += 1
        return dev, ids, unmet


class Device:
    """A logical device with one compute queue on a chosen physical device, shared by models."""

    def __init__(self, inst: Instance, pdev, info: DeviceInfo, exts: list, robust: bool, key,
                 features=frozenset()):
        self.instance = inst
        self.physical = pdev
        self.info = info
        self.key = key
        self.vk, self.ffi = inst.vk, inst.vk.ffi
        self.cleanup = Cleanup()
        self.refs = 0
        self.lost = None  # why nothing runs any more
        self.hung = False
        self.queue_lock = threading.Lock()
        self.features = frozenset()
        try:
            self._create(pdev, info, exts, robust, set(features))
        except BaseException:
            self.cleanup.release()
            raise

    def _create(self, pdev, info, exts, robust, wanted: set):
        vk, ffi, inst = self.vk, self.ffi, self.instance
        with step(f"reading the queues and memory types of {info.name}"):
            families = vk.vkGetPhysicalDeviceQueueFamilyProperties(pdev)
            self.memory_properties = vk.vkGetPhysicalDeviceMemoryProperties(pdev)
        compute = [i for i, f in enumerate(families) if f.queueFlags & vk.VK_QUEUE_COMPUTE_BIT]
        if not compute:
            raise VkcRuntimeError(f"Device {info} has no compute queue; choose another device (`vkc devices`).")
        self.queue_family = compute[0]
        self.timestamp_mask = (1 << families[compute[0]].timestampValidBits) - 1
        api = min(vk.vkGetPhysicalDeviceProperties(pdev).apiVersion, inst.api)
        features, keep = inst.feature_chain(pdev, api, exts) if api >= API_1_1 else (ffi.NULL, [])
        if features != ffi.NULL:  # enable exactly the bundle's features (each may cost), robustness as asked
            wanted = wanted | ({"robustBufferAccess"} if robust else set())
            self.features = frozenset(wanted)  # what this VkDevice has enabled
            for struct in (features.features, *keep):
                for name in _fields(ffi, struct):
                    setattr(struct, name, int(name in wanted))
        prio = ffi.new("float[1]", [1.0])
        qinfo = new(ffi, "VkDeviceQueueCreateInfo", sType=vk.VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                    queueFamilyIndex=self.queue_family, queueCount=1, pQueuePriorities=prio)
        ext_arr, ext_keep = cstrings(ffi, exts)
        dinfo = new(ffi, "VkDeviceCreateInfo", sType=vk.VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, pNext=features,
                    queueCreateInfoCount=1, pQueueCreateInfos=qinfo,
                    enabledExtensionCount=len(exts), ppEnabledExtensionNames=ext_arr)
        with step(f"creating a logical device on {info.name}"):
            self.handle = vk.vkCreateDevice(pdev, dinfo, None)
        self.cleanup.push(vk.vkDestroyDevice, self.handle, None)
        with step("getting the compute queue"):
            self.queue = vk.vkGetDeviceQueue(self.handle, self.queue_family, 0)
        self._set_name = self._label = self._unlabel = None
        if inst.debug_utils:  # names and labels for RenderDoc, Nsight and validation messages
            try:
                get = lambda n: vk.vkGetInstanceProcAddr(inst.handle, n)
                self._set_name, self._label, self._unlabel = (get("vkSetDebugUtilsObjectNameEXT"),
                                                              get("vkCmdBeginDebugUtilsLabelEXT"),
                                                              get("vkCmdEndDebugUtilsLabelEXT"))
            except Exception:  # the loader or driver lacks them: names are a convenience
                self._set_name = self._label = self._unlabel = None

    @property
    def debug_labels(self) -> bool:
        return self._label is not None

    def name(self, object_type: int, handle, name: str):
        """Give a Vulkan object a debug name (shown by RenderDoc, Nsight and the validation layer)."""
        if self._set_name is None:
            return
        ffi = self.ffi
        text = ffi.new("char[]", name.encode("utf-8", "replace")[:200])
        info = new(ffi, "VkDebugUtilsObjectNameInfoEXT", sType=self.vk.VK_STRUCTURE_TYPE_DEBUG_UTILS_OBJECT_NAME_INFO_EXT,
                   objectType=object_type, objectHandle=int(ffi.cast("uintptr_t", handle)), pObjectName=text)
        self._set_name(self.handle, info)

    def begin_label(self, cmd, name: str):
        if self._label is not None:
            text = self.ffi.new("char[]", name.encode("utf-8", "replace")[:200])
            self._label(cmd, new(self.ffi, "VkDebugUtilsLabelEXT", sType=self.vk.VK_STRUCTURE_TYPE_DEBUG_UTILS_LABEL_EXT,
                                 pLabelName=text))

    def end_label(self, cmd):
        if self._unlabel is not None:
            self._unlabel(cmd)

    def submit(self, submit_info, fence, what: str):
        """vkQueueSubmit under the queue's lock (Vulkan requires external synchronization of a queue)."""
        if self.lost:
            raise DeviceLostError(f"The Vulkan device {self.info.name} can run nothing any more ({self.lost}); "
                                  "load the model again.")
        with self.queue_lock:  # the raw call: the package's wrapper costs more than a submit does
            result = self.vk.lib.vkQueueSubmit(self.queue, 1, submit_info, fence)
        if result:
            with step(what):
                raise self.vk.exception_codes.get(result, KeyError)(result)

    def mark_lost(self, why: str, hung: bool = False):
        """Nothing more runs here; new loads get a fresh device."""
        with _lock:
            self.lost, self.hung = self.lost or why, self.hung or hung
            if _devices.get(self.key) is self:
                del _devices[self.key]
            if hung and _instances.get(self.key[1]) is self.instance:
                del _instances[self.key[1]]  # a CPU driver may share its threads per instance: start afresh

    def retain(self):
        with _lock:
            self.refs += 1

    def release(self):
        with _lock:
            self.refs -= 1
            if self.refs:
                return
            if _devices.get(self.key) is self:
                del _devices[self.key]
        if self.hung:  # it may still be running: destroying it (or its instance) is undefined and may hang
            self.cleanup.abandon()
            return
        try:
            with self.queue_lock:
                self.vk.vkDeviceWaitIdle(self.handle)
        except Exception:
            pass  # a lost device still has to be torn down
        self.cleanup.release()
