"""The driver's statistics of every distinct kernel of some bundles (VK_KHR_pipeline_executable_properties:
on NVIDIA the register count, which says whether a tile shape spills).

    python3 -m benchmarks.probes.pipeline_stats a.vkb b.vkb ...

Builds each (module, specialization) pipeline once on the first device that offers the extension, with
its own logical device (every supported core feature enabled, cooperative matrix where offered), and
prints one line per pipeline: bundle, kernel name, workgroup count, then each statistic."""
import sys

import vulkan as vk

from benchmarks.cli import exit_on_help
from bundles.format import read_bundle
from bundles.manifest import variant_views
from runtime_min.pipelines import specialization_data

EXT = "VK_KHR_pipeline_executable_properties"


def open_device():
    """(VkDevice, its two statistics functions) on the first device offering the extension, every
    supported core feature enabled."""
    ffi = vk.ffi
    app = vk.VkApplicationInfo(apiVersion=vk.VK_MAKE_VERSION(1, 3, 0))
    inst = vk.vkCreateInstance(vk.VkInstanceCreateInfo(pApplicationInfo=app), None)
    for pdev in vk.vkEnumeratePhysicalDevices(inst):
        exts = {e.extensionName for e in vk.vkEnumerateDeviceExtensionProperties(pdev, None)}
        if EXT in exts:
            break
    else:
        sys.exit(f"no device offers {EXT}")
    wanted = [EXT] + [e for e in ("VK_KHR_cooperative_matrix",) if e in exts]
    chain = [("VkPhysicalDeviceVulkan11Features", vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES),
             ("VkPhysicalDeviceVulkan12Features", vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES),
             ("VkPhysicalDeviceVulkan13Features", vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES),
             ("VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR",
              vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR)]
    if "VK_KHR_cooperative_matrix" in exts:
        chain.append(("VkPhysicalDeviceCooperativeMatrixFeaturesKHR",
                      vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR))
    nxt, keep = ffi.NULL, []
    for ctype, stype in reversed(chain):
        nxt = ffi.new(ctype + "*", {"sType": stype, "pNext": nxt})
        keep.append(nxt)
    feats = ffi.new("VkPhysicalDeviceFeatures2*", {"sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                                   "pNext": nxt})
    vk.vkGetPhysicalDeviceFeatures2(pdev, feats)  # enable everything supported
    feats.features.robustBufferAccess = 0
    prio = ffi.new("float[1]", [1.0])
    queue = ffi.new("VkDeviceQueueCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                                 "queueFamilyIndex": 0, "queueCount": 1, "pQueuePriorities": prio})
    names = [ffi.new("char[]", e.encode()) for e in wanted]
    name_arr = ffi.new("char*[]", names)
    info = ffi.new("VkDeviceCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, "pNext": feats,
                                           "queueCreateInfoCount": 1, "pQueueCreateInfos": queue,
                                           "enabledExtensionCount": len(wanted), "ppEnabledExtensionNames": name_arr})
    dev = ffi.new("VkDevice*")
    if vk.lib.vkCreateDevice(pdev, info, ffi.NULL, dev) != 0:
        sys.exit("vkCreateDevice failed")
    get = lambda n, t: ffi.cast(t, vk.lib.vkGetDeviceProcAddr(dev[0], n.encode()))  # noqa: E731
    return dev[0], (get("vkGetPipelineExecutablePropertiesKHR", "PFN_vkGetPipelineExecutablePropertiesKHR"),
                    get("vkGetPipelineExecutableStatisticsKHR", "PFN_vkGetPipelineExecutableStatisticsKHR"))


def _value(stat) -> str:
    fmt = stat.format
    if fmt == vk.VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR:
        return str(bool(stat.value.b32))
    if fmt == vk.VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR:
        return str(stat.value.i64)
    if fmt == vk.VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR:
        return str(stat.value.u64)
    return f"{stat.value.f64:.3g}"


def statistics(dev, fns, spirv: bytes, bindings: int, spec: list) -> list[tuple[str, str]]:
    ffi, lib = vk.ffi, vk.lib
    get_props, get_stats = fns
    code = ffi.new("char[]", bytes(spirv))
    sm_info = ffi.new("VkShaderModuleCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                                    "codeSize": len(spirv), "pCode": ffi.cast("uint32_t*", code)})
    shader = ffi.new("VkShaderModule*")
    assert lib.vkCreateShaderModule(dev, sm_info, ffi.NULL, shader) == 0
    binds = ffi.new("VkDescriptorSetLayoutBinding[]", max(bindings, 1))
    for i in range(bindings):
        binds[i].binding, binds[i].descriptorCount = i, 1
        binds[i].descriptorType, binds[i].stageFlags = vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, vk.VK_SHADER_STAGE_COMPUTE_BIT
    dsl_info = ffi.new("VkDescriptorSetLayoutCreateInfo*", {
        "sType": vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, "bindingCount": bindings, "pBindings": binds})
    dsl = ffi.new("VkDescriptorSetLayout*")
    assert lib.vkCreateDescriptorSetLayout(dev, dsl_info, ffi.NULL, dsl) == 0
    pl_info = ffi.new("VkPipelineLayoutCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                                      "setLayoutCount": 1, "pSetLayouts": dsl})
    layout = ffi.new("VkPipelineLayout*")
    assert lib.vkCreatePipelineLayout(dev, pl_info, ffi.NULL, layout) == 0
    data = ffi.new("char[]", specialization_data(spec) or b"\0")
    entries = ffi.new("VkSpecializationMapEntry[]", max(len(spec), 1))
    for i, e in enumerate(spec):
        entries[i].constantID, entries[i].offset, entries[i].size = e["id"], 4 * i, 4
    spec_info = ffi.new("VkSpecializationInfo*", {"mapEntryCount": len(spec), "pMapEntries": entries,
                                                  "dataSize": 4 * len(spec), "pData": data})
    entry = ffi.new("char[]", b"main")
    info = ffi.new("VkComputePipelineCreateInfo*", {
        "sType": vk.VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        "flags": vk.VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR,
        "stage": {"sType": vk.VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                  "stage": vk.VK_SHADER_STAGE_COMPUTE_BIT, "module": shader[0], "pName": entry,
                  "pSpecializationInfo": spec_info},
        "layout": layout[0]})
    pipeline = ffi.new("VkPipeline*")
    assert lib.vkCreateComputePipelines(dev, ffi.NULL, 1, info, ffi.NULL, pipeline) == 0
    pinfo = ffi.new("VkPipelineInfoKHR*", {"sType": vk.VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR, "pipeline": pipeline[0]})
    count = ffi.new("uint32_t*")
    get_props(dev, pinfo, count, ffi.NULL)
    out = []
    for index in range(count[0]):
        einfo = ffi.new("VkPipelineExecutableInfoKHR*", {"sType": vk.VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR,
                                                         "pipeline": pipeline[0], "executableIndex": index})
        n = ffi.new("uint32_t*")
        get_stats(dev, einfo, n, ffi.NULL)
        stats = ffi.new("VkPipelineExecutableStatisticKHR[]", n[0])
        for s in range(n[0]):
            stats[s].sType = vk.VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR
        get_stats(dev, einfo, n, stats)
        out += [(ffi.string(s.name).decode(), _value(s)) for s in stats]
    lib.vkDestroyPipeline(dev, pipeline[0], ffi.NULL)
    lib.vkDestroyPipelineLayout(dev, layout[0], ffi.NULL)
    lib.vkDestroyDescriptorSetLayout(dev, dsl[0], ffi.NULL)
    lib.vkDestroyShaderModule(dev, shader[0], ffi.NULL)
    return out


def main(paths):
    dev, fns = open_device()
    for path in paths:
        with read_bundle(path) as bundle:
            modules, seen = bundle.manifest["modules"], set()
            for view in variant_views(bundle.manifest):
                for kernel in view["kernels"]:
                    spec = kernel.get("specialization", [])
                    key = (kernel["module"], specialization_data(spec))
                    if key in seen:
                        continue
                    seen.add(key)
                    module = modules[kernel["module"]]
                    stats = statistics(dev, fns, bundle.spirv[kernel["module"]], module["bindings"], spec)
                    print(path, kernel["name"], " ".join(f"{n}={v}" for n, v in stats), flush=True)


if __name__ == "__main__":
    exit_on_help(__doc__)
    main(sys.argv[1:])
