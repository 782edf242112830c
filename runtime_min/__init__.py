"""runtime_min: load a vkc `.vkb` bundle and run it on any Vulkan device.

    from runtime_min import load
    with load("model.vkb") as model:          # device chosen automatically, or device=0 / device="nvidia"
        outputs = model.run({"input": x})     # dict of numpy arrays, named as in the ONNX model

Imports only the standard library, numpy, `bundles` and (lazily, on first use) `vulkan`.
Environment: VKC_DEVICE (index or name substring), VKC_VALIDATION=1 (Khronos validation layer).
"""
from .device import DeviceInfo, clear_validation_messages, list_devices, validation_messages
from .errors import VkcRuntimeError
from .model import Model, TensorInfo, load

__all__ = ["load", "Model", "list_devices", "VkcRuntimeError", "DeviceInfo", "TensorInfo",
           "validation_messages", "clear_validation_messages"]
