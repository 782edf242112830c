"""runtime_min: load a vkc `.vkb` bundle and run it on any Vulkan device.

    from runtime_min import load
    with load("model.vkb") as model:          # device chosen automatically, or device=0 / device="nvidia"
        outputs = model.run({"input": x})     # dict of numpy arrays, named as in the ONNX model
        model.run({"input": x}, outputs={"output": out})   # or into arrays of your own
        for d in model.profile({"input": x}): print(d.kernel, d.seconds, d.gflops)

Imports only the standard library, numpy, `bundles` and (lazily, on first use) `vulkan`.
Environment: VKC_DEVICE (index or name substring), VKC_VALIDATION=1 (Khronos validation layer),
VKC_CACHE_DIR (pipeline cache under it, in pipelines/; `off` disables), VKC_ROBUST=0 (robust buffer
access is on by default; 0/off/false turns it off where load() is not given robust=), VKC_TIMING=1
(Model.gpu_time). Pipelining: h = model.run_async(feeds); ...; h.wait() -> outputs (two in flight).
Variants (format 1.2): load picks the device profile (load(..., target="lavapipe") names it), each
run the variant compiled for the feeds' shapes (model.target, model.variants, model.shapes).
Threads: runs of one model are serialized (at most two in flight); models share their device and
run side by side.
"""
from .device import DeviceInfo, choose_device, clear_validation_messages, list_devices, validation_messages
from .errors import DeviceLostError, VkcRuntimeError, resources
from .model import DispatchTime, GpuTime, Model, RunHandle, TensorInfo, load

__all__ = ["load", "Model", "list_devices", "choose_device", "VkcRuntimeError", "DeviceLostError", "DeviceInfo", "TensorInfo",
           "DispatchTime", "GpuTime", "RunHandle", "validation_messages", "clear_validation_messages", "resources"]
