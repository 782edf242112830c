"""The `.vkb` bundle: one file holding a compiled model's manifest, SPIR-V and weights.

FORMAT.md in this directory is the byte-level spec; `read_bundle` checks all of it. `vkb_reader.h`
is the C reader (container level). Packaging a bundle into an Android app is `vkc package`'s
business: compiler/package_android.py.
"""
from .format import Bundle, Container, Section, SectionKind, check_container, read_bundle, write_bundle
from .manifest import DTYPE_BITS, DTYPE_ITEMSIZE, BundleError, validate_manifest
from .spirv import device_requirements

__all__ = ["write_bundle", "read_bundle", "check_container", "validate_manifest", "device_requirements",
           "Bundle", "Container", "Section", "SectionKind", "BundleError", "DTYPE_ITEMSIZE", "DTYPE_BITS"]
