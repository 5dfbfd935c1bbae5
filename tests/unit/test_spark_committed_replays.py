"""A read_committed task's replays of transactions begun before its range: the stretch
from the earliest one open at the start is read once and serves every producer's."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, cast

import pytest

from liftbridge_client.exactly_once.sequencer import PartitionRef, ProducerState
from liftbridge_client.models import Message
from liftbridge_client.spark import _committed
from liftbridge_client.spark._offsets import PartitionRange
from liftbridge_client.spark._runtime import TaskRuntime

REF = PartitionRef("s", 0)


class Runtime:
    client = object()

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run(coro)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    calls: list[tuple[int, int]] = []

    async def read_range(
        client: object, stream: str, partition: int, begin: int, end: int
    ) -> list[Message]:
        calls.append((begin, end))
        return [Message(stream, partition, o, b"%d" % o) for o in range(begin, end)]

    monkeypatch.setattr(_committed, "read_range", read_range)
    return calls


def state(producer: int, begin: int) -> ProducerState:
    return ProducerState(REF, bytes([1, producer, 0, 0, 0, 0]), 100, begin)


def earlier(states: list[ProducerState]) -> Any:
    return _committed._Earlier(cast(TaskRuntime, Runtime()), PartitionRange("s", 0, 50, 90), states)


def test_replays_from_before_the_range_read_the_stretch_once(reads: list[tuple[int, int]]) -> None:
    replays = earlier([state(1, 10), state(2, 20), state(3, 30), state(4, -1)])
    assert [m.offset for m in replays.replay(20, 50)] == list(range(20, 50))
    assert [m.offset for m in replays.replay(10, 50)] == list(range(10, 50))
    assert [m.offset for m in replays.replay(30, 55)] == list(range(30, 55))
    # Each offset before the range once, only as far back as a replay asked; [50, 55):
    # the ring had overflowed into the range.
    assert reads == [(20, 50), (10, 20), (50, 55)]


def test_a_transaction_left_open_costs_no_read_until_it_commits(
    reads: list[tuple[int, int]],
) -> None:
    # Producer 1's transaction opened at 0 and never ends (its producer died): the
    # replays of the others read from where theirs began, not from 0.
    replays = earlier([state(1, 0), state(2, 40), state(3, 45)])
    assert [m.offset for m in replays.replay(45, 50)] == list(range(45, 50))
    assert [m.offset for m in replays.replay(40, 52)] == list(range(40, 52))
    assert reads == [(45, 50), (40, 45), (50, 52)]


def test_replays_inside_the_range_are_read_as_asked(reads: list[tuple[int, int]]) -> None:
    replays = earlier([state(1, -1)])
    assert [m.offset for m in replays.replay(60, 70)] == list(range(60, 70))
    assert reads == [(60, 70)]
