"""Summaries every figure reports the same way: median, percentiles and the spread over runs."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def percentile(samples: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100): a value that was actually measured."""
    ordered = sorted(samples)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def summary(samples: Sequence[float]) -> dict[str, float]:
    """Pooled samples: median, p99, min, max and how many."""
    return {
        "median": statistics.median(samples),
        "p99": percentile(samples, 99),
        "min": min(samples),
        "max": max(samples),
        "n": len(samples),
    }


def over_runs(per_run: Sequence[float]) -> dict[str, float]:
    """One number per run (e.g. each run's median): the median over runs and the min–max spread."""
    return {"median": statistics.median(per_run), "min": min(per_run), "max": max(per_run), "runs": len(per_run)}
