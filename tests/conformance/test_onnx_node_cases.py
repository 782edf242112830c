"""ONNX's node test cases through compiler.onnx_backend, under the Vulkan validation layer.

One test per case whose ops the registry claims (cases.selected_cases()). Cases listed in
exclusions.txt are skipped with their reason; cases the backend declares not supported (an op or
dtype vkc does not implement) are skipped with the backend's message. Everything else must match
onnx's expected outputs with the case's rtol/atol (1e-3 / 1e-7 by default), as ONNX's own runner
compares them. `python -m tests.conformance.run` records the outcomes for docs/SUPPORT.md.
"""
from __future__ import annotations

import os

import pytest

from tests.conformance import cases  # noqa: E402


@pytest.mark.parametrize("name", cases.selected_cases())
def test_node_case(name):
    outcome = cases.run_case(name)
    if outcome.status == "skipped":
        pytest.skip(outcome.detail)
    assert outcome.status == "passed", outcome.detail


def test_exclusions_name_selected_cases():
    """A stale exclusion (the case was renamed, or its op is no longer claimed) is an error."""
    stale = sorted(set(cases.exclusions()) - set(cases.selected_cases()))
    assert not stale, f"exclusions.txt names cases that are not run: {stale}"
