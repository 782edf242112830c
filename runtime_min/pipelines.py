"""Shader modules, descriptor set layouts, pipeline layouts, one compute pipeline per kernel, and the
persisted VkPipelineCache that makes a second load of the same bundle on the same driver fast.

Pipeline cache file: `<cache_dir>/pipelines/<deviceUUID>-<driverUUID>.bin`, where cache_dir is the
`cache_dir=` argument, else the folder `bundles.cache.cache_dir()` names ($VKC_CACHE_DIR, else
$XDG_CACHE_HOME/vkc or ~/.cache/vkc; the compiler keeps SPIR-V in the sibling folder spirv/). The file is a 24-byte header (magic b"VKCPIPE1", u64
payload size, u32 CRC-32 of the payload, u32 zero) and the driver's cache data. A missing, short,
corrupt or foreign file (checksum, or the driver's own header naming another vendor, device or cache
UUID) is a cache miss, never an error, and a cache that cannot be written is skipped."""
from __future__ import annotations

import os
import struct
import threading
import time
import warnings
import zlib
from pathlib import Path

import numpy as np

from bundles.cache import cache_dir as configured_cache_dir
from bundles.manifest import BundleError, texel_formats
from bundles.spirv_val import target_env, validator

from .device import Device, new
from .errors import Cleanup, step

_SPEC_FORMAT = {"int32": "<i", "uint32": "<I", "float32": "<f"}
CACHE_MAGIC = b"VKCPIPE1"
CACHE_HEADER = struct.Struct("<8sQII")
MAX_CACHE_BYTES = 256 << 20


def specialization_data(entries: list) -> bytes:
    """Each entry is 4 bytes in list order; entry k sits at offset 4*k and binds constant_id = entries[k]['id']."""
    return b"".join(struct.pack(_SPEC_FORMAT[e["type"]], e["value"]) for e in entries)


def _key(kernel: dict) -> tuple:
    """What makes two kernels the same pipeline: the module and its specialization."""
    spec = kernel.get("specialization", [])
    return kernel["module"], tuple(e["id"] for e in spec), specialization_data(spec)


def cache_file(info, cache_dir=None, pipeline_cache=True):
    """Where this device's pipeline cache lives, or None when caching is off."""
    if pipeline_cache is False or str(pipeline_cache).lower() == "off":
        return None
    if pipeline_cache not in (True, None):
        return Path(pipeline_cache)  # an explicit file
    base = cache_dir if cache_dir is not None else configured_cache_dir()
    if base is None or str(base).lower() == "off":
        return None
    key = f"{info.device_uuid}-{info.driver_uuid}" if info.device_uuid else info.cache_header.hex()
    return Path(base) / "pipelines" / f"{key}.bin"


def read_cache(path, info) -> tuple[bytes, str]:
    """(driver cache data, what happened). Anything wrong with the file is a miss."""
    if path is None:
        return b"", "off"
    try:
        if os.path.getsize(path) > MAX_CACHE_BYTES:
            return b"", "miss (file too large)"
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        return b"", "miss (no file)"
    except OSError as e:
        return b"", f"miss (unreadable: {e.strerror})"
    if len(raw) < CACHE_HEADER.size:
        return b"", "miss (corrupt)"
    magic, size, crc, _ = CACHE_HEADER.unpack_from(raw)
    data = raw[CACHE_HEADER.size:]
    if magic != CACHE_MAGIC or size != len(data) or zlib.crc32(data) != crc:
        return b"", "miss (corrupt)"
    # VkPipelineCacheHeaderVersionOne: headerSize, headerVersion (1), vendorID, deviceID, pipelineCacheUUID.
    header_size, version = struct.unpack_from("<II", data) if len(data) >= 8 else (0, 0)
    if len(data) < 32 or header_size < 32 or version != 1 or data[8:32] != info.cache_header:
        return b"", "miss (made by another device or driver)"
    return data, f"hit ({len(data)} bytes)"


def write_cache(path, data: bytes) -> bool:
    """Replace the file atomically (a reader never sees half a file); False if it cannot be written."""
    tmp = None
    try:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_bytes(CACHE_HEADER.pack(CACHE_MAGIC, len(data), zlib.crc32(data), 0) + data)
        os.replace(tmp, path)
        return True
    except OSError:
        if tmp is not None:
            try:
                tmp.unlink()
            except OSError:
                pass
        return False


