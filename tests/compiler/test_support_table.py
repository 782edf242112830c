"""docs/SUPPORT.md is generated from the ops' declarations and docs/conformance.json; it must be
current, and the recorded conformance run must cover every op the registry claims."""

import json

import onnx

from compiler import support_table
from compiler.frontend import MAX_OPSET
from compiler.ops import find_rule, registered_ops

# Ops onnxruntime declares in the ONNX domain that onnx itself has no schema for.
ONNXRUNTIME_ONNX_DOMAIN = {"SimplifiedLayerNormalization"}


def test_support_table_is_current():
    assert support_table.TABLE.read_text() == support_table.generate(), \
        "docs/SUPPORT.md is out of date: run `python -m compiler.support_table` (or " \
        "`python -m tests.conformance.run` after changing what passes)."


def test_declarations_name_onnx_ops_and_their_inputs():
    """Every declared op is an ONNX op within vkc's opsets, and its constant inputs are slots the
    op has in the newest version its rules cover (a typo would silently declare nothing)."""
    for op in registered_ops():
        if "." in op:  # vkc's internal ops and other domains' (com.microsoft) have no ONNX schema
            continue
        if op in ONNXRUNTIME_ONNX_DOMAIN:
            assert not onnx.defs.has(op), f"{op} has an ONNX schema now: check its declaration"
            continue
        schema = onnx.defs.get_schema(op, max_inclusive_version=MAX_OPSET)
        assert find_rule(op, "", MAX_OPSET) is not None, f"{op}: no declaration covers opset {MAX_OPSET}"
        variadic = schema.inputs and schema.inputs[-1].option == onnx.defs.OpSchema.FormalParameterOption.Variadic
        slots = 2**31 if variadic else len(schema.inputs)
        for since in registered_ops()[op]:
            bad = [i for i in find_rule(op, "", max(since, 7)).constant_inputs if i >= slots]
            assert not bad, f"{op} (rule since {since}) declares constant inputs {bad}; it has {slots}"


def test_recorded_run_covers_the_registry():
    """Every case the conformance module would select now was recorded (else re-run
    tests/conformance/run.py)."""
    import os

    from tests.conformance import cases

    recorded = set(json.loads(support_table.RESULTS.read_text())["cases"])
    missing = sorted(set(cases.selected_cases()) - recorded)
    assert not missing, f"docs/conformance.json lacks {len(missing)} selected cases, e.g. {missing[:5]}"
