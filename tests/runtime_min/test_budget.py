"""runtime_min stays small and ships alone: under 2,200 code lines, importing only the standard
library, numpy, vulkan and bundles (docs/ARCHITECTURE.md, 'The parts')."""
import ast
import io
import sys
import tokenize
from pathlib import Path

RUNTIME = Path(__file__).resolve().parents[2] / "runtime_min"
BUDGET = 2200
ALLOWED = {"numpy", "vulkan", "bundles"}


def code_lines(source: str) -> int:
    """Lines holding code: not blank, not only a comment, not part of a docstring."""
    tree = ast.parse(source)
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                docstrings.update(range(first.lineno, first.end_lineno + 1))
    lines = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                        tokenize.ENDMARKER):
            continue
        lines.update(range(tok.start[0], tok.end[0] + 1))
    return len(lines - docstrings)


def imported_roots(source: str) -> set:
    roots = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            roots.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_counter():
    src = '"""doc\nstring"""\n# comment\n\nx = 1  # trailing\n\ndef f():\n    """doc"""\n    return (1,\n            2)\n'
    assert code_lines(src) == 4  # x = 1, def f():, return (1,, 2)


def test_runtime_line_budget():
    counts = {p.name: code_lines(p.read_text()) for p in sorted(RUNTIME.glob("*.py"))}
    total = sum(counts.values())
    print(f"runtime_min: {total} code lines", counts)
    assert total < BUDGET, f"runtime_min has {total} code lines, over its budget of {BUDGET}: {counts}"


def test_runtime_imports():
    stdlib = set(sys.stdlib_module_names)
    for p in sorted(RUNTIME.glob("*.py")):
        foreign = imported_roots(p.read_text()) - stdlib - ALLOWED
        assert not foreign, f"{p.name} imports {sorted(foreign)}; runtime_min may import only the standard " \
                            f"library and {sorted(ALLOWED)}"
