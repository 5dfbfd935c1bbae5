"""Latency percentiles for ``bench``: nearest-rank, no IO."""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["PERCENTILES", "percentile", "summarize"]

PERCENTILES = (50.0, 95.0, 99.0, 99.9)


def percentile(ordered: Sequence[float], p: float) -> float:
    """The nearest-rank ``p``-th percentile of ascending ``ordered`` (not empty)."""
    if not ordered:
        raise ValueError("no samples")
    if not 0 < p <= 100:
        raise ValueError(f"percentile must be in (0, 100], got {p}")
    # Rounded first: 99.9 / 100 * 1000 is 999.0000000000001 in floats, not rank 1000.
    rank = math.ceil(round(p * len(ordered) / 100, 9))
    return ordered[rank - 1]


def summarize(samples: Sequence[float]) -> dict[str, float]:
    """min, mean, the `PERCENTILES` (``p50``...) and max of ``samples``."""
    ordered = sorted(samples)
    summary = {"min": ordered[0], "mean": sum(ordered) / len(ordered)}
    for p in PERCENTILES:
        summary[f"p{p:g}"] = percentile(ordered, p)
    summary["max"] = ordered[-1]
    return summary
