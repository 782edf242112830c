"""benchmarks/RESULTS.md's generated tables agree with the JSON in benchmarks/data/ they name,
every data file is rendered somewhere, and the file stays a table of current figures."""
import re
from pathlib import Path

import pytest

from benchmarks import report

RESULTS = Path(report.__file__).resolve().parent / "RESULTS.md"
DATA = RESULTS.parent / "data"


def test_results_md_is_regenerated_from_the_data():
    text = RESULTS.read_text()
    assert report.update(text) == text, "run: python -m benchmarks.report --update benchmarks/RESULTS.md"


def test_every_data_file_has_a_block():
    named = set(re.findall(r"<!-- report: data/(\S+) -->", RESULTS.read_text()))
    assert named == {p.name for p in DATA.glob("*.json")}


def test_results_md_is_short():
    assert len(RESULTS.read_text().splitlines()) < 500


def test_check_flags_a_stale_block(tmp_path):
    stale = tmp_path / "RESULTS.md"
    stale.write_text(RESULTS.read_text().replace("<!-- end report -->", "stale\n<!-- end report -->", 1))
    assert report.main(["--check", str(stale)]) == 1
    assert report.main(["--update", str(stale)]) == 0 and report.main(["--check", str(stale)]) == 0


def test_unknown_json_is_refused(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text('{"rows": [{"what": 1}]}')
    with pytest.raises(SystemExit, match="unknown benchmark JSON"):
        report.main([str(bad)])
