"""Write docs/ZOO.md from the zoo's exports and results (tools/zoo/run.py calls it).

    python tools/zoo/report.py [--work /tmp/zoo] [--vkc /work/main] [--doc docs/ZOO.md]
"""
from __future__ import annotations

import argparse
import json
import re
from collections import Counter, defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCES = {"torchvision": "torchvision (library-default init)",
           "hf-default": "transformers (library-default init)",
           "hf-random": "transformers (random weights, normal(0, 0.5))"}
RANK = {"matched": 0, "refused": 1, "crash": 2, "wrong": 3}


def load_source(work: Path, source: str) -> list[dict]:
    rows = []
    for recipe_path in sorted((work / "exports" / source).glob("*.json")):
        recipe = json.loads(recipe_path.read_text())
        result_path = work / "results" / source / recipe_path.name
        recipe["result"] = json.loads(result_path.read_text()) if result_path.exists() else None
        rows.append(recipe)
    return rows


def verdict(result: dict | None, precision: str) -> tuple[str, dict | None]:
    """A model's status at one precision: the worst over its targets (wrong > crash > refused >
    matched), with the configuration that gave it; or not checked / checker error."""
    if result is None:
        return "not checked", None
    if "error" in result:
        kind = "timeout" if result["error"].startswith("timeout") else (
            "crash" if result["error"].startswith("the checker died") else "ort fails")
        return kind, {"reason": result["error"]}
    rows = [(k, v) for k, v in result["configs"].items() if k.startswith(precision + "/")]
    if not rows:
        return "not checked", None
    key, row = max(rows, key=lambda kv: RANK[kv[1]["status"]])
    return row["status"], {**row, "config": key}


def reason_class(text: str) -> str:
    """A failure's first line with names and numbers blanked, so one bug is one class."""
    while re.search(r"<[^<>]*>", text):
        text = re.sub(r"<[^<>]*>", "…", text)
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", text)
    text = re.sub(r"\[[^\]]*\]", "[…]", text)
    text = re.sub(r"\d+(\.\d+)?(e-?\d+)?", "N", text)
    return text[:160]


def totals(rows: list[dict]) -> dict:
    t = Counter(tried=len(rows), exported=sum(r["status"] == "exported" for r in rows))
    for precision in ("fp32", "fp16"):
        for r in rows:
            if r["status"] != "exported":
                continue
            status, _ = verdict(r["result"], precision)
            t[f"{precision} {status}"] += 1
            if status in ("matched", "wrong") or (status == "crash" and r["result"].get("configs") and all(
                    v.get("stage") == "run" or v["status"] != "crash"
                    for k, v in r["result"]["configs"].items() if k.startswith(precision))):
                t[f"{precision} compiled"] += 1
    return t


def fmt_status(result, precision: str) -> str:
    if result is None or "error" in result:
        return verdict(result, precision)[0]
    cells = []
    for key, row in result["configs"].items():
        if key.startswith(precision + "/"):
            worst = row.get("worst") or {}
            err = f" {worst['rel_l2']:.0e}" if worst.get("rel_l2") is not None else ""
            cells.append(f"{key.split('/')[1]}: {row['status']}{err}")
    return "<br>".join(cells) or "not checked"


def seconds(result, field: str) -> str:
    if not result or "configs" not in result:
        return ""
    return f"{sum(v.get(field, 0) for v in result['configs'].values()):.0f}"


def note(r: dict) -> str:
    if r["status"] != "exported":
        return f"not exported ({r.get('stage', '?')}): {r.get('reason', '')}"
    res = r["result"]
    if not res:
        return ""
    if "error" in res:
        return res["error"]
    for precision in ("fp32", "fp16"):
        status, row = verdict(res, precision)
        if status != "matched" and row:
            text = (row.get("problems") or [row.get("reason", "")])[0]
            where = f" ({row['where']})" if row.get("where") else ""
            return f"{row['config']}: {text}{where}"
    return ""


def cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")[:300]


