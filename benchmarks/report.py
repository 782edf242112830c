#!/usr/bin/env python3
"""Render benchmark JSON as the Markdown tables of benchmarks/RESULTS.md.

    python -m benchmarks.report out/bench.json                 # one file's tables, to stdout
    python -m benchmarks.report --update benchmarks/RESULTS.md  # regenerate every marked block
    python -m benchmarks.report --check benchmarks/RESULTS.md   # exit 1 if a block is stale

A block of RESULTS.md between `<!-- report: data/NAME.json -->` and `<!-- end report -->` is
generated from benchmarks/data/NAME.json; everything outside the markers is written by hand.
Understood: benchmarks/bench.py --json, benchmarks/transformers.py --json,
benchmarks/gpu/transformers.py --json (with meta.precisions, or without: its hand-written models'
rows), benchmarks/lavapipe/decode.py --json, and the JSON lines of benchmarks/gpu/models.py and
benchmarks/gpu/coopmat.py (models, gemm) gathered as {"meta": {...}, "rows": [...]}.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parent


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


def flops_table(rows: list[dict], peak: float | None, first: str) -> str:
    names = systems_of(rows)
    prim = names[0]
    head = [first, "GFLOP"]
    for n in names:
        head += [f"{n} ms", f"{n} GFLOP/s" + (" (% peak)" if peak and n == prim else "")]
        if n != prim:
            head.append(f"{n}/vkc")
    body = []
    for r in rows:
        if "error" in r:
            body.append([r["label"], f"error: {r['error']}"] + [""] * (len(head) - 2))
            continue
        cells = [r["label"], f"{r['flops'] / 1e9:.3g}"]
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


def render_bench(data: dict) -> str:
    v = data.get("versions", {})
    parts = [f"- command: `{data.get('command')}` ({data.get('wall_s', 0) / 60:.0f} min)",
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
        # Each distinct layer's timings stay in the JSON; `make bench` prints them.
        out += ["#### Conv layers of ResNet-50 and MobileNetV2 (batch 1, 224), summed over every occurrence",
                conv_totals(data["convs"])]
    return "\n\n".join(out) + "\n"



def _f(x, fmt: str = ".3f") -> str:
    return format(x, fmt) if isinstance(x, (int, float)) and x == x else "-"


def _div(a, b) -> str:
    ok = all(isinstance(v, (int, float)) and v == v and v > 0 for v in (a, b))
    return f"{a / b:.2f}" if ok else "-"


def _meta(meta: dict, command: str | None, commit: str | None) -> str:
    items = [f"- command: `{command or meta.get('command')}`",
             f"- vkc commit `{commit or meta.get('vkc_commit', '?')}`; device {meta.get('device', '?')}"]
    if meta.get("torch"):
        items.append(f"- torch {meta['torch']}; median of {meta.get('repeat')} runs after {meta.get('warmup')} warm-ups")
    return "\n".join(items)


SHARES = ["attention", "layernorm", "matmul", "conv", "elementwise", "other"]


def render_transformers_ort(data: dict) -> str:
    s, v = data["settings"], data["versions"]
    head = ["model", "vkc ms", "ORT ms", "ORT/vkc", "rel L2", "vkc GPU ms (dispatches)"] + SHARES
    body = []
    for r in data["rows"]:
        if "error" in r:
            body.append([r["model"], f"error: {r['error']}"] + [""] * (len(head) - 2))
            continue
        p = r.get("profile", {})
        cats = p.get("categories", {})
        body.append([r["model"], _f(r["vkc_ms"]), _f(r["ort_ms"]), _div(r["ort_ms"], r["vkc_ms"]), _f(r["rel_l2"], ".1e"),
                     f"{p.get('gpu_ms', 0):.2f} ({p.get('dispatches', 0)})"]
                    + [f"{100 * cats.get(c, {}).get('share', 0):.0f}%" for c in SHARES])
    meta = {"device": v.get("device")}
    return _meta(meta, s.get("command"), v.get("vkc_commit")) + "\n\n" + _table(head, body) + "\n"


def render_transformers_torch(data: dict) -> str:
    head = ["model", "batch", "vkc ms", "eager ms", "graphs ms", "eager/vkc", "graphs/vkc", "rel L2", "vkc GPU ms"]
    body = [[r["model"], str(r["batch"]), _f(r["vkc_ms"]), _f(r.get("eager_ms")), _f(r.get("graphs_ms")),
             _div(r.get("eager_ms"), r["vkc_ms"]), _div(r.get("graphs_ms"), r["vkc_ms"]), _f(r.get("rel_l2"), ".1e"),
             _f(r.get("profile", {}).get("gpu_ms"))] for r in data["rows"]]
    return _meta(data["meta"], None, None) + "\n\n" + _table(head, body) + "\n"


def render_transformers_classes(data: dict) -> str:
    """benchmarks/gpu/transformers.py's rows (one per model, batch and precision): the timings, then
    where vkc's GPU time goes."""
    head = ["model", "batch", "precision", "vkc ms", "eager ms", "graphs ms", "graphs/vkc", "rel L2", "dispatches"]
    body, shares, categories = [], [], []
    for r in data["rows"]:
        v = r.get("vkc_ms")
        body.append([r["model"], str(r["batch"]), r.get("precision", ""), _f(v) if "vkc_error" not in r else "error",
                     _f(r.get("eager_ms")), _f(r.get("graphs_ms")), _div(r.get("graphs_ms"), v),
                     _f(r.get("rel_l2"), ".1e"), str(r.get("dispatches", "-"))])
        p = r.get("profile")
        if p and "error" not in p:
            cats, categories = p["categories"], list(p["categories"])
            shares.append([r["model"], str(r["batch"]), r["precision"], _f(p["gpu_ms"])]
                          + [f"{100 * cats[c]['share']:.0f}% {cats[c]['ms']:.3f}" for c in cats])
    out = _meta(data["meta"], None, None) + "\n\n" + _table(head, body) + "\n"
    if shares:
        out += "\n" + _table(["model", "batch", "precision", "vkc GPU ms"] + categories, shares) + "\n"
    return out


