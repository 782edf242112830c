"""benchmarks/lavapipe/decode.py's pure parts: the agreement it reports and the figures it takes
from timings (the run itself needs torch and llama-cpp-python; its figures are in RESULTS.md)."""
import pytest

from benchmarks.lavapipe.decode import CHECKED, agreement, summarize


def test_agreement_counts_leading_tokens_and_keeps_the_margin_where_they_part():
    reference = list(range(20))
    margins = [float(i) / 10 for i in range(20)]
    got = reference[:5] + [99] + reference[6:]  # equal again after the split: not counted
    a = agreement(got, reference, margins)
    assert a == {"leading_equal": 5, "checked": CHECKED, "equal_in_checked": 5, "compared": 20,
                 "reference_margin_at_split": 0.5}
    same = agreement(reference, reference, margins)
    assert same["leading_equal"] == 20 and same["equal_in_checked"] == CHECKED
    assert "reference_margin_at_split" not in same


def test_agreement_of_a_short_run_compares_what_it_has():
    a = agreement([1, 2], [1, 2, 3], [1.0, 1.0, 1.0])
    assert a["leading_equal"] == 2 and a["compared"] == 2 and "reference_margin_at_split" not in a


def test_summarize_takes_the_median_and_counts_decode_steps_after_the_first_token():
    s = summarize([(0.1, 1.0), (0.4, 3.0), (0.2, 2.0)], prompt=32, new_tokens=65)
    assert s["prefill_tokens_per_s"] == pytest.approx(32 / 0.2)
    assert s["decode_tokens_per_s"] == pytest.approx(64 / 2.0)
    assert s["decode_tokens_per_s_runs"] == pytest.approx([64.0, 64 / 3, 32.0])
    assert s["prefill_tokens_per_s_best"] == pytest.approx(320.0) and s["decode_tokens_per_s_best"] == 64.0
