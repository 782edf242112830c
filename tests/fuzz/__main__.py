"""python -m tests.fuzz --seeds N [--start S] [--batch B] [--max-ops K] [--reduce] [--out DIR]"""
import argparse
import sys
from pathlib import Path

from .run import run_seeds


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    p.add_argument("--seeds", type=int, default=200, help="How many seeds to run.")
    p.add_argument("--start", type=int, default=0, help="The first seed.")
    p.add_argument("--batch", type=int, default=16, help="Graphs joined into one compile.")
    p.add_argument("--max-ops", type=int, default=None,
                   help="Ops (or patterns) drawn per graph; default 1 to 6, drawn per seed.")
    p.add_argument("--reduce", action="store_true", help="Shrink every failing graph to a minimal one.")
    p.add_argument("--out", type=Path, default=None, help="Write summary.json and minimal cases here.")
    a = p.parse_args()
    s = run_seeds(range(a.start, a.start + a.seeds), batch=a.batch, reduce_bugs=a.reduce, out=a.out,
                  max_ops=a.max_ops)
    print(s.line())
    for r, n in s.refusals.most_common(20):
        print(f"  refused x{n}: {r}")
    return 1 if s.bugs else 0


if __name__ == "__main__":
    sys.exit(main())