def render_cnn_fp32(data: dict) -> str:
    head = ["model", "batch", "vkc ms", "torch eager ms", "torch graphs ms", "graphs/vkc", "rel L2 vs torch"]
    body = [[r["model"], str(r["batch"]), _f(r["vkc_ms"]), _f(r.get("torch_eager_ms")), _f(r.get("torch_graph_ms")),
             _div(r.get("torch_graph_ms"), r["vkc_ms"]), _f(r.get("rel_l2_vs_torch"), ".1e")] for r in data["rows"]]
    return _meta(data["meta"], None, None) + "\n\n" + _table(head, body) + "\n"


def render_cnn_fp16(data: dict) -> str:
    head = ["model", "batch", "vkc fp16 ms", "torch fp16 graphs ms", "graphs/vkc", "rel L2 vs ORT fp32"]
    body = [[r["model"], str(r["batch"]), _f(r["vkc_fp16_ms"]), _f(r.get("torch_fp16_graph_ms")),
             _div(r.get("torch_fp16_graph_ms"), r["vkc_fp16_ms"]), _f(r.get("rel_l2_vs_ort_fp32"), ".1e")]
            for r in data["rows"]]
    return _meta(data["meta"], None, None) + "\n\n" + _table(head, body) + "\n"


def render_gemm_fp16(data: dict) -> str:
    head = ["M x N x K", "tiles", "vkc ms", "vkc TFLOP/s", "cuBLAS TFLOP/s", "% of cuBLAS", "rel L2 vs fp32"]
    body = [[r["gemm"], r["tiles"], _f(r["vkc_ms"]), _f(r["vkc_tflops"], ".1f"), _f(r.get("cublas_tflops"), ".1f"),
             _f(r.get("pct_of_cublas"), ".1f"), _f(r.get("rel_l2_vs_torch_fp32"), ".1e")] for r in data["rows"]]
    return _meta(data["meta"], None, None) + "\n\n" + _table(head, body) + "\n"


def _agreement(a: dict) -> str:
    return f"{a['equal_in_checked']}/{a['checked']}" if "checked" in a else "-"


