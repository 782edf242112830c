"""Write docs/ZOO.md from the zoo's exports and results (tools/zoo/run.py calls it).

    python tools/zoo/report.py [--work /tmp/zoo] [--vkc /work/main] [--doc docs/ZOO.md]
                               [--previous docs/ZOO.md] [--exporter torchscript|dynamo]

A model the work folder holds no export of keeps its row from --previous (by default the doc
being rewritten), with the commit it was checked at: a run over a few models updates their rows
and leaves the others' as they were checked. `--exporter dynamo` reports the dynamo exporter's
exports (<work>/exports/<source>-dynamo, run.py --exporter dynamo), to a doc of their own.
"""
from __future__ import annotations

import argparse
import json
import re
from collections import Counter, defaultdict
from pathlib import Path

from recipe import folder

HERE = Path(__file__).resolve().parent
SOURCES = {"torchvision": "torchvision (library-default init)",
           "hf-default": "transformers (library-default init)",
           "hf-random": "transformers (random weights, normal(0, 0.5))"}
RANK = {"matched": 0, "ill-conditioned": 1, "refused": 2, "crash": 3, "wrong": 4}
RAN = ("matched", "ill-conditioned", "wrong")   # statuses of a model that compiled and ran
SPREAD_TEXT = "a deep stack of random weights, attention near one-hot"
FP32_LIMIT = 1e-4
EXPORT_CALLS = {"torchscript": "`torch.onnx.export(..., opset_version=17, dynamo=False)`",
                "dynamo": "`torch.onnx.export(..., dynamo=True)` (torch's default since 2.9) at its default opset"}


def load_source(work: Path, source: str, exporter: str = "torchscript") -> list[dict]:
    rows = []
    for recipe_path in sorted((work / "exports" / folder(source, exporter)).glob("*.json")):
        recipe = json.loads(recipe_path.read_text())
        result_path = work / "results" / folder(source, exporter) / recipe_path.name
        recipe["result"] = json.loads(result_path.read_text()) if result_path.exists() else None
        rows.append(recipe)
    return rows


def _cells(line: str) -> list[str]:
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def previous_rows(doc: Path) -> dict[str, dict[str, dict]]:
    """{source: {model: row}} of a doc this script wrote: each per-model table row with the
    commit it was checked at (its own column, or the doc's single commit)."""
    if not doc.exists():
        return {}
    text = doc.read_text()
    commits = re.findall(r"`([0-9a-f]{7})` \(\d+ models?\)", text.split("\n## ", 1)[0])
    titles = {t: s for s, t in SOURCES.items()}
    rows, source, header = {}, None, []
    for line in text.splitlines():
        if line.startswith("## "):
            source = titles.get(line[3:].strip())
            header = []
            continue
        if source is None or not line.startswith("|") or line.startswith("|---"):
            continue
        cells = _cells(line)
        if not header:
            header = cells
            continue
        row = dict(zip(header, cells))
        row.setdefault("checked at", commits[0] if len(commits) == 1 else "")
        rows.setdefault(source, {})[row["model"]] = row
    return rows


def carried_status(row: dict, precision: str) -> str:
    """A carried row's status at a precision, from its table cell (the worst over targets)."""
    cell = row.get(precision, "")
    if row.get("note", "").startswith("not exported"):
        return "not exported"
    found = [k for k in sorted(RANK, key=RANK.get, reverse=True) if re.search(rf"\b{k}\b", cell)]
    if found:
        return found[0]
    return cell if cell in ("timeout", "ort fails", "not checked") else "not checked"


