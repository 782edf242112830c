"""The compiler's one door to a device: `--target host` profiles the local device, and `vkc tune`
times its candidates here. No other module of compiler/ but the CLI's run/bench/verify/devices
commands imports runtime_min (tests/test_architecture.py holds it so). runtime_min imports
`vulkan` lazily, so importing this module needs no Vulkan loader: only calling it does.
"""
from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from bundles.dtypes import COMPONENT_TYPES
from bundles.manifest import device_type
from runtime_min import choose_device, load
# runtime_min's process-wide instance, for the one query it does not make (coopmat2_shapes): adding
# a public door for it would cost runtime_min lines it keeps under its budget (docs/ARCHITECTURE.md).
from runtime_min.device import _instance

from .targets import TARGETS, Target, get_target, with_cores
from .tuning_cache import load_tuning


NVIDIA = 0x10DE


def host_target(device=None) -> Target:
    """The limits of the device the runtime would pick (`device`, else VKC_DEVICE, else the best
    present), on top of the profile its vendor matches, its workgroup counts scaled to the cores
    the device reports (core_count), with the tile choices `vkc tune` stored for that device."""
    dev = choose_device(device)
    name = dev.name.lower()
    base = TARGETS["nvidia"] if dev.vendor_id == NVIDIA or "nvidia" in name else \
        TARGETS["lavapipe"] if "llvmpipe" in name else TARGETS["generic"]
    base = with_cores(base, core_count(dev))
    # Its variants are for this device's vendor and type (in a bundle of several profiles).
    return replace(base, name=f"host:{dev.name}", vendor_ids=(dev.vendor_id,),
                   device_types=(device_type(dev.type_code),),
                   max_shared_memory=min(base.max_shared_memory, dev.max_shared_memory_bytes),
                   max_invocations=min(base.max_invocations, dev.max_workgroup_invocations),
                   subgroup_size=dev.subgroup_size or base.subgroup_size,
                   max_texel_elements=dev.max_texel_buffer_elements,
                   cooperative_matrix=dev.cooperative_matrix, coopmat2=coopmat2_shapes(dev),
                   tuned=load_tuning(dev.name))


def core_count(dev) -> int:
    """The device's streaming multiprocessors (NVIDIA: VK_NV_shader_sm_builtins' shaderSMCount) or
    compute units (AMD: VK_AMD_shader_core_properties' engines x arrays x units per array); 0
    where it reports neither (the profile's counts then stay)."""
    if "VK_NV_shader_sm_builtins" in dev.all_extensions:
        p = device_properties(dev, "VkPhysicalDeviceShaderSMBuiltinsPropertiesNV",
                              "VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SM_BUILTINS_PROPERTIES_NV")
        return int(p.shaderSMCount)
    if "VK_AMD_shader_core_properties" in dev.all_extensions:
        p = device_properties(dev, "VkPhysicalDeviceShaderCorePropertiesAMD",
                              "VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CORE_PROPERTIES_AMD")
        return int(p.shaderEngineCount * p.shaderArraysPerEngineCount * p.computeUnitsPerShaderArray)
    return 0


def device_properties(dev, ctype: str, stype: str):
    """One extension's properties struct of the device, through vkGetPhysicalDeviceProperties2."""
    inst = _instance(False)
    vk, ffi = inst.vk, inst.vk.ffi
    ext = ffi.new(f"{ctype}*")
    ext.sType = getattr(vk, stype)
    props2 = ffi.new("VkPhysicalDeviceProperties2*")
    props2.sType = vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2
    props2.pNext = ext
    vk.lib.vkGetPhysicalDeviceProperties2(inst.physical_devices()[dev.index], props2)
    return ext


# What templates/matmul_coopmat2.comp.j2 uses of VK_NV_cooperative_matrix2.
COOPMAT2_FEATURES = ("cooperativeMatrixWorkgroupScope", "cooperativeMatrixFlexibleDimensions",
                     "cooperativeMatrixTensorAddressing")


