"""The tuning cache: the tile choices `vkc tune` measured fastest, per device, in one JSON file
({device name: {problem: {Target field: value}}}) that `--target host` compiles read.

Plain file I/O, no device access. It lives beside the SPIR-V cache (see bundles/cache.py), but
VKC_CACHE_DIR=off turns caching off, not tuning: the choices then go to the default folder.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from bundles.cache import cache_dir, default_cache_dir


def tuning_path() -> Path:
    return (cache_dir() or default_cache_dir()) / "tuning.json"


def load_tuning(device_name: str, path: Path | None = None) -> tuple:
    """The stored choices for a device as Target.tuned; a missing or unreadable file is empty."""
    try:
        entries = json.loads((path or tuning_path()).read_text()).get(device_name, {})
        return tuple((problem, tuple(sorted((k, _tuples(v)) for k, v in fields.items())))
                     for problem, fields in entries.items())
    except (OSError, ValueError, AttributeError):
        return ()


def _tuples(value):
    """JSON's lists back as the tuples Target fields hold (coopmat_tiles)."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def store_tuning(device_name: str, choice: dict[str, dict], path: Path | None = None) -> Path:
    """Merge a device's choices into the file (atomically replaced); returns the file's path."""
    path = path or tuning_path()
    try:
        stored = json.loads(path.read_text())
    except (OSError, ValueError):
        stored = {}
    stored.setdefault(device_name, {}).update(choice)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(stored, indent=1, sort_keys=True))
    tmp.replace(path)
    return path
