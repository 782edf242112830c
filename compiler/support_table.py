"""docs/SUPPORT.md, generated: one row per op vkc compiles, from the lowering registry (which ops,
which rules per opset, how each is handled) and the ONNX node-case outcomes that
tests/conformance/run.py records in docs/conformance.json. A test regenerates it and compares,
so the table cannot drift from the code.

    python -m compiler.support_table          # write docs/SUPPORT.md
    python -m compiler.support_table --check  # exit 1 when docs/SUPPORT.md is out of date
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import onnx

from . import expr as E
from .frontend import MAX_OPSET, MIN_OPSET
from .lower import find_rule, registered_ops
from .lower.registry import HANDLED_BY_PASSES
from .passes.elementwise import ELEMENTWISE_OPS
from .passes.views import VIEW_OPS
from .typed_expr import FLOAT64_OPS, INTEGER_OPS

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "docs" / "SUPPORT.md"
RESULTS = ROOT / "docs" / "conformance.json"

F32 = "float32"
MOVES = "float32, int32, int64 (any 32- or 64-bit type)"
COPIES = "any (8- to 64-bit elements)"
# (dtypes computed at run time, what is not supported). Ops not listed: float32, nothing missing.
LIMITS = {
    "Conv": (F32, "3-D convolution"),
    "ConvTranspose": (F32, "4-D and higher spatial ranks"),
    "MaxPool": (F32 + "; Indices int64", "4-D and higher spatial ranks"),
    "AveragePool": (F32, "4-D and higher spatial ranks"),
    "GlobalMaxPool": (F32, "4-D and higher spatial ranks"),
    "GlobalAveragePool": (F32, "4-D and higher spatial ranks"),
    "MatMul": (F32, "batch dims that broadcast in more than two separate groups"),
    "Resize": (F32, "more than two resized axes, or two that are not adjacent; roi, scales and "
                    "sizes computed at run time"),
    "Upsample": (F32, "cubic mode; scales computed at run time"),
    "Transpose": (COPIES, "-"), "Expand": (COPIES, "shape computed at run time"),
    "Slice": (COPIES, "starts, ends, axes, steps computed at run time"),
    "Split": (COPIES, "split sizes computed at run time"),
    "Gather": (MOVES + "; indices int32, int64", "-"),
    "Pad": (MOVES, "pads or constant_value computed at run time"),
    "Tile": (MOVES, "repeats computed at run time"),
    "Concat": (F32, "-"),
    "Clip": (None, "min and max computed at run time"),
    "Pow": (None, "float64 base with a floating-point exponent tensor or a fractional constant"),
    "BatchNormalization": (F32, "training_mode=1; statistics computed at run time"),
    "Dropout": (F32, "training_mode=1 with ratio > 0"),
    "Shape": ("-", "an int64 graph output (folded values are not copied out yet)"),
    "Size": ("-", "an int64 graph output (folded values are not copied out yet)"),
    "Constant": ("any", "-"),
}
for _op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
            "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"):
    LIMITS[_op] = (F32, "axes computed at run time; empty outputs")
for _op in ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"):
    LIMITS[_op] = ("any", "shape or axes computed at run time")


def _elementwise_dtypes(op: str) -> str:
    """The dtypes vkc computes an elementwise op on: those ONNX allows (its first input's type
    constraint) that typed_expr renders (float32 and float16 take every op)."""
    name = (E.ONNX_BINARY.get(op) or E.ONNX_UNARY.get(op) or E.ONNX_VARIADIC.get(op)
            or op.lower())
    vkc = {"float", "float16"}  # ONNX's names: float is float32, double float64
    if name in FLOAT64_OPS:
        vkc.add("double")
    if name in INTEGER_OPS:
        vkc |= {f"{u}int{b}" for u in ("", "u") for b in (8, 16, 32, 64)}
    schema = onnx.defs.get_schema(op, max_inclusive_version=MAX_OPSET)
    allowed = {t[len("tensor("):-1] for t in schema.type_constraints[0].allowed_type_strs}
    have = vkc & allowed
    names = [n for n in ("float", "float16", "double") if n in have]
    for u in ("int", "uint"):
        ints = [f"{u}{b}" for b in (8, 16, 32, 64) if f"{u}{b}" in have]
        names += [f"{u}8-64"] if len(ints) == 4 else ints
    text = ", ".join("float64" if n == "double" else "float32" if n == "float" else n for n in names)
    return text + ("; any numeric exponent" if op == "Pow" else "")


def supported_ops() -> list[str]:
    return sorted({op for op in registered_ops() if not op.startswith("vkc.")} | HANDLED_BY_PASSES)


def _handled_by(op: str) -> str:
    if op in VIEW_OPS:
        return "view (no kernel)"
    if op == "BatchNormalization":
        return "folded into Conv/Gemm, else fused elementwise"
    if op in ("Constant", "Shape", "Size"):
        return "folded at compile time"
    if op in ELEMENTWISE_OPS:
        return "fused elementwise"
    rule = find_rule(op, "", MAX_OPSET)
    return f"`lower/{rule.__module__.rsplit('.', 1)[-1]}.py`"


def _opsets(op: str) -> str:
    """The opsets (within vkc's range) whose version of the op vkc compiles, and the versions
    that have their own lowering rule."""
    first_schema = MAX_OPSET
    for v in range(1, MAX_OPSET + 1):
        try:
            first_schema = onnx.defs.get_schema(op, max_inclusive_version=v).since_version
            break
        except onnx.defs.SchemaError:
            continue
    rules = registered_ops().get(op, [])
    first = max(MIN_OPSET, first_schema, min(rules) if rules else 0)
    text = f"{first}-{MAX_OPSET}"
    if len(rules) > 1:
        text += " (rules since " + ", ".join(map(str, rules)) + ")"
    return text


# Why a case was skipped, from the reason recorded with it.
DTYPE = "a dtype vkc's kernel for the op does not compute at run time"
CONSTANT_OUT = ("an int64 or bool graph output known at compile time (no kernel copies those "
                "out yet)")
SKIP_KINDS = (("excluded:", "listed in exclusions.txt"),
              ("/vkc_copy' computes on int64", CONSTANT_OUT),
              ("/vkc_copy' computes on bool", CONSTANT_OUT),
              ("kernels do not compute", DTYPE),
              ("data-movement kernels", DTYPE),
              ("has type", "a sequence or optional value"),
              ("does not support", "an op vkc does not implement"))


def _skip_kind(detail: str) -> str:
    return next((kind for phrase, kind in SKIP_KINDS if phrase in detail), "other")


def _counts(results: dict, op: str) -> dict:
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    for case in results["cases"].values():
        if case["op"] == op:
            counts[case["status"]] += 1
    return counts


def _cases_cell(c: dict) -> str:
    total = sum(c.values())
    if not total:
        return "no single-node case"
    extra = ", ".join(f"{c[k]} {k}" for k in ("failed", "skipped") if c[k])
    return f"{c['passed']}/{total}" + (f" ({extra})" if extra else "")


def generate(results: dict | None = None) -> str:
    if results is None:
        results = json.loads(RESULTS.read_text())
    ops = supported_ops()
    lines = [
        "# Op support",
        "",
        "Generated by `python -m compiler.support_table` from the lowering registry and",
        "`docs/conformance.json` (ONNX's node test cases, recorded by",
        f"`python tests/conformance/run.py` on {results['device']}); CI checks it is current.",
        "Do not edit by hand.",
        "",
        f"vkc reads opsets {MIN_OPSET} to {MAX_OPSET}. *Cases* counts ONNX's single-node test cases",
        "of the op: passed / all, with those failed or skipped (an unsupported dtype, a listed",
        "exclusion in `tests/conformance/exclusions.txt`, or a non-tensor type). Cases run with",
        "ONNX's runner tolerances (rtol 1e-3, atol 1e-7) under the Vulkan validation layer.",
        "",
        "| op | opsets | handled by | dtypes | not supported | cases |",
        "|---|---|---|---|---|---|",
    ]
    for op in ops:
        dtypes, missing = LIMITS.get(op, (None if op in ELEMENTWISE_OPS else F32, "-"))
        dtypes = dtypes or _elementwise_dtypes(op)
        lines.append(f"| {op} | {_opsets(op)} | {_handled_by(op)} | {dtypes} | {missing} | "
                     f"{_cases_cell(_counts(results, op))} |")
    issue = results["issue_ops"]
    total = {"passed": 0, "failed": 0, "skipped": 0}
    for op in issue:
        for k, v in _counts(results, op).items():
            total[k] += v
    n = sum(total.values())
    ran = total["passed"] + total["failed"]
    kinds: dict[str, int] = {}
    for case in results["cases"].values():
        if case["op"] in issue and case["status"] == "skipped":
            kind = _skip_kind(case["detail"])
            kinds[kind] = kinds.get(kind, 0) + 1
    other_dtype = kinds.get(DTYPE, 0)
    lines += [
        "",
        "## The CNN-zoo and end-to-end ops",
        "",
        f"Over the single-node cases of {', '.join(issue)}:",
        "",
        f"- {total['passed']} passed, {total['failed']} failed, {total['skipped']} skipped of {n}",
        "- skipped: " + ", ".join(f"{v} for {k}"
                                  for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])),
        f"- passed / all cases: {100 * total['passed'] / max(n, 1):.1f}%",
        f"- passed / cases without such a dtype: "
        f"{100 * total['passed'] / max(n - other_dtype, 1):.1f}%",
        f"- passed / cases run (not skipped): {100 * total['passed'] / max(ran, 1):.1f}%",
        "",
    ]
    return "\n".join(lines)


def write() -> Path:
    TABLE.parent.mkdir(parents=True, exist_ok=True)
    TABLE.write_text(generate())
    return TABLE


def main(argv: list[str]) -> int:
    if "--check" in argv:
        if not TABLE.exists() or TABLE.read_text() != generate():
            print(f"{TABLE} is out of date; run `python -m compiler.support_table`.")
            return 1
        return 0
    print(f"wrote {write()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
