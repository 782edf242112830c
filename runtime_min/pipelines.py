"""Shader modules, descriptor set layouts, pipeline layouts, and one compute pipeline per kernel."""
from __future__ import annotations

import struct

import numpy as np

from .device import Device, new
from .errors import step

_SPEC_FORMAT = {"int32": "<i", "uint32": "<I", "float32": "<f"}


def specialization_data(entries: list) -> bytes:
    """Each entry is 4 bytes in list order; entry k sits at offset 4*k and binds constant_id = entries[k]['id']."""
    return b"".join(struct.pack(_SPEC_FORMAT[e["type"]], e["value"]) for e in entries)


class Pipelines:
    """Per module: shader, set layout, pipeline layout. Per kernel: pipeline (+ its layout)."""

    def __init__(self, dev: Device, manifest: dict, spirv: list):
        vk, ffi = dev.vk, dev.ffi
        self.set_layouts, self.layouts, self.pipelines, self.kernel_layouts = [], [], [], []
        with step("creating the pipeline cache"):
            cache_info = new(ffi, "VkPipelineCacheCreateInfo", sType=vk.VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO)
            cache = vk.vkCreatePipelineCache(dev.handle, cache_info, None)
        dev.cleanup.push(vk.vkDestroyPipelineCache, dev.handle, cache, None)
        shaders = []
        for m, (module, words) in enumerate(zip(manifest["modules"], spirv)):
            # A fresh uint32 copy: aligned as Vulkan requires, and independent of the bundle's buffer.
            code = np.frombuffer(words, dtype="<u4").copy()
            code_ptr = ffi.cast("uint32_t*", ffi.from_buffer(code))
            info = new(ffi, "VkShaderModuleCreateInfo", sType=vk.VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                       codeSize=code.nbytes, pCode=code_ptr)
            with step(f"creating shader module {m} ({module['name']})"):
                shaders.append(vk.vkCreateShaderModule(dev.handle, info, None))
            dev.cleanup.push(vk.vkDestroyShaderModule, dev.handle, shaders[-1], None)
            n = module["bindings"]
            binds = ffi.new("VkDescriptorSetLayoutBinding[]", max(n, 1))
            for i in range(n):
                binds[i].binding = i
                binds[i].descriptorType = vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER
                binds[i].descriptorCount = 1
                binds[i].stageFlags = vk.VK_SHADER_STAGE_COMPUTE_BIT
            dsl_info = new(ffi, "VkDescriptorSetLayoutCreateInfo",
                           sType=vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, bindingCount=n, pBindings=binds)
            with step(f"creating the descriptor set layout of module {m} ({module['name']})"):
                dsl = vk.vkCreateDescriptorSetLayout(dev.handle, dsl_info, None)
            dev.cleanup.push(vk.vkDestroyDescriptorSetLayout, dev.handle, dsl, None)
            dsl_arr = ffi.new("VkDescriptorSetLayout[1]", [dsl])
            pl_info = new(ffi, "VkPipelineLayoutCreateInfo", sType=vk.VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                          setLayoutCount=1, pSetLayouts=dsl_arr)
            with step(f"creating the pipeline layout of module {m} ({module['name']})"):
                layout = vk.vkCreatePipelineLayout(dev.handle, pl_info, None)
            dev.cleanup.push(vk.vkDestroyPipelineLayout, dev.handle, layout, None)
            self.set_layouts.append(dsl)
            self.layouts.append(layout)

        entry = ffi.new("char[]", b"main")  # its own variable: the stage info only points at it
        for k, kernel in enumerate(manifest["kernels"]):
            spec = kernel.get("specialization", [])
            data = ffi.new("char[]", specialization_data(spec) or b"\0")
            entries = ffi.new("VkSpecializationMapEntry[]", max(len(spec), 1))
            for i, e in enumerate(spec):
                entries[i].constantID, entries[i].offset, entries[i].size = e["id"], 4 * i, 4
            spec_info = new(ffi, "VkSpecializationInfo", mapEntryCount=len(spec), pMapEntries=entries,
                            dataSize=4 * len(spec), pData=data)
            stage = new(ffi, "VkPipelineShaderStageCreateInfo",
                        sType=vk.VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                        stage=vk.VK_SHADER_STAGE_COMPUTE_BIT, module=shaders[kernel["module"]], pName=entry,
                        pSpecializationInfo=spec_info)
            info = new(ffi, "VkComputePipelineCreateInfo", sType=vk.VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
                       stage=stage[0], layout=self.layouts[kernel["module"]])  # stage is copied by value
            with step(f"building the pipeline of kernel {k} ({kernel['name']})"):
                pipeline = vk.vkCreateComputePipelines(dev.handle, cache, 1, info, None)[0]
            dev.cleanup.push(vk.vkDestroyPipeline, dev.handle, pipeline, None)
            self.pipelines.append(pipeline)
            self.kernel_layouts.append(self.layouts[kernel["module"]])
