"""README.md stays true to the code: its environment table lists every VKC_* variable the product
code reads, its layout table names every template and top-level folder, and its first commands
are the Makefile's."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
PRODUCT = ("compiler", "runtime_min", "bundles", "native", "templates")
SOURCES = ("*.py", "*.c", "*.h", "*.kt", "*.java")
# An environment read: os.environ.get("VKC_X"), os.environ["VKC_X"], getenv("VKC_X") and the
# runtimes' flag helpers (_env_flag("VKC_X", ...) in Python, env_on("VKC_X", ...) in C).
ENV_READ = re.compile(r"""(?:environ(?:\.get)?\s*[\[(]|getenv\s*\(|env_\w*\s*\()\s*["'](VKC_[A-Z0-9_]+)["']""")


def section(title: str) -> str:
    return README.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def env_reads() -> dict[str, str]:
    found = {}
    for part in PRODUCT:
        for pattern in SOURCES:
            for path in (ROOT / part).rglob(pattern):
                for name in ENV_READ.findall(path.read_text(errors="replace")):
                    found.setdefault(name, str(path.relative_to(ROOT)))
    return found


def test_the_scan_finds_the_runtimes_reads():
    assert {"VKC_DEVICE", "VKC_VALIDATION", "VKC_ROBUST", "VKC_CACHE_DIR"} <= set(env_reads())


def test_every_variable_read_is_in_the_environment_table():
    table = set(re.findall(r"^\| `(VKC_[A-Z0-9_]+)", section("Environment"), re.M))
    missing = {name: where for name, where in env_reads().items() if name not in table}
    assert not missing, f"README's environment table lacks {missing} (variable: first file reading it)"
    stale = table - set(env_reads())
    assert not stale, f"README's environment table lists {sorted(stale)}, which no product code reads"


def test_layout_names_every_template_and_folder():
    layout = section("Layout")
    templates = {p.name.split(".")[0] for p in (ROOT / "templates").glob("*.comp.j2")}
    assert not {t for t in templates if f"`{t}`" not in layout}
    folders = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))
               and p.name not in ("out", "build", "dist") and not p.name.endswith(".egg-info")}
    assert {"compiler", "tests"} <= folders
    assert not {f for f in folders if f"`{f}/`" not in layout}


def test_first_commands_are_the_makefiles():
    makefile = (ROOT / "Makefile").read_text()
    for target in re.findall(r"^make (\w+)", README.split("## ", 1)[0], re.M):
        assert re.search(rf"^{target}:", makefile, re.M), f"README runs `make {target}`; the Makefile has no such target"
    bench = re.search(r"^bench:.*\n\t(.*)", makefile, re.M).group(1)
    assert "benchmarks.bench " in bench and "`make bench` runs `python -m benchmarks.bench`" in README
