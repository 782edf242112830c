"""Device profiles: what kernels may use and how big their tiles are. Pure data: no device access.

`generic` fits any Vulkan 1.1 compute device (16 KiB shared memory, 256 invocations), so a bundle
compiled for it runs everywhere. The `host` profile, read from the local device, is built by
compiler/host.py on top of one of these. A bundle of several profiles (format 1.2 variants) says
which devices each is for (`match`); the runtime picks the best one that fits.
"""
from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Target:
    name: str
    max_shared_memory: int = 16384
    max_invocations: int = 256
    subgroup_size: int = 32
    # Elementwise-style kernels: invocations per workgroup.
    elementwise_local: int = 256
    # Tiled matmul: workgroup tile, register tile (rows x cols of C per invocation), K step.
    tile_m: int = 64
    tile_n: int = 64
    tile_k: int = 16
    reg_m: int = 4
    reg_n: int = 4
    # Workgroups that keep the device busy: a matmul with fewer tiles than this gets smaller
    # tiles (down to 32x32) so that small batch-1 layers still spread over every core. Where the
    # device reports its cores (with_cores), MIN_WORKGROUPS_PER_CORE of them.
    min_workgroups: int = 16
    # Split-K: K steps each slice keeps at least (shallower slices cost more in the extra reduction
    # dispatch than their workgroups give back).
    splitk_min_steps: int = 4
    # Tiled matmul with fewer than min_workgroups tiles: where splitting K can give this many
    # workgroups, the profile's tile stays and K splits (smaller tiles load more per product);
    # else (or 0) tiles shrink first, and split-K aims at min_workgroups.
    splitk_workgroups: int = 0
    # Split-K's finish: the last slice of each tile adds the partial sums itself where that is at
    # most this many per invocation, else a second dispatch adds them (lower/matmul.py).
    splitk_fused_sums: int = 64
    # The profiles use "tiled" (shared-memory tiles, for GPUs) or "texel" (register tiles, no
    # shared memory, A and B fetched through uniform texel buffers: for CPUs such as lavapipe, where
    # barriers cost more than shared memory saves and a texel fetch is one gather). Both fall back
    # to templates/matmul_register.comp.j2 (cpu_rows rows and one vec4 of columns per invocation,
    # 64 invocations) in lower/matmul.py: "tiled" for matmuls of at most 8 rows, "texel" for
    # operands over max_texel_elements.
    matmul: str = "tiled"
    # Texel matmul: rows per invocation, vec4 columns per invocation, invocations per workgroup
    # (the register fallback takes cpu_rows only).
    cpu_rows: int = 8
    cpu_cols: int = 2
    cpu_lanes: int = 16
    # Texel buffers (matmul="texel") address at most this many texels: Vulkan guarantees 65536.
    max_texel_elements: int = 65536
    # Winograd F(m x m, 3x3), m = 2 or 4 (0: off), for float32 3x3 stride-1 convolutions with at
    # least this many input and output channels (its transforms fetch through texel buffers of at
    # most max_texel_elements; the GEMMs between them take the profile's matmul kernel).
    winograd: int = 0
    winograd_min_channels: int = 16
    # Convolutions write im2col out when it takes at most this many bytes (else the GEMM gathers
    # it on the fly), so that the GEMM fetches B four (texel) or eight (float16) elements at a
    # time; on GPU profiles with the batch's images side by side along its rows (lower/conv.py).
    im2col_max_bytes: int = 0
    # VK_KHR_cooperative_matrix: the shapes the device lists (vkGetPhysicalDeviceCooperativeMatrix-
    # PropertiesKHR, subgroup scope) as (M, N, K, A type, B type, C type, result type), types as
    # numpy dtype names ("bfloat16" for VK_COMPONENT_TYPE_BFLOAT16_KHR). Empty: no cooperative
    # matrix. lower/matmul.py runs float16 matmuls and convolutions on a float16 x float16 ->
    # float32 shape when there is one (models compiled --precision fp16; float32 never).
    cooperative_matrix: tuple = ()
    # Cooperative-matrix workgroup tiles, largest first, as (subgroups along M, along N,
    # accumulators per subgroup along M, along N); the K step is coopmat_k, through
    # coopmat_stages (1 or 2) shared-memory buffers. One buffer of K 64 beats two of K 32: staging
    # a step costs about what its products do (`python3 -m benchmarks.gpu.coopmat gemm 8192 sweep
    # 3,0`, benchmarks/RESULTS.md "float16 GEMM against cuBLAS").
    coopmat_tiles: tuple = ((2, 4, 4, 2), (2, 2, 2, 4), (2, 2, 2, 2), (2, 2, 1, 2), (2, 2, 1, 1))
    coopmat_k: int = 64
    coopmat_stages: int = 1
    # The cooperative-matrix kernel's tile choice and split-K aim at this many workgroups (0:
    # min_workgroups). Where coopmat_k_steps > 0, the K step is the deepest of coopmat_k, 2x and
    # 4x that leaves at least that many steps and fits shared memory with the tile. Fewer
    # workgroups help large batches and hurt batch 1, and no setting of these or
    # coopmat_split_steps wins on every model, so nvidia sets none (`python3 -m
    # benchmarks.gpu.profile_variants fp16 bert:1,resnet50:1,vit:8,resnet50:32 default,...`).
    coopmat_workgroups: int = 0
    coopmat_k_steps: int = 0
    # Split-K slices of the cooperative-matrix kernel keep at least this many K steps (0:
    # splitk_min_steps).
    coopmat_split_steps: int = 0
    # Where even the smallest tile gives too few workgroups (but at least an eighth of
    # coopmat_workgroups) and K is too short for two split-K slices of this many coopmat_k steps,
    # the product is not split: its K step deepens (2x or 4x coopmat_k, leaving at least 3 steps)
    # instead. 0: split as above. nvidia: 16: short products such as BERT-base's 128x768x768 at
    # batch 1 run faster in three deep steps than in split slices of shallow ones, while grids
    # under an eighth of the workgroups (MobileNetV2's last layers) need split-K's slices to fill
    # the device (`vkc tune --precision fp16` prints both per problem).
    coopmat_short_k: int = 0
    # One shared buffer: two K steps in flight in registers (steps k + 1 and k + 2) where a set
    # takes at most this many loads an invocation (0: one step). nvidia: 4, the 32x32 tiles of
    # small products, which it speeds up by 1-2 % at batch 1; 8 (the larger tiles too) gains
    # nothing more (`python3 -m benchmarks.gpu.profile_variants fp16 bert:1,gpt2:1,resnet50:1 ...`).
    coopmat_deep_prefetch: int = 0
    # VK_NV_cooperative_matrix2: the workgroup-scope float16 x float16 -> float32 shapes the device
    # allows (vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV) as (M, N, K
    # granularity, workgroup invocations): a workgroup of that many invocations may hold any
    # multiple of them. Empty: no coopmat2.
    coopmat2: tuple = ()
    # The workgroup tile of templates/matmul_coopmat2.comp.j2, (BM, BN, BK, invocations, K steps a
    # loop iteration), or () for the subgroup-scope kernel (matmul_coopmat). No profile sets it:
    # it wins large products and loses small ones (benchmarks/RESULTS.md, "float16 GEMM against
    # cuBLAS"), so `vkc tune` measures it per problem where the profile lists coopmat2 shapes.
    coopmat2_tile: tuple = ()
    # Most float16 elements one global load of the cooperative-matrix kernel fetches: 8 (16 bytes), 4, 1.
    coopmat_load: int = 8
    # The cooperative-matrix kernels (matmul_coopmat, attention_coopmat) with their
    # cooperative-matrix operations done element by element in portable GLSL
    # (templates/coopmat.glsl.j2), chosen and tiled as the profile's device lists them: the same
    # kernels on a device without cooperative matrices, so that tests check their numbers on
    # lavapipe (emulating_cooperative_matrix). Slow; for checking, never for speed.
    emulate_cooperative_matrix: bool = False
    # Workgroup reductions (LayerNorm's statistics) add within each subgroup first
    # (GL_KHR_shader_subgroup_arithmetic, which the bundle then requires), then the subgroups'
    # sums through shared memory: two barriers per sum instead of one per level of a tree.
    subgroup_reductions: bool = False
    # Tile choices `vkc tune` measured fastest on this device: (problem key, ((field, value),
    # ...)) pairs, applied to matmuls of that problem (compiler/tune.py measures them,
    # compiler/tuning_cache.py stores them, compiler/host.py reads them into the host profile).
    tuned: tuple = ()
    # Set on the profile for_problem returns for a tuned problem: its tile is taken as measured,
    # not fitted to the problem (lower/matmul.py _fit_short_side).
    exact_tile: bool = False
    # The devices this profile is for, by VkPhysicalDeviceProperties vendorID and deviceType (names
    # of bundles.manifest.DEVICE_TYPES); both empty: any device (the portable fallback).
    vendor_ids: tuple = ()
    device_types: tuple = ()

    def match(self) -> dict | None:
        """`target.match` of the variants compiled for this profile (FORMAT.md, "Which variant runs")."""
        found = {"vendor_ids": list(self.vendor_ids), "device_types": list(self.device_types)}
        return {k: v for k, v in found.items() if v} or None

    def for_problem(self, key: str) -> "Target":
        for problem, fields in self.tuned:
            if problem == key and fields:  # empty: the tuner kept the profile's own choice
                return replace(self, **dict(fields), exact_tile=True)
        return self


