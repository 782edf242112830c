"""Buffers: memory-type choice, device-local buffers (arena, weights), mapped host-visible staging."""
from __future__ import annotations

import numpy as np

from .device import Device, new
from .errors import VkcRuntimeError, count, step


def memory_type(dev: Device, type_bits: int, required: int, preferred: int = 0) -> int:
    """Index of a memory type allowed by type_bits with all `required` flags, `preferred` ones if possible."""
    props = dev.memory_properties
    ok = [i for i in range(props.memoryTypeCount)
          if type_bits & (1 << i) and props.memoryTypes[i].propertyFlags & required == required]
    if not ok:
        raise VkcRuntimeError(f"Device {dev.info.name} has no memory type with flags {required:#x} for a buffer; "
                              "choose another device (`vkc devices`).")
    best = [i for i in ok if props.memoryTypes[i].propertyFlags & preferred == preferred]
    return (best or ok)[0]


class Buffer:
    """One VkBuffer bound to its own allocation. `host` buffers are mapped and expose `.bytes` (a uint8
    numpy view); device-local ones are mapped too when their memory happens to be host-visible
    (integrated GPUs, lavapipe), so uploads can skip a staging copy."""

    def __init__(self, dev: Device, size: int, usage: int, what: str, cleanup, host: bool = False,
                 map_if_visible: bool = False):
        vk, ffi = dev.vk, dev.ffi
        self.size = size = max(int(size), 4)  # a zero-sized buffer is invalid
        info = new(ffi, "VkBufferCreateInfo", sType=vk.VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, size=size,
                   usage=usage, sharingMode=vk.VK_SHARING_MODE_EXCLUSIVE)
        with step(f"creating the {what} buffer ({size} bytes)"):
            self.handle = vk.vkCreateBuffer(dev.handle, info, None)
        self.memory, self.allocated = None, 0
        cleanup.push(self._destroy, vk, dev.handle)
        with step(f"allocating {size} bytes for the {what} buffer"):
            req = vk.vkGetBufferMemoryRequirements(dev.handle, self.handle)
            if host:  # coherent, so no flush/invalidate; cached makes reading outputs back fast
                index = memory_type(dev, req.memoryTypeBits,
                                    vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
                                    vk.VK_MEMORY_PROPERTY_HOST_CACHED_BIT)
            else:
                index = memory_type(dev, req.memoryTypeBits, vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT)
            alloc = new(ffi, "VkMemoryAllocateInfo", sType=vk.VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                        allocationSize=req.size, memoryTypeIndex=index)
            self.memory = vk.vkAllocateMemory(dev.handle, alloc, None)
            self.allocated = req.size
            count("allocations", 1)
            count("allocated_bytes", req.size)
        with step(f"binding memory to the {what} buffer"):
            vk.vkBindBufferMemory(dev.handle, self.handle, self.memory, 0)
        dev.name(vk.VK_OBJECT_TYPE_BUFFER, self.handle, f"vkc {what}")
        self.bytes = None
        flags = dev.memory_properties.memoryTypes[index].propertyFlags
        coherent = vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
        if host or (map_if_visible and flags & coherent == coherent):
            with step(f"mapping the {what} buffer"):
                mapped = vk.vkMapMemory(dev.handle, self.memory, 0, size, 0)  # an ffi.buffer of `size` bytes
            cleanup.push(self._unmap, vk, dev.handle)
            self.bytes = np.frombuffer(mapped, dtype=np.uint8)

    def _destroy(self, vk, device):
        vk.vkDestroyBuffer(device, self.handle, None)  # before its memory, which the layer prefers
        if self.memory is not None:
            vk.vkFreeMemory(device, self.memory, None)
            count("allocations", -1)
            count("allocated_bytes", -self.allocated)

    def _unmap(self, vk, device):
        self.bytes = None  # drop the view first: nothing may touch the mapping after this
        vk.vkUnmapMemory(device, self.memory)
