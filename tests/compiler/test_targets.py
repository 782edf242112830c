"""Device profiles (compiler/targets.py) and how `--target host` derives one from the device's
reported properties (compiler/host.py), on fake devices: this machine has no GPU."""
from dataclasses import replace
from types import SimpleNamespace

import pytest

from compiler import host
from compiler.targets import (MIN_WORKGROUPS_PER_CORE, NVIDIA_PROFILE_SMS, SPLITK_WORKGROUPS_PER_CORE, TARGETS,
                              with_cores)
from runtime_min.device import DeviceInfo


def fake_device(name, vendor_id, extensions=(), type_code=2):
    return DeviceInfo(index=0, name=name, type="discrete GPU", api_version=(1, 3), driver="fake",
                      max_shared_memory_bytes=49152, max_workgroup_invocations=1024, max_workgroup_size=(1024,) * 3,
                      subgroup_size=32, max_storage_buffer_range=2**31, min_storage_buffer_offset_alignment=64,
                      max_memory_allocation_bytes=2**32, device_local_bytes=2**34, host_visible_bytes=2**34,
                      extensions=(), all_extensions=frozenset(extensions), type_code=type_code, vendor_id=vendor_id)


@pytest.fixture
def on(monkeypatch):
    """host_target on a fake device whose extension structs hold `props`."""
    def use(dev, **props):
        monkeypatch.setattr(host, "choose_device", lambda device=None: dev)
        monkeypatch.setattr(host, "device_properties", lambda d, ctype, stype: SimpleNamespace(**props))
        monkeypatch.setattr(host, "load_tuning", lambda name: ())
        return host.host_target()
    return use


def test_the_nvidia_profile_names_its_device_class():
    nv = TARGETS["nvidia"]
    assert nv.min_workgroups == MIN_WORKGROUPS_PER_CORE * NVIDIA_PROFILE_SMS
    assert nv.splitk_workgroups == SPLITK_WORKGROUPS_PER_CORE * NVIDIA_PROFILE_SMS


def test_with_cores_scales_only_what_the_profile_uses():
    assert with_cores(TARGETS["nvidia"], 0) is TARGETS["nvidia"]
    small = with_cores(TARGETS["nvidia"], 20)
    assert (small.min_workgroups, small.splitk_workgroups) == (40, 80)
    assert with_cores(TARGETS["generic"], 10).splitk_workgroups == 0  # generic does not split K first


def test_host_scales_to_an_nvidia_gpus_sms(on):
    t = on(fake_device("NVIDIA GeForce RTX 4060", 0x10DE, ["VK_NV_shader_sm_builtins"]), shaderSMCount=24,
           shaderWarpsPerSM=48)
    assert t.name == "host:NVIDIA GeForce RTX 4060" and t.vendor_ids == (0x10DE,)
    assert (t.min_workgroups, t.splitk_workgroups) == (48, 96)
    assert (t.tile_m, t.tile_n) == (TARGETS["nvidia"].tile_m, TARGETS["nvidia"].tile_n)


def test_host_counts_an_amd_gpus_compute_units(on):
    t = on(fake_device("AMD Radeon RX 7900 XTX", 0x1002, ["VK_AMD_shader_core_properties"]), shaderEngineCount=6,
           shaderArraysPerEngineCount=2, computeUnitsPerShaderArray=8)
    assert t.min_workgroups == MIN_WORKGROUPS_PER_CORE * 96
    assert t.splitk_workgroups == 0  # the generic profile it builds on does not split K first


def test_a_device_that_reports_no_cores_keeps_the_profiles_counts(on):
    t = on(fake_device("NVIDIA H200", 0x10DE))
    assert t.min_workgroups == TARGETS["nvidia"].min_workgroups
    t = on(replace(fake_device("Mali-G715", 0x13B5), name="Mali-G715"))
    assert t.min_workgroups == TARGETS["generic"].min_workgroups


def test_device_properties_reads_a_struct_of_the_real_device():
    """The raw vkGetPhysicalDeviceProperties2 query core_count makes, on this machine's device with
    a struct every Vulkan 1.1 device fills; lavapipe reports no cores, so its profile stays."""
    dev = host.choose_device(None)
    sub = host.device_properties(dev, "VkPhysicalDeviceSubgroupProperties",
                                 "VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES")
    assert sub.subgroupSize == dev.subgroup_size
    if "llvmpipe" in dev.name:
        assert host.core_count(dev) == 0
