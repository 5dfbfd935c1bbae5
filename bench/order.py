"""Run orders balanced across repetitions, and the spread of repeated figures (pure).

A ratio taken between two contenders that run one after the other depends on who ran
first on a shared 2-core machine (caches, the server's garbage collector, a neighbour's
burst). `balanced_orders` gives each repetition an order from a Williams design: over
``len(contenders)`` repetitions every contender runs in every position once, and (for an
even count, or over twice as many repetitions for an odd one) runs right after every other
contender equally often, so neither position nor predecessor favours anyone.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import TypeVar

__all__ = ["balanced_orders", "balanced_reps", "cycle_length", "spread"]

T = TypeVar("T")


def _williams(n: int) -> list[list[int]]:
    """The rows of a Williams design for ``n`` items (n rows if even, 2n if odd)."""
    first = [0]
    low, high = 1, n - 1
    while len(first) < n:
        first.append(low)
        low += 1
        if len(first) < n:
            first.append(high)
            high -= 1
    rows = [[(v + i) % n for v in first] for i in range(n)]
    if n % 2:
        rows += [row[::-1] for row in rows]
    return rows


def cycle_length(n: int) -> int:
    """Repetitions after which position and predecessor are both balanced."""
    return len(_williams(n)) if n > 1 else 1


def balanced_reps(n: int, at_least: int) -> int:
    """The fewest repetitions >= ``at_least`` that put each of ``n`` contenders first
    equally often (a multiple of ``n``)."""
    if n < 1 or at_least < 1:
        raise ValueError("need at least one contender and one repetition")
    return n * math.ceil(at_least / n)


def balanced_orders(items: Sequence[T], reps: int) -> list[list[T]]:
    """One order of ``items`` per repetition, from a Williams design.

    With ``reps`` a multiple of ``len(items)`` each item is first (and in every other
    position) equally often; with a multiple of `cycle_length` each also follows every
    other item equally often.
    """
    if not items:
        return [[] for _ in range(reps)]
    rows = _williams(len(items))
    return [[items[i] for i in rows[rep % len(rows)]] for rep in range(reps)]


def spread(values: Sequence[float]) -> dict[str, float] | None:
    """median, min, max, quartiles (q1, q3; inclusive method) and count; None if empty."""
    data = sorted(values)
    if not data:
        return None
    if len(data) > 1:
        q1, _, q3 = statistics.quantiles(data, n=4, method="inclusive")
    else:
        q1 = q3 = data[0]
    return {
        "median": statistics.median(data),
        "min": data[0],
        "max": data[-1],
        "q1": q1,
        "q3": q3,
        "n": float(len(data)),
    }