_warned_unvalidated = False


def validate_modules(modules: list[dict], spirv: list, cache_dir=None, trusted=False) -> str:
    """Run SPIRV-Tools' validator over every module of the bundle, before the driver sees any (an
    invalid module can crash it). Raises BundleError naming the first invalid module; returns what
    was done, for Model.load_info. Accepted modules are remembered by hash (bundles/spirv_val.py)."""
    if trusted:
        return "skipped (trusted=True)"
    val = validator()
    if not val.available:
        global _warned_unvalidated
        if not _warned_unvalidated:
            _warned_unvalidated = True
            warnings.warn(f"vkc: SPIR-V modules run unvalidated: {val.problem}; an invalid module in a corrupt "
                          "or hostile bundle can crash the driver", RuntimeWarning, stacklevel=4)
        return f"off ({val.problem})"
    t0 = time.perf_counter()
    folder = cache_dir if cache_dir is not None else configured_cache_dir()
    for i in range(len(spirv)):
        complaint = val.validate(spirv[i], folder=folder)
        if complaint:
            env = target_env(spirv[i])
            raise BundleError("spirv validation", f"module {i} ({modules[i]['name']!r}) is not valid SPIR-V for {env}: "
                                                  f"{complaint[:600]}; the bundle is corrupt: compile it again")
    return f"ok ({len(spirv)} modules, {(time.perf_counter() - t0) * 1e3:.1f} ms)"


