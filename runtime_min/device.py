"""Vulkan instance (with optional validation), device enumeration and choice, logical device and queue."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from .errors import INSTALL_DRIVER, Cleanup, VkcRuntimeError, import_vulkan, step

VALIDATION_LAYER = "VK_LAYER_KHRONOS_validation"
EXTENSIONS_OF_INTEREST = (
    "VK_KHR_16bit_storage", "VK_KHR_8bit_storage", "VK_KHR_shader_float16_int8",
    "VK_KHR_shader_integer_dot_product", "VK_KHR_cooperative_matrix", "VK_NV_cooperative_matrix",
    "VK_EXT_subgroup_size_control", "VK_KHR_shader_subgroup_extended_types",
)
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
API_1_1, API_1_2, API_1_3 = (1 << 22) | (1 << 12), (1 << 22) | (2 << 12), (1 << 22) | (3 << 12)


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
    all_extensions: frozenset = field(repr=False, default=frozenset())
    type_code: int = field(repr=False, default=0)

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


class Instance:
    """A VkInstance, with the validation layer and a message collector when asked."""

    def __init__(self, validation: bool, cleanup: Cleanup):
        self.vk = vk = import_vulkan()
        ffi = vk.ffi
        with step("asking the Vulkan loader for its version"):
            loader = vk.vkEnumerateInstanceVersion()
        self.api = min(loader, API_1_3)
        layers, exts = [], []
        if validation:
            with step("listing Vulkan layers"):
                have = {p.layerName for p in vk.vkEnumerateInstanceLayerProperties()}
            if VALIDATION_LAYER not in have:
                raise VkcRuntimeError(
                    f"Validation was requested (validation=True or VKC_VALIDATION=1) but {VALIDATION_LAYER} "
                    "is not installed; install it (`apt-get install vulkan-validationlayers`) or turn validation off.")
            layers, exts = [VALIDATION_LAYER], ["VK_EXT_debug_utils"]
        name = ffi.new("char[]", b"vkc runtime_min")
        app = new(ffi, "VkApplicationInfo", sType=vk.VK_STRUCTURE_TYPE_APPLICATION_INFO,
                  pApplicationName=name, pEngineName=name, apiVersion=self.api)
        layer_arr, layer_keep = cstrings(ffi, layers)
        ext_arr, ext_keep = cstrings(ffi, exts)
        # Chained into the create info too, so messages from vkCreate/DestroyInstance are caught.
        dbg = _messenger_info(vk) if validation else ffi.NULL
        info = new(ffi, "VkInstanceCreateInfo", sType=vk.VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                   pNext=dbg, pApplicationInfo=app, enabledLayerCount=len(layers),
                   ppEnabledLayerNames=layer_arr, enabledExtensionCount=len(exts),
                   ppEnabledExtensionNames=ext_arr)
        with step("creating a Vulkan instance"):
            self.handle = vk.vkCreateInstance(info, None)
        cleanup.push(vk.vkDestroyInstance, self.handle, None)
        if validation:
            with step("creating the validation message collector"):
                create = vk.vkGetInstanceProcAddr(self.handle, "vkCreateDebugUtilsMessengerEXT")
                destroy = vk.vkGetInstanceProcAddr(self.handle, "vkDestroyDebugUtilsMessengerEXT")
                messenger = create(self.handle, dbg, None)
            cleanup.push(destroy, self.handle, messenger, None)
        self._keep = (name, app, layer_keep, ext_keep, dbg)

    def physical_devices(self):
        with step("enumerating Vulkan devices"):
            return list(self.vk.vkEnumeratePhysicalDevices(self.handle))

    def describe(self, pdev, index: int) -> DeviceInfo:
        vk, ffi = self.vk, self.vk.ffi
        with step("reading device properties"):
            base = vk.vkGetPhysicalDeviceProperties(pdev)  # a StrWrap: char arrays read as str
            api = min(base.apiVersion, self.api)
            sub = new(ffi, "VkPhysicalDeviceSubgroupProperties",
                      sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES)
            m3 = new(ffi, "VkPhysicalDeviceMaintenance3Properties",
                     sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES, pNext=sub)
            drv = new(ffi, "VkPhysicalDeviceDriverProperties",
                      sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES, pNext=m3)
            props2 = new(ffi, "VkPhysicalDeviceProperties2", sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                         pNext=drv if api >= API_1_2 else m3)
            if api >= API_1_1:
                vk.vkGetPhysicalDeviceProperties2(pdev, props2)
            exts = frozenset(e.extensionName for e in vk.vkEnumerateDeviceExtensionProperties(pdev, None))
            mem = vk.vkGetPhysicalDeviceMemoryProperties(pdev)
        lim = base.limits
        if api >= API_1_2:
            driver = f"{ffi.string(drv.driverName).decode()} {ffi.string(drv.driverInfo).decode()}".strip()
        else:
            driver = f"driver version {base.driverVersion:#x}"
        heaps = [mem.memoryHeaps[i] for i in range(mem.memoryHeapCount)]
        host_heaps = {mem.memoryTypes[i].heapIndex for i in range(mem.memoryTypeCount)
                      if mem.memoryTypes[i].propertyFlags & vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT}
        return DeviceInfo(
            index=index, name=base.deviceName, type=_TYPE_NAMES.get(base.deviceType, "other"),
            api_version=version_tuple(base.apiVersion), driver=driver,
            max_shared_memory_bytes=lim.maxComputeSharedMemorySize,
            max_workgroup_invocations=lim.maxComputeWorkGroupInvocations,
            max_workgroup_size=tuple(lim.maxComputeWorkGroupSize),
            subgroup_size=sub.subgroupSize if api >= API_1_1 else 0,
            max_storage_buffer_range=lim.maxStorageBufferRange,
            min_storage_buffer_offset_alignment=lim.minStorageBufferOffsetAlignment,
            max_memory_allocation_bytes=m3.maxMemoryAllocationSize if api >= API_1_1 else 1 << 31,
            device_local_bytes=max([h.size for h in heaps if h.flags & vk.VK_MEMORY_HEAP_DEVICE_LOCAL_BIT] or [0]),
            host_visible_bytes=max([heaps[i].size for i in host_heaps] or [0]),
            extensions=tuple(e for e in EXTENSIONS_OF_INTEREST if e in exts), all_extensions=exts,
            type_code=base.deviceType)


def list_devices() -> list[DeviceInfo]:
    """Every Vulkan device the loader sees, in the loader's order (the index `device=` accepts)."""
    cleanup = Cleanup()
    try:
        inst = Instance(validation=False, cleanup=cleanup)
        return [inst.describe(p, i) for i, p in enumerate(inst.physical_devices())]
    finally:
        cleanup.release()


