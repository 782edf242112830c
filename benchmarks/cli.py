"""What every benchmark script shares on its command line."""
import sys


def exit_on_help(doc: str, argv: list[str] | None = None) -> None:
    """Print the script's docstring and exit when -h/--help is given: for the scripts that read
    sys.argv themselves, before they import what only the GPU machine has (torch)."""
    if {"-h", "--help"} & set(sys.argv[1:] if argv is None else argv):
        print(doc.strip())
        sys.exit(0)
