"""ExactlyOncePublisher's retry and ordering rules, against a stub Client (no IO)."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any, cast

import pytest

from liftbridge_client import Client, RetryPolicy, errors
from liftbridge_client._cluster import metadata as metadata_module
from liftbridge_client.exactly_once import (
    UUID_HEADER,
    Clock,
    Envelope,
    ExactlyOncePublisher,
    Flags,
    PartitionRef,
    QueueOutcome,
    Sequencer,
    intents_from_json,
    intents_to_json,
)
from liftbridge_client.exactly_once.uuids import clock_of, fields_of, flags_of
from liftbridge_client.models import Ack, AckPolicy


class StubClient:
    """Records every publish; fails the attempts listed in ``failures`` (by call number).

    ``listings``: what successive metadata answers list, as {stream: partition count}
    (an Exception is raised instead); the last one repeats. Default: the streams the tests
    use, with 4 partitions."""

    def __init__(
        self,
        failures: Mapping[int, errors.LiftbridgeError] | None = None,
        listings: Sequence[Mapping[str, int] | Exception] = (),
    ) -> None:
        self.failures = dict(failures or {})
        self.calls: list[dict[str, Any]] = []
        self.gate: asyncio.Event | None = None
        self.listings = list(listings)
        self.metadata_calls = 0

    async def fetch_metadata(self, *streams: str) -> Any:
        self.metadata_calls += 1
        listings = self.listings or [dict.fromkeys(("s", "a", "b"), 4)]
        listing = listings[min(self.metadata_calls, len(listings)) - 1]
        if isinstance(listing, Exception):
            raise listing
        return SimpleNamespace(
            streams={
                name: SimpleNamespace(partitions=dict.fromkeys(range(count)))
                for name, count in listing.items()
                if not streams or name in streams
            }
        )

    async def publish(self, stream: str, value: bytes, **kw: Any) -> Ack:
        number = len(self.calls)
        self.calls.append({"stream": stream, "value": value, **kw})
        if self.gate is not None:
            await self.gate.wait()
        if number in self.failures:
            raise self.failures[number]
        return Ack(stream, "", "", number, "", "", AckPolicy.ALL, 0, 0)


FAST = RetryPolicy(attempts=5, initial_backoff=0.0, max_backoff=0.0)


def publisher(stub: StubClient, **kw: Any) -> ExactlyOncePublisher:
    return ExactlyOncePublisher(cast(Client, stub), retry=FAST, **kw)


async def test_a_retry_resends_the_same_uuid_to_the_same_partition() -> None:
    stub = StubClient({0: errors.AckTimeoutError("lost ack"), 1: errors.UnavailableError("x")})
    pub = publisher(stub)
    await pub.publish_committed("s", b"v", partition=3)
    assert len(stub.calls) == 3
    assert pub.retries == 2
    assert len({c["headers"][UUID_HEADER] for c in stub.calls}) == 1
    assert {c["partition"] for c in stub.calls} == {3}
    assert {c["ack_policy"] for c in stub.calls} == {AckPolicy.ALL}


async def test_internal_errors_are_retried_but_other_refusals_are_raised() -> None:
    stub = StubClient({0: errors.InternalServerError("Internal error from Core")})
    await publisher(stub).publish_committed("s", b"v", partition=0)
    assert len(stub.calls) == 2
    refused = StubClient({0: errors.MessageTooLargeError("too big")})
    with pytest.raises(errors.MessageTooLargeError):
        await publisher(refused).publish_committed("s", b"v", partition=0)
    assert len(refused.calls) == 1


async def test_gives_up_after_the_policy_attempts() -> None:
    stub = StubClient({i: errors.AckTimeoutError("lost") for i in range(10)})
    with pytest.raises(errors.AckTimeoutError):
        await publisher(stub).publish_committed("s", b"v", partition=0)
    assert len(stub.calls) == FAST.attempts


async def test_one_message_in_flight_per_partition_in_clock_order() -> None:
    stub = StubClient()
    stub.gate = asyncio.Event()
    pub = publisher(stub)
    tasks = [
        asyncio.create_task(pub.publish_committed("s", b"%d" % i, partition=i % 2))
        for i in range(6)
    ]
    await asyncio.sleep(0.01)
    assert sorted(c["partition"] for c in stub.calls) == [0, 1]  # one per partition
    stub.gate.set()
    await asyncio.gather(*tasks)
    for partition in (0, 1):
        clocks = [
            clock_of(c["headers"][UUID_HEADER]) for c in stub.calls if c["partition"] == partition
        ]
        assert clocks == sorted(clocks)
        assert len(set(clocks)) == 3


async def test_transaction_flags_and_intents() -> None:
    stub = StubClient()
    pub = publisher(stub)
    await pub.publish_uncommitted("a", b"1", partition=0)
    await pub.publish_uncommitted("b", b"2", partition=1)
    await pub.publish_uncommitted("a", b"3", partition=0)
    assert [flags_of(c["headers"][UUID_HEADER]) for c in stub.calls] == [Flags.CONTINUE_TXN] * 3
    intents = pub.build_ack_intents()
    assert [(i.stream, i.partition) for i in intents] == [("a", 0), ("b", 1)]
    last = max(clock_of(c["headers"][UUID_HEADER]) for c in stub.calls)
    for intent in intents:
        producer, clock, flags = fields_of(intent.uuid)
        assert (producer, flags) == (pub.producer, Flags.ACK_TXN)
        assert clock > last
    await pub.write_ack_intents(intents)
    assert [c["value"] for c in stub.calls[3:]] == [b"", b""]
    assert [c["headers"][UUID_HEADER] for c in stub.calls[3:]] == [i.uuid for i in intents]


async def test_reserved_header_and_bad_values_are_refused() -> None:
    pub = publisher(StubClient())
    with pytest.raises(errors.InvalidInputError, match="reserved"):
        await pub.publish_committed("s", b"v", partition=0, headers={UUID_HEADER: b"x"})
    with pytest.raises(errors.InvalidInputError, match="value"):
        await pub.publish_committed("s", "text", partition=0)  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidInputError, match="partition"):
        await pub.publish_committed("s", b"v", partition=-1)


async def test_a_value_function_gets_the_uuid_once_and_retries_resend_its_bytes() -> None:
    stub = StubClient({0: errors.AckTimeoutError("lost ack")})
    pub = publisher(stub)
    seen: list[uuid.UUID] = []

    def value(u: uuid.UUID) -> bytes:
        seen.append(u)
        return b"id=" + u.bytes

    await pub.publish_committed("s", value, partition=0)
    assert len(seen) == 1
    assert [c["value"] for c in stub.calls] == [b"id=" + seen[0].bytes] * 2
    assert stub.calls[0]["headers"][UUID_HEADER] == seen[0].bytes
    with pytest.raises(errors.InvalidInputError, match="return bytes"):
        await pub.publish_committed("s", str, partition=0)  # type: ignore[arg-type]


# ---------------------------------------------------------------- NOT_FOUND

NOT_FOUND = errors.NotFoundError("NOT_FOUND: no such stream: s", details="no such stream: s")
PATIENT = RetryPolicy(attempts=60, initial_backoff=0.0, max_backoff=0.0)


@pytest.fixture
def absence_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Absent answers count without lasting any time (the tests' backoff is zero)."""
    monkeypatch.setattr(metadata_module, "ABSENT_SECONDS", 0.0)