def lacks(info: DeviceInfo, manifest: dict) -> list[str]:
    """What the device lacks to run the bundle, as short phrases; empty when it can run it."""
    req, mem, out = manifest.get("requirements", {}), manifest["memory"], []
    want = tuple(req.get("vulkan_api", (1, 0, 0)))
    if info.api_version < want:
        out.append(f"Vulkan {'.'.join(map(str, want))} (it has {'.'.join(map(str, info.api_version))})")
    out += [f"extension {e}" for e in req.get("extensions", []) if e not in info.all_extensions]
    checks = [("shared memory bytes", req.get("max_shared_memory_bytes", 0), info.max_shared_memory_bytes),
              ("workgroup invocations", req.get("max_workgroup_invocations", 0), info.max_workgroup_invocations),
              ("storage buffer range bytes", req.get("max_storage_buffer_range", 0), info.max_storage_buffer_range)]
    for axis, (w, h) in enumerate(zip(req.get("max_workgroup_size", [1, 1, 1]), info.max_workgroup_size)):
        checks.append((f"workgroup size on axis {'xyz'[axis]}", w, h))
    for what, w, h in checks:
        if w > h:
            out.append(f"{w} {what} (it has {h})")
    for what, size in (("arena", mem["arena_bytes"]), ("weights", mem["weights_bytes"])):
        if size > min(info.device_local_bytes, info.max_memory_allocation_bytes):
            out.append(f"{size} bytes of device memory for the {what} (it allows {info.device_local_bytes} "
                       f"in its largest heap, {info.max_memory_allocation_bytes} per allocation)")
    if mem["arena_bytes"] + mem["weights_bytes"] > info.device_local_bytes:
        out.append(f"{mem['arena_bytes'] + mem['weights_bytes']} bytes of device memory for arena and weights "
                   f"(its largest heap has {info.device_local_bytes})")
    io = [manifest["tensors"][x["tensor"]]["nbytes"] for x in manifest["inputs"] + manifest["outputs"]]
    if max(sum(io), mem["weights_bytes"]) > info.host_visible_bytes:
        out.append(f"{max(sum(io), mem['weights_bytes'])} bytes of host-visible memory for staging "
                   f"(its largest host-visible heap has {info.host_visible_bytes})")
    align = info.min_storage_buffer_offset_alignment
    bad = [t["name"] for t in manifest["tensors"] if t["offset"] % align]
    if bad:
        out.append(f"tensor offsets aligned to {align} bytes (not so: {', '.join(bad[:5])})")
    return out