def render_llm_decode(data: dict) -> str:
    """benchmarks/lavapipe/decode.py: vkc's and llama.cpp's prefill and decode tokens/s per model
    and precision (median, best in parentheses; ratios of the medians), and how many of the first
    16 greedy tokens equal transformers'."""
    m, v = data["meta"], data["meta"].get("versions", {})
    blocks = [b for rounds in m.get("turns", {}).values() for r in rounds for b in r.values()]
    during = sorted(b["others_during"] for b in blocks)
    items = [f"- command: `{m['command']}`",
             f"- vkc commit `{m['vkc_commit']}`; device {m['device']}; CPU {m['cpu']}",
             f"- llama-cpp-python {v.get('llama_cpp_python', '?')} (CPU backend, {m['threads']} threads); torch "
             f"{v.get('torch', '?')}, transformers {v.get('transformers', '?')}",
             f"- prompt {m['prompt']} tokens, {m['new_tokens']} new tokens; {m['rounds']} rounds x {m['repeat']} "
             f"generations per system and row"
             + (f"; other processes took {100 * during[len(during) // 2]:.0f}% of the CPU while a system ran (median "
                f"of {len(during)} turns, at most {100 * during[-1]:.0f}%)" if during else "")
             + f"; load average {m['load_average_start']:.1f} at the start, {m['load_average_end']:.1f} at the end"]
    head = ["model", "params", "vkc / llama.cpp", "vkc prefill tok/s", "llama.cpp prefill tok/s", "vkc/llama.cpp",
            "vkc decode tok/s", "llama.cpp decode tok/s", "vkc/llama.cpp",
            "leading greedy tokens = transformers' (vkc, llama.cpp)"]
    body = []
    for r in data["rows"]:
        k, c = r["vkc"], r["llama_cpp"]
        cells = [f"{r['model']} ({r['hidden']} x {r['layers']}, vocab {r['vocab']})", f"{r['params'] / 1e6:.1f} M",
                 f"{r['precision']} / {r['llama_cpp_type']}"]
        for key, fmt in [("prefill", ".0f"), ("decode", ".1f")]:
            a, b = k.get(f"{key}_tokens_per_s"), c.get(f"{key}_tokens_per_s")
            cells += [f"{_f(a, fmt)} ({_f(k.get(f'{key}_tokens_per_s_best'), fmt)})",
                      f"{_f(b, fmt)} ({_f(c.get(f'{key}_tokens_per_s_best'), fmt)})", _div(a, b)]
        cells.append(f"{_agreement(k.get('agreement', {}))}, {_agreement(c.get('agreement', {}))}")
        body.append(cells)
    return "\n".join(items) + "\n\n" + _table(head, body) + "\n"


def render(data: dict) -> str:
    """The tables of one JSON file, whichever benchmark wrote it."""
    if "models" in data or "gemm" in data and isinstance(data["gemm"], list):
        return render_bench(data)
    rows = data.get("rows") or [{}]
    if "precisions" in data.get("meta", {}):
        return render_transformers_classes(data)
    if "settings" in data and "ort_ms" in rows[0]:
        return render_transformers_ort(data)
    for key, fn in [("llama_cpp", render_llm_decode), ("eager_ms", render_transformers_torch),
                    ("torch_eager_ms", render_cnn_fp32), ("vkc_fp16_ms", render_cnn_fp16), ("gemm", render_gemm_fp16)]:
        if key in rows[0]:
            return fn(data)
    raise SystemExit("error: unknown benchmark JSON (no key this report knows); see benchmarks/report.py's docstring")


BLOCK = re.compile(r"(<!-- report: (\S+) -->\n)(.*?)(<!-- end report -->)", re.S)


def update(text: str, root: Path = DATA) -> str:
    """RESULTS.md with every marked block regenerated from the JSON it names (relative to benchmarks/)."""
    return BLOCK.sub(lambda m: m.group(1) + render(json.loads((root / m.group(2)).read_text())) + m.group(4), text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", help="a benchmark JSON file, or RESULTS.md with --update / --check")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--update", action="store_true", help="rewrite the marked blocks of the Markdown file")
    mode.add_argument("--check", action="store_true", help="exit 1 when a marked block differs from its JSON")
    args = ap.parse_args(argv)
    path = Path(args.path)
    if not path.is_file():
        print(f"error: {path}: no such file", file=sys.stderr)
        return 2
    if not (args.update or args.check):
        print(render(json.loads(path.read_text())), end="")
        return 0
    old = path.read_text()
    new = update(old)
    if args.check:
        if new != old:
            print(f"{path} is stale: run python -m benchmarks.report --update {path}", file=sys.stderr)
            return 1
        return 0
    path.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