async def test_not_found_from_a_node_that_has_not_loaded_the_stream_is_retried() -> None:
    # A restarted node answers NOT_FOUND until it has reloaded the stream; the metadata
    # lists it all along.
    stub = StubClient({0: NOT_FOUND, 1: NOT_FOUND, 2: NOT_FOUND})
    pub = publisher(stub)
    ack = await pub.publish_uncommitted("s", b"v", partition=1)
    assert ack.offset == 3
    assert len({c["headers"][UUID_HEADER] for c in stub.calls}) == 1
    assert pub.retries == 3
    await pub.write_ack_intents(pub.build_ack_intents())  # intents take the same path


@pytest.mark.usefixtures("absence_at_once")
async def test_a_stream_the_metadata_never_lists_fails_after_a_few_answers() -> None:
    stub = StubClient(dict.fromkeys(range(100), NOT_FOUND), listings=[{}])
    pub = ExactlyOncePublisher(cast(Client, stub), retry=PATIENT)
    with pytest.raises(errors.NotFoundError, match=r"s/0: .*not listed by 3 metadata answers"):
        await pub.publish_committed("s", b"v", partition=0)
    assert len(stub.calls) == 3  # far from the 60 attempts of the budget
    assert stub.metadata_calls == 3


async def test_absence_must_last_a_while_before_the_stream_counts_as_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(metadata_module, "ABSENT_SECONDS", 0.2)
    stub = StubClient(dict.fromkeys(range(1000), NOT_FOUND), listings=[{}])
    steady = RetryPolicy(attempts=1000, initial_backoff=0.01, max_backoff=0.01)
    pub = ExactlyOncePublisher(cast(Client, stub), retry=steady)
    started = time.monotonic()
    with pytest.raises(errors.NotFoundError, match="not listed"):
        await pub.publish_committed("s", b"v", partition=0)
    assert time.monotonic() - started >= 0.2
    assert len(stub.calls) > 3