def _pick(infos: list[DeviceInfo], manifest: dict, device) -> DeviceInfo:
    listing = "; ".join(map(str, infos))
    if device is None:
        device = os.environ.get("VKC_DEVICE") or None
    if isinstance(device, str) and device.strip().isdigit():
        device = int(device)
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
    elif device is None:
        candidates = list(infos)
    else:
        raise TypeError(f"device must be an int index, a name substring or None, not {type(device).__name__}")
    candidates.sort(key=lambda i: (_TYPE_RANK.get(i.type_code, 9), i.index))
    problems = []
    for info in candidates:
        missing = lacks(info, manifest)
        if not missing:
            return info
        problems.append(f"device {info} lacks: {'; '.join(missing)}")
    who = "No Vulkan device" if device is None else f"The requested Vulkan device ({device!r})"
    raise VkcRuntimeError(f"{who} cannot run this bundle: {' | '.join(problems)}. Choose another "
                          "device (`vkc devices`) or compile for a profile this device meets (`--target host`).")


class Device:
    """The chosen physical device, a logical device with one compute queue, and what must be destroyed."""

    def __init__(self, manifest: dict, device=None, validation=None):
        if validation is None:
            validation = os.environ.get("VKC_VALIDATION", "") not in ("", "0")
        self.cleanup = Cleanup()
        try:
            self._create(manifest, device, bool(validation))
        except BaseException:
            self.cleanup.release()
            raise

    def _create(self, manifest, device, validation):
        self.instance = inst = Instance(validation, self.cleanup)
        self.vk = vk = inst.vk
        self.ffi = ffi = vk.ffi
        pdevs = inst.physical_devices()
        if not pdevs:
            raise VkcRuntimeError(f"The Vulkan loader found no device; {INSTALL_DRIVER}.")
        self.info = _pick([inst.describe(p, i) for i, p in enumerate(pdevs)], manifest, device)
        self.physical = pdev = pdevs[self.info.index]
        with step(f"reading the queues and memory types of {self.info.name}"):
            families = vk.vkGetPhysicalDeviceQueueFamilyProperties(pdev)
            self.memory_properties = vk.vkGetPhysicalDeviceMemoryProperties(pdev)
        compute = [i for i, f in enumerate(families) if f.queueFlags & vk.VK_QUEUE_COMPUTE_BIT]
        if not compute:
            raise VkcRuntimeError(f"Device {self.info} has no compute queue; choose another device (`vkc devices`).")
        self.queue_family = compute[0]
        features, keep = self._features(manifest)
        prio = ffi.new("float[1]", [1.0])
        qinfo = new(ffi, "VkDeviceQueueCreateInfo", sType=vk.VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                    queueFamilyIndex=self.queue_family, queueCount=1, pQueuePriorities=prio)
        exts = list(manifest.get("requirements", {}).get("extensions", []))
        ext_arr, ext_keep = cstrings(ffi, exts)
        info = new(ffi, "VkDeviceCreateInfo", sType=vk.VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, pNext=features,
                   queueCreateInfoCount=1, pQueueCreateInfos=qinfo,
                   enabledExtensionCount=len(exts), ppEnabledExtensionNames=ext_arr)
        with step(f"creating a logical device on {self.info.name}"):
            self.handle = vk.vkCreateDevice(pdev, info, None)
        self.cleanup.push(vk.vkDestroyDevice, self.handle, None)
        with step("getting the compute queue"):
            self.queue = vk.vkGetDeviceQueue(self.handle, self.queue_family, 0)

    def _features(self, manifest):
        """Enable every supported core feature a kernel might use (16-bit storage, float16, int8, ...)."""
        vk, ffi = self.vk, self.ffi
        api = min(vk.vkGetPhysicalDeviceProperties(self.physical).apiVersion, self.instance.api)
        if api < API_1_1:
            return ffi.NULL, ()
        chain = []
        if api >= API_1_2:
            chain += [("VkPhysicalDeviceVulkan11Features", vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES),
                      ("VkPhysicalDeviceVulkan12Features", vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES)]
        if api >= API_1_3:
            chain.append(("VkPhysicalDeviceVulkan13Features", vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES))
        exts = manifest.get("requirements", {}).get("extensions", [])
        if "VK_KHR_cooperative_matrix" in exts:
            chain.append(("VkPhysicalDeviceCooperativeMatrixFeaturesKHR",
                          vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR))
        if "VK_NV_cooperative_matrix" in exts:
            chain.append(("VkPhysicalDeviceCooperativeMatrixFeaturesNV",
                          vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV))
        nxt, keep = ffi.NULL, []
        for ctype, stype in reversed(chain):
            nxt = new(ffi, ctype, sType=stype, pNext=nxt)
            keep.append(nxt)
        feats = new(ffi, "VkPhysicalDeviceFeatures2", sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, pNext=nxt)
        with step("reading device features"):
            vk.vkGetPhysicalDeviceFeatures2(self.physical, feats)
        feats.features.robustBufferAccess = 0  # bounds checks cost speed; the compiler proves accesses in range
        for p in keep:
            if hasattr(p, "robustImageAccess"):
                p.robustImageAccess = 0
        self._feature_keep = (feats, keep)
        return feats, keep

    def close(self):
        self.cleanup.release()
