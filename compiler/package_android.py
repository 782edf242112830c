"""`vkc package model.vkb --android APP_DIR`: ship a bundle as an uncompressed Android asset.

- The bundle goes to `<module>/src/main/assets/<name>.vkb` (`<module>` is `APP_DIR/app`, or
  APP_DIR itself when it is the app module), re-laid with 16 KiB-aligned weights on request.
- Beside it, `<name>.requirements.json`: what the device needs (Vulkan version, extensions,
  features, limits, memory), in Vulkan's own names, so an app can check before it loads the bundle.
- The module's Gradle build file gets `androidResources { noCompress += "vkb" }` (AAPT then stores
  `.vkb` assets uncompressed, so native code can read them in place through `AAsset_getBuffer`
  or mmap them). The file is edited only where that is unambiguous: one top-level `android { }`
  block, balanced braces, at most one `androidResources { }` inside it; otherwise nothing is
  written and the snippet is returned for the user to paste.

Standard library plus the bundle reader and writer (`bundles`): packaging is the `vkc package`
command's business, not the file format's.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from bundles import SectionKind, device_requirements, read_bundle, write_bundle

PAGE_SIZES = (4096, 16384)
REQUIREMENTS_FORMAT = "vkc-device-requirements"


class PackageError(Exception):
    """The app directory or the output cannot be used; the message says why and what to do."""


@dataclass
class GradleResult:
    file: Path | None
    action: str               # "added", "already" (nothing to do), or "manual" (print `snippet`)
    reason: str = ""          # why "manual"
    snippet: str = ""         # what to add by hand (always set)
    added: str = ""           # the text inserted, when "added"


@dataclass
class PackageResult:
    module: Path
    asset: Path
    requirements: Path
    bundle_bytes: int
    weights_alignment: int
    relaid: bool
    gradle: GradleResult
    device: dict = field(default_factory=dict)
    native: list = field(default_factory=list)   # files of the native runtime written (native=True)
    native_snippet: str = ""                     # the Gradle lines that build them (never edited in)


def snippet(kotlin: bool) -> str:
    quote = '"' if kotlin else "'"
    return f"android {{\n    androidResources {{\n        noCompress += {quote}vkb{quote}\n    }}\n}}\n"


# ---- Gradle build file editing -----------------------------------------------------------------

def _code_mask(text: str) -> list[bool] | None:
    """For each character: True when it is code (not inside a comment or a string literal).
    None when the file has an unterminated string or comment (not safe to edit)."""
    mask, i, n = [True] * len(text), 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                return None
            j += 2
        elif text.startswith('"""', i) or text.startswith("'''", i):
            j = text.find(text[i:i + 3], i + 3)
            if j < 0:
                return None
            j += 3
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            if j >= n or text[j] != c:
                return None
            j += 1
        else:
            i += 1
            continue
        for k in range(i, j):
            mask[k] = False
        i = j
    return mask


def _blocks(text: str, mask: list[bool]) -> list[tuple[str, int, int, int, int]] | None:
    """Every `name {` block in code as (name, index where the name starts, index of '{', index of
    the matching '}', nesting depth: 0 at top level); None when the braces do not balance."""
    stack, out = [], []
    for i, c in enumerate(text):
        if not mask[i] or c not in "{}":
            continue
        if c == "{":
            m = re.search(r"([A-Za-z_][A-Za-z0-9_]*)\s*$", text[:i])
            name = m.group(1) if m and all(mask[m.start(1):m.end(1)]) else ""
            stack.append((name, m.start(1) if m and name else i, i, len(stack)))
        else:
            if not stack:
                return None
            name, start, open_at, depth = stack.pop()
            out.append((name, start, open_at, i, depth))
    return None if stack else out


def _line_start(text: str, i: int) -> int:
    return text.rfind("\n", 0, i) + 1


def _indent_of(text: str, i: int) -> str:
    start = _line_start(text, i)
    return re.match(r"[ \t]*", text[start:]).group(0)


def _mentions_vkb(text: str, mask: list[bool]) -> bool:
    """A noCompress statement (in code) that lists "vkb" or ".vkb"."""
    for m in re.finditer(r"\bnoCompress\b", text):
        if not mask[m.start()]:
            continue
        depth, j = 0, m.end()
        while j < len(text) and not (text[j] == "\n" and depth <= 0):
            depth += text[j] in "([" and mask[j]
            depth -= text[j] in ")]" and mask[j]
            j += 1
        if re.search(r"""["']\.?vkb["']""", text[m.end():j]):
            return True
    return False