@pytest.mark.usefixtures("absence_at_once")
async def test_a_partition_the_metadata_does_not_list_fails_the_same_way() -> None:
    stub = StubClient(dict.fromkeys(range(100), NOT_FOUND), listings=[{"s": 2}])
    pub = ExactlyOncePublisher(cast(Client, stub), retry=PATIENT)
    with pytest.raises(errors.NotFoundError, match=r"s/5: .*not listed"):
        await pub.publish_committed("s", b"v", partition=5)
    assert len(stub.calls) == 3


@pytest.mark.usefixtures("absence_at_once")
async def test_a_stream_listed_again_between_absent_answers_is_retried_on() -> None:
    # A restarting broker answering metadata too lists only what it has reloaded: absent
    # answers must come in a row to count.
    absent: dict[str, int] = {}
    listings = [absent, absent, {"s": 1}, absent, absent, {"s": 1}]
    stub = StubClient(dict.fromkeys(range(6), NOT_FOUND), listings=listings)
    pub = ExactlyOncePublisher(cast(Client, stub), retry=PATIENT)
    await pub.publish_committed("s", b"v", partition=0)
    assert len(stub.calls) == 7


@pytest.mark.usefixtures("absence_at_once")
async def test_metadata_that_cannot_be_read_is_no_proof_of_absence() -> None:
    listings = [errors.UnavailableError("down")] * 4 + [{"s": 1}]
    stub = StubClient(dict.fromkeys(range(5), NOT_FOUND), listings=listings)
    pub = ExactlyOncePublisher(cast(Client, stub), retry=PATIENT)
    await pub.publish_committed("s", b"v", partition=0)
    assert len(stub.calls) == 6


async def test_not_found_through_the_whole_budget_says_it_was_retried() -> None:
    stub = StubClient(dict.fromkeys(range(100), NOT_FOUND))
    with pytest.raises(errors.NotFoundError, match=r"s/0: NOT_FOUND through 5 attempts") as info:
        await publisher(stub).publish_committed("s", b"v", partition=0)
    assert "the metadata lists it" in str(info.value)
    assert info.value.__cause__ is NOT_FOUND
    assert len(stub.calls) == FAST.attempts
    # A budget spent before absence has lasted long enough says what the metadata said.
    unlisted = StubClient(dict.fromkeys(range(100), NOT_FOUND), listings=[{}])
    with pytest.raises(errors.NotFoundError, match=r"through 5 attempts .*not listed by 4"):
        await publisher(unlisted).publish_committed("s", b"v", partition=0)


async def test_a_stale_partition_list_is_kept_when_a_reread_does_not_list_the_stream() -> None:
    # Keyed publishes re-read the partition list every metadata_max_age; an answer from a
    # broker that has not reloaded the stream must not fail them.
    stub = StubClient(listings=[{"s": 3}, {}, {}, {}, {"s": 3}])
    pub = ExactlyOncePublisher(cast(Client, stub), retry=FAST, metadata_max_age=1e-9)
    first = await pub.publish_committed("s", b"v", key=b"k")
    await asyncio.sleep(0.001)
    second = await pub.publish_committed("s", b"v", key=b"k")
    assert stub.calls[0]["partition"] == stub.calls[1]["partition"]
    assert (first.offset, second.offset) == (0, 1)


@pytest.mark.usefixtures("absence_at_once")
async def test_a_keyed_publish_to_a_stream_never_listed_fails_after_a_few_answers() -> None:
    stub = StubClient(listings=[{}])
    pub = ExactlyOncePublisher(cast(Client, stub), retry=PATIENT)
    with pytest.raises(errors.NotFoundError, match="not in the metadata"):
        await pub.publish_committed("s", b"v", key=b"k")
    assert stub.metadata_calls == 3
    assert stub.calls == []
    flaky = StubClient(listings=[{}, errors.UnavailableError("down"), {"s": 2}])
    assert await ExactlyOncePublisher(cast(Client, flaky), retry=PATIENT).partitions("s") == (0, 1)


