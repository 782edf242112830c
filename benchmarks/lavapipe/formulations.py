#!/usr/bin/env python3
"""What bounds a GEMM on lavapipe: one register-tiled kernel (formulations.comp) with its operands
read five ways, timed interleaved in one process on the default Vulkan device.

    python -m benchmarks.lavapipe.formulations [--size 512] [--rounds 9]

Storage-buffer loads are what llvmpipe (Mesa 22.x) makes expensive: a load whose address differs
per SIMD lane becomes a loop over the lanes, and every load pays a bounds-check branch per
component; the "uniform B" row (wrong results, timing only) and the "no loads" row isolate that.
Texel fetches are straight-line gathers. vkc's lavapipe kernels (templates/matmul_texel.comp.j2)
use texel buffers; imageLoad would need storage texel buffers for a small further gain.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import vulkan as vk

from compiler.codegen import compile_glsl

HERE = Path(__file__).resolve().parent
ROWS = {1: "storage buffers", 2: "storage buffers, B lane-uniform (timing only)", 3: "no loads (timing only)",
        4: "uniform texel buffers (texelFetch)", 5: "storage texel buffers (imageLoad)"}
KIND = {1: "ssbo", 2: "ssbo", 3: "ssbo", 4: "texel", 5: "image"}


class Harness:
    """The few Vulkan objects one compute dispatch needs; host-visible memory (lavapipe's only kind)."""

    def __init__(self):
        app = vk.VkApplicationInfo(pApplicationName="formulations", apiVersion=vk.VK_MAKE_VERSION(1, 2, 0))
        self.inst = vk.vkCreateInstance(vk.VkInstanceCreateInfo(pApplicationInfo=app), None)
        self.pdev = vk.vkEnumeratePhysicalDevices(self.inst)[0]
        self.name = vk.vkGetPhysicalDeviceProperties(self.pdev).deviceName
        queue = vk.VkDeviceQueueCreateInfo(queueFamilyIndex=0, queueCount=1, pQueuePriorities=[1.0])
        self.dev = vk.vkCreateDevice(self.pdev, vk.VkDeviceCreateInfo(pQueueCreateInfos=[queue]), None)
        self.queue = vk.vkGetDeviceQueue(self.dev, 0, 0)
        self.memory = vk.vkGetPhysicalDeviceMemoryProperties(self.pdev)
        self.pool = vk.vkCreateCommandPool(self.dev, vk.VkCommandPoolCreateInfo(queueFamilyIndex=0), None)
        self.fence = vk.vkCreateFence(self.dev, vk.VkFenceCreateInfo(), None)

    def buffer(self, array: np.ndarray) -> dict:
        usage = (vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | vk.VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT
                 | vk.VK_BUFFER_USAGE_STORAGE_TEXEL_BUFFER_BIT)
        buf = vk.vkCreateBuffer(self.dev, vk.VkBufferCreateInfo(size=array.nbytes, usage=usage), None)
        req = vk.vkGetBufferMemoryRequirements(self.dev, buf)
        flags = vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
        kind = next(i for i in range(self.memory.memoryTypeCount) if req.memoryTypeBits >> i & 1
                    and self.memory.memoryTypes[i].propertyFlags & flags == flags)
        mem = vk.vkAllocateMemory(self.dev, vk.VkMemoryAllocateInfo(allocationSize=req.size, memoryTypeIndex=kind), None)
        vk.vkBindBufferMemory(self.dev, buf, mem, 0)
        ptr = vk.vkMapMemory(self.dev, mem, 0, array.nbytes, 0)
        ptr[:array.nbytes] = array.tobytes()
        return dict(buf=buf, ptr=ptr, nbytes=array.nbytes)

    def read(self, b: dict, shape) -> np.ndarray:
        return np.frombuffer(b["ptr"][:b["nbytes"]], dtype=np.float32).reshape(shape).copy()

    def dispatch(self, spirv: bytes, bindings: list, groups):
        """A recorded command buffer running one dispatch; bindings are (kind, buffer)."""
        types = {"ssbo": vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, "texel": vk.VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER,
                 "image": vk.VK_DESCRIPTOR_TYPE_STORAGE_TEXEL_BUFFER}
        module = vk.vkCreateShaderModule(self.dev, vk.VkShaderModuleCreateInfo(codeSize=len(spirv), pCode=spirv), None)
        layout_bindings = [vk.VkDescriptorSetLayoutBinding(binding=i, descriptorType=types[k], descriptorCount=1,
                                                           stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT)
                           for i, (k, _) in enumerate(bindings)]
        set_layout = vk.vkCreateDescriptorSetLayout(self.dev, vk.VkDescriptorSetLayoutCreateInfo(pBindings=layout_bindings), None)
        layout = vk.vkCreatePipelineLayout(self.dev, vk.VkPipelineLayoutCreateInfo(pSetLayouts=[set_layout]), None)
        stage = vk.VkPipelineShaderStageCreateInfo(stage=vk.VK_SHADER_STAGE_COMPUTE_BIT, module=module, pName="main")
        pipeline = vk.vkCreateComputePipelines(self.dev, None, 1, [vk.VkComputePipelineCreateInfo(stage=stage, layout=layout)], None)[0]
        sizes = [vk.VkDescriptorPoolSize(type=t, descriptorCount=4) for t in types.values()]
        pool = vk.vkCreateDescriptorPool(self.dev, vk.VkDescriptorPoolCreateInfo(maxSets=1, pPoolSizes=sizes), None)
        dset = vk.vkAllocateDescriptorSets(self.dev, vk.VkDescriptorSetAllocateInfo(descriptorPool=pool, pSetLayouts=[set_layout]))[0]
        writes = []
        for i, (kind, b) in enumerate(bindings):
            if kind == "ssbo":
                info = vk.VkDescriptorBufferInfo(buffer=b["buf"], offset=0, range=b["nbytes"])
                writes.append(vk.VkWriteDescriptorSet(dstSet=dset, dstBinding=i, descriptorType=types[kind], pBufferInfo=[info]))
            else:
                view = vk.vkCreateBufferView(self.dev, vk.VkBufferViewCreateInfo(
                    buffer=b["buf"], format=vk.VK_FORMAT_R32G32B32A32_SFLOAT, offset=0, range=b["nbytes"]), None)
                writes.append(vk.VkWriteDescriptorSet(dstSet=dset, dstBinding=i, descriptorType=types[kind], pTexelBufferView=[view]))
        vk.vkUpdateDescriptorSets(self.dev, len(writes), writes, 0, None)
        cmd = vk.vkAllocateCommandBuffers(self.dev, vk.VkCommandBufferAllocateInfo(commandPool=self.pool, level=0, commandBufferCount=1))[0]
        vk.vkBeginCommandBuffer(cmd, vk.VkCommandBufferBeginInfo())
        vk.vkCmdBindPipeline(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, pipeline)
        vk.vkCmdBindDescriptorSets(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, layout, 0, 1, [dset], 0, None)
        vk.vkCmdDispatch(cmd, *groups)
        vk.vkEndCommandBuffer(cmd)
        return cmd

    def seconds(self, cmd) -> float:
        start = time.perf_counter()
        vk.vkQueueSubmit(self.queue, 1, [vk.VkSubmitInfo(pCommandBuffers=[cmd])], self.fence)
        vk.vkWaitForFences(self.dev, 1, [self.fence], vk.VK_TRUE, 10**11)
        vk.vkResetFences(self.dev, 1, [self.fence])
        return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--tile", default="8,2,8", help="rows, vec4 columns, lanes per workgroup")
    args = ap.parse_args()
    n = args.size
    tm, tn, lx = map(int, args.tile.split(","))
    h = Harness()
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n)).astype(np.float32), rng.standard_normal((n, n)).astype(np.float32)
    ref = a @ b
    A, B = h.buffer(a), h.buffer(b)
    runs = {}
    version, body = (HERE / "formulations.comp").read_text().split("\n", 1)
    for load, label in ROWS.items():
        defines = dict(LOAD=load, TM=tm, TN=tn, LX=lx, N=n, K=n)
        source = "\n".join([version, *(f"#define {k} {v}" for k, v in defines.items()), body])
        spirv = compile_glsl(source, f"formulations_{load}", target_env="vulkan1.2")
        C = h.buffer(np.full((n, n), np.nan, np.float32))
        cmd = h.dispatch(spirv, [(KIND[load], A), (KIND[load], B), ("ssbo", C)],
                         (n // (4 * tn * lx), n // tm, 1))
        h.seconds(cmd)
        err = np.linalg.norm(h.read(C, (n, n)) - ref) / np.linalg.norm(ref)
        runs[load] = (cmd, [], err)
    for _ in range(args.rounds):
        for cmd, times, _ in runs.values():
            times.append(h.seconds(cmd))
    flops = 2 * n ** 3
    print(f"{h.name}: C = A x B, {n}^3, tile {tm} rows x {tn} vec4 columns x {lx} lanes, median of {args.rounds} interleaved")
    print(f"{'operands read through':48s} {'ms':>8s} {'GFLOP/s':>8s}  rel L2 vs numpy")
    for load, (_, times, err) in runs.items():
        med = statistics.median(times)
        check = f"{err:.1e}" if load in (1, 4, 5) else "(timing only)"
        print(f"{ROWS[load]:48s} {med * 1e3:8.2f} {flops / med / 1e9:8.1f}  {check}")


if __name__ == "__main__":
    main()