# What an H200 (driver 580.159) lists, in its order (`python3 -m benchmarks.gpu.coopmat check` prints it):
# float16 with float16 or float32 accumulators, 8-bit integers with 32-bit ones, bfloat16.
NVIDIA_H200_COOPERATIVE_MATRIX = tuple(
    [(16, n, k, "float16", "float16", c, c) for c in ("float16", "float32")
     for n, k in ((16, 16), (8, 16), (8, 8))]
    + [(16, n, 32, t, t, acc, acc) for n in (16, 8) for t, acc in (("uint8", "uint32"), ("int8", "int32"))]
    + [(16, 16, 16, "bfloat16", "bfloat16", "float32", "float32")])

# What an H200 (driver 580.159) lists for VK_NV_cooperative_matrix2 at workgroup scope, float16 x
# float16 -> float32: (M, N, K granularity, invocations) (`python3 -m benchmarks.probes.coopmat2_probe` prints it).
NVIDIA_H200_COOPMAT2 = ((16, 16, 16, 32), (16, 16, 16, 64), (32, 16, 16, 128), (32, 32, 16, 256))

# The storage-buffer range every Vulkan device binds (maxStorageBufferRange >= 2^27): what a
# compile lays out in one binding, whatever the profile (lavapipe's is exactly this).
GUARANTEED_BINDING_BYTES = 1 << 27
# Workgroup counts per core (an NVIDIA streaming multiprocessor, an AMD compute unit): tiles shrink
# until a matmul has MIN_WORKGROUPS_PER_CORE workgroups a core, so that one can run while another
# waits at a barrier (two of the nvidia profile's 256-invocation tiles fit an SM's registers); a
# profile that splits K first aims at SPLITK_WORKGROUPS_PER_CORE.
MIN_WORKGROUPS_PER_CORE = 2
SPLITK_WORKGROUPS_PER_CORE = 4
# The nvidia profile's device class: the H100 SXM5 and the H200 have 132 SMs each (NVIDIA's
# H100 Tensor Core GPU Architecture whitepaper).
NVIDIA_PROFILE_SMS = 132