# ---------------------------------------------------------------- a producer's restart

P = bytes.fromhex("a1a2a3a4a5a6")


def read_committed(calls: Sequence[Mapping[str, Any]]) -> list[bytes]:
    """What a read-committed reader yields if every recorded publish was stored once."""
    seq = Sequencer()
    logs: dict[PartitionRef, list[Envelope]] = {}
    out = []
    for call in calls:
        ref = PartitionRef(call["stream"], call["partition"])
        entries = logs.setdefault(ref, [])
        uuid = call["headers"][UUID_HEADER]
        entries.append(Envelope(ref, len(entries), len(entries) + 1, uuid, call["value"]))
        if seq.queue(entries[-1]) is QueueOutcome.ACK_COMMIT_REPLAY:
            _, begin, end = seq.replay_range()
            seq.start_replay([e for e in entries if begin <= e.begin < end])
        while (env := seq.step()) is not None:
            if flags_of(env.uuid) != Flags.ACK_TXN:
                out.append(env.message)
    return out


def acks(calls: Sequence[Mapping[str, Any]]) -> list[tuple[str, int, int]]:
    """(stream, partition, clock) of the ACK_TXN messages published."""
    return [
        (c["stream"], c["partition"], clock_of(c["headers"][UUID_HEADER]))
        for c in calls
        if flags_of(c["headers"][UUID_HEADER]) == Flags.ACK_TXN
    ]


async def test_a_crashed_first_transaction_does_not_commit_with_the_recovered_writers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stub = StubClient()
    crashed = publisher(stub, producer=P)
    await crashed.publish_uncommitted("a", b"lost-a", partition=0)
    await crashed.publish_uncommitted("b", b"lost-b", partition=1)
    # It crashes before storing any intent; it is recovered with the same ProducerID.
    recovered = publisher(stub, producer=P)
    await recovered.publish_uncommitted("a", b"new-a", partition=0)
    await recovered.publish_uncommitted("b", b"new-b", partition=1)
    await recovered.write_ack_intents(recovered.build_ack_intents())
    with caplog.at_level(logging.ERROR):
        assert read_committed(stub.calls) == [b"new-a", b"new-b"]
    assert caplog.records == []


async def test_a_writer_that_crashed_before_any_rollback_is_rolled_back_too() -> None:
    # The crashed run wrote no rollback of its own (rollback_open off, or an older
    # version of this layer): readers know the producer only from its open span.
    stub = StubClient()
    crashed = publisher(stub, producer=P, rollback_open=False)
    await crashed.publish_uncommitted("a", b"lost", partition=0)
    recovered = publisher(stub, producer=P)
    await recovered.publish_uncommitted("a", b"new", partition=0)
    await recovered.write_ack_intents(recovered.build_ack_intents())
    assert read_committed(stub.calls) == [b"new"]
    assert acks(stub.calls)[0] == ("a", 0, 1)  # the rollback


async def test_two_crashes_in_a_row_in_a_first_transaction() -> None:
    stub = StubClient()
    for _ in range(2):
        crashed = publisher(stub, producer=P)
        await crashed.publish_uncommitted("a", b"lost", partition=0)
    recovered = publisher(stub, producer=P)
    await recovered.publish_uncommitted("a", b"new", partition=0)
    await recovered.write_ack_intents(recovered.build_ack_intents())
    assert read_committed(stub.calls) == [b"new"]


