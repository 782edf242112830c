"""On the GPU machine: does VK_NV_cooperative_matrix2 make a faster fp16 GEMM than vkc's
VK_KHR_cooperative_matrix kernel (issue 11: "VK_NV_cooperative_matrix2 where it measures faster")?

A probe, apart from the compiler's own coopmat2 kernel (templates/matmul_coopmat2.comp.j2, which
it measured first): pip's glslang 13.1.1 cannot compile GL_NV_cooperative_matrix2, and the `vulkan`
package's headers predate the extension. This script compiles its one kernel (coopmat2_gemm.comp beside it: workgroup-scope
matrices loaded through tensor layouts, the driver staging them) with the glslc named by $GLSLC
(glslang >= 15: Debian 13's glslc 2025.2, which fetch_glslc_trixie.sh downloads and setup.sh
unpacks, setting GLSLC), creates its own device with the extension's
features chained in (runtime_min's Coopmat2Features; the flexible shapes read by
compiler.host.flexible_dimensions), times C = A x B (float16, float32 accumulation) with
timestamps, checks rows of C against numpy, and times torch (cuBLAS) fp16 in the same process.

    GLSLC=... python3 -m benchmarks.probes.coopmat2_probe 4096,8192,128x2304x768 128x256x32x256:u8c2 ...
    python3 -m benchmarks.probes.coopmat2_probe --plain 256      # no extension: checks the harness
                                                               # (lavapipe), a scalar GEMM kernel

Sizes are N (N^3) or MxNxK. Tiles are BMxBNxBKxINVOCATIONS[:uUcC]: K steps unrolled U times
(default 1); loads clamped (edges read 0) in every tile (C 1, the default), only in tiles that
cross an edge (C 2) or none (C 0: whole tiles only). Prints the device's coopmat2 features and
flexible workgroup-scope shapes, then one JSON line per (size, tile), with cuBLAS fp16 timed from
a CUDA graph of 20 products.
"""
import functools, json, os, subprocess, sys, tempfile

import numpy as np
import vulkan as vk

HERE = os.path.dirname(os.path.abspath(__file__))
from benchmarks.cli import exit_on_help  # noqa: E402
from compiler.host import flexible_dimensions  # noqa: E402
from runtime_min.device import Coopmat2Features, new as new_struct  # noqa: E402

ffi = vk.ffi
new = functools.partial(new_struct, ffi)  # a zeroed `ctype*` with fields set
# What run() gives a GEMM kernel written as a GLSL string: its specialization constants (invocations,
# the tile, the sizes) and the float16 A, B and C (row-major M x K, K x N, M x N).
HARNESS_INTERFACE = """layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint BM = 1;
layout(constant_id = 2) const uint BN = 1;
layout(constant_id = 3) const uint BK = 1;
layout(constant_id = 4) const uint M = 1;
layout(constant_id = 5) const uint N = 1;
layout(constant_id = 6) const uint K = 1;
layout(std430, binding = 0) readonly buffer A_buf { float16_t A[]; };
layout(std430, binding = 1) readonly buffer B_buf { float16_t B[]; };
layout(std430, binding = 2) writeonly buffer C_buf { float16_t C[]; };
"""
PLAIN_GEMM = """#version 450
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
""" + HARNESS_INTERFACE + """void main() {  // one element of C per invocation, BM x BN = the workgroup
    const uint m = gl_WorkGroupID.y * BM + gl_LocalInvocationID.x / BN;
    const uint n = gl_WorkGroupID.x * BN + gl_LocalInvocationID.x % BN;
    if (m >= M || n >= N) return;
    float acc = 0.0;
    for (uint k = 0; k < K; ++k) acc += float(A[m * K + k]) * float(B[k * N + n]);
    C[m * N + n] = float16_t(acc);
}
"""


