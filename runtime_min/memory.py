"""Buffers: memory-type choice, device-local buffers (arena, weights), mapped host-visible staging."""
from __future__ import annotations

import weakref

import numpy as np

from .device import Device, new
from .errors import VkcRuntimeError, count, step


def memory_type(dev: Device, type_bits: int, required: int, *preferred: int, size: int = 0) -> int:
    """Index of a memory type allowed by type_bits with all `required` flags: the first with all flags of
    the earliest `preferred` set whose heap holds 4x `size` (a small BAR heap is left to the driver)."""
    props = dev.memory_properties
    ok = [i for i in range(props.memoryTypeCount)
          if type_bits & (1 << i) and props.memoryTypes[i].propertyFlags & required == required]
    if not ok:
        raise VkcRuntimeError(f"Device {dev.info.name} has no memory type with flags {required:#x} for a buffer; "
                              "choose another device (`vkc devices`).")
    for want in preferred:
        best = [i for i in ok if props.memoryTypes[i].propertyFlags & want == want
                and props.memoryHeaps[props.memoryTypes[i].heapIndex].size >= 4 * size]
        if best:
            return best[0]
    return ok[0]


class Buffer:
    """One VkBuffer bound to its own allocation. `host` buffers are mapped and expose `.bytes` (a uint8
    numpy view); `prefer`: memory-type flag sets to try in order (host-visible is required). Device-local
    ones are mapped too when their memory happens to be host-visible and coherent (integrated GPUs,
    lavapipe), so uploads can skip a staging copy. Non-coherent memory: flush() after the host writes,
    flush(invalidate=1) before it reads (the whole mapping: it spans the allocation, so no atom rounding)."""

    def __init__(self, dev: Device, size: int, usage: int, what: str, cleanup, host: bool = False,
                 prefer: tuple = (), map_if_visible: bool = False, lent: bool = False):
        vk, ffi = dev.vk, dev.ffi
        self.size = size = max(int(size), 4)  # a zero-sized buffer is invalid
        info = new(ffi, "VkBufferCreateInfo", sType=vk.VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, size=size,
                   usage=usage, sharingMode=vk.VK_SHARING_MODE_EXCLUSIVE)
        with step(f"creating the {what} buffer ({size} bytes)"):
            self.handle = vk.vkCreateBuffer(dev.handle, info, None)
        self.memory, self.allocated = None, 0
        cleanup.push(self._lend_out if lent else self._destroy, vk, dev)
        with step(f"allocating {size} bytes for the {what} buffer"):
            req = vk.vkGetBufferMemoryRequirements(dev.handle, self.handle)
            if host:  # by default coherent and cached (reading back is fast), else what there is
                cached = vk.VK_MEMORY_PROPERTY_HOST_CACHED_BIT
                index = memory_type(dev, req.memoryTypeBits, vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT,
                                    *(prefer or (cached | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT, cached)), size=size)
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
        self.bytes, self.flags = None, dev.memory_properties.memoryTypes[index].propertyFlags
        self.coherent = bool(self.flags & vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT)
        if host or (map_if_visible and self.coherent and self.flags & vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT):
            with step(f"mapping the {what} buffer"):
                mapped = vk.vkMapMemory(dev.handle, self.memory, 0, req.size, 0)  # an ffi.buffer of the allocation
            lent or cleanup.push(self._unmap, vk, dev)
            self.bytes = np.frombuffer(mapped, dtype=np.uint8, count=size)
            self._range = new(ffi, "VkMappedMemoryRange", sType=vk.VK_STRUCTURE_TYPE_MAPPED_MEMORY_RANGE,
                              memory=self.memory, offset=0, size=(1 << 64) - 1)  # VK_WHOLE_SIZE (the package has -1)
            self._sync = (vk.lib.vkFlushMappedMemoryRanges, vk.lib.vkInvalidateMappedMemoryRanges, dev.handle)

    def flush(self, invalidate: int = 0):
        if not self.coherent and self._sync[invalidate](self._sync[2], 1, self._range):
            raise VkcRuntimeError("Flushing or invalidating mapped memory failed (out of host memory).")

    def _destroy(self, vk, dev):
        vk.vkDestroyBuffer(dev.handle, self.handle, None)  # before its memory, which the layer prefers
        if self.memory is not None:
            vk.vkFreeMemory(dev.handle, self.memory, None)
            count("allocations", -1)
            count("allocated_bytes", -self.allocated)

    def _unmap(self, vk, dev):
        self.bytes = None  # drop the view first: nothing may touch the mapping after this
        vk.vkUnmapMemory(dev.handle, self.memory)

    def _lend_out(self, vk, dev):
        """Destroy a `lent` buffer, whose mapped memory arrays handed to the caller may view
        (Model.input_arrays): not before the last such array is gone, so none ever points at
        unmapped memory. The device stays alive (one more reference) until then."""
        if self.bytes is None:  # never mapped
            return self._destroy(vk, dev)
        dev.retain()
        mapping, self.bytes = self.bytes.base, None
        weakref.finalize(mapping, _free_lent, self, vk, dev).atexit = False  # at exit: the process's memory


def _free_lent(buffer: Buffer, vk, dev: Device):
    if not dev.hung:  # a hung device may still use it: leave it
        buffer._unmap(vk, dev)
        buffer._destroy(vk, dev)
    dev.release()
