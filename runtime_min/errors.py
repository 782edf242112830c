"""One exception type for every runtime failure, the helpers that produce it, and resource tracking."""
from __future__ import annotations

import contextlib
import threading

INSTALL_DRIVER = ("install a Vulkan driver, e.g. `apt-get install mesa-vulkan-drivers libvulkan1` "
                  "for the CPU implementation lavapipe, or your GPU vendor's driver")

# What to do about a failed call, by the name of the `vulkan` package's exception class.
_ADVICE = {
    "VkErrorOutOfHostMemory": "free host memory or run a smaller model",
    "VkErrorOutOfDeviceMemory": "choose a device with more memory (see `vkc devices`) or run a smaller model",
    "VkErrorInitializationFailed": INSTALL_DRIVER + ", and check that it works with `vulkaninfo --summary`",
    "VkErrorIncompatibleDriver": INSTALL_DRIVER,
    "VkErrorDeviceLost": "the driver lost the device (a crash, a reset or a timeout in a kernel); every model on "
                         "it must be loaded again; rerun with VKC_VALIDATION=1 to look for misuse, or try another device",
    "VkErrorLayerNotPresent": "install the Khronos validation layer (`apt-get install vulkan-validationlayers`) "
                              "or run without validation",
    "VkErrorExtensionNotPresent": "choose a device that supports the extension (see `vkc devices`)",
    "VkErrorFeatureNotPresent": "choose a device that supports the feature (see `vkc devices`)",
    "VkErrorOutOfPoolMemory": "this is a runtime bug; please report it with the bundle",
}


class VkcRuntimeError(RuntimeError):
    """A Vulkan call or a device check failed; the message says what and what to do."""


class DeviceLostError(VkcRuntimeError):
    """The driver lost the device (VK_ERROR_DEVICE_LOST) or it stopped answering: every model on it is unusable."""


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
        if name == "VkErrorDeviceLost":
            raise DeviceLostError(f"The Vulkan device was lost while {what} ({name}); {advice}.") from e
        raise VkcRuntimeError(f"Vulkan failed while {what} ({name}); {advice}.") from e


# Every object the runtime created and has not destroyed yet (Vulkan handles, mappings), and those
# it gave up on (left alive on a hung device, as destroying objects in use is undefined).
_counts = {"live": 0, "instances": 0, "abandoned": 0, "allocations": 0, "allocated_bytes": 0}
_count_lock = threading.Lock()


def resources() -> dict:
    """Live runtime objects and device memory allocations (tests check they return to their start)."""
    with _count_lock:
        return dict(_counts)


def count(key: str, delta: int):
    with _count_lock:
        _counts[key] += delta


class Cleanup:
    """Destructors pushed as objects are created, run in reverse order by release(); counted in
    resources() under `key` while they wait ("instances": the process's Vulkan instances)."""

    def __init__(self, key: str = "live"):
        self._undo, self._key = [], key

    def push(self, fn, *args):
        self._undo.append((fn, args))
        with _count_lock:
            _counts[self._key] += 1

    def release(self):
        while self._undo:
            fn, args = self._undo.pop()
            try:
                fn(*args)
            except Exception:  # keep releasing the rest; a failed destroy must not leak the others
                pass
            finally:
                with _count_lock:
                    _counts[self._key] -= 1

    def abandon(self):
        """Forget every object without destroying it (the device hung and may still use them)."""
        with _count_lock:
            _counts[self._key] -= len(self._undo)
            _counts["abandoned"] += len(self._undo)
        self._undo.clear()