def write(work: Path, vkc: Path, doc: Path) -> None:
    data = {s: load_source(work, s) for s in SOURCES}
    configs = Counter(k for rows in data.values() for r in rows if r.get("result")
                      for k in r["result"].get("configs", {}))
    commits = Counter(r["result"].get("vkc", "?")[:7] for rows in data.values() for r in rows if r.get("result"))
    seconds_total = sum(r["result"].get("seconds", 0) for rows in data.values() for r in rows if r.get("result"))
    lines = ["# Model zoo: what users export, against onnxruntime", "",
             "Written by `tools/zoo/report.py` (run `tools/zoo/run.py`; the recipe is in `tools/zoo/`).",
             "vkc at " + ", ".join(f"`{c}` ({n} models)" for c, n in commits.most_common())
             + " (main when each model was checked), on lavapipe. Every model is exported as users do: "
             "`torch.onnx.export(..., opset_version=17, dynamo=False)`, eval mode, the graph as the "
             "exporter wrote it, a dynamic batch axis where the export allows (then compiled with two shape "
             "variants, batch 1 and 2, and run at both); run on fresh random inputs against onnxruntime (CPU). "
             "The script checks fp32 and fp16, each with the default targets and `--target host`; the "
             "configurations in this report, with the number of models checked in each: "
             + ", ".join(f"`{k}` {n}" for k, n in sorted(configs.items())) + ".",
             f"Checking took {seconds_total / 3600:.1f} h of wall time (the per-model compile and run "
             "seconds are in the tables; lavapipe on 2 shared cores).", "",
             "Run: `/work/main/.venv/bin/python tools/zoo/run.py` (exports with the venv of "
             "`tools/zoo/requirements.txt`, checks with the project venv against `--vkc`, a checkout of "
             "main; `--configs fp32/host fp16/host` for a quicker pass). The committed fixtures "
             "(`tests/models/fixtures/exports/`, `tools/zoo/make_fixtures.py`) run in CI as "
             "`tests/models/test_exports.py`.", "",
             "Tolerances: fp32: rel L2 <= 1e-4 and every element |got - ref| <= atol + rtol*|ref|, "
             "rtol 1e-3, atol 1e-4 * max|ref|. fp16 (float16 storage, float32 inputs and outputs) against the "
             "fp32 reference: rel L2 <= 1e-2.", "",
             "A model's status at a precision is the worst over its targets: **wrong** (ran, outside "
             "tolerance: a silently wrong answer) > **crash** (a traceback, the checker dying or a timeout) > "
             "**refused** (a CompileError naming the problem) > **matched**. \"compiled\" counts models whose "
             "every configuration of that precision compiled.", "",
             "## Totals", "",
             "| source | tried | exported | checked | fp32 compiled | fp32 matched | fp32 refused "
             "| fp32 crash | fp32 wrong | fp16 compiled | fp16 matched | fp16 refused | fp16 crash | fp16 wrong |",
             "|---|" + "---:|" * 13]
    for source, title in SOURCES.items():
        t = totals(data[source])
        checked = t["exported"] - t["fp32 not checked"]
        lines.append(f"| {title} | {t['tried']} | {t['exported']} | {checked} | "
                     + " | ".join(str(t[f"{p} {k}"] + (t[f"{p} timeout"] if k == "crash" else 0))
                                  for p in ("fp32", "fp16")
                                  for k in ("compiled", "matched", "refused", "crash", "wrong")) + " |")
    lines += ["", "\"tried\": every architecture the zoo attempted; \"exported\": torch exported it and "
              "onnxruntime ran the export at batch 1 (and 2, where dynamic); \"checked\": compared with vkc "
              "(the rest were not reached in the run's time, smallest models first)."]
    classes = defaultdict(set)
    for source, rows in data.items():
        for r in rows:
            if r["status"] != "exported":
                classes[("not exported", reason_class(r.get("reason", "")))].add(f"{source}/{r['name']}")
                continue
            for precision in ("fp32", "fp16"):
                status, row = verdict(r["result"], precision)
                if status in ("matched", "not checked"):
                    continue
                text = (row.get("problems") or [row.get("reason", "")])[0] if row else ""
                if status == "wrong":
                    text = re.sub(r"^batch \d+: [^:]*: ", "", text).split(";")[0]
                where = f" @ {row['where']}" if row and row.get("where") else ""
                classes[(f"{precision} {status}", reason_class(text) + where)].add(f"{source}/{r['name']}")
    lines += ["", "## Failure classes", "", "| kind | first line (names and numbers blanked) | models | examples |",
              "|---|---|---:|---|"]
    for (kind, text), models in sorted(classes.items(), key=lambda kv: (kv[0][0], -len(kv[1]))):
        lines.append(f"| {kind} | {cell(text)} | {len(models)} | {cell(', '.join(sorted(models)[:6]))} |")
    for source, title in SOURCES.items():
        lines += ["", f"## {title}", "", "| model | class | params | fp32 | fp16 | compile s | run s | note |",
                  "|---|---|---:|---|---|---:|---:|---|"]
        for r in sorted(data[source], key=lambda r: r["name"]):
            params = f"{r['params'] / 1e6:.2f} M" if r.get("params") else ""
            lines.append(f"| {r['name']} | {r.get('class', '')} | {params} | {fmt_status(r['result'], 'fp32')} | "
                         f"{fmt_status(r['result'], 'fp16')} | {seconds(r['result'], 'compile_s')} | "
                         f"{seconds(r['result'], 'run_s')} | {cell(note(r))} |")
    doc.write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, default=Path("/tmp/zoo"))
    ap.add_argument("--vkc", type=Path, default=Path("/work/main"))
    ap.add_argument("--doc", type=Path, default=HERE.parents[1] / "docs" / "ZOO.md")
    args = ap.parse_args()
    write(args.work, args.vkc, args.doc)


if __name__ == "__main__":
    main()