def ensure_no_compress(build_file: Path | None) -> GradleResult:
    """Add `androidResources { noCompress += "vkb" }` to a module's build file when it is safe."""
    if build_file is None:
        return GradleResult(None, "manual", "the module has no build.gradle.kts or build.gradle", snippet(True))
    kotlin = build_file.suffix == ".kts"
    text = build_file.read_text(encoding="utf-8")
    snip = snippet(kotlin)

    def manual(reason: str) -> GradleResult:
        return GradleResult(build_file, "manual", reason, snip)

    mask = _code_mask(text)
    if mask is None:
        return manual("it has an unterminated string or comment")
    if _mentions_vkb(text, mask):
        return GradleResult(build_file, "already", snippet=snip)
    blocks = _blocks(text, mask)
    if blocks is None:
        return manual("its braces do not balance")
    android = [b for b in blocks if b[0] == "android" and b[4] == 0]
    if len(android) != 1:
        return manual(f"it has {len(android)} top-level `android {{ }}` blocks, not one "
                      "(configured elsewhere, e.g. in a convention plugin?)")
    _, a_start, a_open, a_close, _ = android[0]
    statement = f'noCompress += {chr(34) if kotlin else chr(39)}vkb{chr(34) if kotlin else chr(39)}'
    # One indentation step: how far the block's first non-blank line is indented past `android {`.
    first = next((line for line in text[a_open + 1:a_close].split("\n")[1:] if line.strip()), "")
    base_indent = _indent_of(text, a_start)
    step = re.match(r"[ \t]*", first).group(0)
    unit = step[len(base_indent):] if step.startswith(base_indent) and len(step) > len(base_indent) else "    "
    named = [b for b in blocks if b[0] == "androidResources" and b[4] == 1 and a_open < b[2] < a_close]
    if len(named) > 1:
        return manual("it has more than one `androidResources { }` block")
    if named:
        _, r_start, r_open, r_close, _ = named[0]
        if text[r_open + 1:].split("\n", 1)[0].strip() or text.count("\n", r_open, r_close) == 0:
            return manual("its `androidResources {` is not followed by a line break")
        indent = _indent_of(text, r_start) + unit
        added = f"{indent}{statement}\n"
        at = text.index("\n", r_open) + 1
    else:
        if text[_line_start(text, a_close):a_close].strip() or text.count("\n", a_open, a_close) == 0:
            return manual("the closing brace of `android {` does not stand on its own line")
        indent = _indent_of(text, a_start) + unit
        added = f"{indent}androidResources {{\n{indent}{unit}{statement}\n{indent}}}\n"
        at = _line_start(text, a_close)
    _atomic_write(build_file, (text[:at] + added + text[at:]).encode("utf-8"))
    return GradleResult(build_file, "added", snippet=snip, added=added)


# ---- packaging ---------------------------------------------------------------------------------

def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o777)
        else:
            os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _build_file(module: Path) -> Path | None:
    for name in ("build.gradle.kts", "build.gradle"):
        if (module / name).is_file():
            return module / name
    return None


def find_app_module(app_dir: Path) -> Path:
    """APP_DIR/app when it exists (a Gradle project root), else APP_DIR when it is a module itself."""
    app_dir = Path(app_dir)
    if not app_dir.is_dir():
        raise PackageError(f"{app_dir} is not a directory; pass the Android project (the folder with "
                           "settings.gradle[.kts] and app/) or its app module.")
    if (app_dir / "app").is_dir():
        return app_dir / "app"
    if _build_file(app_dir) is not None or (app_dir / "src" / "main").is_dir():
        return app_dir
    raise PackageError(f"{app_dir} is not an Android project: it has no app/ folder and no build.gradle[.kts] "
                       "or src/main; pass the project root or the app module.")


NATIVE_DIR = Path(__file__).resolve().parents[1] / "native"
READER = Path(__file__).resolve().parents[1] / "bundles" / "vkb_reader.h"


def native_snippet(kotlin: bool) -> str:
    path = 'file("src/main/cpp/vkc/CMakeLists.txt")' if kotlin else "file('src/main/cpp/vkc/CMakeLists.txt')"
    return f"android {{\n    externalNativeBuild {{\n        cmake {{\n            path = {path}\n        }}\n    }}\n}}\n"