def flexible_dimensions(vk, instance, pdev) -> list[tuple]:
    """Every entry of vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV as (M, N, K
    granularity, A, B, C and result component types (bundles.dtypes names), saturating, scope,
    workgroup invocations). Called raw: the `vulkan` package predates its 56-byte struct (sType,
    pNext, then those ten 32-bit fields)."""
    name = b"vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV"
    ffi, fn = vk.ffi, vk.lib.vkGetInstanceProcAddr(instance, name)
    if fn == ffi.NULL:
        return []
    call = ffi.cast("VkResult(*)(VkPhysicalDevice, uint32_t*, void*)", fn)
    count = ffi.new("uint32_t*")
    if call(pdev, count, ffi.NULL) != vk.VK_SUCCESS:
        return []
    words = ffi.new("uint32_t[]", 14 * count[0])
    for i in range(count[0]):
        words[14 * i] = 1000593001  # VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_FLEXIBLE_DIMENSIONS_PROPERTIES_NV
    if call(pdev, count, words) not in (vk.VK_SUCCESS, vk.VK_INCOMPLETE):
        return []
    rows = [[words[14 * i + 4 + j] for j in range(10)] for i in range(count[0])]
    return [(*r[:3], *(COMPONENT_TYPES.get(t, t) for t in r[3:7]), *r[7:]) for r in rows]


def coopmat2_shapes(dev) -> tuple:
    """The device's workgroup-scope float16 x float16 -> float32 VK_NV_cooperative_matrix2 shapes,
    (M, N, K granularity, workgroup invocations) as Target.coopmat2 holds them, where it has what
    matmul_coopmat2 uses; else ()."""
    if ("VK_NV_cooperative_matrix2" not in dev.all_extensions or dev.api_version < (1, 3)
            or not set(COOPMAT2_FEATURES) <= dev.all_features):
        return ()
    inst = _instance(False)
    rows = flexible_dimensions(inst.vk, inst.handle, inst.physical_devices()[dev.index])
    return tuple((*r[:3], r[9]) for r in rows
                 if r[3:7] == ("float16", "float16", "float32", "float32") and not r[7] and r[8] == 2)


def resolve_target(name: "str | Target", device=None) -> Target:
    """A named profile (compiler.targets), a Target as is, or "host": the local device's."""
    return host_target(device) if name == "host" else get_target(name)


# Before a model is timed, profiled runs (one upload, the GPU kept busy) in rounds of WARM_UP_ROUND_S
# until three rounds in a row agree within WARM_UP_STEADY, for at most WARM_UP_LIMIT_S: a GPU left
# idle while a candidate compiled sits at its lowest clocks (an H200: 345 MHz against 1980) and
# takes a while to clock up, which made a GEMM five times slower cold than warm; a fixed short
# warm-up was not enough on large models. Host-to-host runs do not warm it where copies dominate.
WARM_UP_ROUND_S = 0.1
WARM_UP_STEADY = 0.05
WARM_UP_LIMIT_S = 2.0


def time_dispatches(bundle: bytes, device=None, repeat: int = 5) -> tuple[str, list]:
    """(device name, the GPU time of every dispatch in schedule order) for profiled runs of a
    bundle on random inputs, once warm_up finds its time steady: what the tuner compares its
    candidates by."""
    with load(bundle, device=device) as m:
        rng = np.random.default_rng(0)
        feeds = {t.name: rng.standard_normal(t.shape).astype(t.dtype) for t in m.inputs}
        warm_up(m, feeds)
        return m.device_name, m.profile(feeds, repeat=repeat)


def warm_up(model, feeds: dict, limit_s: float = WARM_UP_LIMIT_S) -> None:
    """Keep the GPU busy with a loaded model until its time is steady (see WARM_UP_ROUND_S), so that
    it runs at its working clocks when it is timed."""
    start, rounds = time.perf_counter(), []
    while time.perf_counter() - start < limit_s:
        round_end = time.perf_counter() + WARM_UP_ROUND_S
        while True:
            total = sum(t.seconds for t in model.profile(feeds, repeat=5))
            if time.perf_counter() >= round_end:
                break
        rounds.append(total)
        if len(rounds) >= 3 and max(rounds[-3:]) <= (1 + WARM_UP_STEADY) * min(rounds[-3:]):
            return
