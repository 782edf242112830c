"""Where vkc keeps its caches (compiled SPIR-V, pipeline caches, `vkc tune` results): one rule for
the compiler and the runtime, which both import `bundles`.

$VKC_CACHE_DIR names the folder (`off` turns caching off); else $XDG_CACHE_HOME/vkc when
XDG_CACHE_HOME is set and absolute (the XDG spec says a relative value is to be ignored); else
~/.cache/vkc.
"""
from __future__ import annotations

import os
from pathlib import Path


def default_cache_dir() -> Path:
    """The folder when VKC_CACHE_DIR does not name one: the XDG cache home's vkc/."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    return Path(xdg if os.path.isabs(xdg) else os.path.expanduser("~/.cache")) / "vkc"


def cache_dir() -> Path | None:
    """The cache folder, or None when VKC_CACHE_DIR=off."""
    configured = os.environ.get("VKC_CACHE_DIR", "")
    if configured.lower() == "off":
        return None
    return Path(configured) if configured else default_cache_dir()
