"""Run every selected ONNX node case and record the outcomes in docs/conformance.json, then
regenerate docs/SUPPORT.md from it and the registry.

    python -m tests.conformance.run            # all cases (about a minute and a half on lavapipe)
    python -m tests.conformance.run -k resize  # only cases whose name contains 'resize' (no write)
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

from tests.conformance import cases  # noqa: E402

RESULTS = os.path.join(ROOT, "docs", "conformance.json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", default="", help="only cases whose name contains this")
    args = parser.parse_args()
    names = [n for n in cases.selected_cases() if args.k in n]
    results, t0 = {}, time.time()
    for name in names:
        o = cases.run_case(name)
        case = cases.all_cases()[name]
        results[name] = {"op": cases.single_op(case), "status": o.status,
                         "detail": o.detail.splitlines()[0][:200] if o.detail else ""}
        if o.status != "passed":
            print(f"{o.status:8s} {name}: {results[name]['detail']}", flush=True)
    counts = collections.Counter(r["status"] for r in results.values())
    print(f"{len(names)} cases in {time.time() - t0:.0f} s: {dict(counts)}")
    if args.k:
        return
    from runtime_min import list_devices

    record = {"device": os.environ.get("VKC_DEVICE") or list_devices()[0].name,
              "issue_ops": list(cases.ISSUE_OPS), "cases": results}
    with open(RESULTS, "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)
        f.write("\n")
    from compiler.support_table import write

    print(f"wrote {RESULTS} and {write()}")


if __name__ == "__main__":
    main()
