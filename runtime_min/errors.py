"""One exception type for every runtime failure, and the helpers that produce it."""
from __future__ import annotations

import contextlib

INSTALL_DRIVER = ("install a Vulkan driver, e.g. `apt-get install mesa-vulkan-drivers libvulkan1` "
                  "for the CPU implementation lavapipe, or your GPU vendor's driver")

# What to do about a failed call, by the name of the `vulkan` package's exception class.
_ADVICE = {
    "VkErrorOutOfHostMemory": "free host memory or run a smaller model",
    "VkErrorOutOfDeviceMemory": "choose a device with more memory (see `vkc devices`) or run a smaller model",
    "VkErrorInitializationFailed": INSTALL_DRIVER + ", and check that it works with `vulkaninfo --summary`",
    "VkErrorIncompatibleDriver": INSTALL_DRIVER,
    "VkErrorDeviceLost": "the driver lost the device (a crash or a timeout in a kernel); "
                         "rerun with VKC_VALIDATION=1 to look for misuse, or try another device",
    "VkErrorLayerNotPresent": "install the Khronos validation layer (`apt-get install vulkan-validationlayers`) "
                              "or run without validation",
    "VkErrorExtensionNotPresent": "choose a device that supports the extension (see `vkc devices`)",
    "VkErrorFeatureNotPresent": "choose a device that supports the feature (see `vkc devices`)",
    "VkErrorOutOfPoolMemory": "this is a runtime bug; please report it with the bundle",
}


class VkcRuntimeError(RuntimeError):
    """A Vulkan call or a device check failed; the message says what and what to do."""


def import_vulkan():
    """Import the `vulkan` package here, not at module import, so `import runtime_min` always works."""
    try:
        import vulkan
    except OSError as e:  # the package dlopens libvulkan.so.1 on import
        raise VkcRuntimeError(f"No Vulkan loader was found ({e}); {INSTALL_DRIVER}.") from None
    except ImportError as e:
        raise VkcRuntimeError(f"The Python package `vulkan` could not be imported ({e}); "
                              "install it with `pip install vulkan`.") from None
    return vulkan


def _is_vulkan_failure(e: BaseException) -> bool:
    # The package raises its own classes, and KeyError for VkResult codes its table lacks
    # (its table holds VK_ERROR_OUT_OF_POOL_MEMORY with the wrong sign).
    mod = type(e).__module__ or ""
    return mod.startswith("vulkan") or (isinstance(e, KeyError) and e.args and isinstance(e.args[0], int))


@contextlib.contextmanager
def step(what: str):
    """Turn a Vulkan failure inside the block into a VkcRuntimeError naming `what` was being done."""
    try:
        yield
    except VkcRuntimeError:
        raise
    except Exception as e:
        if not _is_vulkan_failure(e):
            raise
        name = type(e).__name__ if not isinstance(e, KeyError) else f"VkResult {e.args[0]}"
        advice = _ADVICE.get(type(e).__name__, "rerun with VKC_VALIDATION=1 to see what the driver objects to, "
                                                "or try another device (`vkc devices`)")
        raise VkcRuntimeError(f"Vulkan failed while {what} ({name}); {advice}.") from e


class Cleanup:
    """Destructors pushed as objects are created, run in reverse order by release()."""

    def __init__(self):
        self._undo = []

    def push(self, fn, *args):
        self._undo.append((fn, args))

    def release(self):
        while self._undo:
            fn, args = self._undo.pop()
            try:
                fn(*args)
            except Exception:  # keep releasing the rest; a failed destroy must not leak the others
                pass
