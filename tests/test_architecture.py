"""The arrows of docs/ARCHITECTURE.md, checked on the source: which part may import which, and no import
cycles. Every import counts, at any depth (one inside a function still runs, and used to hide a
cycle compile -> targets -> tune -> compile).

Rules:
- no cycle among the modules of compiler/, bundles/, runtime_min/ and templates/;
- runtime_min imports only the standard library, numpy, vulkan, bundles and itself (a deployment
  ships runtime_min/ + bundles/; tests/runtime_min/test_deploy.py runs it with the rest blocked);
- bundles imports only the standard library, numpy and itself (the file format);
- templates imports only the standard library;
- in compiler/, runtime_min is imported only by the modules that run on a device: host.py (the
  compiler's one door to a device: `--target host` and the tuner's measurements), cli.py (the
  run/bench/verify/devices commands) and onnx_backend.py (the ONNX Backend, whose run() runs a
  bundle);
- serving (the Ray Serve deployment) imports only the standard library, numpy, ray, starlette,
  runtime_min, bundles and itself; in compiler/, only cli.py imports it, inside `vkc serve`'s
  function, since serving imports Ray, an optional dependency (`vkc[serve]`);
- a project module is imported at module top, never inside a function (a lazy import is for an
  optional third-party dependency only, and for the doors in LAZY_DOORS).
"""
from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PARTS = ("compiler", "bundles", "runtime_min", "templates", "serving")
STDLIB = set(sys.stdlib_module_names)

# What each part may import (top-level names), beyond itself and the standard library.
ALLOWED = {
    "runtime_min": {"numpy", "vulkan", "bundles"},
    "bundles": {"numpy"},
    "templates": set(),
    "serving": {"numpy", "ray", "starlette", "runtime_min", "bundles"},
}
# Where compiler/ may import runtime_min, and why.
RUNTIME_USERS = {
    "compiler/host.py": "the compiler's one door to a device (host profile, tuner measurements)",
    "compiler/cli.py": "the run, bench, verify and devices commands",
    "compiler/onnx_backend.py": "the ONNX Backend: its run() runs a compiled bundle",
}
# Project imports that must stay inside a function, and why.
LAZY_DOORS = {("compiler/cli.py", "serving"): "`vkc serve`: serving imports Ray, an optional dependency"}
# Files whose in-function project imports are known and waiting for their owner.
PENDING_LAZY: dict[str, str] = {}


@dataclass(frozen=True)
class Import:
    file: str      # relative to the root, e.g. "compiler/compile.py"
    line: int
    target: str    # the imported module, absolute, e.g. "compiler.host" or "numpy.linalg"
    in_function: bool

    def __str__(self) -> str:
        where = " (inside a function)" if self.in_function else ""
        return f"{self.file}:{self.line} imports {self.target}{where}"


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def scan(root: Path, parts=PARTS) -> tuple[dict[str, str], list[Import]]:
    """({module: file}, every import of every module) for the .py files under `parts`."""
    files = {module_name(root, p): p for part in parts for p in sorted((root / part).rglob("*.py"))}
    imports = []
    for mod, path in files.items():
        rel = path.relative_to(root).as_posix()
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        tree = ast.parse(path.read_text(), filename=rel)
        for node, in_function in _walk(tree, False):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                # `from pkg import name` imports the submodule pkg.name when there is one
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            else:
                continue
            imports += [Import(rel, node.lineno, t, in_function) for t in dict.fromkeys(targets)]
    return {m: p.relative_to(root).as_posix() for m, p in files.items()}, imports


def _walk(node, in_function):
    for child in ast.iter_child_nodes(node):
        inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        yield child, in_function
        yield from _walk(child, inner)


def cycles(files: dict[str, str], imports: list[Import]) -> list[list[Import]]:
    """One cycle (as the imports that make it) per strongly connected group of modules."""
    by_file = {f: m for m, f in files.items()}
    edges: dict[str, dict[str, Import]] = {m: {} for m in files}
    for imp in imports:
        if imp.target in files:
            edges[by_file[imp.file]].setdefault(imp.target, imp)
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def connect(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1 or v in edges[v]:
                groups.append(group)

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(files)))
    for v in sorted(files):
        if v not in index:
            connect(v)
    found = []
    for group in groups:  # walk inside the group from its first module back to it
        start = min(group)
        path, seen, v = [], {start}, start
        while True:
            w = next(w for w in sorted(edges[v]) if w in group and (w == start or w not in seen) and
                     (w == start or _reaches(edges, w, start, group)))
            path.append(edges[v][w])
            if w == start:
                break
            seen.add(w)
            v = w
        found.append(path)
    return found


