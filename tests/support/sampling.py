"""The two-sample chi-squared comparison the sampling tests make."""

from __future__ import annotations

import numpy as np
from scipy import stats


def assert_same_distribution_per_position(a: np.ndarray, b: np.ndarray, min_count: int = 10):
    """``a`` and ``b``: sampled answers, one row per draw, one column per position.  At every
    position, the values drawn at least ``min_count`` times in all (rarer ones left out) must
    not tell the two apart: a chi-squared test of homogeneity, p > 1e-3."""
    for pos in range(a.shape[1]):
        values = np.union1d(a[:, pos], b[:, pos])
        table = np.array([[np.sum(d[:, pos] == v) for v in values] for d in (a, b)])
        table = table[:, table.sum(axis=0) >= min_count]
        if table.shape[1] >= 2:
            assert stats.chi2_contingency(table)[1] > 1e-3, (pos, table)


def assert_mtp_sampling_keeps_the_targets_distribution(model, prompt: str, draws: int = 200):
    """The first 3 sampled tokens after ``prompt`` (temperature 1.5), drawn ``draws`` times
    plain and with the model's MTP drafter (its own q in the acceptance rule, 2 tokens a
    round): only the MTP run drafts, and the two are one distribution per position."""
    got = {}
    for name, options in (
        ("plain", {"draft_max": 0}),
        ("mtp", {"strategy": "mtp", "draft_max": 2}),
    ):
        results = [
            model.generate(prompt, max_tokens=3, temperature=1.5, seed=s, **options)
            for s in range(draws)
        ]
        got[name] = np.array([r.tokens for r in results])
        assert (sum(r.stats.drafted_tokens for r in results) > 0) == (name == "mtp")
    assert_same_distribution_per_position(got["plain"], got["mtp"])
