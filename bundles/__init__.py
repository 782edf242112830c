"""The `.vkb` bundle: one file holding a compiled model's manifest, SPIR-V and weights.

FORMAT.md in this directory is the byte-level spec; `read_bundle` checks all of it.
"""
from .format import Bundle, Section, SectionKind, read_bundle, write_bundle
from .manifest import DTYPE_ITEMSIZE, BundleError, validate_manifest

__all__ = ["write_bundle", "read_bundle", "validate_manifest", "Bundle", "Section", "SectionKind",
           "BundleError", "DTYPE_ITEMSIZE"]
