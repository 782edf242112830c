"""Writes expr_fixture.json: what the renderers BEFORE their unification (commit 7f9faf9:
compiler/expr.py for float32 trees, compiler/typed_expr.py for every other dtype) made of a broad
set of trees on every dtype. test_expr.py renders the same cases with today's single renderer and
requires byte-identical GLSL, helper functions and errors.

    python tests/compiler/make_expr_fixture.py   # from the repository root; needs git

The old modules are read with `git show` into a temporary package, so this script keeps
recording the pre-unification output whatever the working tree holds.
"""
from __future__ import annotations

import importlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).with_name("expr_fixture.json")
BEFORE = "7f9faf9"

DTYPES = ["float32", "float16", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32",
          "int64", "uint64"]
X, Y = ("in", 0), ("in", 1)
# Every op of the tree language, with ONNX's default attributes where it has some.
UNARY = {"relu": (), "sigmoid": (), "neg": (), "abs": (), "exp": (), "log": (), "sqrt": (),
         "reciprocal": (), "floor": (), "ceil": (), "round": (), "sign": (), "tanh": (),
         "hardswish": (), "softsign": (), "softplus": (), "hardsigmoid": (0.2, 0.5),
         "elu": (1.0,), "selu": (1.67326319217681884765625, 1.05070102214813232421875),
         "thresholded_relu": (1.0,)}
BINARY = ["add", "sub", "mul", "div", "max", "min", "prelu"]
CONSTS = [0, 1, -1, 3, 7, 0.1, -0.0, 2.5, 1e-8, 1e30, float("inf"), float("-inf"), float("nan"),
          2**31 - 1, -2**31, 2**40, -2**63, 255]
POW_EXPONENTS = [0, 1, 2, 3, 4, 0.5, -1, -2, -0.5, 5, -3, 2.5, -1.5, 2**31, 7.0, 0.0, 1e10]


def cases():
    """(dtype, tree, operand dtypes) triples."""
    out = []
    for t in DTYPES:
        same = [t, t]
        for op, attrs in UNARY.items():
            out.append((t, (op, X, *(("const", a) for a in attrs)), [t]))
            out.append((t, (op, ("const", 3), *(("const", a) for a in attrs)), []))
        for op in BINARY:
            out += [(t, (op, X, Y), same), (t, (op, X, ("const", 2)), [t]),
                    (t, (op, ("const", -5), X), [t]), (t, (op, X, X), [t])]
        out.append((t, ("prelu", X, ("const", 0.01)), [t]))  # LeakyRelu
        for c in CONSTS:
            out.append((t, ("add", X, ("const", c)), [t]))
        for lo, hi in [(None, None), (0, None), (None, 6), (0, 6), (-1.5, 2.5), (-128, 127),
                       (float("-inf"), float("inf")), (0, 2**40)]:
            out.append((t, ("clip", X, lo, hi), [t]))
        for e in POW_EXPONENTS:
            out.append((t, ("pow", X, ("const", e)), [t]))
        for e in DTYPES:
            out.append((t, ("pow", X, Y), [t, e]))
        out.append((t, ("pow", ("add", X, ("const", 1)), ("mul", X, X)), [t]))
        out += [
            (t, ("add", ("mul", X, Y), ("relu", ("sub", X, ("const", 1.5)))), same),
            (t, ("div", ("neg", X), ("abs", Y)), same),
            (t, ("max", ("min", ("div", X, Y), ("const", 100)), ("sign", X)), same),
            (t, ("clip", ("prelu", ("add", X, Y), ("const", 0.25)), 0, 6), same),
            (t, ("div", ("div", X, ("const", 3)), ("pow", Y, ("const", 3))), same),
            (t, ("sqrt", ("reciprocal", ("floor", ("add", X, ("const", 0.5))))), [t]),
            (t, ("elu", ("softsign", ("thresholded_relu", X, ("const", 1.0))), ("const", 1.0)),
             [t]),
            (t, ("sigmoid", ("tanh", ("mul", ("hardswish", X), ("exp", Y)))), same),
            (t, ("add", ("add", ("add", X, Y), ("in", 2)), ("const", 0.5)), [t, t, t]),
            (t, ("round", ("ceil", ("neg", ("abs", X)))), [t]),
            (t, ("pow", ("div", X, Y), ("pow", X, ("in", 2))), [t, t, "int64"]),
        ]
    # Epilogue trees: the producing kernel's accumulator as a leaf (float32 only).
    acc = ("acc",)
    out += [("float32", ("relu", ("add", acc, X)), ["float32"]),
            ("float32", ("clip", ("mul", acc, ("const", 0.5)), 0, 6), []),
            ("float32", ("pow", acc, acc), []), ("float32", ("pow", X, acc), ["float32"]),
            ("float32", ("selu", acc, ("const", 1.5), ("const", 2.0)), [])]
    return out


def leaf(t):
    return "acc_v" if t[0] == "acc" else f"x{t[1]}"


def old_modules():
    tmp = Path(tempfile.mkdtemp()) / "vkc_before_expr"
    tmp.mkdir()
    (tmp / "__init__.py").write_text("")
    for name in ("expr", "typed_expr", "dtypes"):
        text = subprocess.run(["git", "show", f"{BEFORE}:compiler/{name}.py"], cwd=ROOT,
                              check=True, capture_output=True, text=True).stdout
        (tmp / f"{name}.py").write_text(text)
    sys.path.insert(0, str(tmp.parent))
    return (importlib.import_module("vkc_before_expr.expr"),
            importlib.import_module("vkc_before_expr.typed_expr"),
            importlib.import_module("vkc_before_expr.dtypes"))


def record(E, T, D, t, tree, operands):
    """What the compiler rendered before: expr.render when every operand and the output are
    float32 (lower/elementwise.py, epilogues), TypedRenderer otherwise."""
    try:
        if t == "float32" and all(o == "float32" for o in operands):
            return {"expr": E.render(tree, leaf), "helpers": {}, "int64": False}
        r = T.TypedRenderer(D.TYPES[t], [D.TYPES[o] for o in operands])
        text = r.render(tree, leaf)
        return {"expr": text, "helpers": dict(r.helpers), "int64": r.int64}
    except Exception as exc:  # noqa: BLE001 - the error is part of the recorded behaviour
        return {"error": f"{type(exc).__name__}: {exc}"}


def main():
    E, T, D = old_modules()
    rows, helper_text = [], {}
    for t, tree, operands in cases():
        row = {"dtype": t, "tree": tree, "operands": operands, **record(E, T, D, t, tree, operands)}
        if "helpers" in row:  # each helper's text once (its name says its types), in call order
            helper_text.update(row["helpers"])
            row["helpers"] = list(row["helpers"])
        # render_size (the fusion pass's bound) renders trees of every dtype as float32.
        row["size"] = len(E.render(tree, lambda _: "x"))
        rows.append(row)
    lines = ",\n".join(json.dumps(r) for r in rows)
    FIXTURE.write_text(f'{{"before": "{BEFORE}", "helpers": {json.dumps(helper_text, indent=1)},\n'
                       f'"cases": [\n{lines}\n]}}\n')
    print(f"{FIXTURE}: {len(rows)} cases")


if __name__ == "__main__":
    main()
