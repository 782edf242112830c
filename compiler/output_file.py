"""Writing the files a command makes: whole or not at all, and never over one of its inputs."""
from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import BinaryIO


class OutputError(ValueError):
    """An output path that cannot be written; the message names it and the fix."""


def check_output(path: Path, inputs: Iterable[Path] = (), what: str = "the output") -> None:
    """Refuse, before any work, a path that is a folder, lies in a missing folder or is an input."""
    path = Path(path)
    if path.is_dir():
        raise OutputError(f"{what} {path} is a folder; name a file in it, e.g. {path / 'model.vkb'}.")
    if path.parent.exists() and not path.parent.is_dir():
        raise OutputError(f"{what} {path}: {path.parent} is a file, not a folder; write elsewhere.")
    if not path.parent.is_dir():
        raise OutputError(f"{what} {path}: the folder {path.parent} does not exist; create it first "
                          f"(mkdir -p {path.parent}) or write elsewhere.")
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise OutputError(f"{what} {path}: the folder {path.parent} is not writable; choose one you can "
                          "write to.")
    for source in inputs:
        if path.exists() and Path(source).exists() and os.path.samefile(path, source):
            raise OutputError(f"{what} {path} is the input {source}; writing it would destroy the input. "
                              "Name another file.")


def write_atomically(path: Path, content: bytes | Callable[[BinaryIO], None], inputs: Iterable[Path] = (),
                     what: str = "the output") -> None:
    """Write `content` (bytes, or a function writing to a binary file) to `path` through a temporary
    file in the same folder renamed over it, so a reader never sees half a file and a failed write
    leaves what was there."""
    path = Path(path)
    check_output(path, inputs, what)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise OutputError(f"cannot write {what} {path}: {exc.strerror or exc}; choose a folder you can "
                          "write to.") from exc
    try:
        with os.fdopen(fd, "wb") as f:
            if callable(content):
                content(f)
            else:
                f.write(content)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 would hide the file from other users
        os.replace(tmp, path)
    except OSError as exc:
        raise OutputError(f"cannot write {what} {path}: {exc.strerror or exc}.") from exc
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
