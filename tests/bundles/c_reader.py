"""Build and drive the C reader (bundles/vkb_check.c + vkb_reader.h) for the bundle tests; and
put the Python container verdict in the same words, so the two can be compared line by line."""
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from bundles import BundleError
from bundles.format import check_container

BUNDLES_DIR = Path(__file__).resolve().parents[2] / "bundles"


def build(out_dir: Path) -> tuple[Path, str]:
    """Compile vkb_check with the system C compiler, strict C99, with AddressSanitizer and UBSan
    when the toolchain has them (any out-of-bounds read then aborts the run). Returns (exe, label)."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        pytest.skip("no C compiler (cc, gcc or clang) to build bundles/vkb_check.c")
    source, exe = BUNDLES_DIR / "vkb_check.c", out_dir / "vkb_check"
    strict = ["-std=c99", "-Wall", "-Wextra", "-pedantic", "-Werror"]
    sanitized = ["-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
    for flags, label in ((sanitized, "ASan+UBSan"), (["-O2"], "plain")):
        proc = subprocess.run([cc, *strict, *flags, "-o", str(exe), str(source)], capture_output=True, text=True)
        if proc.returncode == 0 and subprocess.run([str(exe), "--stream"], input=b"", env=_env(),
                                                   capture_output=True).returncode == 0:
            return exe, f"{Path(cc).name} -std=c99 -pedantic -Werror, {label}"
        if label == "plain":
            pytest.fail(f"bundles/vkb_check.c does not build with {cc}:\n{proc.stderr}")
    raise AssertionError("unreachable")


def _env():
    return dict(os.environ, ASAN_OPTIONS="detect_leaks=0", UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")


def run(exe: Path, blobs: list) -> list[str]:
    """One output line per blob, from one vkb_check process reading them all from a pipe."""
    stream = b"".join(struct.pack("<Q", len(b)) + bytes(b) for b in blobs)
    proc = subprocess.run([str(exe), "--stream"], input=stream, capture_output=True, timeout=300, env=_env())
    assert proc.returncode == 0, f"vkb_check failed ({proc.returncode}):\n{proc.stderr.decode()[-3000:]}"
    lines = proc.stdout.decode("utf-8", "replace").splitlines()
    assert len(lines) == len(blobs), (len(lines), len(blobs), proc.stderr.decode()[-2000:])
    return lines


def python_verdict(data) -> str:
    """`check_container`'s verdict, worded as c_verdict() words a vkb_check line."""
    try:
        c = check_container(bytes(data))
    except BundleError as e:
        return f"REJECT {e.check}"
    manifest = next(s for s in c.sections if s.kind == 1)
    modules = ",".join(f"{s.offset}+{s.size}" for s in c.sections if s.kind == 2)
    weights = next((s for s in c.sections if s.kind == 3), None)
    w = f"{weights.offset}+{weights.size}" if weights is not None and weights.size else "0+0"
    return f"ACCEPT manifest={manifest.offset}+{manifest.size} modules={modules} weights={w}"


def c_verdict(line: str) -> str:
    """A vkb_check line without its label: 'ACCEPT <ranges>' or 'REJECT <check>'."""
    word, _label, rest = line.split(" ", 2)
    return f"REJECT {rest.split(':', 1)[0]}" if word == "REJECT" else f"ACCEPT {rest}"
