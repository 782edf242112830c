"""Minimal graphs the fuzzer found compiled wrong, kept as regression tests: cases/CASES.json
names each with the compile it needs and what it showed. An entry with "open" (the area that owns
it) is a bug not fixed yet: it runs as a strict xfail, so its fix shows as an XPASS to move it."""
import json
from pathlib import Path

import onnx
import pytest

from .generate import Case
from .oracle import check

CASES = Path(__file__).parent / "cases"
INDEX = json.loads((CASES / "CASES.json").read_text())


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(
    strict=True, reason=f"open, owned by {e['open']}: {e['found']}")) if "open" in e else n
    for n, e in sorted(INDEX.items())])
def test_minimal_case(name):
    entry = INDEX[name]
    model = onnx.parser.parse_model((CASES / f"{name}.onnxtxt").read_text())
    verdict = check(Case(entry["seed"], model, entry["precision"], entry["target"]))
    assert verdict.kind == entry.get("expect", "ok"), f"{entry['found']}: {verdict}"