def _reaches(edges, src, dst, group) -> bool:
    todo, seen = [src], {src}
    while todo:
        v = todo.pop()
        if dst in edges[v]:
            return True
        for w in edges[v]:
            if w in group and w not in seen:
                seen.add(w)
                todo.append(w)
    return False


def forbidden(imports: list[Import]) -> list[str]:
    """Every import that crosses an arrow docs/ARCHITECTURE.md does not draw, as a sentence."""
    problems = []
    for imp in imports:
        part, top = imp.file.split("/")[0], imp.target.split(".")[0]
        if top == part or top in STDLIB or top == "__future__":
            continue
        if part in ALLOWED and top not in ALLOWED[part]:
            allowed = ", ".join(sorted(ALLOWED[part] | {"the standard library"}))
            problems.append(f"{imp}: {part}/ may import only {allowed}.")
        if part == "compiler" and top == "runtime_min" and imp.file not in RUNTIME_USERS:
            problems.append(f"{imp}: in compiler/, only {', '.join(RUNTIME_USERS)} import runtime_min; "
                            "reach the device through compiler/host.py.")
        if part == "compiler" and top == "serving" and not ((imp.file, top) in LAZY_DOORS and imp.in_function):
            problems.append(f"{imp}: in compiler/, only cli.py imports serving, inside `vkc serve` (Ray is optional).")
    return problems


def hidden(imports: list[Import]) -> list[str]:
    return [f"{imp}: import project modules at the module's top, where a cycle cannot hide."
            for imp in imports if imp.in_function and imp.target.split(".")[0] in PARTS
            and imp.file not in PENDING_LAZY and (imp.file, imp.target.split(".")[0]) not in LAZY_DOORS]


@pytest.fixture(scope="module")
def graph():
    return scan(ROOT)


def test_no_import_cycles(graph):
    found = cycles(*graph)
    assert not found, "import cycles:\n" + "\n".join(
        "  " + " -> ".join([path[0].file] + [f"{i.target} ({i.file}:{i.line})" for i in path]) for path in found)


def test_imports_follow_the_design_arrows(graph):
    problems = forbidden(graph[1])
    assert not problems, "\n".join(problems)


def test_no_project_imports_hidden_in_functions(graph):
    problems = hidden(graph[1])
    assert not problems, "\n".join(problems)


def test_the_scan_sees_every_part(graph):
    files, imports = graph
    assert {"compiler.compile", "compiler.host", "bundles.cache", "runtime_min.model", "templates"} <= set(files)
    assert any(i.file == "compiler/compile.py" and i.target == "compiler.host" for i in imports)


def test_the_checks_catch_what_they_are_for(tmp_path):
    """A small tree with one of each fault: the messages name the file, line and import."""
    for rel, text in {
        "compiler/__init__.py": "",
        "compiler/a.py": "from . import b\n",
        "compiler/b.py": "def f():\n    from .a import x\n",
        "compiler/c.py": "import runtime_min\n",
        "runtime_min/__init__.py": "from compiler import compile_model\nimport vulkan, numpy, os\n",
        "bundles/__init__.py": "import jinja2\n",
        "templates/__init__.py": "",
    }.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    files, imports = scan(tmp_path)
    (cycle,) = cycles(files, imports)
    assert [str(i) for i in cycle] == ["compiler/a.py:1 imports compiler.b",
                                       "compiler/b.py:2 imports compiler.a (inside a function)"]
    problems = sorted(forbidden(imports))
    assert len(problems) == 3
    assert problems[0].startswith("bundles/__init__.py:1 imports jinja2: bundles/ may import only")
    assert problems[1].startswith("compiler/c.py:1 imports runtime_min: in compiler/, only")
    assert problems[2].startswith("runtime_min/__init__.py:1 imports compiler: runtime_min/ may import only")
    assert hidden(imports) == ["compiler/b.py:2 imports compiler.a (inside a function): import project "
                               "modules at the module's top, where a cycle cannot hide."]


def test_the_map_lists_every_pass():
    """docs/ARCHITECTURE.md's pass table names every pass of the pipeline, in its order."""
    from compiler.passes import PIPELINE
    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    rows = [line.split("|")[1].strip().strip("`") for line in doc.splitlines() if line.startswith("| `")]
    names = [p.__name__ for p in PIPELINE]
    assert [r for r in rows if r in names] == names
