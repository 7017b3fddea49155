"""The benchmarks' mean ratio and its 95 % interval."""

import pytest

from localspec.bench.ratios import interval_text, mean_interval, t95


def test_the_interval_is_students_t_over_the_pairs():
    got = mean_interval([0.9, 1.0, 1.1])  # mean 1.0, sd 0.1, t(2) 4.303
    assert got["mean"] == pytest.approx(1.0)
    half = 4.303 * 0.1 / 3**0.5
    assert (got["low"], got["high"]) == pytest.approx((1.0 - half, 1.0 + half))
    assert interval_text(got) == "1.00 [0.75, 1.25]"


def test_an_interval_needs_two_pairs_and_narrows_with_more():
    assert mean_interval([]) == {"mean": None, "low": None, "high": None, "n": 0}
    assert interval_text(mean_interval([1.02])) == "1.02"
    ten = mean_interval([0.95, 1.05] * 5)
    forty = mean_interval([0.95, 1.05] * 20)
    assert forty["high"] - forty["low"] < ten["high"] - ten["low"]
    assert t95(9) == 2.262 and t95(100) == 1.96
