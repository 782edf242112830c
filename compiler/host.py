"""The compiler's one door to a device: `--target host` profiles the local device, and `vkc tune`
times its candidates here. No other module of compiler/ but the CLI's run/bench/verify/devices
commands imports runtime_min (tests/test_architecture.py holds it so). runtime_min imports
`vulkan` lazily, so importing this module needs no Vulkan loader: only calling it does.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from bundles.manifest import device_type
from runtime_min import choose_device, load

from .targets import TARGETS, Target, get_target
from .tuning_cache import load_tuning


def host_target(device=None) -> Target:
    """The limits of the device the runtime would pick (`device`, else VKC_DEVICE, else the best
    present), on top of the profile its vendor matches, with the tile choices `vkc tune` stored
    for that device."""
    dev = choose_device(device)
    name = dev.name.lower()
    base = TARGETS["nvidia"] if "nvidia" in name else TARGETS["lavapipe"] if "llvmpipe" in name \
        else TARGETS["generic"]
    # Its variants are for this device's vendor and type (in a bundle of several profiles).
    return replace(base, name=f"host:{dev.name}", vendor_ids=(dev.vendor_id,),
                   device_types=(device_type(dev.type_code),),
                   max_shared_memory=min(base.max_shared_memory, dev.max_shared_memory_bytes),
                   max_invocations=min(base.max_invocations, dev.max_workgroup_invocations),
                   subgroup_size=dev.subgroup_size or base.subgroup_size,
                   max_texel_elements=dev.max_texel_buffer_elements,
                   cooperative_matrix=dev.cooperative_matrix,
                   tuned=load_tuning(dev.name))


def resolve_target(name: "str | Target", device=None) -> Target:
    """A named profile (compiler.targets), a Target as is, or "host": the local device's."""
    return host_target(device) if name == "host" else get_target(name)


def time_dispatches(bundle: bytes, device=None, repeat: int = 5) -> tuple[str, list]:
    """(device name, the GPU time of every dispatch in schedule order) for one profiled run of a
    bundle on random inputs: what the tuner compares its candidates by."""
    with load(bundle, device=device) as m:
        rng = np.random.default_rng(0)
        feeds = {t.name: rng.standard_normal(t.shape).astype(t.dtype) for t in m.inputs}
        return m.device_name, m.profile(feeds, repeat=repeat)
