"""The benchmark suite's pure helpers: percentiles, ratios, baselines, targets, formatting."""

from __future__ import annotations

import math
from typing import Any

import pytest

from bench import report
from bench.stats import (
    format_number,
    format_ratio,
    mb_per_s,
    per_second,
    percentile,
    ratio,
    summarize_latencies,
    target_status,
)


def test_percentile_interpolates_like_numpy_linear() -> None:
    data = [1.0, 2.0, 3.0, 4.0]
    assert percentile(data, 0) == 1.0
    assert percentile(data, 100) == 4.0
    assert percentile(data, 50) == 2.5
    assert percentile(data, 25) == pytest.approx(1.75)
    assert percentile([7.0], 99.9) == 7.0


def test_percentile_rejects_empty_and_out_of_range() -> None:
    with pytest.raises(ValueError, match="empty"):
        percentile([], 50)
    with pytest.raises(ValueError, match=r"0\.\.100"):
        percentile([1.0], 101)


def test_summarize_latencies() -> None:
    summary = summarize_latencies(float(v) for v in range(1, 1001))
    assert summary["count"] == 1000
    assert summary["min"] == 1.0
    assert summary["max"] == 1000.0
    assert summary["mean"] == pytest.approx(500.5)
    assert summary["p50"] == pytest.approx(500.5)
    assert summary["p99.9"] == pytest.approx(999.001)
    assert summarize_latencies([]) == {}


def test_rates_and_ratios() -> None:
    assert per_second(1000, 0.5) == 2000.0
    assert per_second(10, 0.0) == 0.0
    assert mb_per_s(1000, 1000, 1.0) == 1.0
    assert ratio(80.0, 100.0) == pytest.approx(0.8)
    assert ratio(None, 1.0) is None
    assert ratio(1.0, None) is None
    assert ratio(1.0, 0.0) is None
    assert ratio(1.0, math.nan) is None


def test_target_status() -> None:
    assert target_status(0.8, 0.8) == "met"
    assert target_status(0.79, 0.8) == "missed"
    assert target_status(1.5, 1.5, higher_is_better=False) == "met"
    assert target_status(1.6, 1.5, higher_is_better=False) == "missed"
    assert target_status(None, 1.0) == "n/a"


def test_formatting() -> None:
    assert format_number(None) == "-"
    assert format_number(1_234_567.0) == "1.23M"
    assert format_number(29_187.0) == "29.2k"
    assert format_number(2374.4) == "2374"
    assert format_number(0.8123) == "0.812"
    assert format_ratio(None) == "-"
    assert format_ratio(1.234) == "1.23x"


def _pub(client: str, mode: str, rate: float, p50: float = 0.0, **kw: Any) -> dict[str, Any]:
    record = {
        "kind": "publish",
        "client": client,
        "mode": mode,
        "size": 256,
        "partitions": 1,
        "ack": "LEADER",
        "ok": True,
        "msgs_per_s": rate,
        "latency_us": {"p50": p50, "p99": p50 * 3},
    }
    record.update(kw)
    return record


RECORDS: list[dict[str, Any]] = [
    _pub("go-liftbridge", "sync", 2000.0, p50=400.0),
    _pub("go-liftbridge", "batch-100", 20000.0),
    _pub("go-liftbridge", "batch-100", 99999.0, size=1024),
    _pub("liftbridge-client", "nats-pipelined", 30000.0),
    _pub("liftbridge-client", "nats-one", 1500.0, p50=500.0),
    _pub("gufo-liftbridge", "publish_bulk", 5000.0),
    _pub("gufo-liftbridge", "publish", 1000.0),
    {"kind": "subscribe", "client": "go-liftbridge", "mode": "earliest", "ok": True,
     "size": 256, "partitions": 1, "msgs_per_s": 50000.0},
    {"kind": "subscribe", "client": "liftbridge-client", "mode": "earliest", "ok": True,
     "size": 256, "partitions": 1, "msgs_per_s": 45000.0},
    _pub("go-liftbridge", "go-async", 25000.0),  # the pipelined anchor
]  # fmt: skip


