"""The ratio benchmark's pure parts: balanced orders, spreads, ratio series, the per-commit
summary and the comparison of two trees (no server; records are made up)."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import uvloop

from bench import ratio_report
from bench.order import balanced_orders, balanced_reps, cycle_length, spread
from bench.proc import loop_runner
from bench.ratio_report import RATIOS
from bench.ratios import RatioPlan, contenders_for, phase_count


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 7])
def test_every_contender_runs_in_every_position_equally_often(n: int) -> None:
    items = [f"c{i}" for i in range(n)]
    orders = balanced_orders(items, balanced_reps(n, 1))
    assert len(orders) == n
    for order in orders:
        assert sorted(order) == items
    for position in range(n):
        assert Counter(order[position] for order in orders) == dict.fromkeys(items, 1)


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6])
def test_over_a_full_cycle_each_contender_follows_every_other_equally_often(n: int) -> None:
    items = list(range(n))
    orders = balanced_orders(items, cycle_length(n))
    follows = Counter((a, b) for order in orders for a, b in itertools.pairwise(order))
    expected = set(itertools.permutations(items, 2))
    assert set(follows) == expected
    assert len(set(follows.values())) == 1  # every ordered pair equally often


def test_a_plain_rotation_is_not_predecessor_balanced_but_a_williams_design_is() -> None:
    # The old bench rotated: c0 c1 c2, c1 c2 c0, c2 c0 c1; c1 then always followed c0.
    rotation = [[0, 1, 2], [1, 2, 0], [2, 0, 1]]
    rotated = Counter((a, b) for order in rotation for a, b in itertools.pairwise(order))
    assert rotated[(1, 0)] == 0
    orders = balanced_orders([0, 1, 2], 6)
    follows = Counter((a, b) for order in orders for a, b in itertools.pairwise(order))
    assert follows[(1, 0)] == follows[(0, 1)] == 2


def test_balanced_reps_rounds_up_to_a_multiple_of_the_contenders() -> None:
    assert balanced_reps(3, 5) == 6
    assert balanced_reps(2, 5) == 6
    assert balanced_reps(5, 5) == 5
    assert balanced_reps(3, 1) == 3
    with pytest.raises(ValueError, match="at least one"):
        balanced_reps(0, 3)


def test_spread() -> None:
    stats = spread([5.0, 1.0, 3.0, 2.0, 4.0])
    assert stats == {"median": 3.0, "min": 1.0, "max": 5.0, "q1": 2.0, "q3": 4.0, "n": 5.0}
    single = spread([7.0])
    assert single is not None
    assert single["q1"] == single["q3"] == single["median"] == 7.0
    assert spread([]) is None


def test_phase_count_gives_phases_of_the_planned_length() -> None:
    assert phase_count(50_000.0, 3.0, "publish", False) == 150_000
    assert phase_count(3_333.0, 3.0, "one", False) == 10_000  # rounded up to 100s
    assert phase_count(None, 3.0, "publish", False) == 20_000  # the warm-up count
    assert phase_count(1_000.0, 3.0, "publish", True) == 3_000  # never below the warm-up


def test_the_quick_plan_has_the_goal_contenders_and_the_full_plan_the_side_ones() -> None:
    quick = {(c.group, c.name) for c in contenders_for(RatioPlan.quick())}
    assert quick == {
        ("publish", "go-async"),
        ("publish", "ours-nats"),
        ("publish", "ours-grpc-h2"),
        ("subscribe", "go-consumer"),
        ("subscribe", "ours-h2"),
        ("one", "go-sync"),
        ("one", "ours-nats"),
        ("one", "ours-grpc-h2"),
    }
    full = {c.name for c in contenders_for(RatioPlan.full())}
    assert {"go-batch-100", "ours-grpc-aio", "ours-nats-uvloop", "ours-grpc-h2-uvloop"} <= full


def test_uvloop_contenders_join_any_plan_that_asks_and_run_on_uvloop() -> None:
    plan = dataclasses.replace(RatioPlan.quick(), uvloop=True)
    uv = [c for c in contenders_for(plan) if c.name.endswith("-uvloop")]
    assert [c.name for c in uv] == ["ours-nats-uvloop", "ours-grpc-h2-uvloop"]
    assert all(c.group == "publish" and c.task and c.task["loop"] == "uvloop" for c in uv)
    assert loop_runner(uv[0].task or {}) is uvloop.run
    assert loop_runner({}) is asyncio.run
    with pytest.raises(SystemExit, match="unknown loop"):
        loop_runner({"loop": "trio"})
    # Each has its ratios to go-async (rate and CPU), outside the goals.
    keys = {r.key: r for r in RATIOS if r.ours in {c.name for c in uv}}
    assert set(keys) == {
        "publish.nats.uvloop",
        "publish.h2.uvloop",
        "cpu.publish.nats.uvloop",
        "cpu.publish.h2.uvloop",
    }
    assert not any(r.goal for r in keys.values())


def test_two_trees_duplicate_this_clients_contenders_only(tmp_path: Path) -> None:
    trees = {"A": tmp_path / "a", "B": tmp_path / "b"}
    cs = contenders_for(RatioPlan.full(), trees)
    names = [c.name for c in cs if c.group == "publish"]
    assert names == [
        "go-async",
        "ours-nats@A",
        "ours-nats@B",
        "ours-grpc-h2@A",
        "ours-grpc-h2@B",
        "go-batch-100",
    ]
    assert {c.lib for c in cs if c.name.endswith("@B")} == {trees["B"]}


def _rec(group: str, name: str, rep: int, position: int, **fields: float) -> dict[str, Any]:
    return {"group": group, "name": name, "rep": rep, "position": position, **fields}


def _results(records: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "started": "2026-11-28T04:00:00+00:00",
        "plan": {"name": "quick", "phase_s": 3.0, "size": 256},
        "reps": {"publish": 2},
        "seconds": 200.4,
        "load_average": {"before": "1 1 1", "after": "2 2 2"},
        "machine": {"cpu_model": "x", "nproc": 2},
        "server": {"liftbridge": "v1.9.0"},
        "window": 4096,
        "commit": {"sha": "0123456789abcdef0123", "dirty": False},
        "records": records,
        **extra,
    }


def test_ratios_are_taken_within_a_repetition_and_split_by_who_ran_first() -> None:
    records = [
        _rec("publish", "go-async", -1, 0, msgs_per_s=1.0),  # warm-up: never counted
        _rec("publish", "ours-nats", -1, 0, msgs_per_s=100.0),
        _rec("publish", "go-async", 0, 0, msgs_per_s=100.0, client_cpu_us=10.0),
        _rec("publish", "ours-nats", 0, 1, msgs_per_s=80.0, client_cpu_us=12.0),
        _rec("publish", "ours-nats", 1, 0, msgs_per_s=90.0, client_cpu_us=11.0),
        _rec("publish", "go-async", 1, 1, msgs_per_s=60.0, client_cpu_us=10.0),
    ]
    rows = {row["key"]: row for row in ratio_report.ratio_rows(_results(records))}
    rate = rows["publish.nats"]
    assert sorted(rate["values"]) == [0.8, 1.5]
    assert rate["ours_first_median"] == 1.5
    assert rate["anchor_first_median"] == 0.8
    assert rate["spread"]["median"] == pytest.approx(1.15)
    assert rate["met"] is True
    cpu = rows["cpu.publish.nats"]
    assert sorted(cpu["values"]) == [1.1, 1.2]
    assert cpu["met"] is False  # lower is better: 1.15x of go's CPU misses <= 1.0
    assert "publish.h2" not in rows  # no such contender in the run


def test_two_trees_give_each_trees_ratio_and_the_ratio_of_ratios() -> None:
    records = []
    for rep, (go, a, b) in enumerate([(100.0, 80.0, 88.0), (50.0, 45.0, 54.0)]):
        records += [
            _rec("publish", "go-async", rep, 0, msgs_per_s=go),
            _rec("publish", "ours-nats@A", rep, 1, msgs_per_s=a),
            _rec("publish", "ours-nats@B", rep, 2, msgs_per_s=b),
        ]
    results = _results(records, trees={"A": "/a", "B": "/b"})
    rows = {row["key"]: row for row in ratio_report.ratio_rows(results)}
    assert rows["publish.nats@A"]["values"] == pytest.approx([0.8, 0.9])
    assert rows["publish.nats@B"]["values"] == pytest.approx([0.88, 1.08])
    assert rows["publish.nats:B/A"]["values"] == pytest.approx([1.1, 1.2])
    assert rows["publish.nats:B/A"]["goal"] is False
    text = ratio_report.summarize({**results, "ratios": list(rows.values())})
    assert "pipelined publish, NATS / go-async: B / A" in text


def test_the_summary_is_small_and_appends_runs_per_commit(tmp_path: Path) -> None:
    records = [
        _rec("publish", "go-async", rep, rep, msgs_per_s=100.0 + rep, seconds=3.0, **{
            "client_cpu_us": 10.0, "server_cpu_us": 20.0})
        for rep in range(2)
    ] + [
        _rec("publish", "ours-nats", rep, 1 - rep, msgs_per_s=90.0, seconds=3.3, **{
            "client_cpu_us": 12.0, "server_cpu_us": 15.0})
        for rep in range(2)
    ]  # fmt: skip
    results = _results(records)
    results["ratios"] = ratio_report.ratio_rows(results)
    path = ratio_report.save_summary(results, tmp_path)
    assert path.name == "0123456789ab.json"
    ratio_report.save_summary(results, tmp_path)
    data = json.loads(path.read_text())
    assert data["commit"] == "0123456789abcdef0123"
    assert len(data["runs"]) == 2
    run = data["runs"][0]
    assert set(run["ratios"]["publish.nats"]) >= {"median", "min", "max", "q1", "q3", "n"}
    assert run["contenders"]["publish/ours-nats"]["client_cpu_us"]["median"] == 12.0
    assert "records" not in run
    assert len(path.read_text()) < 8_000
    dirty = {**results, "commit": {"sha": "0123456789abcdef", "dirty": True}}
    assert ratio_report.save_summary(dirty, tmp_path).name == "0123456789ab-dirty.json"


def test_the_docs_block_replaces_itself() -> None:
    records = [
        _rec("one", "go-sync", 0, 0, msgs_per_s=10.0, p50_us=100.0, seconds=3.0),
        _rec("one", "ours-nats", 0, 1, msgs_per_s=11.0, p50_us=90.0, seconds=3.0),
    ]
    results = _results(records, machine={"cpu_model": "x", "nproc": 2})
    results["ratios"] = ratio_report.ratio_rows(results)
    block = ratio_report.markdown(results, None)
    assert block.startswith(ratio_report.BLOCK_START)
    assert block.endswith(ratio_report.BLOCK_END)
    assert "| one-at-a-time p50, NATS / go sync | 0.90x (0.90..0.90) |" in block
    page = "# B\n\nintro\n\n" + block + "\n\n## Machine and versions\n"
    again = ratio_report.splice(page, block.replace("0.90x", "0.91x"))
    assert again.count(ratio_report.BLOCK_START) == 1
    assert "0.91x (0.90..0.90)" in again
    assert again.endswith("## Machine and versions\n")


def test_py_spy_stacks_are_counted_by_leaf_and_anywhere_on_the_stack() -> None:
    from bench.spy import aggregate, package_of

    site = "/v/lib/python3.11/site-packages"
    stacks = [
        f"run (/py/lib/python3.11/asyncio/base_events.py:600);"
        f"send (/w/liftbridge_client/_publish/publisher.py:10);"
        f"publish ({site}/nats/aio/client.py:5) 7",
        "run (/py/lib/python3.11/asyncio/base_events.py:600);"
        "send (/w/liftbridge_client/_publish/publisher.py:10) 3",
        "",
        "<module> (/w/bench/proc.py:1);_find_and_load (<frozen importlib._bootstrap>:1) 50",
    ]
    total, own, inclusive = aggregate(stacks)  # the import's 50 samples left out
    assert total == 10
    assert own == {
        "nats/aio/client.py:5(publish)": 7,
        "liftbridge_client/_publish/publisher.py:10(send)": 3,
    }
    assert inclusive["liftbridge_client/_publish/publisher.py:10(send)"] == 10
    assert inclusive["stdlib/asyncio/base_events.py:600(run)"] == 10
    assert package_of("nats/aio/client.py:5(publish)") == "nats-py"
    assert package_of("stdlib/asyncio/base_events.py:600(run)") == "asyncio (event loop)"


def test_counts_follow_the_machine_when_phases_come_out_far_from_the_plan() -> None:
    from bench.ratios import RatioRun

    plan = RatioPlan.quick()  # phases of 3 s
    cs = contenders_for(plan)
    run = RatioRun(plan, None, None, cs)  # type: ignore[arg-type]  # no server needed
    run.counts = {f"{c.group}/{c.name}": 30_000 for c in cs}
    names = ("go-async", "ours-nats", "ours-grpc-h2")

    def phases(*seconds: float) -> list[dict[str, Any]]:
        return [
            {"name": n, "seconds": s, "problem": None} for n, s in zip(names, seconds, strict=True)
        ]

    run.rescale("publish", phases(1.0, 1.2, 0.9))  # 1 s phases: three times the messages
    assert run.counts["publish/go-async"] == run.counts["publish/ours-nats"] == 90_000
    assert run.counts["one/go-sync"] == 30_000  # other groups keep theirs
    run.rescale("publish", phases(2.5, 5.5, 4.1))  # close enough (up to twice): unchanged
    assert run.counts["publish/ours-grpc-h2"] == 90_000
    run.rescale("publish", phases(60.0, 60.0, 60.0))  # never below the warm-up count
    assert run.counts["publish/go-async"] == 20_000


def test_a_slow_side_contender_is_scaled_by_its_own_phase() -> None:
    from bench.ratios import RatioRun

    plan = RatioPlan.full()  # phases of 4 s; grpc.aio contenders are slow
    cs = [c for c in contenders_for(plan) if c.group == "publish"]
    run = RatioRun(plan, None, None, cs)  # type: ignore[arg-type]  # no server needed
    run.counts = {f"{c.group}/{c.name}": 100_000 for c in cs}
    run.counts["publish/ours-grpc-aio"] = 10_000
    measured = [{"name": c.name, "seconds": 4.0, "problem": None} for c in cs]
    measured[-1] = {"name": "ours-grpc-aio", "seconds": 1.0, "problem": None}
    run.rescale("publish", measured)
    assert run.counts["publish/ours-grpc-aio"] == 30_000  # x4 asked, x3 at most
    assert run.counts["publish/go-async"] == 100_000
