"""What every benchmark script shares on its command line: --help before heavy imports, and the
commit a result was measured at."""
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def exit_on_help(doc: str, argv: list[str] | None = None) -> None:
    """Print the script's docstring and exit when -h/--help is given: for the scripts that read
    sys.argv themselves, before they import what only the GPU machine has (torch)."""
    if {"-h", "--help"} & set(sys.argv[1:] if argv is None else argv):
        print(doc.strip())
        sys.exit(0)


def vkc_commit() -> str:
    """The tree's commit, marked where files differ from it; VKC_BENCH_COMMIT names it for a copy
    of the tree without .git (the GPU machine's)."""
    if os.environ.get("VKC_BENCH_COMMIT"):
        return os.environ["VKC_BENCH_COMMIT"]
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"
    return commit + (" (+ uncommitted changes)" if dirty else "")


def command_line() -> str:
    """How this script was run, as `python -m benchmarks.NAME ARGS`."""
    module = sys.modules["__main__"].__spec__.name if getattr(sys.modules["__main__"], "__spec__", None) else sys.argv[0]
    return " ".join(["python", "-m", module, *sys.argv[1:]])
