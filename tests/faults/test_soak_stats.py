"""The soak's arithmetic and bookkeeping on synthetic samples (no servers)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from faults.soak_client import ACKED, CONSUMED, Ledger
from faults.soak_stats import (
    FAIL,
    MIN_TREND_MINUTES,
    NOT_JUDGED,
    PASS,
    THRESHOLDS,
    client_trends,
    failures,
    interval_table,
    merge_servers,
    percentile,
    slope,
    trend,
    verdict,
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


GOOD_END = {"lost": 0, "pending_after_close": 0, "tasks_after_close": [], "eo_lost": 0}


def run_samples(minutes: float, every_s: float, **lines: Any) -> list[dict[str, Any]]:
    """Client samples with every judged series: flat unless ``lines`` gives f(minute)."""
    flat: dict[str, Any] = {
        "rss_mib": lambda m: 55.0,
        "fds": lambda m: 20,
        "tasks": lambda m: 33,
        "threads": lambda m: 9,
        "py_blocks": lambda m: 245_000,
    }
    flat.update(lines)
    count = int(minutes * 60 / every_s)
    return [
        {"t": i * every_s, **{k: f(i * every_s / 60) for k, f in flat.items()}}
        for i in range(1, count + 1)
    ]


def test_a_long_flat_run_passes() -> None:
    # 30 min with warm-up growth in the first 10 (the judged half is flat).
    samples = run_samples(30, 30, rss_mib=lambda m: 50 + min(m, 10.0) * 0.6)
    found = verdict(client_trends(samples), GOOD_END)
    assert found.outcome == PASS
    assert found.exit_status == 0
    assert found.line() == "verdict: PASS"


def test_a_long_run_with_a_growing_series_fails() -> None:
    # One descriptor per fault (a fault every 75 s) over 30 min.
    samples = run_samples(30, 30, fds=lambda m: 20 + math.floor(m * 60 / 75))
    found = verdict(client_trends(samples), GOOD_END)
    assert found.outcome == FAIL
    assert found.exit_status == 1
    assert len(found.reasons) == 1
    assert found.reasons[0].startswith("fds grows +0.8")


def test_a_short_run_is_not_judged_and_no_pass() -> None:
    # The 5-minute soak of issue 30: a judged half of about 2.5 min. Flat or growing, and
    # with its end checks passed, it reaches no verdict; the status is not 0.
    for lines in ({}, {"fds": lambda m: 19 + m}):
        samples = run_samples(5, 10, **lines)
        found = verdict(client_trends(samples), GOOD_END)
        assert found.outcome == NOT_JUDGED, lines
        assert found.exit_status not in (0, 1)
        assert found.line().startswith("verdict: NOT JUDGED: ")
        assert "over 2.5 min" in found.line()
        assert "the end checks passed" in found.line()
    # A failed end check is a verdict, however short the run.
    lost = verdict(client_trends(run_samples(5, 10)), {**GOOD_END, "lost": 2})
    assert lost.outcome == FAIL
    assert lost.reasons == ("2 acked messages never consumed",)
    assert verdict([], None).outcome == FAIL
    # The runner's own failure (passed in as extra) fails too.
    extra = verdict(client_trends(run_samples(30, 30)), GOOD_END, ["the runner ended with 7"])
    assert extra.outcome == FAIL


def test_a_series_without_samples_is_not_judged() -> None:
    samples = run_samples(30, 30)
    for sample in samples:
        del sample["py_blocks"]  # e.g. a client that did not report it
    found = verdict(client_trends(samples), GOOD_END)
    assert found.outcome == NOT_JUDGED
    assert found.reasons[0].startswith("py_blocks not judged")


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