class Pipelines:
    """Per module (created when a kernel first needs it): set layout, pipeline layout. Per (module,
    specialization): one pipeline, shared by every variant's kernels that have it. Shader modules
    live only while `build` runs; the pipeline cache lives with the model, and is saved after each
    build that added to it (a multi-variant bundle builds a variant's pipelines on its first use)."""

    def __init__(self, dev: Device, modules: list[dict], spirv: list, cleanup: Cleanup, cache_path, used):
        vk, ffi = dev.vk, dev.ffi
        self._dev = dev
        self._modules = modules
        self._cleanup = cleanup
        self._cache_path = cache_path
        # A fresh uint32 copy of each module `used` (by some variant that may run): aligned as Vulkan
        # requires, and independent of the bundle's buffer (closed after load).
        self._code = {i: np.frombuffer(spirv[i], dtype="<u4").copy() for i in sorted(used)}
        self.set_layouts = {}  # module -> descriptor set layout
        self.layouts = {}  # module -> pipeline layout
        self._built = {}  # (module, specialization) -> pipeline
        self._saved, self.cache_status = read_cache(cache_path, dev.info)
        init_data = ffi.new("char[]", self._saved) if self._saved else ffi.NULL
        cache_info = new(ffi, "VkPipelineCacheCreateInfo", sType=vk.VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO,
                         initialDataSize=len(self._saved), pInitialData=init_data)
        with step("creating the pipeline cache"):
            self._cache = vk.vkCreatePipelineCache(dev.handle, cache_info, None)
        cleanup.push(vk.vkDestroyPipelineCache, dev.handle, self._cache, None)

    def build(self, kernels: list[dict]) -> tuple[list, list]:
        """(pipelines, pipeline layouts), one each per kernel, building what is not built yet."""
        dev = self._dev
        temp = Cleanup()
        shaders = {}
        try:
            for k, kernel in enumerate(kernels):
                m, key = kernel["module"], _key(kernel)
                if key in self._built:
                    continue
                if m not in shaders:
                    shaders[m] = self._module(dev, m, self._modules[m], self._code[m], temp)
                self._built[key] = self._pipeline(dev, k, kernel, shaders[m])
            if shaders and self._cache_path is not None:
                data = self._cache_data(dev, self._cache)
                if data and data != self._saved and write_cache(self._cache_path, data):
                    self._saved = data
                    self.cache_status += f", saved {len(data)} bytes"
        finally:
            temp.release()
        return [self._built[_key(k)] for k in kernels], [self.layouts[k["module"]] for k in kernels]

    def _module(self, dev, m, module, code, temp):
        vk, ffi = dev.vk, dev.ffi
        code_ptr = ffi.cast("uint32_t*", ffi.from_buffer(code))
        info = new(ffi, "VkShaderModuleCreateInfo", sType=vk.VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                   codeSize=code.nbytes, pCode=code_ptr)
        with step(f"creating shader module {m} ({module['name']})"):
            shader = vk.vkCreateShaderModule(dev.handle, info, None)
        temp.push(vk.vkDestroyShaderModule, dev.handle, shader, None)
        dev.name(vk.VK_OBJECT_TYPE_SHADER_MODULE, shader, module["name"])
        if m in self.layouts:
            return shader
        n, texels = module["bindings"], texel_formats(module)
        binds = ffi.new("VkDescriptorSetLayoutBinding[]", max(n, 1))
        for i in range(n):
            binds[i].binding = i
            binds[i].descriptorType = vk.VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER if i in texels \
                else vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER
            binds[i].descriptorCount = 1
            binds[i].stageFlags = vk.VK_SHADER_STAGE_COMPUTE_BIT
        dsl_info = new(ffi, "VkDescriptorSetLayoutCreateInfo",
                       sType=vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, bindingCount=n, pBindings=binds)
        with step(f"creating the descriptor set layout of module {m} ({module['name']})"):
            dsl = vk.vkCreateDescriptorSetLayout(dev.handle, dsl_info, None)
        self._cleanup.push(vk.vkDestroyDescriptorSetLayout, dev.handle, dsl, None)
        dsl_arr = ffi.new("VkDescriptorSetLayout[1]", [dsl])
        pl_info = new(ffi, "VkPipelineLayoutCreateInfo", sType=vk.VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                      setLayoutCount=1, pSetLayouts=dsl_arr)
        with step(f"creating the pipeline layout of module {m} ({module['name']})"):
            layout = vk.vkCreatePipelineLayout(dev.handle, pl_info, None)
        self._cleanup.push(vk.vkDestroyPipelineLayout, dev.handle, layout, None)
        self.set_layouts[m], self.layouts[m] = dsl, layout
        return shader

    def _pipeline(self, dev, k, kernel, shader):
        vk, ffi = dev.vk, dev.ffi
        entry = ffi.new("char[]", b"main")  # its own variable: the stage info only points at it
        spec = kernel.get("specialization", [])
        data = ffi.new("char[]", specialization_data(spec) or b"\0")
        entries = ffi.new("VkSpecializationMapEntry[]", max(len(spec), 1))
        for i, e in enumerate(spec):
            entries[i].constantID = e["id"]
            entries[i].offset = 4 * i
            entries[i].size = 4
        spec_info = new(ffi, "VkSpecializationInfo", mapEntryCount=len(spec), pMapEntries=entries,
                        dataSize=4 * len(spec), pData=data)
        stage = new(ffi, "VkPipelineShaderStageCreateInfo",
                    sType=vk.VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                    stage=vk.VK_SHADER_STAGE_COMPUTE_BIT, module=shader, pName=entry,
                    pSpecializationInfo=spec_info)
        info = new(ffi, "VkComputePipelineCreateInfo", sType=vk.VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
                   stage=stage[0], layout=self.layouts[kernel["module"]])  # stage is copied by value
        with step(f"building the pipeline of kernel {k} ({kernel['name']})"):
            pipeline = vk.vkCreateComputePipelines(dev.handle, self._cache, 1, info, None)[0]
        self._cleanup.push(vk.vkDestroyPipeline, dev.handle, pipeline, None)
        dev.name(vk.VK_OBJECT_TYPE_PIPELINE, pipeline, f"{k}: {kernel['name']}")
        return pipeline

    @staticmethod
    def _cache_data(dev, cache) -> bytes:
        ffi, lib = dev.ffi, dev.vk.lib  # the package does not wrap vkGetPipelineCacheData
        size = ffi.new("size_t*")
        if lib.vkGetPipelineCacheData(dev.handle, cache, size, ffi.NULL) != 0 or not size[0]:
            return b""
        buf = ffi.new("char[]", size[0])
        if lib.vkGetPipelineCacheData(dev.handle, cache, size, buf) != 0:  # VK_INCOMPLETE: it grew; skip
            return b""
        return bytes(ffi.buffer(buf, size[0]))
