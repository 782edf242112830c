"""The static schedule: dispatches in order, a barrier only where one is needed.

The rule (FORMAT.md, "Barriers") lives in bundles/hazards.py, shared with the bundle reader, which
refuses a schedule whose barriers do not cover it. The compiler applies it to exactly what a reader
sees: the byte ranges a runtime binds (an empty tensor binds 4 bytes at offset 0) and the bindings
each module's SPIR-V may write (storage buffers not declared `readonly`), so the two cannot disagree.
"""
from __future__ import annotations

from bundles.hazards import dispatch_accesses, required_barriers
from bundles.spirv import Module


def place_barriers(manifest: dict, spirv_modules: list[bytes]) -> list[bool]:
    """The barrier flag of each of the manifest's dispatches (tensors, kernels, modules and
    dispatches filled in; barrier flags ignored), from the SPIR-V of its modules."""
    written = [Module(blob).written_bindings() for blob in spirv_modules]
    return required_barriers(dispatch_accesses(manifest, written))
