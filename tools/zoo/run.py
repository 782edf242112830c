"""Run the zoo: export what is not exported yet, check every export against onnxruntime (one
subprocess per model, with a timeout, so a driver crash or a hang costs one model), then write
docs/ZOO.md.

    python tools/zoo/run.py [--vkc /work/main] [--sources torchvision hf-default hf-random]
                            [--only NAME ...] [--limit N] [--timeout 600] [--no-export]
                            [--exporter torchscript|dynamo] [--doc docs/ZOO.md]

The exports come from the export venv (--torch-python), the checks run with the project venv
(--vkc-python) and PYTHONPATH=--vkc (a checkout of main), so the zoo tests that checkout. Exports
and results are cached under --work (default /tmp/zoo); a result is reused while the ONNX file
and the vkc checkout's commit are the ones it was made with. docs/ZOO.md keeps the rows of the models
not under --work as they were (tools/zoo/report.py), each with the commit it was checked at.
`--exporter dynamo` exports with torch.onnx.export(..., dynamo=True) into <work>/exports/<source>-dynamo
(results in <work>/results/<source>-dynamo); give it its own --doc, as docs/ZOO.md is the torchscript
exporter's.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from recipe import EXPORTERS, folder

HERE = Path(__file__).resolve().parent
SOURCES = ("torchvision", "hf-default", "hf-random")


def vkc_commit(vkc: Path) -> str:
    return subprocess.run(["git", "-C", str(vkc), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def exported(work: Path, name: str) -> list[dict]:  # name: the source's folder
    recipes = [json.loads(p.read_text()) for p in sorted((work / "exports" / name).glob("*.json"))]
    return sorted(recipes, key=lambda r: (r.get("params") or 0, r["name"]))


def check(args, source: str, recipe: dict, commit: str) -> dict:
    """The cached result of one model, or a fresh one from check_one.py in a subprocess."""
    source = folder(source, args.exporter)
    onnx_path = args.work / "exports" / source / f"{recipe['name']}.onnx"
    out = args.work / "results" / source / f"{recipe['name']}.json"
    digest = sha(onnx_path)
    if out.exists():
        cached = json.loads(out.read_text())
        if (cached.get("onnx_sha") == digest and cached.get("vkc") == commit
                and set(args.configs) <= set(cached.get("configs", args.configs))):
            return cached
    env = {**os.environ, "PYTHONPATH": str(args.vkc)}
    start = time.perf_counter()
    cmd = ["nice", "-n", "10", str(args.vkc_python), str(HERE / "check_one.py"), str(onnx_path),
           str(args.work / "exports" / source / f"{recipe['name']}.json"), "--configs", *args.configs]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("ZOO-RESULT ")), None)
        if line:
            result = json.loads(line[len("ZOO-RESULT "):])
        else:
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            result = {"error": f"the checker died (exit {proc.returncode}): {tail[:300]}"}
    except subprocess.TimeoutExpired:
        result = {"error": f"timeout: over {args.timeout} s"}
    result.update(onnx_sha=digest, vkc=commit, seconds=round(time.perf_counter() - start, 1))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, sort_keys=True))
    return result


def summary(result: dict) -> str:
    if "error" in result:
        return result["error"]
    return " ".join(f"{k}={v['status']}" for k, v in result["configs"].items())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vkc", type=Path, default=Path("/work/main"))
    ap.add_argument("--vkc-python", type=Path, default=Path("/work/main/.venv/bin/python"))
    ap.add_argument("--torch-python", type=Path, default=Path("/work/venvs/torch/bin/python"))
    ap.add_argument("--work", type=Path, default=Path("/tmp/zoo"))
    ap.add_argument("--sources", nargs="*", default=list(SOURCES), choices=SOURCES)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--limit", type=int, help="check at most this many models per source (smallest first)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per model (all its configurations)")
    ap.add_argument("--configs", nargs="*", default=["fp32/default", "fp32/host", "fp16/default", "fp16/host"],
                    help="PRECISION/TARGET pairs to check")
    ap.add_argument("--no-export", action="store_true", help="check only what is exported already")
    ap.add_argument("--exporter", choices=EXPORTERS, default="torchscript",
                    help="torch.onnx.export's dynamo=False (opset 17) or dynamo=True (its default opset)")
    ap.add_argument("--doc", type=Path, default=HERE.parents[1] / "docs" / "ZOO.md")
    args = ap.parse_args()
    if args.exporter != "torchscript" and args.doc.resolve() == (HERE.parents[1] / "docs" / "ZOO.md").resolve():
        ap.error("docs/ZOO.md is the torchscript exporter's: give --doc for another exporter")
    commit = vkc_commit(args.vkc)
    for source in args.sources:
        if not args.no_export:
            cmd = ["nice", "-n", "10", str(args.torch_python), str(HERE / "export.py"), source,
                   "--out", str(args.work / "exports"), "--exporter", args.exporter] + (
                       ["--only", *args.only] if args.only else [])
            subprocess.run(cmd, check=False)
        recipes = [r for r in exported(args.work, folder(source, args.exporter)) if r["status"] == "exported"
                   and (not args.only or r["name"] in args.only)]
        for recipe in recipes[:args.limit]:
            result = check(args, source, recipe, commit)
            print(f"{source}/{recipe['name']}: {summary(result)} ({result.get('seconds')} s)", flush=True)
    subprocess.run([sys.executable, str(HERE / "report.py"), "--work", str(args.work), "--vkc", str(args.vkc),
                    "--doc", str(args.doc), "--exporter", args.exporter], check=True)


if __name__ == "__main__":
    main()