def copy_native(module: Path) -> list[Path]:
    """The native runtime into the app module: C sources, vkb_reader.h, the JNI layer and its
    CMakeLists.txt under src/main/cpp/vkc/, VkcModel.kt under src/main/java/dev/vkc/. The app's
    Gradle file needs `externalNativeBuild` pointing at the CMakeLists.txt (native_snippet): that
    block is printed, not edited in, as an app may already build native code its own way."""
    cpp = module / "src" / "main" / "cpp" / "vkc"
    files = [(NATIVE_DIR / "include" / "vkc.h", cpp / "include" / "vkc.h"), (READER, cpp / "src" / "vkb_reader.h"),
             (NATIVE_DIR / "android" / "CMakeLists.txt", cpp / "CMakeLists.txt"),
             (NATIVE_DIR / "android" / "vkc_jni.c", cpp / "vkc_jni.c"),
             (NATIVE_DIR / "android" / "kotlin" / "dev" / "vkc" / "VkcModel.kt",
              module / "src" / "main" / "java" / "dev" / "vkc" / "VkcModel.kt")]
    files += [(src, cpp / "src" / src.name) for src in sorted((NATIVE_DIR / "src").glob("*.[ch]"))]
    for src, dst in files:
        if not src.is_file():
            raise PackageError(f"the native runtime's file {src} is missing; package from a full vkc checkout")
        _atomic_write(dst, src.read_bytes())
    return [dst for _, dst in files]


def package_android(bundle_path: Path | str, app_dir: Path | str, *, page_size: int | None = None,
                    name: str | None = None, edit_gradle: bool = True, native: bool = False) -> PackageResult:
    """Validate the bundle, copy it into the app's assets (with weights aligned to `page_size`
    when asked: 4096, or 16384 for devices with 16 KiB pages), write its requirements JSON beside
    it and make Gradle store `.vkb` assets uncompressed. Raises BundleError for an invalid bundle,
    PackageError for an unusable app directory or name."""
    if page_size is not None and page_size not in PAGE_SIZES:
        raise PackageError(f"page size {page_size} is not one of {', '.join(map(str, PAGE_SIZES))}")
    bundle_path = Path(bundle_path)
    data = bundle_path.read_bytes()
    module = find_app_module(Path(app_dir))
    name = name or bundle_path.name
    if not name.endswith(".vkb"):
        name += ".vkb"
    if "/" in name or "\\" in name or name.startswith("."):
        raise PackageError(f"asset name {name!r} must be a plain file name (no folders, not hidden)")
    with read_bundle(data) as bundle:
        weights = next((s for s in bundle.sections if s.kind == SectionKind.WEIGHTS), None)
        alignment = weights.alignment if weights is not None else 0
        relaid = page_size is not None and alignment < page_size
        if relaid:
            data = write_bundle(bundle.manifest, [bytes(m) for m in bundle.spirv], bytes(bundle.weights),
                                weights_alignment=page_size)
    with read_bundle(data) as bundle:  # what is shipped, read back: it must pass every check
        weights = next(s for s in bundle.sections if s.kind == SectionKind.WEIGHTS) if relaid else weights
        requirements = {
            "format": REQUIREMENTS_FORMAT, "format_version": 1,
            "bundle": name, "bundle_bytes": len(data), "bundle_sha256": hashlib.sha256(data).hexdigest(),
            "bundle_format_version": f"{bundle.version[0]}.{bundle.version[1]}",
            "weights": {"offset": weights.offset if weights else 0, "bytes": weights.size if weights else 0,
                        "alignment": weights.alignment if weights else 0},
            **device_requirements(bundle),
        }
    assets = module / "src" / "main" / "assets"
    asset = assets / name
    req_path = assets / (name[:-len(".vkb")] + ".requirements.json")
    _atomic_write(asset, data)
    _atomic_write(req_path, (json.dumps(requirements, indent=2) + "\n").encode("utf-8"))
    build_file = _build_file(module)
    if edit_gradle:
        gradle = ensure_no_compress(build_file)
    else:
        gradle = GradleResult(build_file, "manual", "asked not to edit (--no-gradle-edit)",
                              snippet(build_file is None or build_file.suffix == ".kts"))
    result = PackageResult(module, asset, req_path, len(data), weights.alignment if weights else 0, relaid,
                           gradle, requirements)
    if native:
        result.native = copy_native(module)
        result.native_snippet = native_snippet(build_file is None or build_file.suffix == ".kts")
    return result
