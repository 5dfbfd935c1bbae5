"""Pure helpers: percentiles, throughput, ratios to a baseline, target checks, formatting."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

__all__ = [
    "PERCENTILES",
    "format_number",
    "format_ratio",
    "lookup",
    "mb_per_s",
    "per_second",
    "percentile",
    "ratio",
    "summarize_latencies",
    "target_status",
]

PERCENTILES: tuple[tuple[str, float], ...] = (
    ("p50", 50.0),
    ("p95", 95.0),
    ("p99", 99.0),
    ("p99.9", 99.9),
)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of sorted values, linearly interpolated.

    Same definition as numpy's default (``linear``). Raises ValueError on an empty input
    or ``q`` out of range.
    """
    if not sorted_values:
        raise ValueError("percentile of an empty sequence")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"q must be within 0..100, got {q}")
    rank = (len(sorted_values) - 1) * q / 100.0
    low = math.floor(rank)
    high = math.ceil(rank)
    if low == high:
        return float(sorted_values[low])
    frac = rank - low
    return float(sorted_values[low] + (sorted_values[high] - sorted_values[low]) * frac)


def summarize_latencies(values: Iterable[float]) -> dict[str, float]:
    """count, min, mean, p50, p95, p99, p99.9 and max of latencies (any unit); {} if none."""
    data = sorted(values)
    if not data:
        return {}
    summary: dict[str, float] = {
        "count": float(len(data)),
        "min": float(data[0]),
        "mean": math.fsum(data) / len(data),
    }
    for name, q in PERCENTILES:
        summary[name] = percentile(data, q)
    summary["max"] = float(data[-1])
    return summary


def per_second(count: float, seconds: float) -> float:
    """``count / seconds``; 0.0 when no time elapsed."""
    return count / seconds if seconds > 0 else 0.0


def mb_per_s(messages: float, size: int, seconds: float) -> float:
    """Payload megabytes (10**6 bytes) per second."""
    return per_second(messages * size, seconds) / 1e6


def ratio(value: float | None, baseline: float | None) -> float | None:
    """``value / baseline``, or None when either is missing or the baseline is not positive."""
    if value is None or baseline is None or baseline <= 0 or math.isnan(baseline):
        return None
    return value / baseline


def target_status(value: float | None, goal: float, *, higher_is_better: bool = True) -> str:
    """ "met", "missed" or "n/a" for a ratio against its goal (e.g. >= 0.8 or <= 1.5)."""
    if value is None:
        return "n/a"
    ok = value >= goal if higher_is_better else value <= goal
    return "met" if ok else "missed"


def format_number(value: float | None, digits: int = 3) -> str:
    """Human formatting for tables: ``12.3k``, ``1.23M``, ``456``, ``0.812``; ``-`` if None."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    magnitude = abs(value)
    if magnitude >= 1e6:
        return f"{value / 1e6:.{digits - 1}f}M"
    if magnitude >= 1e4:
        return f"{value / 1e3:.1f}k"
    if magnitude >= 100:
        return f"{value:.0f}"
    return f"{value:.{digits}g}"


def format_ratio(value: float | None) -> str:
    """``0.85x``; ``-`` if None."""
    return "-" if value is None else f"{value:.2f}x"


def lookup(records: Iterable[Mapping[str, object]], **match: object) -> Mapping[str, object] | None:
    """The first record whose fields equal every ``match`` item, or None."""
    for record in records:
        if all(record.get(key) == want for key, want in match.items()):
            return record
    return None
