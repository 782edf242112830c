"""The CI scripts check what they download: no package source is trusted without a signature, no
mirror is written into the tree (apt's own configuration names it), and every .deb fetched is
pinned by version and SHA-256. Each script at least parses."""
import re
import subprocess
from pathlib import Path

import pytest

CI = Path(__file__).resolve().parents[1] / ".ci"
SCRIPTS = sorted(p for p in CI.iterdir() if p.is_file() and p.suffix in ("", ".sh") and p.name != "trixie_glslc.sha256")


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_parses(script):
    r = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_no_unverified_source_nor_host_name(script):
    text = script.read_text()
    assert "trusted=yes" not in text and "allow-insecure" not in text.lower()
    assert not re.search(r"\b(?:https?|ftp)://", text), "a mirror's address belongs to apt's configuration, not here"


def test_debs_are_pinned_by_version_and_sum():
    lines = (CI / "trixie_glslc.sha256").read_text().splitlines()
    names = set()
    for line in lines:
        digest, name = line.split("  ")
        assert re.fullmatch(r"[0-9a-f]{64}", digest), line
        assert re.fullmatch(r"[a-z0-9.+-]+_[0-9A-Za-z.+~%-]+_amd64\.deb", name), line
        names.add(name.split("_")[0])
    assert {"glslc", "libshaderc1", "libc6"} <= names
    fetch = (CI / "fetch_glslc_trixie.sh").read_text()
    assert "sha256sum" in fetch and "signed-by=" in fetch and "apt-get indextargets" in fetch
