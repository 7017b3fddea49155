"""A ratio measured over interleaved pairs, as the benchmarks report it: the mean and its 95 %
confidence interval (Student's t over the pairs' ratios), so a reader sees whether a
difference is one the run can detect."""

from __future__ import annotations

import math
import statistics

# two-sided 95 % quantiles of Student's t by degrees of freedom (1 to 30); 1.96 beyond
_T95 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t95(dof: int) -> float:
    """Student's t two-sided 95 % quantile for ``dof`` degrees of freedom (>= 1)."""
    return _T95[dof - 1] if dof <= len(_T95) else 1.96


def mean_interval(values: list[float]) -> dict:
    """``{"mean", "low", "high", "n"}``: the mean of ``values`` and its 95 % interval (low and
    high None with fewer than two values: no spread to judge by)."""
    n = len(values)
    if n == 0:
        return {"mean": None, "low": None, "high": None, "n": 0}
    mean = statistics.fmean(values)
    if n < 2:
        return {"mean": mean, "low": None, "high": None, "n": 1}
    half = t95(n - 1) * statistics.stdev(values) / math.sqrt(n)
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": n}


def interval_text(interval: dict) -> str:
    """``0.97 [0.93, 1.01]`` (``0.97`` alone without a spread; empty without values)."""
    if interval["mean"] is None:
        return ""
    if interval["low"] is None:
        return f"{interval['mean']:.2f}"
    return f"{interval['mean']:.2f} [{interval['low']:.2f}, {interval['high']:.2f}]"
