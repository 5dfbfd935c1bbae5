"""The soak machinery end to end, short: one minute, one leader kill (about 70-80 s).

Run by ``make test-faults`` (``pytest tests/faults``), not by ``make test``, which
ignores this file: the full soak is ``make soak`` (docs/testing.md). Checks what a soak
run must always produce, whatever its length: samples of every series, the fault applied
and healed, every acked message consumed (by the subscribers and the group member), the
exactly-once stream without loss or duplicate, nothing pending and no task left after the
client closed. The trends are not judged on a minute (soak_stats.MIN_TREND_MINUTES).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from faults.fault_suite import require_tools
from faults.soak import main
from faults.soak_stats import NOT_JUDGED

pytestmark = pytest.mark.integration


@pytest.mark.timeout(240)
def test_a_one_minute_soak_through_a_leader_kill(tmp_path: Path) -> None:
    require_tools("the soak")
    out = tmp_path / "soak"
    args = ["--minutes", "1", "--interval", "5", "--first", "15", "--fault-s", "8"]
    status = main([*args, "--kinds", "kill-leader", "--rate", "100", "--out", str(out)])
    where = f"report: {out / 'report.md'}; client log: {out / 'client.log'}"
    summary = json.loads((out / "summary.json").read_text())
    final = summary["final"]
    assert final is not None, where
    assert not final.get("crash"), where
    assert summary["faults"] == ["kill-leader"], where
    assert summary["samples"] >= 8, where
    samples = [json.loads(line) for line in (out / "client.jsonl").read_text().splitlines() if line]
    for key in ("rss_mib", "fds", "tasks", "threads", "acked", "consumed"):
        assert all(s.get(key) is not None for s in samples if s["phase"] == "run"), (key, where)
    # No latency in an interval without an ack (the kill), but in most.
    assert sum(s["lat_p99_ms"] is not None for s in samples) > len(samples) / 2, where
    servers = [json.loads(line) for line in (out / "servers.jsonl").read_text().splitlines()]
    assert all(set(s["servers"]) == {"nats", "n1", "n2", "n3"} for s in servers), where
    # A killed node shows as down in at least one sample.
    assert any(v["rss_mib"] is None for s in servers for v in s["servers"].values()), where
    assert final["acked"] > 1000, where
    assert final["lost"] == 0, (final["lost_values"], where)
    assert final["group_missing"] == 0, where
    assert final["eo_acked"] > 0
    assert final["eo_lost"] == 0
    assert final["eo_duplicates"] == 0
    assert final["pending_after_close"] == 0, where
    assert final["tasks_after_close"] == [], where
    # A minute is too short to judge the trends: the end checks pass, the verdict is not
    # reached, and that is no success (soak_stats.verdict).
    assert summary["failures"] == [], (summary["failures"], where)
    assert summary["verdict"] == NOT_JUDGED, where
    assert status == summary["exit_status"] == 3, where