def test_baseline_matches_mode_and_config() -> None:
    pipelined = report.baseline_for(RECORDS[3], RECORDS)
    assert pipelined is not None
    assert pipelined["mode"] == "go-async"
    assert pipelined["size"] == 256
    one = report.baseline_for(RECORDS[4], RECORDS)
    assert one is not None
    assert one["mode"] == "sync"
    gufo_unary = report.baseline_for(RECORDS[6], RECORDS)
    assert gufo_unary is not None
    assert gufo_unary["mode"] == "sync"
    assert report.baseline_for({"kind": "resources"}, RECORDS) is None


def test_failed_go_run_is_no_baseline() -> None:
    records = [_pub("go-liftbridge", "go-async", 1.0, ok=False), RECORDS[3]]
    assert report.baseline_for(RECORDS[3], records) is None


def test_targets() -> None:
    rows = {row["target"]: row for row in report.targets(RECORDS)}
    nats = rows["pipelined NATS publish vs go-async"]
    assert nats["value"] == pytest.approx(1.2)
    assert nats["status"] == "met"
    gufo = rows["pipelined NATS publish vs gufo's best"]
    assert gufo["value"] == pytest.approx(6.0)
    assert gufo["status"] == "met"
    p50 = rows["one-at-a-time p50 (nats-one) vs go synchronous p50"]
    assert p50["value"] == pytest.approx(1.25)
    assert p50["status"] != "met"  # the goal is <= 1.0x go
    sub = rows["subscribe from EARLIEST (earliest) vs go"]
    assert sub["value"] == pytest.approx(0.9)
    assert sub["status"] != "met"  # the goal is >= 1.0x go


def test_markdown_has_ratios_and_failures() -> None:
    failed = _pub("liftbridge-client", "grpc-pipelined", 0.0, ok=False, problem="3 of 5 acked")
    text = report.markdown({"records": [*RECORDS, failed], "failures": [failed]}, None)
    assert "1.20x (go-async)" in text
    assert "FAILED: 3 of 5 acked" in text
    assert "## Targets" in text


def test_ratios_are_taken_within_each_repetition_and_goals_print_last() -> None:
    from bench import ratio_report

    def rec(group: str, name: str, rep: int, rate: float, p50: float | None = None) -> Any:
        r = {"group": group, "name": name, "rep": rep, "msgs_per_s": rate, "server_cpu_us": 1.0}
        if p50 is not None:
            r["p50_us"] = p50
        return r

    records = [
        rec("publish", "go-async", 0, 100.0),
        rec("publish", "ours-nats", 0, 50.0),
        rec("publish", "go-async", 1, 10.0),  # a loaded repetition: both slow
        rec("publish", "ours-nats", 1, 20.0),
        rec("one", "go-sync", 0, 1.0, p50=100.0),
        rec("one", "ours-nats", 0, 1.0, p50=90.0),
    ]
    results = {
        "records": records,
        "plan": {"phase_s": 3.0},
        "load_average": {"before": "1", "after": "1"},
    }
    rows = ratio_report.ratio_rows(results)
    by_title = {r["title"]: r for r in rows}
    nats = by_title["pipelined publish, NATS / go-async"]
    assert (nats["spread"]["min"], nats["spread"]["max"]) == (0.5, 2.0)  # per repetition
    assert nats["spread"]["median"] == pytest.approx(1.25)
    assert nats["met"] is True
    p50 = by_title["one-at-a-time p50, NATS / go sync"]
    assert p50["spread"]["median"] == pytest.approx(0.9)
    assert p50["met"] is True  # lower is better
    assert "subscribe, h2 / go consumer" not in by_title  # not measured: no row
    text = ratio_report.summarize({**results, "ratios": rows})
    goals = text.split("the goals")[1]
    assert "NATS / go-async" in goals
    assert "goal >= 1.0x: met" in goals


def test_the_ratios_block_is_spliced_and_kept() -> None:
    from bench import ratio_report as ratios

    block = f"{ratios.BLOCK_START}\nnew\n{ratios.BLOCK_END}"
    page = "# Benchmarks\n\nintro\n\n## Machine and versions\n\nx\n"
    once = ratios.splice(page, block)
    assert once.index("new") < once.index("## Machine and versions")
    again = ratios.splice(once, block.replace("new", "newer"))
    assert "newer" in again
    assert "\nnew\n" not in again
    assert ratios.existing_block(again) == block.replace("new", "newer")
