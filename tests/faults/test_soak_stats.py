"""The soak's arithmetic and bookkeeping on synthetic samples (no servers)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from faults.soak_client import ACKED, CONSUMED, Ledger
from faults.soak_stats import (
    MIN_TREND_MINUTES,
    THRESHOLDS,
    failures,
    interval_table,
    merge_servers,
    percentile,
    slope,
    trend,
)


def series(minutes: float, every_s: float, metric: str, f: Any) -> list[dict[str, Any]]:
    """Samples every ``every_s`` seconds for ``minutes``, ``metric`` = f(minute)."""
    count = int(minutes * 60 / every_s)
    return [
        {"t": i * every_s, "wall": 1000.0 + i * every_s, metric: f(i * every_s / 60)}
        for i in range(1, count + 1)
    ]


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(100, 0, -1)]  # order does not matter
    assert percentile(values, 50) == 50
    assert percentile(values, 99) == 99
    assert percentile(values, 100) == 100
    assert percentile([7.0], 99) == 7
    assert percentile([], 99) is None
    with pytest.raises(ValueError, match="out of"):
        percentile(values, 0)


def test_slope_is_least_squares() -> None:
    assert slope([(x, 2 * x + 1) for x in range(10)]) == pytest.approx(2)
    assert slope([(x, 5.0) for x in range(10)]) == 0
    # Symmetric noise around a flat line has no slope.
    assert slope([(x, 5.0 + (-1) ** x) for x in range(10)]) == pytest.approx(-1 / 8.25, abs=0.2)
    assert slope([(1.0, 1.0)]) is None
    assert slope([(1.0, 1.0), (1.0, 2.0)]) is None


def test_a_leak_in_the_second_half_is_flagged() -> None:
    # Flat for 15 min, then 1 MiB/min: the judged half sees the growth.
    samples = series(30, 30, "rss_mib", lambda m: 50 + max(0.0, m - 15))
    found = trend(samples, "rss_mib")
    assert found.per_min == pytest.approx(1.0, rel=0.05)
    assert found.judged
    assert found.flagged
    assert found.minutes >= MIN_TREND_MINUTES


def test_warm_up_growth_is_not_judged() -> None:
    # 30 MiB during the first 10 min (caches, pools, the reader's ring), flat after.
    samples = series(30, 30, "rss_mib", lambda m: 50 + min(3 * m, 30.0))
    found = trend(samples, "rss_mib")
    assert found.per_min == pytest.approx(0.0, abs=1e-9)
    assert found.judged
    assert not found.flagged
    # Judged over the whole run, the same line would have failed.
    assert trend(samples, "rss_mib", warmup=0.0).flagged


def test_one_descriptor_per_fault_is_a_leak_and_one_spike_is_not() -> None:
    # A fault every 75 s leaving one descriptor behind: 0.8/min.
    leaking = series(30, 30, "fds", lambda m: 20 + math.floor(m * 60 / 75))
    assert trend(leaking, "fds").flagged
    # Tasks up by 10 in one sample taken during a failover, back to normal after.
    spiky = series(30, 30, "tasks", lambda m: 40 if 22.0 <= m < 22.5 else 30)
    found = trend(spiky, "tasks")
    assert found.per_min is not None
    assert abs(found.per_min) < THRESHOLDS["tasks"]
    assert not found.flagged


def test_a_short_run_reports_without_judging() -> None:
    samples = series(1, 5, "rss_mib", lambda m: 50 + 10 * m)  # 10 MiB/min, but 1 minute
    found = trend(samples, "rss_mib")
    assert found.per_min == pytest.approx(10)
    assert not found.judged
    assert not found.flagged
    assert "not judged" in found.describe()


def test_latency_is_reported_not_judged() -> None:
    samples = series(30, 30, "lat_p99_ms", lambda m: 10 * m)
    found = trend(samples, "lat_p99_ms")
    assert found.threshold is None
    assert not found.flagged


def test_failures_name_each_failed_end_check() -> None:
    good = {"lost": 0, "pending_after_close": 0, "tasks_after_close": [], "eo_lost": 0}
    assert failures([], good) == []
    assert failures([], None) == ["the client process left no final report"]
    bad = {
        **good,
        "lost": 3,
        "pending_after_close": 2,
        "tasks_after_close": ["Reader._run"],
        "eo_duplicates": 1,
    }
    why = failures([], bad)
    assert len(why) == 4
    assert any("3 acked" in w for w in why)
    assert any("Reader._run" in w for w in why)
    leak = trend(series(30, 30, "fds", lambda m: 20 + m), "fds")
    assert failures([leak], good) == [f"fds grows {leak.per_min:+.3f}/min"]


def test_merge_takes_the_nearest_server_sample_and_the_table_condenses() -> None:
    client = [
        {"t": 30.0 * i, "wall": 100.0 + 30 * i, "rss_mib": 50.0, "lat_p99_ms": None}
        for i in range(1, 7)
    ]
    servers = [
        {"wall": 131.0, "servers": {"n1": {"rss_mib": 30.0, "fds": 20}}, "fault": ""},
        {"wall": 189.0, "servers": {"n1": {"rss_mib": None, "fds": None}}, "fault": "kill"},
    ]
    rows = merge_servers(client, servers)
    assert [r["fault"] for r in rows] == ["", "", "kill", "kill", "kill", "kill"]
    lines = interval_table(rows, every=4)
    body = lines[2:]
    assert len(body) == 3  # rows 0 and 4, and the last one
    assert [line.split("|")[1].strip() for line in body] == ["0.5", "2.5", "3.0"]
    assert "| - |" in body[-1]  # no latency, a node down


def test_ledger_marks_values_and_lists_the_missing() -> None:
    ledger = Ledger("w", 2)
    for worker in (0, 1):
        ledger.next[worker] = Ledger.CHUNK + 5  # past the first chunk: it grows
        for n in range(Ledger.CHUNK + 5):
            ledger.mark(worker, n, ACKED)
    assert ledger.parse(ledger.value(1, 7).encode()) == (1, 7)
    assert ledger.parse(b"w9-0000001") is None  # no such worker
    assert ledger.parse(b"e0-0000001") is None
    for worker in (0, 1):
        for n in range(Ledger.CHUNK + 5):
            if (worker, n) != (1, Ledger.CHUNK + 2):
                assert not ledger.mark(worker, n, CONSUMED)
    assert ledger.mark(0, 3, CONSUMED)  # consumed twice
    assert ledger.missing(CONSUMED) == [(1, Ledger.CHUNK + 2)]
    assert ledger.count(ACKED) == 2 * (Ledger.CHUNK + 5)
