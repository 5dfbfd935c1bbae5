"""ExactlyOncePublisher's retry and ordering rules, against a stub Client (no IO)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from typing import Any, cast

import pytest

from liftbridge_client import Client, RetryPolicy, errors
from liftbridge_client.exactly_once import UUID_HEADER, ExactlyOncePublisher, Flags
from liftbridge_client.exactly_once.uuids import clock_of, fields_of, flags_of
from liftbridge_client.models import Ack, AckPolicy


class StubClient:
    """Records every publish; fails the attempts listed in ``failures`` (by call number)."""

    def __init__(self, failures: Mapping[int, errors.LiftbridgeError] | None = None) -> None:
        self.failures = dict(failures or {})
        self.calls: list[dict[str, Any]] = []
        self.gate: asyncio.Event | None = None

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