async def test_the_rollback_sits_at_the_clock_of_the_earlier_runs_stored_intents(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stub = StubClient()
    writer = publisher(stub, producer=P)
    await writer.publish_uncommitted("b", b"t0-b", partition=0)
    await writer.write_ack_intents(writer.build_ack_intents())
    await writer.publish_uncommitted("a", b"t1-a", partition=0)
    stored = intents_to_json(writer.build_ack_intents())  # T1 touched "a" only
    await writer.write_ack_intents(intents_from_json(stored))
    await writer.publish_uncommitted("a", b"t2-a", partition=0)
    await writer.publish_uncommitted("b", b"t2-b", partition=0)
    # Crash before T2's intents are stored: recovery re-writes T1's, then goes on.
    recovered = publisher(stub, producer=P)
    await recovered.write_ack_intents(intents_from_json(stored))
    await recovered.publish_uncommitted("b", b"t3-b", partition=0)
    await recovered.publish_uncommitted("a", b"t3-a", partition=0)
    await recovered.write_ack_intents(recovered.build_ack_intents())
    with caplog.at_level(logging.INFO):
        assert read_committed(stub.calls) == [b"t0-b", b"t1-a", b"t3-b", b"t3-a"]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    # "b" is rolled back at T1's clock (above T0's ACK there, below T2's messages); "a"
    # needs nothing beyond the re-written intent.
    (stored_intent,) = intents_from_json(stored)
    t1 = clock_of(stored_intent.uuid)
    at_t1 = [a for a in acks(stub.calls) if a[2] == t1]
    assert at_t1 == [("a", 0, t1), ("a", 0, t1), ("b", 0, t1)]  # intent twice, rollback


async def test_a_committed_publish_ends_an_open_span_so_no_rollback_follows_it() -> None:
    stub = StubClient()
    crashed = publisher(stub, producer=P)
    await crashed.publish_uncommitted("a", b"lost", partition=0)
    recovered = publisher(stub, producer=P)
    await recovered.publish_committed("a", b"c", partition=0)
    await recovered.publish_uncommitted("a", b"new", partition=0)
    await recovered.write_ack_intents(recovered.build_ack_intents())
    assert read_committed(stub.calls) == [b"c", b"new"]
    assert [a[2] for a in acks(stub.calls)] == [1, acks(stub.calls)[1][2]]  # crashed's only


async def test_rollbacks_are_written_once_per_partition_and_only_when_due() -> None:
    stub = StubClient()
    pub = publisher(stub, producer=P)
    await asyncio.gather(*(pub.publish_uncommitted("a", b"%d" % i, partition=0) for i in range(5)))
    await pub.publish_uncommitted("a", b"more", partition=1)
    assert acks(stub.calls) == [("a", 0, 1), ("a", 1, 1)]
    assert [flags_of(c["headers"][UUID_HEADER]) for c in stub.calls].count(Flags.ACK_TXN) == 2
    # A producer of its own, or a clock of the caller's (re-sending the same UUIDs is its
    # recovery, as the Spark sink's): no rollback unless asked for.
    for kw in (
        {},
        {"producer": P, "clock": Clock(10**18)},
        {"producer": P, "rollback_open": False},
    ):
        other = StubClient()
        await publisher(other, **kw).publish_uncommitted("a", b"v", partition=0)
        assert acks(other.calls) == []
    asked = StubClient()
    await publisher(asked, clock=Clock(10**18), rollback_open=True).publish_uncommitted(
        "a", b"v", partition=0
    )
    assert acks(asked.calls) == [("a", 0, 1)]
    with pytest.raises(errors.InvalidInputError, match="rollback_open"):
        publisher(StubClient(), rollback_open=1)


async def test_a_failed_rollback_fails_the_publish_and_is_tried_again() -> None:
    stub = StubClient({0: errors.MessageTooLargeError("refused")})
    pub = publisher(stub, producer=P)
    with pytest.raises(errors.MessageTooLargeError):
        await pub.publish_uncommitted("a", b"v", partition=0)
    await pub.publish_uncommitted("a", b"v", partition=0)
    assert [flags_of(c["headers"][UUID_HEADER]) for c in stub.calls] == [
        Flags.ACK_TXN,
        Flags.ACK_TXN,
        Flags.CONTINUE_TXN,
    ]


async def test_stored_intents_written_after_a_rollback_there_are_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stub = StubClient()
    writer = publisher(stub, producer=P)
    await writer.publish_uncommitted("a", b"t1", partition=0)
    stored = intents_to_json(writer.build_ack_intents())
    recovered = publisher(stub, producer=P)
    await recovered.publish_uncommitted("a", b"t2", partition=0)  # wrong order
    with caplog.at_level(logging.WARNING, logger="liftbridge_client.exactly_once.publisher"):
        await recovered.write_ack_intents(intents_from_json(stored))
    assert "write the stored intents first" in caplog.text
    assert "a/0" in caplog.text
    before = len(stub.calls)
    with pytest.raises(errors.InvalidInputError, match="AckIntent"):
        await recovered.write_ack_intents([*intents_from_json(stored), "x"])  # type: ignore[list-item]
    assert len(stub.calls) == before  # checked before any is written
