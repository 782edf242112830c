"""Kernels -> GLSL (Jinja2 templates) -> SPIR-V (glslc), cached by the hash of the source."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

import jinja2

from bundles.cache import cache_dir
from templates import TEMPLATE_DIR

from .errors import CompileError
from .lower.kernel import Kernel

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


@lru_cache(maxsize=1)
def glslc() -> str:
    path = shutil.which("glslc")
    if path is None:
        raise CompileError("glslc (shaderc) is not installed; install it with "
                           "`apt-get install glslc` (Debian/Ubuntu) or from the Vulkan SDK.")
    version = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
    return path + "\0" + version


@lru_cache(maxsize=4096)
def compile_glsl(source: str, name: str = "kernel") -> bytes:
    """SPIR-V for a GLSL compute shader; memoized in-process and on disk by source hash."""
    path_and_version = glslc()
    key = hashlib.sha256((path_and_version + TARGET_ENV + source).encode()).hexdigest()
    cache = _spirv_cache()
    cached = cache / f"{key}.spv" if cache else None
    if cached and cached.exists():
        return cached.read_bytes()
    cmd = [path_and_version.split("\0")[0], "-fshader-stage=compute", f"--target-env={TARGET_ENV}",
           "-O", "-o", "-", "-"]
    proc = subprocess.run(cmd, input=source.encode(), capture_output=True)
    if proc.returncode != 0:
        numbered = "\n".join(f"{i + 1:4d} {line}" for i, line in enumerate(source.splitlines()))
        raise CompileError(f"glslc rejected kernel '{name}' (a vkc bug; please report it):\n"
                           f"{proc.stderr.decode()}\n{numbered}")
    spirv = proc.stdout
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
    if kernel.template == "matmul_register":
        parts += [p["b_mode"], f"{p['TM']}x{p['TN']}x{p['VEC']}"]
    if kernel.template == "pool":
        parts.append(p["mode"])
    if kernel.template == "elementwise_typed":
        parts.append(p["out"].name)
    if kernel.template == "strided_copy" and p["bits"] < 32:
        parts.append(f"{p['bits']}bit")
    if p.get("n_epilogue") or p.get("epilogue_expr", "acc_v") != "acc_v":
        parts.append("epilogue")
    return "_".join(parts)
