#!/usr/bin/env python3
"""Render a benchmarks/bench.py --json file as the Markdown tables of benchmarks/RESULTS.md.

    python benchmarks/report.py out/bench.json > section.md
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def _ms(res: dict) -> str:
    if "ms" not in res:
        return res.get("status", "?")
    ms = res["ms"]
    txt = f"{ms:,.3f}" if ms < 100 else f"{ms:,.1f}"
    return f"{txt} ({res['runs']})"


def _ratio(res: dict) -> str:
    r = res.get("ratio")
    return "" if r is None else f"{r:.2f}"


def _noise(res: dict) -> str:
    q = res.get("iqr_rel")
    return "" if q is None else f"{100 * q:.0f}%"


def _table(head: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" if i == 0 else "---:" for i in range(len(head))) + "|"]
    out += ["| " + " | ".join(c.replace("|", "/") for c in r) + " |" for r in rows]
    return "\n".join(out)


def systems_of(rows: list[dict]) -> list[str]:
    names: list[str] = []
    for r in rows:
        for n in r.get("systems", {}):
            if n not in names:
                names.append(n)
    return names


def models_table(rows: list[dict]) -> str:
    names = systems_of(rows)
    prim = names[0]
    head = ["model"]
    for n in names:
        head.append(f"{n} ms")
        if n != prim:
            head.append(f"{n}/vkc")
    head += ["vkc IQR/median", "rel L2 (worst timed)"]
    body = []
    for r in rows:
        if "error" in r:
            body.append([r["label"], f"error: {r['error']}"] + [""] * (len(head) - 2))
            continue
        cells = [r["label"]]
        for n in names:
            res = r["systems"].get(n, {})
            cells.append(_ms(res))
            if n != prim:
                cells.append(_ratio(res))
        cells.append(_noise(r["systems"].get(prim, {})))
        errs = [x["rel_l2"] for x in r["systems"].values() if "ms" in x and "rel_l2" in x]
        cells.append(f"{max(errs):.1e}" if errs else "")
        body.append(cells)
    return _table(head, body)


def flops_table(rows: list[dict], peak: float | None, first: str, count: bool = False) -> str:
    names = systems_of(rows)
    prim = names[0]
    head = [first] + (["x"] if count else []) + ["GFLOP"]
    for n in names:
        head += [f"{n} ms", f"{n} GFLOP/s" + (" (% peak)" if peak and n == prim else "")]
        if n != prim:
            head.append(f"{n}/vkc")
    body = []
    for r in rows:
        if "error" in r:
            body.append([r["label"], f"error: {r['error']}"] + [""] * (len(head) - 2))
            continue
        cells = [r["label"]] + ([str(r.get("count", ""))] if count else []) + [f"{r['flops'] / 1e9:.3g}"]
        for n in names:
            res = r["systems"].get(n, {})
            cells.append(_ms(res))
            g = res.get("gflops")
            cells.append("" if g is None else f"{g:.1f}" + (f" ({100 * g / peak:.1f}%)" if peak and n == prim else ""))
            if n != prim:
                cells.append(_ratio(res))
        body.append(cells)
    return _table(head, body)


def conv_totals(rows: list[dict]) -> str:
    names = systems_of(rows)
    prim = names[0]
    head = ["model", "conv GFLOP"]
    for n in names:
        head += [f"{n} ms", f"{n} GFLOP/s"] + ([f"{n}/vkc"] if n != prim else [])
    body = []
    for model in dict.fromkeys(r.get("model") for r in rows):
        rs = [r for r in rows if r.get("model") == model and "systems" in r]
        fl = sum(r["flops"] * r["count"] for r in rs)
        cells, base = [model, f"{fl / 1e9:.2f}"], None
        for n in names:
            if not all("ms" in r["systems"].get(n, {}) for r in rs):
                cells += ["incomplete", ""] + ([""] if n != prim else [])
                continue
            ms = sum(r["systems"][n]["ms"] * r["count"] for r in rs)
            cells += [f"{ms:.1f}", f"{fl / ms / 1e6:.1f}"]
            if n == prim:
                base = ms
            else:
                cells.append(f"{ms / base:.2f}" if base else "")
        body.append(cells)
    return _table(head, body)


def profile_table(rows: list[dict]) -> str:
    head = ["model", "wall ms", "dispatches", "matmul/conv ms (n)", "matmul/conv GFLOP/s", "other ms (n)",
            "wall - sum of dispatches ms", "top kernels: n, ms, GFLOP/s"]
    body = []
    for r in rows:
        p = r.get("profile")
        if not p or "error" in p or "batch" in r["label"]:  # batch rows: 1 run each, too noisy to subtract
            continue
        top = "; ".join(f"{k['kernel']} x{k['n']} {k['ms']:.1f} ms {k['gflops']:.1f}" for k in p["top"][:3])
        body.append([r["label"], f"{p['wall_ms']:.1f}", str(p["dispatches"]), f"{p['heavy_ms']:.1f} ({p['heavy_n']})",
                     f"{p['heavy_gflops']:.2f}", f"{p['other_ms']:.1f} ({p['other_n']})", f"{p['overhead_ms']:.1f}", top])
    return _table(head, body)


def render(data: dict) -> str:
    v = data.get("versions", {})
    parts = [f"- date: {data.get('date')}; total wall time {data.get('wall_s', 0) / 60:.0f} min",
             f"- command: `{data.get('command')}`",
             f"- device: {data.get('device')}; CPU {data.get('cpu', {}).get('model')} x {data.get('cpu', {}).get('cores')}",
             f"- peak: {data.get('peak_note')}",
             "- versions: " + ", ".join(f"{k} {val}" for k, val in v.items()),
             "- vkc targets: " + ", ".join(f"{k}: {t.get('target')} = {t.get('resolved')}"
                                           for k, t in data.get("targets", {}).items())]
    s = data.get("settings", {})
    parts.append(f"- settings: at most {s.get('repeat')} timed runs, {s.get('warmup')} warm-up, budget "
                 f"{s.get('budget_s')} s per system and workload ({s.get('batch_budget_s')} s and >= 1 run for "
                 f"batch rows, {s.get('conv_budget_s')} s per conv layer), tolerance {s.get('tolerance')} rel L2")
    out = ["\n".join(parts)]
    if data.get("models"):
        out += ["#### Models (median ms (timed runs); peer/vkc > 1: vkc faster)", models_table(data["models"])]
    if any(r.get("profile") for r in data.get("models", [])):
        out += ["#### vkc per-dispatch profile (`Model.profile`, dispatches separated by barriers)",
                profile_table(data["models"])]
    if data.get("gemm"):
        out += ["#### GEMM C = A @ B, both operands inputs, fp32", flops_table(data["gemm"], data.get("peak_gflops"),
                                                                           "M x N x K")]
    if data.get("convs"):
        out += ["#### Distinct conv layers of ResNet-50 and MobileNetV2 (batch 1, 224; x = occurrences)",
                flops_table(data["convs"], data.get("peak_gflops"), "layer", count=True),
                "#### Conv layers summed over every occurrence", conv_totals(data["convs"])]
    return "\n\n".join(out) + "\n"


if __name__ == "__main__":
    print(render(json.loads(Path(sys.argv[1]).read_text())))
