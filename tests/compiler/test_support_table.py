"""docs/SUPPORT.md is generated from the lowering registry and docs/conformance.json; it must be
current, and the recorded conformance run must cover every op the registry claims."""

import json

from compiler import support_table


def test_support_table_is_current():
    assert support_table.TABLE.read_text() == support_table.generate(), \
        "docs/SUPPORT.md is out of date: run `python -m compiler.support_table` (or " \
        "`python tests/conformance/run.py` after changing what passes)."


def test_limits_name_only_supported_ops():
    stale = set(support_table.LIMITS) - set(support_table.supported_ops())
    assert not stale, f"support_table.LIMITS describes ops vkc does not claim: {sorted(stale)}"


def test_recorded_run_covers_the_registry():
    """Every case the conformance module would select now was recorded (else re-run
    tests/conformance/run.py)."""
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "conformance"))
    import cases

    recorded = set(json.loads(support_table.RESULTS.read_text())["cases"])
    missing = sorted(set(cases.selected_cases()) - recorded)
    assert not missing, f"docs/conformance.json lacks {len(missing)} selected cases, e.g. {missing[:5]}"