def with_cores(target: Target, cores: int) -> Target:
    """The profile's workgroup counts for a device of `cores` cores (0: unknown, unchanged)."""
    if cores <= 0:
        return target
    return replace(target, min_workgroups=MIN_WORKGROUPS_PER_CORE * cores,
                   splitk_workgroups=SPLITK_WORKGROUPS_PER_CORE * cores if target.splitk_workgroups else 0)


def emulating_cooperative_matrix(target: Target) -> Target:
    """`target`'s kernels and tiles, its cooperative matrices emulated (emulate_cooperative_matrix),
    for any device that has float16 arithmetic and the shared memory its tiles take."""
    return replace(target, name=f"{target.name}-emulated", emulate_cooperative_matrix=True,
                   vendor_ids=(), device_types=())


TARGETS = {
    "generic": Target("generic"),
    # ARM Mali, Qualcomm Adreno, Imagination PowerVR, Samsung Xclipse.
    "mobile": Target("mobile", max_invocations=128, elementwise_local=128, tile_m=32, tile_n=32,
                     vendor_ids=(0x13B5, 0x5143, 0x1010, 0x144D)),
    # Any CPU implementation (lavapipe, SwiftShader: the latter misses the texel limit and falls back).
    "lavapipe": Target("lavapipe", max_shared_memory=32768, max_invocations=1024, subgroup_size=8,
                       matmul="texel", cpu_lanes=8, max_texel_elements=2**27, winograd=4,
                       im2col_max_bytes=64 << 20, device_types=("cpu",)),
    # NVIDIA data-center GPUs of NVIDIA_PROFILE_SMS streaming multiprocessors, where its tiles
    # were chosen (`python3 -m benchmarks.gpu.profile_variants fp32|fp16 MODELS VARIANTS` times the
    # alternatives on whole models): 128x64 tiles with 8x4 registers (128x128 ties on large
    # squares and loses at transformer shapes); split-K before tiles shrink, its partial sums
    # added by a second dispatch (the fused finish costs the kernel registers and occupancy);
    # im2col scratch up to 256 MiB (ResNet-50's stem at batch 32 in float32 takes 236);
    # Winograd F(2x2, 3x3) for float32 3x3 stride-1 layers (F(4x4) loses on ResNets). Other
    # NVIDIA GPUs run this variant too; `--target host` scales its workgroup counts to the
    # device's own SMs (compiler/host.py).
    "nvidia": with_cores(Target("nvidia", max_shared_memory=49152, max_invocations=1024, tile_m=128,
                     tile_n=64, tile_k=16, reg_m=8, reg_n=4, splitk_workgroups=1,
                     splitk_fused_sums=0, winograd=2, max_texel_elements=2**27,
                     im2col_max_bytes=256 << 20, subgroup_reductions=True,
                     vendor_ids=(0x10DE,), device_types=("discrete_gpu", "integrated_gpu"),
                     cooperative_matrix=NVIDIA_H200_COOPERATIVE_MATRIX, coopmat_deep_prefetch=4,
                     coopmat_short_k=16, coopmat2=NVIDIA_H200_COOPMAT2), NVIDIA_PROFILE_SMS),
}

# What `vkc compile` and compile_model build without a target: the profiles of common devices, best
# first (list order breaks ties in the pick rule), and `generic`, which runs on any device, last.
DEFAULT_TARGETS = ("nvidia", "mobile", "lavapipe", "generic")


def get_target(name: "str | Target") -> Target:
    """A named profile (a Target is returned as is). `host` needs the device: compiler.host."""
    if isinstance(name, Target):
        return name
    if name == "host":
        raise ValueError("target 'host' reads the local device; resolve it with "
                         "compiler.host.resolve_target (compile_model and `vkc` do).")
    if name not in TARGETS:
        raise ValueError(f"unknown target '{name}'; choose one of {sorted(TARGETS) + ['host']}.")
    return TARGETS[name]

