"""cProfile of one of this client's measurements: the top functions by own time."""

from __future__ import annotations

import cProfile
import pstats
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["profile", "top_costs"]


def top_costs(stats: pstats.Stats, messages: int, limit: int = 15) -> list[dict[str, Any]]:
    """The ``limit`` functions with the most own time, with per-message microseconds."""
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    total = sum(entry[2] for entry in raw.values()) or 1.0
    rows = []
    for (filename, line, name), (_cc, calls, tottime, cumtime, _callers) in raw.items():
        rows.append(
            {
                "function": f"{_short(filename)}:{line}({name})",
                "calls": calls,
                "tottime_s": tottime,
                "cumtime_s": cumtime,
                "share": tottime / total,
                "us_per_msg": tottime / messages * 1e6 if messages else 0.0,
            }
        )
    rows.sort(key=lambda row: row["tottime_s"], reverse=True)
    return rows[:limit]


def _short(filename: str) -> str:
    for marker in ("site-packages/", "liftbridge_client/", "lib/python3"):
        if marker in filename:
            _head, _, tail = filename.partition(marker)
            return (marker if marker == "liftbridge_client/" else "") + tail
    return filename


async def profile(work: Callable[[], Awaitable[dict[str, Any]]], messages: int) -> dict[str, Any]:
    """Run ``work`` under cProfile; its result plus the top costs."""
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        result = await work()
    finally:
        profiler.disable()
    stats = pstats.Stats(profiler)
    total = sum(entry[2] for entry in stats.stats.values())  # type: ignore[attr-defined]
    return {
        "messages": messages,
        "seconds_under_profiler": result.get("seconds"),
        "profiled_cpu_s": total,
        "top": top_costs(stats, messages),
    }
