"""The Model: upload weights once, record the schedule once into one command buffer, replay it per run()."""
from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np

from bundles import read_bundle

from .device import Device, new
from .errors import Cleanup, VkcRuntimeError, step
from .memory import Buffer
from .pipelines import Pipelines

NUMPY_DTYPES = {"float32": np.float32, "float16": np.float16, "int32": np.int32, "int64": np.int64,
                "uint8": np.uint8, "int8": np.int8, "bool": np.bool_}
STAGING_ALIGN = 256


NAN_BITS = 0x7FC00000  # a quiet float32 NaN


class TensorInfo(NamedTuple):
    name: str
    shape: tuple
    dtype: np.dtype

    def __str__(self):
        return f"{self.dtype.name}[{', '.join(map(str, self.shape))}]"


def _describe(arr) -> str:
    return f"{arr.dtype.name}[{', '.join(map(str, arr.shape))}]"


class Model:
    """A loaded bundle on one Vulkan device. Use load(); run() it; close() it (or use `with`)."""

    timeout_s = 300.0  # how long run() waits for the device before giving up

    def __init__(self, source, device=None, *, validation=None):
        self._closed, self._broken = True, None
        bundle = read_bundle(source)
        try:
            m = bundle.manifest
            tensors = m["tensors"]
            spec = lambda io: TensorInfo(io["name"], tuple(tensors[io["tensor"]]["shape"]),
                                         np.dtype(NUMPY_DTYPES[tensors[io["tensor"]]["dtype"]]))
            self.inputs = [spec(i) for i in m["inputs"]]
            self.outputs = [spec(o) for o in m["outputs"]]
            self._dev = Device(m, device, validation)
            self._closed = False
            try:
                self._build(m, tensors, bundle)
            except BaseException:
                self.close()
                raise
        finally:
            bundle.close()
        self.device_info = self._dev.info
        self.device_name = self._dev.info.name

    def _build(self, m, tensors, bundle):
        dev = self._dev
        vk, ffi, d = dev.vk, dev.ffi, dev.handle
        usage = vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT
        self._arena = Buffer(dev, m["memory"]["arena_bytes"], usage | vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT, "arena")
        self._weights = Buffer(dev, m["memory"]["weights_bytes"], usage, "weights")
        # Staging: every input, then every output, each at a 256-byte aligned offset.
        ins = [tensors[i["tensor"]] for i in m["inputs"]]
        outs = [tensors[o["tensor"]] for o in m["outputs"]]
        offsets, size = [], 0
        for t in ins + outs:
            offsets.append(size)
            size += -(-t["nbytes"] // STAGING_ALIGN) * STAGING_ALIGN
        self._staging = Buffer(dev, size, vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                               "staging", host=True)
        views = [self._staging.bytes[o:o + t["nbytes"]].view(NUMPY_DTYPES[t["dtype"]]).reshape(t["shape"])
                 for o, t in zip(offsets, ins + outs)]
        self._in_views, self._out_views = views[:len(ins)], views[len(ins):]

        with step("creating the command pool"):
            pool_info = new(ffi, "VkCommandPoolCreateInfo", sType=vk.VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                            queueFamilyIndex=dev.queue_family)
            self._pool = vk.vkCreateCommandPool(d, pool_info, None)
        dev.cleanup.push(vk.vkDestroyCommandPool, d, self._pool, None)
        with step("creating the fence"):
            fence_info = new(ffi, "VkFenceCreateInfo", sType=vk.VK_STRUCTURE_TYPE_FENCE_CREATE_INFO)
            self._fence = vk.vkCreateFence(d, fence_info, None)
        dev.cleanup.push(vk.vkDestroyFence, d, self._fence, None)
        self._fences = ffi.new("VkFence[1]", [self._fence])
        self._upload_weights(bundle.weights, m["memory"]["weights_bytes"])

        self._pipes = Pipelines(dev, m, bundle.spirv)
        sets = self._descriptor_sets(m, tensors)
        self._cmd = self._command_buffer()
        self._record(m, tensors, ins, outs, offsets, sets)
        self._cmds = ffi.new("VkCommandBuffer[1]", [self._cmd])
        self._submit = new(ffi, "VkSubmitInfo", sType=vk.VK_STRUCTURE_TYPE_SUBMIT_INFO, commandBufferCount=1,
                           pCommandBuffers=self._cmds)

    def _command_buffer(self):
        vk, dev = self._dev.vk, self._dev
        info = new(dev.ffi, "VkCommandBufferAllocateInfo", sType=vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                   commandPool=self._pool, level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, commandBufferCount=1)
        with step("allocating a command buffer"):
            cmd = vk.vkAllocateCommandBuffers(dev.handle, info)[0]
        begin = new(dev.ffi, "VkCommandBufferBeginInfo", sType=vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO)
        with step("beginning a command buffer"):
            vk.vkBeginCommandBuffer(cmd, begin)
        return cmd

    def _barrier(self, cmd, src_stage, src_access, dst_stage, dst_access):
        vk = self._dev.vk
        mb = new(self._dev.ffi, "VkMemoryBarrier", sType=vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                 srcAccessMask=src_access, dstAccessMask=dst_access)
        vk.vkCmdPipelineBarrier(cmd, src_stage, dst_stage, 0, 1, mb, 0, None, 0, None)

    def _upload_weights(self, weights, nbytes):
        """Copy the WEIGHTS section to device-local memory once, through a temporary staging
        buffer, and poison the arena with NaN so an element no kernel writes shows up as NaN."""
        dev, vk = self._dev, self._dev.vk
        temp = Cleanup()
        try:
            cmd = self._command_buffer()
            temp.push(vk.vkFreeCommandBuffers, dev.handle, self._pool, 1, dev.ffi.new("VkCommandBuffer[1]", [cmd]))
            vk.vkCmdFillBuffer(cmd, self._arena.handle, 0, self._arena.size // 4 * 4, NAN_BITS)
            if nbytes:
                staging = Buffer(dev, nbytes, vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT, "weights staging", host=True,
                                 cleanup=temp)
                staging.bytes[:nbytes] = np.frombuffer(weights, dtype=np.uint8, count=nbytes)
                region = dev.ffi.new("VkBufferCopy[1]", [(0, 0, nbytes)])
                vk.vkCmdCopyBuffer(cmd, staging.handle, self._weights.handle, 1, region)
            with step("uploading the weights"):
                vk.vkEndCommandBuffer(cmd)
                self._submit_and_wait(cmd)
        finally:
            temp.release()

    def _descriptor_sets(self, m, tensors):
        dev, vk, ffi = self._dev, self._dev.vk, self._dev.ffi
        dispatches = m["dispatches"]
        if not dispatches:
            return []
        total = sum(len(x["bindings"]) for x in dispatches)
        size = ffi.new("VkDescriptorPoolSize[1]", [(vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, max(total, 1))])
        info = new(ffi, "VkDescriptorPoolCreateInfo", sType=vk.VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                   maxSets=len(dispatches), poolSizeCount=1, pPoolSizes=size)
        with step("creating the descriptor pool"):
            pool = vk.vkCreateDescriptorPool(dev.handle, info, None)
        dev.cleanup.push(vk.vkDestroyDescriptorPool, dev.handle, pool, None)
        module_of = [k["module"] for k in m["kernels"]]
        set_layouts = ffi.new("VkDescriptorSetLayout[]",
                              [self._pipes.set_layouts[module_of[x["kernel"]]] for x in dispatches])
        alloc = new(ffi, "VkDescriptorSetAllocateInfo", sType=vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                    descriptorPool=pool, descriptorSetCount=len(dispatches), pSetLayouts=set_layouts)
        with step(f"allocating {len(dispatches)} descriptor sets"):
            sets = vk.vkAllocateDescriptorSets(dev.handle, alloc)
        # One buffer info per binding (offset/range = the tensor's bytes), one write per dispatch.
        infos = ffi.new("VkDescriptorBufferInfo[]", max(total, 1))
        writes = ffi.new("VkWriteDescriptorSet[]", len(dispatches))
        n, w = 0, 0
        for i, x in enumerate(dispatches):
            if not x["bindings"]:
                continue
            for b, t in enumerate(x["bindings"]):
                t = tensors[t]
                infos[n + b].buffer = (self._arena if t["memory"] == "arena" else self._weights).handle
                # An empty tensor is never read; bind a harmless 4 bytes, as a zero range is invalid.
                infos[n + b].offset, infos[n + b].range = (t["offset"], t["nbytes"]) if t["nbytes"] else (0, 4)
            wr = writes[w]
            wr.sType, wr.dstSet, wr.dstBinding = vk.VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, sets[i], 0
            wr.descriptorCount, wr.descriptorType = len(x["bindings"]), vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER
            wr.pBufferInfo = infos + n
            n, w = n + len(x["bindings"]), w + 1
        if w:
            vk.vkUpdateDescriptorSets(dev.handle, w, writes, 0, None)
        return [sets[i] for i in range(len(dispatches))]

    def _record(self, m, tensors, ins, outs, offsets, sets):
        """The whole schedule, recorded once (FORMAT.md, 'How a runtime replays it')."""
        vk, ffi, cmd = self._dev.vk, self._dev.ffi, self._cmd
        stg, arena = self._staging.handle, self._arena.handle
        copy_in = [(o, t["offset"], t["nbytes"]) for o, t in zip(offsets, ins) if t["nbytes"]]
        copy_out = [(t["offset"], o, t["nbytes"]) for o, t in zip(offsets[len(ins):], outs) if t["nbytes"]]
        if copy_in:
            vk.vkCmdCopyBuffer(cmd, stg, arena, len(copy_in), ffi.new("VkBufferCopy[]", copy_in))
        transfer, compute = vk.VK_PIPELINE_STAGE_TRANSFER_BIT, vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT
        shader_rw = vk.VK_ACCESS_SHADER_READ_BIT | vk.VK_ACCESS_SHADER_WRITE_BIT
        self._barrier(cmd, transfer, vk.VK_ACCESS_TRANSFER_WRITE_BIT, compute, shader_rw)
        bound = None
        for i, x in enumerate(m["dispatches"]):
            if x.get("barrier") and i:
                self._barrier(cmd, compute, vk.VK_ACCESS_SHADER_WRITE_BIT, compute, shader_rw)
            k = x["kernel"]
            if bound != k:
                vk.vkCmdBindPipeline(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, self._pipes.pipelines[k])
                bound = k
            vk.vkCmdBindDescriptorSets(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, self._pipes.kernel_layouts[k],
                                       0, 1, ffi.new("VkDescriptorSet[1]", [sets[i]]), 0, None)
            vk.vkCmdDispatch(cmd, *x["groups"])
        self._barrier(cmd, compute, vk.VK_ACCESS_SHADER_WRITE_BIT, transfer,
                      vk.VK_ACCESS_TRANSFER_READ_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT)
        if copy_out:
            vk.vkCmdCopyBuffer(cmd, arena, stg, len(copy_out), ffi.new("VkBufferCopy[]", copy_out))
        # Make the copies visible to the host that reads staging after the fence.
        self._barrier(cmd, transfer, vk.VK_ACCESS_TRANSFER_WRITE_BIT, vk.VK_PIPELINE_STAGE_HOST_BIT,
                      vk.VK_ACCESS_HOST_READ_BIT)
        with step("recording the command buffer"):
            vk.vkEndCommandBuffer(cmd)

    def _submit_and_wait(self, cmd=None):
        vk, ffi, d = self._dev.vk, self._dev.ffi, self._dev.handle
        if cmd is None:
            submit = self._submit
        else:
            cmds = ffi.new("VkCommandBuffer[1]", [cmd])
            submit = new(ffi, "VkSubmitInfo", sType=vk.VK_STRUCTURE_TYPE_SUBMIT_INFO, commandBufferCount=1,
                         pCommandBuffers=cmds)
        vk.vkQueueSubmit(self._dev.queue, 1, submit, self._fence)
        try:
            vk.vkWaitForFences(d, 1, self._fences, vk.VK_TRUE, int(self.timeout_s * 1e9))
        except vk.VkTimeout:
            self._broken = f"a run did not finish within {self.timeout_s:g} s"
            raise VkcRuntimeError(
                f"The device {self._dev.info.name} did not finish within {self.timeout_s:g} s; the model may be too "
                "slow for this device or the device hung. Raise Model.timeout_s, or choose another device.") from None
        vk.vkResetFences(d, 1, self._fences)

    def _check_feeds(self, feeds) -> list:
        problems, arrays = [], []
        known = {i.name for i in self.inputs}
        listing = ", ".join(f"{i.name} ({i})" for i in self.inputs)
        for name in feeds:
            if name not in known:
                problems.append(f"unknown input {name!r}; the model's inputs are: {listing}")
        for spec in self.inputs:
            if spec.name not in feeds:
                problems.append(f"missing input {spec.name!r}: expected {spec}")
                continue
            a = feeds[spec.name]
            if not isinstance(a, (np.ndarray, np.generic)):
                problems.append(f"input {spec.name!r}: expected a numpy array {spec}, got {type(a).__name__}")
            elif a.dtype != spec.dtype or tuple(a.shape) != spec.shape:
                problems.append(f"input {spec.name!r}: expected {spec}, got {_describe(a)}")
            else:
                arrays.append(np.ascontiguousarray(a))
        if problems:
            raise ValueError("; ".join(problems))
        return arrays

    def run(self, feeds: dict) -> dict:
        """Run the model once; returns fresh arrays keyed by the ONNX output names."""
        if self._closed:
            raise VkcRuntimeError("This model was closed; load it again to run it.")
        if self._broken:
            raise VkcRuntimeError(f"This model cannot run any more ({self._broken}); load it again.")
        for view, a in zip(self._in_views, self._check_feeds(feeds)):
            view[...] = a
        with step(f"running the model on {self.device_name}"):
            self._submit_and_wait()
        return {spec.name: view.copy() for spec, view in zip(self.outputs, self._out_views)}

    def bench(self, feeds: dict, warmup: int = 3, repeat: int = 20) -> list:
        """Wall-clock seconds of each of `repeat` run() calls, after `warmup` untimed ones."""
        for _ in range(warmup):
            self.run(feeds)
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            self.run(feeds)
            times.append(time.perf_counter() - t0)
        return times

    def close(self):
        """Destroy every Vulkan object, in reverse order of creation. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._in_views = self._out_views = []
        try:
            self._dev.vk.vkDeviceWaitIdle(self._dev.handle)
        except Exception:
            pass  # a lost device still has to be torn down
        self._dev.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        state = "closed" if self._closed else self.device_name
        return f"<runtime_min.Model inputs={[str(i.name) for i in self.inputs]} on {state}>"


def load(source, device=None, *, validation=None) -> Model:
    """Load a .vkb bundle (path, bytes or memoryview) onto a Vulkan device; see Model."""
    return Model(source, device, validation=validation)
