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


def test_transformers_classes_rows_render_with_their_profile():
    cats = {c: {"ms": 0.5, "share": 0.25} for c in ("attention", "matmul")}
    data = {"meta": {"precisions": ["fp32", "fp16"], "command": "python -m benchmarks.gpu.transformers"},
            "rows": [{"model": "bert", "batch": 1, "precision": "fp16", "vkc_ms": 1.0, "eager_ms": 4.0, "graphs_ms": 2.0,
                      "rel_l2": 1e-3, "dispatches": 40, "profile": {"gpu_ms": 1.0, "categories": cats}},
                     {"model": "t5", "batch": 8, "precision": "fp32", "vkc_error": "refused", "eager_ms": 3.0}]}
    text = report.render(data)
    assert "| bert | 1 | fp16 | 1.000 | 4.000 | 2.000 | 2.00 | 1.0e-03 | 40 |" in text
    assert "| t5 | 8 | fp32 | error | 3.000 | - | - | - | - |" in text
    assert "| bert | 1 | fp16 | 1.000 | 25% 0.500 | 25% 0.500 |" in text


def test_llm_decode_rows_render_with_ratios_and_agreement():
    meta = {"command": "python -m benchmarks.lavapipe.decode", "vkc_commit": "abc1234", "device": "llvmpipe",
            "cpu": "EPYC x 2", "threads": 2, "prompt": 32, "new_tokens": 64, "rounds": 3, "repeat": 3,
            "load_average_start": 2.0, "load_average_end": 3.0, "versions": {"llama_cpp_python": "0.3.36"},
            "turns": {"tiny": [{"llama_cpp": {"others_during": 0.02}, "vkc": {"others_during": 0.2}},
                                {"llama_cpp": {"others_during": 0.05}, "vkc": {"others_during": 0.01}}]}}
    agree = {"checked": 16, "equal_in_checked": 16}
    row = {"model": "tiny", "hidden": 256, "layers": 4, "vocab": 4096, "params": 5.2e6, "precision": "int8",
           "llama_cpp_type": "Q8_0",
           "vkc": {"prefill_tokens_per_s": 400.0, "decode_tokens_per_s": 50.0, "prefill_tokens_per_s_best": 450.0,
                   "decode_tokens_per_s_best": 60.0, "agreement": agree},
           "llama_cpp": {"prefill_tokens_per_s": 2000.0, "decode_tokens_per_s": 500.0,
                         "prefill_tokens_per_s_best": 2100.0, "decode_tokens_per_s_best": 700.0,
                         "agreement": {"checked": 16, "equal_in_checked": 3}}}
    text = report.render({"meta": meta, "rows": [row]})
    assert ("| tiny (256 x 4, vocab 4096) | 5.2 M | int8 / Q8_0 | 400 (450) | 2000 (2100) | 0.20 | 50.0 (60.0) "
            "| 500.0 (700.0) | 0.10 | 16/16, 3/16 |") in text
    assert "llama-cpp-python 0.3.36" in text and "vkc commit `abc1234`" in text and "5% of the CPU while a system ran (median of 4 turns, at most 20%)" in text
