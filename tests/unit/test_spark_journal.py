"""The exactly-once write's journal with records larger than a message: parts, copies of a
part, a driver that died while appending them (no server: an in-memory journal)."""

from __future__ import annotations

import asyncio
import os
from types import SimpleNamespace
from typing import Any, cast

import pytest
from sink_model import ListSubscription

from liftbridge_client import errors
from liftbridge_client.client import Client
from liftbridge_client.exactly_once.publisher import AckIntent
from liftbridge_client.models import Message
from liftbridge_client.spark import _journal
from liftbridge_client.spark._journal import PART_BYTES, Record, journal_stream, plan_commit

WRITE = "query-9"
LARGE = 3000  # intents: several parts of `SMALL_PARTS` bytes
SMALL_PARTS = 16 * 1024


@pytest.fixture(autouse=True)
def small_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    # Parts of 16 KiB, so that thousands of intents (not tens of thousands) need several.
    monkeypatch.setattr(_journal, "PART_BYTES", SMALL_PARTS)


def intents(count: int, tag: int = 0) -> tuple[AckIntent, ...]:
    # Random UUIDs, as the sink's producers have: they compress least.
    return tuple(AckIntent(f"orders-{i % 7}-{tag}", i % 32, os.urandom(16)) for i in range(count))


class Journal:
    """One journal stream in memory; ``copy`` stores the n-th publish twice (a retried
    append that had landed), ``die`` fails the n-th publish for good."""

    def __init__(self) -> None:
        self.log: list[bytes] = []
        self.publishes = 0
        self.copy: int | None = None
        self.die: int | None = None

    async def fetch_metadata(self, stream: str | None = None) -> Any:
        return SimpleNamespace(streams={journal_stream(WRITE): None}, brokers={"b": None})

    async def create_stream(self, *args: Any, **kw: Any) -> None:
        return None

    async def fetch_partition_metadata(self, stream: str, partition: int) -> Any:
        return SimpleNamespace(high_watermark=len(self.log) - 1)

    def subscribe(self, stream: str, partition: int, **kw: Any) -> Any:
        stop = min(kw["stop_offset"] + 1, len(self.log))
        return ListSubscription(
            [Message(stream, 0, o, self.log[o]) for o in range(kw["start_offset"], stop)]
        )

    async def publish(self, stream: str, value: bytes, **kw: Any) -> None:
        n, self.publishes = self.publishes, self.publishes + 1
        if n == self.die:
            raise errors.InvalidInputError("the driver dies here")  # not retried
        self.log.append(value)
        if n == self.copy:
            self.log.append(value)

    def commit(self, batch: int, these: tuple[AckIntent, ...]) -> list[AckIntent]:
        return asyncio.run(plan_commit(cast(Client, self), WRITE, batch, these))

    def newest(self) -> Record | None:
        return asyncio.run(_journal.newest(cast(Client, self), journal_stream(WRITE)))


def test_a_large_record_splits_into_parts_under_the_bound_and_back() -> None:
    # The real bound: a batch of 60,000 intents with random UUIDs needs several messages.
    assert len(Record(WRITE, 1, intents(60_000)).encode()) > PART_BYTES
    record = Record(WRITE, 3, intents(LARGE))
    parts = record.split()
    assert len(parts) > 1
    assert all(len(p) <= SMALL_PARTS for p in parts)
    decoded = [Record.decode(p) for p in parts]
    assert [d.part for d in decoded] == list(range(len(parts)))
    assert {(d.parts, d.nonce, d.batch) for d in decoded} == {(len(parts), decoded[0].nonce, 3)}
    assert tuple(i for d in decoded for i in d.intents) == record.intents
    small = Record(WRITE, 3, intents(10))
    assert [Record.decode(p) for p in small.split()] == [small]  # one message, no parts
    with pytest.raises(errors.MessageTooLargeError):
        Record(WRITE, 1, (AckIntent("s", 0, bytes(16), os.urandom(2000)),)).split(limit=1000)


def test_a_replay_finds_a_large_record_whole_even_with_a_copied_part() -> None:
    journal = Journal()
    first = intents(LARGE)
    journal.copy = 1  # the second part lands twice
    assert journal.commit(5, first) == list(first)
    parts = len(Record(WRITE, 5, first).split())
    assert len(journal.log) == parts + 1
    found = journal.newest()
    assert found is not None
    assert (found.batch, found.intents) == (5, first)
    # The replay of batch 5 writes what was recorded, and rolls its own producers back.
    again = intents(3, tag=1)
    planned = journal.commit(5, again)
    assert planned[: len(first)] == list(first)
    assert {(i.stream, i.partition) for i in planned[len(first) :]} == {
        (i.stream, i.partition) for i in again
    }
    assert len(journal.log) == parts + 1  # nothing appended


def test_a_record_cut_short_while_appended_is_no_record() -> None:
    journal = Journal()
    journal.commit(1, intents(5))  # batch 1, whole, in one message
    journal.die = 2  # batch 2's third part never lands: the driver died
    second = intents(LARGE, tag=2)
    with pytest.raises(errors.InvalidInputError):
        journal.commit(2, second)
    assert journal.newest() is None  # no intent of batch 2 was written
    journal.die = None
    third = intents(LARGE, tag=3)  # the replay of batch 2, with producers of its own
    assert journal.commit(2, third) == list(third)
    found = journal.newest()
    assert found is not None
    assert (found.batch, found.intents) == (2, third)


def test_parts_missing_before_the_last_are_refused() -> None:
    journal = Journal()
    parts = Record(WRITE, 4, intents(LARGE)).split()
    journal.log = [parts[0], *parts[2:]]  # a part gone: never written so, refused loudly
    with pytest.raises(errors.PayloadDecodeError, match="parts of the newest record"):
        journal.newest()