def verdict(result: dict | None, precision: str) -> tuple[str, dict | None]:
    """A model's status at one precision: the worst over its targets (wrong > crash > refused >
    ill-conditioned > matched), with the configuration that gave it; or not checked / checker error."""
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
            if "carried" in r:
                status = carried_status(r["carried"], precision)
                t[f"{precision} {status}"] += 1
                t[f"{precision} compiled"] += status in RAN
                continue
            status, _ = verdict(r["result"], precision)
            t[f"{precision} {status}"] += 1
            if status in RAN or (status == "crash" and r["result"].get("configs") and all(
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
    text = "<br>".join(cells) or "not checked"
    if precision == "fp32" and cells and result.get("reference_spread", 0) > FP32_LIMIT:
        text += f" (onnxruntime's own spread {result['reference_spread']:.0e})"
    return text


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


def carried(source: str, previous: dict) -> list[dict]:
    """Rows of models the work folder holds no export of, as the previous doc has them."""
    return [{"name": name, "class": row.get("class", ""), "carried": row, "result": None,
             "status": "not exported" if row.get("note", "").startswith("not exported") else "exported"}
            for name, row in previous.get(source, {}).items()]


def carried_reason(row: dict, precision: str, status: str) -> str:
    """A carried row's failure text at a precision: its note names one configuration's; the
    other precision's, where its status is the same, is taken to be that one too."""
    note = row.get("note", "")
    config, _, text = note.partition(": ")
    other = "fp16" if precision == "fp32" else "fp32"
    if config.startswith(precision + "/") or (config.startswith(other + "/")
                                              and carried_status(row, other) == status):
        return text
    return note if status in ("timeout", "crash", "ort fails") else "(reason not recorded)"


def model_line(r: dict) -> str:
    if "carried" in r:
        c = r["carried"]
        checked = any(carried_status(c, p) not in ("not checked", "not exported") for p in ("fp32", "fp16"))
        return (f"| {r['name']} | {c.get('class', '')} | {c.get('params', '')} | {cell(c.get('fp32', ''))} | "
                f"{cell(c.get('fp16', ''))} | {c.get('compile s', '')} | {c.get('run s', '')} | "
                f"{c.get('checked at', '') if checked else ''} | {cell(c.get('note', ''))} |")
    params = f"{r['params'] / 1e6:.2f} M" if r.get("params") else ""
    commit = r["result"].get("vkc", "")[:7] if r.get("result") else ""
    return (f"| {r['name']} | {r.get('class', '')} | {params} | {fmt_status(r['result'], 'fp32')} | "
            f"{fmt_status(r['result'], 'fp16')} | {seconds(r['result'], 'compile_s')} | "
            f"{seconds(r['result'], 'run_s')} | {commit} | {cell(note(r))} |")


def write(work: Path, vkc: Path, doc: Path, previous: Path | None = None, exporter: str = "torchscript") -> None:
    data = {s: load_source(work, s, exporter) for s in SOURCES}
    before = previous_rows(previous or doc)
    for source, rows in data.items():
        fresh = {r["name"] for r in rows}
        rows += [r for r in carried(source, before) if r["name"] not in fresh]
    fresh_rows = [r for rows in data.values() for r in rows if r.get("result")]
    old_rows = [r["carried"] for rows in data.values() for r in rows
                if "carried" in r and carried_status(r["carried"], "fp32") not in ("not checked", "not exported")]
    configs = Counter(k for r in fresh_rows for k in r["result"].get("configs", {}))
    configs.update(f"{p}/{target}" for row in old_rows for p in ("fp32", "fp16")
                   for target in re.findall(r"(\w+): ", row.get(p, "")))
    commits = Counter(r["result"].get("vkc", "?")[:7] for r in fresh_rows)
    commits.update(row.get("checked at") or "?" for row in old_rows)
    seconds_total = sum(r["result"].get("seconds", 0) for r in fresh_rows) + sum(
        float(row.get(k) or 0) for row in old_rows for k in ("compile s", "run s"))
    opsets = Counter(r["opset"] for rows in data.values() for r in rows if r.get("opset"))
    carried_exports = sum(1 for rows in data.values() for r in rows if "carried" in r and r["status"] == "exported")
    call = EXPORT_CALLS[exporter] + ("" if exporter == "torchscript" else " (opset " + ", ".join(
        f"{o}: {n} models" for o, n in sorted(opsets.items())) + (
            f" of the work folder's exports; the {carried_exports} carried from earlier runs keep their rows, "
            "which do not record it" if carried_exports else "") + ")")
    lines = ["# Model zoo: what users export, against onnxruntime"
             + ("" if exporter == "torchscript" else f" ({exporter} exporter)"), "",
             "Written by `tools/zoo/report.py` (run `tools/zoo/run.py`; the recipe is in `tools/zoo/`).",
             "vkc at " + ", ".join(f"`{c}` ({n} models)" for c, n in commits.most_common())
             + " (main when each model was checked: the tables' \"checked at\"; a run over some models "
             "rewrites their rows and keeps the others' as checked before), on lavapipe. Every model is "
             "exported as users do: "
             + call + ", eval mode, the graph as the "
             "exporter wrote it, a dynamic batch axis where the export allows (then compiled with two shape "
             "variants, batch 1 and 2, and run at both); run on fresh random inputs against onnxruntime (CPU). "
             "The script checks fp32 and fp16, each with the default targets and `--target host`; the "
             "configurations in this report, with the number of models checked in each: "
             + ", ".join(f"`{k}` {n}" for k, n in sorted(configs.items())) + ".",
             f"Checking took {seconds_total / 3600:.1f} h of wall time (the per-model compile and run "
             "seconds are in the tables; lavapipe on 2 shared cores).", "",
             "Run: `/work/main/.venv/bin/python tools/zoo/run.py` (exports with the venv of "
             "`tools/zoo/requirements.txt`, checks with the project venv against `--vkc`, a checkout of "
             "main; `--configs fp32/host fp16/host` for a quicker pass, `--only NAME ...` for some models"
             + ("" if exporter == "torchscript" else f", `--exporter {exporter} --doc ...` for this report") + "). "
             "The committed fixtures "
             "(`tests/models/fixtures/exports/`, `tools/zoo/make_fixtures.py`) run in CI as "
             "`tests/models/test_exports.py`.", "",
             "Tolerances: fp32: rel L2 <= 1e-4 and every element |got - ref| <= atol + rtol*|ref|, "
             "rtol 1e-3, atol 1e-4 * max|ref| (or twice the most an element of onnxruntime's own result moves, "
             "where that is more: between its graph optimizations on and off, or with every float32 weight "
             "one float32 step away, up or down at random, a rounding as large as one float32 operation's); "
             "where its result moves by more than the rel L2 limit (a model that amplifies rounding: " + SPREAD_TEXT
             + "), rel L2 <= twice that spread, which the table states. fp16 (float16 storage, float32 "
             "inputs and outputs) against the fp32 reference: rel L2 <= 1e-2.", "",
             "A model's status at a precision is the worst over its targets: **wrong** (ran, outside "
             "tolerance: a silently wrong answer) > **crash** (a traceback, the checker dying or a timeout) > "
             "**refused** (a CompileError naming the problem) > **ill-conditioned** (ran, outside tolerance, where "
             "onnxruntime's own spread reaches 1e-2: float32's rounding alone moves the reference by fp16's "
             "whole tolerance, so it does not determine the answer to that tolerance) > **matched**. "
             "\"compiled\" counts models whose "
             "every configuration of that precision compiled.", "",
             "## Totals", "",
             "| source | tried | exported | checked | fp32 compiled | fp32 matched | fp32 ill-conditioned "
             "| fp32 refused | fp32 crash | fp32 wrong | fp16 compiled | fp16 matched | fp16 ill-conditioned "
             "| fp16 refused | fp16 crash | fp16 wrong |",
             "|---|" + "---:|" * 15]
    for source, title in SOURCES.items():
        t = totals(data[source])
        checked = t["exported"] - t["fp32 not checked"]
        lines.append(f"| {title} | {t['tried']} | {t['exported']} | {checked} | "
                     + " | ".join(str(t[f"{p} {k}"] + (t[f"{p} timeout"] if k == "crash" else 0))
                                  for p in ("fp32", "fp16")
                                  for k in ("compiled", "matched", "ill-conditioned", "refused", "crash",
                                            "wrong")) + " |")
    lines += ["", "\"tried\": every architecture the zoo attempted; \"exported\": torch exported it and "
              "onnxruntime ran the export at batch 1 (and 2, where dynamic); \"checked\": compared with vkc "
              "(the rest were not reached in the run's time, smallest models first)."]
    classes = defaultdict(set)
    for source, rows in data.items():
        for r in rows:
            if r["status"] != "exported":
                reason = r.get("reason", "")
                if "carried" in r:
                    reason = r["carried"].get("note", "").split(": ", 1)[-1]
                classes[("not exported", reason_class(reason))].add(f"{source}/{r['name']}")
                continue
            for precision in ("fp32", "fp16"):
                if "carried" in r:
                    status, row = carried_status(r["carried"], precision), None
                    text = carried_reason(r["carried"], precision, status)
                else:
                    status, row = verdict(r["result"], precision)
                    text = (row.get("problems") or [row.get("reason", "")])[0] if row else ""
                if status in ("matched", "not checked"):
                    continue
                if status in ("wrong", "ill-conditioned"):
                    text = re.sub(r"^batch \d+: [^:]*: ", "", text).split(";")[0]
                where = f" @ {row['where']}" if row and row.get("where") else ""
                classes[(f"{precision} {status}", reason_class(text) + where)].add(f"{source}/{r['name']}")
    lines += ["", "## Failure classes", "", "| kind | first line (names and numbers blanked) | models | examples |",
              "|---|---|---:|---|"]
    for (kind, text), models in sorted(classes.items(), key=lambda kv: (kv[0][0], -len(kv[1]))):
        lines.append(f"| {kind} | {cell(text)} | {len(models)} | {cell(', '.join(sorted(models)[:6]))} |")
    for source, title in SOURCES.items():
        lines += ["", f"## {title}", "",
                  "| model | class | params | fp32 | fp16 | compile s | run s | checked at | note |",
                  "|---|---|---:|---|---|---:|---:|---|---|"]
        lines += [model_line(r) for r in sorted(data[source], key=lambda r: r["name"])]
    doc.write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, default=Path("/tmp/zoo"))
    ap.add_argument("--vkc", type=Path, default=Path("/work/main"))
    ap.add_argument("--doc", type=Path, default=HERE.parents[1] / "docs" / "ZOO.md")
    ap.add_argument("--previous", type=Path, help="the doc whose rows the models not in --work keep "
                    "(default: --doc as it is)")
    ap.add_argument("--exporter", choices=sorted(EXPORT_CALLS), default="torchscript",
                    help="whose exports to report (run.py's --exporter)")
    args = ap.parse_args()
    write(args.work, args.vkc, args.doc, args.previous, args.exporter)


if __name__ == "__main__":
    main()