@functools.lru_cache(maxsize=None)
def compile_glsl(source_path: str, defines=()) -> np.ndarray:
    glslc = os.environ.get("GLSLC", "glslc")
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "k.spv")
        r = subprocess.run(glslc.split() + ["--target-env=vulkan1.3", "-fshader-stage=compute", "-O",
                                            *[f"-D{d}" for d in defines], source_path, "-o", out], capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(f"{glslc} failed on {source_path}:\n{r.stderr}")
        return np.fromfile(out, dtype="<u4")


class Gpu:
    """One device and queue, with the features the kernel needs (and coopmat2's where asked)."""

    def __init__(self, coopmat2: bool):
        app = new("VkApplicationInfo", sType=vk.VK_STRUCTURE_TYPE_APPLICATION_INFO, apiVersion=vk.VK_MAKE_VERSION(1, 3, 0))
        self.keep = [app]
        self.instance = vk.vkCreateInstance(new("VkInstanceCreateInfo", sType=vk.VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                                                pApplicationInfo=app), None)
        pdevs = vk.vkEnumeratePhysicalDevices(self.instance)
        exts = lambda p: {e.extensionName for e in vk.vkEnumerateDeviceExtensionProperties(p, None)}
        wanted = ["VK_KHR_cooperative_matrix", "VK_NV_cooperative_matrix2"] if coopmat2 else []
        fits = [p for p in pdevs if set(wanted) <= exts(p)]
        if not fits:
            sys.exit(f"no Vulkan device offers {wanted}")
        self.pdev = fits[0]
        props = vk.vkGetPhysicalDeviceProperties(self.pdev)
        self.name, self.period_ns = props.deviceName, props.limits.timestampPeriod

        # The features, read first (to report coopmat2's), then only the needed ones enabled: no
        # robustness features (vkc's runtime enables robustBufferAccess unless told not to; on an
        # H200 it made no difference to the coopmat2 kernels' times).
        f11 = new("VkPhysicalDeviceVulkan11Features", sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES)
        f12 = new("VkPhysicalDeviceVulkan12Features", sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES)
        f13 = new("VkPhysicalDeviceVulkan13Features", sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES)
        f11.storageBuffer16BitAccess = 1
        f12.shaderFloat16 = f12.vulkanMemoryModel = f12.vulkanMemoryModelDeviceScope = 1
        f13.subgroupSizeControl = f13.computeFullSubgroups = f13.maintenance4 = 1
        f11.pNext, f12.pNext = f12, f13
        self.cm2, self.flexible, self.owned = {}, [], []
        if coopmat2:
            # Read into the feature struct, which then enables what the device has.
            cm2 = Coopmat2Features(ffi, ffi.NULL)
            query = new("VkPhysicalDeviceFeatures2", sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                        pNext=ffi.cast("void*", cm2.words))
            vk.vkGetPhysicalDeviceFeatures2(self.pdev, query)
            self.cm2 = {n: bool(cm2.words[4 + i]) for i, n in enumerate(cm2.FIELDS)}
            khr = new("VkPhysicalDeviceCooperativeMatrixFeaturesKHR",
                      sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR, cooperativeMatrix=1,
                      pNext=ffi.cast("void*", cm2.words))
            f13.pNext = khr
            self.keep += [cm2, khr]
            self.flexible = flexible_dimensions(vk, self.instance, self.pdev)
        feats = new("VkPhysicalDeviceFeatures2", sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, pNext=f11)
        feats.features.shaderInt64 = 1
        self.keep += [f11, f12, f13, feats]

        families = vk.vkGetPhysicalDeviceQueueFamilyProperties(self.pdev)
        self.family = next(i for i, f in enumerate(families) if f.queueFlags & vk.VK_QUEUE_COMPUTE_BIT)
        prio = ffi.new("float[1]", [1.0])
        qinfo = new("VkDeviceQueueCreateInfo", sType=vk.VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                    queueFamilyIndex=self.family, queueCount=1, pQueuePriorities=prio)
        names = [ffi.new("char[]", e.encode()) for e in wanted]
        name_arr = ffi.new("char*[]", names) if names else ffi.NULL
        dinfo = new("VkDeviceCreateInfo", sType=vk.VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, pNext=feats,
                    queueCreateInfoCount=1, pQueueCreateInfos=qinfo, enabledExtensionCount=len(names),
                    ppEnabledExtensionNames=name_arr)
        self.device = vk.vkCreateDevice(self.pdev, dinfo, None)
        self.queue = vk.vkGetDeviceQueue(self.device, self.family, 0)
        self.mem = vk.vkGetPhysicalDeviceMemoryProperties(self.pdev)
        pool = new("VkCommandPoolCreateInfo", sType=vk.VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                   flags=vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT, queueFamilyIndex=self.family)
        self.pool = vk.vkCreateCommandPool(self.device, pool, None)

    def buffer(self, size: int, host: bool):
        usage = (vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT
                 | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT)
        buf = vk.vkCreateBuffer(self.device, new("VkBufferCreateInfo", sType=vk.VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                                                 size=size, usage=usage), None)
        req = vk.vkGetBufferMemoryRequirements(self.device, buf)
        want = (vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT) if host \
            else vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT
        t = next(i for i in range(self.mem.memoryTypeCount)
                 if req.memoryTypeBits & (1 << i) and (self.mem.memoryTypes[i].propertyFlags & want) == want)
        mem = vk.vkAllocateMemory(self.device, new("VkMemoryAllocateInfo", sType=vk.VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                                                   allocationSize=req.size, memoryTypeIndex=t), None)
        vk.vkBindBufferMemory(self.device, buf, mem, 0)
        self.owned += [(vk.vkFreeMemory, mem), (vk.vkDestroyBuffer, buf)]
        mapped = np.frombuffer(vk.vkMapMemory(self.device, mem, 0, size, 0), dtype=np.uint8, count=size) if host else None
        return buf, mapped

    def submit(self, record):
        cmd = vk.vkAllocateCommandBuffers(self.device, new(
            "VkCommandBufferAllocateInfo", sType=vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
            commandPool=self.pool, level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, commandBufferCount=1))[0]
        vk.vkBeginCommandBuffer(cmd, new("VkCommandBufferBeginInfo", sType=vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                         flags=vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT))
        record(cmd)
        vk.vkEndCommandBuffer(cmd)
        cmds = ffi.new("VkCommandBuffer[1]", [cmd])
        fence = vk.vkCreateFence(self.device, new("VkFenceCreateInfo", sType=vk.VK_STRUCTURE_TYPE_FENCE_CREATE_INFO), None)
        vk.vkQueueSubmit(self.queue, 1, new("VkSubmitInfo", sType=vk.VK_STRUCTURE_TYPE_SUBMIT_INFO, commandBufferCount=1,
                                            pCommandBuffers=cmds), fence)
        vk.vkWaitForFences(self.device, 1, [fence], vk.VK_TRUE, 60 * 10 ** 9)
        vk.vkDestroyFence(self.device, fence, None)
        vk.vkFreeCommandBuffers(self.device, self.pool, 1, cmds)

    def pipeline(self, code: np.ndarray, spec: list, n_buffers: int):
        shader = vk.vkCreateShaderModule(self.device, new(
            "VkShaderModuleCreateInfo", sType=vk.VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, codeSize=code.nbytes,
            pCode=ffi.cast("uint32_t*", ffi.from_buffer(code))), None)
        binds = ffi.new("VkDescriptorSetLayoutBinding[]", n_buffers)
        for i in range(n_buffers):
            binds[i].binding, binds[i].descriptorType = i, vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER
            binds[i].descriptorCount, binds[i].stageFlags = 1, vk.VK_SHADER_STAGE_COMPUTE_BIT
        dsl = vk.vkCreateDescriptorSetLayout(self.device, new(
            "VkDescriptorSetLayoutCreateInfo", sType=vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
            bindingCount=n_buffers, pBindings=binds), None)
        dsls = ffi.new("VkDescriptorSetLayout[1]", [dsl])
        layout = vk.vkCreatePipelineLayout(self.device, new(
            "VkPipelineLayoutCreateInfo", sType=vk.VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, setLayoutCount=1,
            pSetLayouts=dsls), None)
        data = ffi.new("uint32_t[]", spec)
        entries = ffi.new("VkSpecializationMapEntry[]", len(spec))
        for i in range(len(spec)):
            entries[i].constantID, entries[i].offset, entries[i].size = i, 4 * i, 4
        sinfo = new("VkSpecializationInfo", mapEntryCount=len(spec), pMapEntries=entries, dataSize=4 * len(spec),
                    pData=data)
        entry = ffi.new("char[]", b"main")
        stage = new("VkPipelineShaderStageCreateInfo", sType=vk.VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                    stage=vk.VK_SHADER_STAGE_COMPUTE_BIT, module=shader, pName=entry, pSpecializationInfo=sinfo)
        info = new("VkComputePipelineCreateInfo", sType=vk.VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
                   stage=stage[0], layout=layout)
        pipe = vk.vkCreateComputePipelines(self.device, vk.VK_NULL_HANDLE, 1, info, None)[0]
        vk.vkDestroyShaderModule(self.device, shader, None)
        sizes = ffi.new("VkDescriptorPoolSize[1]")
        sizes[0].type, sizes[0].descriptorCount = vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, n_buffers
        dpool = vk.vkCreateDescriptorPool(self.device, new(
            "VkDescriptorPoolCreateInfo", sType=vk.VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, maxSets=1,
            poolSizeCount=1, pPoolSizes=sizes), None)
        dset = vk.vkAllocateDescriptorSets(self.device, new(
            "VkDescriptorSetAllocateInfo", sType=vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO, descriptorPool=dpool,
            descriptorSetCount=1, pSetLayouts=dsls))[0]
        self.owned += [(vk.vkDestroyDescriptorSetLayout, dsl), (vk.vkDestroyPipelineLayout, layout),
                       (vk.vkDestroyPipeline, pipe), (vk.vkDestroyDescriptorPool, dpool)]
        return pipe, layout, dset

    def release(self):
        """Destroy what buffer() and pipeline() made since the last release, newest first."""
        vk.vkDeviceWaitIdle(self.device)
        while self.owned:
            destroy, handle = self.owned.pop()
            destroy(self.device, handle, None)

    def bind(self, dset, buffers):
        infos = ffi.new("VkDescriptorBufferInfo[]", len(buffers))
        writes = ffi.new("VkWriteDescriptorSet[]", len(buffers))
        for i, b in enumerate(buffers):
            infos[i].buffer, infos[i].offset, infos[i].range = b, 0, (1 << 64) - 1  # VK_WHOLE_SIZE (the package has -1)
            writes[i].sType, writes[i].dstSet, writes[i].dstBinding = vk.VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, dset, i
            writes[i].descriptorCount, writes[i].descriptorType = 1, vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER
            writes[i].pBufferInfo = infos + i
        vk.lib.vkUpdateDescriptorSets(self.device, len(buffers), writes, 0, ffi.NULL)


def barrier(cmd):
    mb = new("VkMemoryBarrier", sType=vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER,
             srcAccessMask=vk.VK_ACCESS_SHADER_WRITE_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT,
             dstAccessMask=vk.VK_ACCESS_SHADER_READ_BIT | vk.VK_ACCESS_SHADER_WRITE_BIT | vk.VK_ACCESS_TRANSFER_READ_BIT)
    vk.lib.vkCmdPipelineBarrier(cmd, vk.VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, vk.VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, 0,
                                1, mb, 0, ffi.NULL, 0, ffi.NULL)


def timer(gpu, pipe, layout, dset, groups):
    """(record(cmd, count): `count` dispatches of the pipeline over `groups` (x, y) between two
    timestamps; last_ms(count): milliseconds per dispatch of the last such recording submitted)."""
    qp = vk.vkCreateQueryPool(gpu.device, new("VkQueryPoolCreateInfo", sType=vk.VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                                              queryType=vk.VK_QUERY_TYPE_TIMESTAMP, queryCount=2), None)
    gpu.owned.append((vk.vkDestroyQueryPool, qp))

    def record(cmd, count):
        vk.lib.vkCmdResetQueryPool(cmd, qp, 0, 2)
        vk.lib.vkCmdBindPipeline(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, pipe)
        vk.lib.vkCmdBindDescriptorSets(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, layout, 0, 1,
                                       ffi.new("VkDescriptorSet[1]", [dset]), 0, ffi.NULL)
        vk.lib.vkCmdWriteTimestamp(cmd, vk.VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, qp, 0)
        for _ in range(count):
            vk.lib.vkCmdDispatch(cmd, groups[0], groups[1], 1)
            barrier(cmd)
        vk.lib.vkCmdWriteTimestamp(cmd, vk.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, qp, 1)

    def last_ms(count):
        stamps = ffi.new("uint64_t[2]")
        vk.lib.vkGetQueryPoolResults(gpu.device, qp, 0, 2, 16, stamps, 8,
                                     vk.VK_QUERY_RESULT_64_BIT | vk.VK_QUERY_RESULT_WAIT_BIT)
        return (stamps[1] - stamps[0]) * gpu.period_ns / 1e6 / count

    return record, last_ms


def run(gpu, shape, tile, code, reps):
    m, n, k = shape
    bm, bn, bk, threads = tile
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32).astype(np.float16)
    b = (rng.standard_normal((k, n), dtype=np.float32) / np.sqrt(k)).astype(np.float16)
    sizes = [2 * m * k, 2 * k * n, 2 * m * n]
    bufs = [gpu.buffer(size, host=False)[0] for size in sizes]
    stage, mapped = gpu.buffer(max(sizes), host=True)
    pipe, layout, dset = gpu.pipeline(code, [threads, bm, bn, bk, m, n, k], 3)
    gpu.bind(dset, bufs)
    region = ffi.new("VkBufferCopy[1]")
    for host, dst in ((a, bufs[0]), (b, bufs[1])):
        region[0].size = host.nbytes
        mapped[:host.nbytes] = host.view(np.uint8).ravel()
        gpu.submit(lambda cmd: vk.lib.vkCmdCopyBuffer(cmd, stage, dst, 1, region))
    region[0].size = sizes[2]
    mapped[:] = 0xFF  # NaN poison: an unwritten element of C shows
    gpu.submit(lambda cmd: vk.lib.vkCmdCopyBuffer(cmd, stage, bufs[2], 1, region))
    record, last_ms = timer(gpu, pipe, layout, dset, ((n + bn - 1) // bn, (m + bm - 1) // bm))
    gpu.submit(lambda cmd: record(cmd, 1))
    gpu.submit(lambda cmd: (barrier(cmd), vk.lib.vkCmdCopyBuffer(cmd, bufs[2], stage, 1, region)))
    c = mapped[:sizes[2]].view(np.float16).reshape(m, n).astype(np.float32)
    rows = rng.choice(m, size=min(m, 64), replace=False)
    ref = a[rows].astype(np.float32) @ b.astype(np.float32)
    err = float(np.linalg.norm(c[rows] - ref) / np.linalg.norm(ref))
    unwritten = int(np.isnan(c).sum())
    gpu.submit(lambda cmd: record(cmd, 3))  # warm
    gpu.submit(lambda cmd: record(cmd, reps))
    ms = last_ms(reps)
    return dict(ms=ms, tflops=2 * m * n * k / (ms * 1e-3) / 1e12, rel_l2_rows=err, unwritten=unwritten)


def cublas(shape):
    try:
        from benchmarks.gpu.cublas_timing import cublas_ms  # beside this script; needs torch
        return cublas_ms(*shape)
    except ImportError:
        return None


def main(argv):
    plain = "--plain" in argv
    args = [x for x in argv if x != "--plain"]
    shapes = [tuple(int(v) for v in s.split("x")) if "x" in s else (int(s),) * 3
              for s in (args[0].split(",") if args else ["4096", "8192"])]
    specs = args[1:] or ["16x16x1x256" if plain else "128x128x32x256"]
    gpu = Gpu(coopmat2=not plain)
    if plain:
        with tempfile.NamedTemporaryFile("w", suffix=".comp", delete=False) as f:
            f.write(PLAIN_GEMM)
        plain_code = compile_glsl(f.name)
        os.unlink(f.name)
    print(json.dumps(dict(device=gpu.name, coopmat2_features=gpu.cm2, flexible_dimensions=gpu.flexible)), flush=True)
    for shape in shapes:
        cu = None if plain else cublas(shape)
        for spec in specs:
            tile_text, _, opts = spec.partition(":")
            tile = tuple(int(v) for v in tile_text.split("x"))
            unroll = int(opts.split("u")[1].split("c")[0]) if "u" in opts else 1
            clamp = int(opts.split("c")[1]) if "c" in opts else 1
            try:
                code = plain_code if plain else compile_glsl(os.path.join(HERE, "coopmat2_gemm.comp"),
                                                             (f"UNROLL={unroll}", f"CLAMP={clamp}"))
                r = run(gpu, shape, tile, code, reps=3 if plain else 20)
            except Exception as e:  # a tile the device refuses: say so and go on
                r = dict(error=f"{type(e).__name__}: {e}")
            finally:
                gpu.release()
            if cu and "tflops" in r:
                r.update(cublas_ms=cu, cublas_tflops=2 * np.prod(shape, dtype=float) / (cu * 1e-3) / 1e12,
                         pct_of_cublas=100 * cu / r["ms"])
            print(json.dumps(dict(shape="x".join(map(str, shape)), tile=spec, **r)), flush=True)


if __name__ == "__main__":
    exit_on_help(__doc__)
    main(sys.argv[1:])
