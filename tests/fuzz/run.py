"""Run seeds through the oracle, several graphs to a compile, and shrink what fails.

Graphs of one (opset, precision, target, dtype) are joined into one model (their names
prefixed, so they stay disjoint): one compile, one load and one run check them all, which is what
makes hundreds of seeds a minute possible. A batch that is not ok is rerun graph by graph to name
the seeds at fault.
"""
from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import onnx
from onnx import compose, helper

from .generate import Case, generate
from .oracle import Verdict, check, locate, reference_of


@dataclass
class Summary:
    seeds: int = 0
    verdicts: Counter = field(default_factory=Counter)
    bugs: dict = field(default_factory=dict)       # seed -> Verdict
    refusals: Counter = field(default_factory=Counter)
    seconds: float = 0.0

    def line(self) -> str:
        return (f"{self.seeds} seeds in {self.seconds:.1f} s: " +
                ", ".join(f"{k} {v}" for k, v in sorted(self.verdicts.items())))


def prefix(seed: int) -> str:
    return f"s{seed}_"


def join(cases: list[Case], references: dict) -> tuple[Case, tuple]:
    """One Case holding every graph of `cases` side by side, and its feeds and reference (each
    graph's own, renamed)."""
    if len(cases) == 1:
        return cases[0], references[cases[0].seed]
    graphs, feeds, want = [], {}, {}
    for c in cases:
        m = compose.add_prefix(c.model, prefix(c.seed))
        graphs.append(m.graph)
        f, w = references[c.seed]
        feeds.update({prefix(c.seed) + k: v for k, v in f.items()})
        want.update({prefix(c.seed) + k: v for k, v in w.items()})
    graph = helper.make_graph([n for g in graphs for n in g.node], "fuzz_batch",
                              [i for g in graphs for i in g.input], [o for g in graphs for o in g.output],
                              [t for g in graphs for t in g.initializer])
    opsets = {o.domain: o.version for c in cases for o in c.model.opset_import}
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()],
                              ir_version=cases[0].model.ir_version, producer_name="vkc-fuzz")
    first = cases[0]
    return Case(-1, model, first.precision, first.target), (feeds, want)


def run_seeds(seeds, *, batch: int = 16, reduce_bugs: bool = False, out: Path | None = None,
              max_ops: int | None = None, log=print) -> Summary:
    start = time.perf_counter()
    summary = Summary()
    groups: dict[tuple, list[Case]] = defaultdict(list)
    references = {}
    for s in seeds:
        c = generate(s, max_ops)
        summary.seeds += 1
        references[s] = reference_of(c)
        if isinstance(references[s], Verdict):
            _record(summary, c, references[s], log)
            continue
        groups[(c.model.opset_import[0].version, c.precision, c.target, c.dtype.name)].append(c)
    for cases in groups.values():
        for i in range(0, len(cases), batch):
            chunk = cases[i:i + batch]
            joined, given = join(chunk, references)
            v = check(joined, given)
            if v.kind == "ok":
                summary.verdicts["ok"] += len(chunk)
                continue
            for c in chunk if len(chunk) > 1 else []:
                _record(summary, c, check(c, references[c.seed]), log)
            if len(chunk) == 1:
                _record(summary, chunk[0], v, log)
    if reduce_bugs and summary.bugs:
        from .reduce import reduce_case
        for seed, v in summary.bugs.items():
            small = reduce_case(generate(seed, max_ops), v.signature, log=log)
            if v.signature.startswith("mismatch"):
                log(f"  {locate(small)}")
            if out is not None:
                out.mkdir(parents=True, exist_ok=True)
                (out / f"seed{seed}.txt").write_text(onnx.printer.to_text(small.model))
                log(f"  minimal case of seed {seed}: {out / f'seed{seed}.txt'}")
    summary.seconds = time.perf_counter() - start
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "summary.json").write_text(json.dumps(
            {"seeds": summary.seeds, "verdicts": summary.verdicts, "seconds": summary.seconds,
             "bugs": {s: str(v) for s, v in summary.bugs.items()}, "refusals": summary.refusals}, indent=1))
    return summary


def _record(summary: Summary, case: Case, v: Verdict, log) -> None:
    summary.verdicts[v.kind] += 1
    if v.kind == "refused":
        summary.refusals[v.detail[:120]] += 1
    elif v.kind == "bug":
        summary.bugs[case.seed] = v
        log(f"seed {case.seed} ({case.precision}, {case.target}, {case.dtype.name}, ops {case.ops}): {v}")
