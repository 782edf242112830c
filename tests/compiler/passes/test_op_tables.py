"""What a pass needs to know about an op is declared with the op (registry facts: noop,
row_wise, reshapes, store_cast_absorbing, product, evaluate, output_types), never listed in the
pass: no pass module holds a literal table (set, list, tuple, dict) of op type names, other than
of the ops it declares itself. The op names of a pattern a fusion matches are arguments of
is_onnx(node, ...), not tables."""
from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

from compiler import ops, passes
from compiler.registry import _RULES

MODULES = sorted(info.name for info in pkgutil.iter_modules(passes.__path__))


def _tables(tree, names: set[str]):
    """(line, op names) of every literal table of op names: a set, list or tuple holding two or
    more (one is a value, as in `op, attrs = "vkc.Copy", {}`), a dict keyed by one or more."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Set, ast.List, ast.Tuple)):
            items, least = node.elts, 2
        elif isinstance(node, ast.Dict):
            items, least = [k for k in node.keys if k is not None], 1
        else:
            continue
        found = {i.value for i in items if isinstance(i, ast.Constant) and i.value in names}
        if len(found) >= least:
            yield node.lineno, found


def _op_names(module: str) -> tuple[set[str], set[str]]:
    """(every declared op type, the op types `module` declares itself)."""
    everything = {op if op.startswith("vkc.") else op.rsplit(".", 1)[-1] for op in ops.registered_ops()}
    own = {op if op.startswith("vkc.") else op.rsplit(".", 1)[-1]
           for op, versions in _RULES.items() for r in versions.values()
           if r.module == f"compiler.passes.{module}"}
    return everything, own


@pytest.mark.parametrize("module", MODULES)
def test_no_pass_lists_other_modules_ops(module):
    source = Path(importlib.import_module(f"compiler.passes.{module}").__file__).read_text()
    everything, own = _op_names(module)
    tables = [(line, sorted(found - own)) for line, found in _tables(ast.parse(source), everything)
              if found - own]
    assert not tables, (f"compiler/passes/{module}.py lists op types of other modules at "
                        f"{tables}: declare the fact with the op (compiler/registry.py OpRule) "
                        "and ask the registry, or match a pattern with is_onnx(node, ...)")


def test_the_scan_finds_a_table():
    everything, own = _op_names("store_casts")
    tree = ast.parse('PRODUCTS = ("MatMul", "Gemm")\nKIND = {"Conv": "conv"}')
    assert [(line, found - own) for line, found in _tables(tree, everything)] == \
        [(1, {"MatMul", "Gemm"}), (2, {"Conv"})]
