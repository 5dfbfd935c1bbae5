"""The read counts a task appends to ``taskStatsFile``: one JSON line per task, whole
even when tasks in several processes append at once."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

from liftbridge_client.models import Message
from liftbridge_client.spark._offsets import PartitionRange
from liftbridge_client.spark._stats import ReadStats


def _task(path: str, index: int) -> None:
    for n in range(200):
        stats = ReadStats.of(PartitionRange("s", index, n, n + 1), "read_uncommitted")
        stats.ranged([Message("s", index, n, b"x" * 300, key=b"k")])
        stats.write(path)


def test_counts_what_was_read_for_the_range_and_again() -> None:
    stats = ReadStats.of(PartitionRange("s", 1, 10, 14), "read_committed")
    stats.ranged([Message("s", 1, o, b"abc", key=b"kk") for o in range(10, 14)])
    stats.reread([Message("s", 1, o, b"abcd") for o in range(5, 10)])
    stats.reread([])
    assert (stats.messages, stats.bytes) == (4, 20)
    assert (stats.reread_messages, stats.reread_bytes, stats.reads) == (5, 20, 3)


def test_lines_of_concurrent_tasks_stay_whole(tmp_path: Path) -> None:
    path = str(tmp_path / "stats.jsonl")
    procs = [multiprocessing.Process(target=_task, args=(path, i)) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    lines = [json.loads(line) for line in Path(path).read_text().splitlines()]
    assert len(lines) == 800
    assert {(d["partition"], d["start"]) for d in lines} == {
        (i, n) for i in range(4) for n in range(200)
    }
    assert all(d["bytes"] == 301 and d["messages"] == 1 for d in lines)
