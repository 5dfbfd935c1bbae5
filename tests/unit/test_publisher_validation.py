"""Bad publish input is rejected client-side, before anything is queued or sent.

The publisher runs against fakes (publish_fakes.py): a NATS client that records what it is
given, a metadata cache with one cached stream of 3 partitions, and a broker pool that records
every PublishAsync call. After each rejected call nothing was sent, nothing is pending and the
in-flight window is untouched.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

import hypothesis.strategies as st
import pytest
from budget import examples
from hypothesis import given, settings
from publish_fakes import Rig, make_rig

from liftbridge_client import envelope, errors
from liftbridge_client._publish.publisher import Publisher
from liftbridge_client.models import AckPolicy
from liftbridge_client.options import ClientOptions, Transport


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    r = await make_rig()
    yield r
    await r.close()


Call = Callable[..., Awaitable[Any]]


def the_three_ways(publisher: Publisher) -> list[Call]:
    """publish, send and publish_nowait, all as awaitables raising what the call raises."""

    async def nowait(*args: Any, **kw: Any) -> Any:
        return publisher.publish_nowait(*args, **kw)

    return [publisher.publish, publisher.send, nowait]


BAD_PUBLISHES: list[tuple[str, tuple[Any, ...], dict[str, Any], str]] = [
    ("empty stream", ("", b"v"), {}, "stream must be"),
    ("stream not a str", (5, b"v"), {}, "stream must be"),
    ("value is str", ("s", "text"), {}, "value must be bytes"),
    ("value is None", ("s", None), {}, "value must be bytes"),
    ("key is str", ("s", b"v"), {"key": "k"}, "key must be bytes"),
    ("headers not a mapping", ("s", b"v"), {"headers": [("a", b"b")]}, "headers must be"),
    ("header name not str", ("s", b"v"), {"headers": {1: b"b"}}, "header names"),
    ("header value str", ("s", b"v"), {"headers": {"a": "b"}}, "must be bytes"),
    ("header key too long", ("s", b"v"), {"headers": {"k" * 32768: b""}}, "32767"),
    ("header key not utf-8", ("s", b"v"), {"headers": {"\ud800": b""}}, "UTF-8"),
    ("negative partition", ("s", b"v"), {"partition": -1}, "partition must be"),
    ("bool partition", ("s", b"v"), {"partition": True}, "partition must be"),
    ("str partition", ("s", b"v"), {"partition": "0"}, "partition must be"),
    ("partition out of range", ("s", b"v"), {"partition": 3}, "partitions 0..2"),
    ("partitioner not callable", ("s", b"v"), {"partitioner": 3}, "callable"),
    ("partitioner out of range", ("s", b"v"), {"partitioner": lambda *a: 5}, "gave 5"),
    ("expected offset -2", ("s", b"v"), {"expected_offset": -2}, "expected_offset"),
    ("expected offset float", ("s", b"v"), {"expected_offset": 1.0}, "expected_offset"),
    ("expected offset bool", ("s", b"v"), {"expected_offset": True}, "expected_offset"),
    ("expected offset too big", ("s", b"v"), {"expected_offset": 2**63}, "expected_offset"),
    (
        "expected offset with NONE",
        ("s", b"v"),
        {"expected_offset": 3, "ack_policy": AckPolicy.NONE},
        "needs an ack",
    ),
    ("ack policy out of range", ("s", b"v"), {"ack_policy": 7}, "ack_policy"),
    ("ack policy str", ("s", b"v"), {"ack_policy": "LEADER"}, "ack_policy"),
    ("ack policy bool", ("s", b"v"), {"ack_policy": True}, "ack_policy"),
    ("ack wait zero", ("s", b"v"), {"ack_wait": 0}, "ack_wait"),
    ("ack wait negative", ("s", b"v"), {"ack_wait": -1.0}, "ack_wait"),
    ("ack wait nan", ("s", b"v"), {"ack_wait": float("nan")}, "ack_wait"),
    ("ack wait inf", ("s", b"v"), {"ack_wait": float("inf")}, "ack_wait"),
    ("ack wait str", ("s", b"v"), {"ack_wait": "1"}, "ack_wait"),
    ("transport str", ("s", b"v"), {"transport": "nats"}, "transport must be"),
    ("empty correlation id", ("s", b"v"), {"correlation_id": ""}, "correlation_id"),
    ("int correlation id", ("s", b"v"), {"correlation_id": 5}, "correlation_id"),
    ("surrogate correlation id", ("s", b"v"), {"correlation_id": "\ud800"}, "correlation_id"),
    ("surrogate stream", ("\ud800", b"v"), {}, "stream does not encode"),
    ("huge partition", ("s", b"v"), {"partition": 2**40}, "partition must be"),
    ("key is int", ("s", b"v"), {"key": 5}, "key must be bytes"),
    ("ack wait too big", ("s", b"v"), {"ack_wait": 1e300}, "ack_wait"),
    ("ack wait bad timedelta", ("s", b"v"), {"ack_wait": timedelta(seconds=-1)}, "ack_wait"),
]


@pytest.mark.parametrize(
    ("args", "kw", "match"),
    [pytest.param(a, k, m, id=i) for i, a, k, m in BAD_PUBLISHES],
)
@pytest.mark.parametrize("transport", [Transport.NATS, Transport.GRPC])
async def test_bad_input_is_rejected_before_sending(
    rig: Rig, args: tuple[Any, ...], kw: dict[str, Any], match: str, transport: Transport
) -> None:
    kw = {"transport": transport, **kw}
    for call in the_three_ways(rig.publisher):
        with pytest.raises(errors.InvalidInputError, match=match):
            await call(*args, **kw)
    await asyncio.sleep(0)  # give the sender a chance: it must find nothing
    rig.assert_nothing_happened()


@pytest.mark.parametrize("transport", [Transport.NATS, Transport.GRPC])
async def test_an_unknown_keyword_is_refused_by_the_signature(
    rig: Rig, transport: Transport
) -> None:
    """The verbs take `Client.publish`'s keywords, typed: a misspelt one is Python's
    TypeError, as on the client, and nothing is sent."""
    for call in the_three_ways(rig.publisher):
        with pytest.raises(TypeError, match="partiton"):
            await call("s", b"v", transport=transport, partiton=1)
    with pytest.raises(TypeError, match="partition"):
        await rig.publisher.publish_to_subject("a.b", b"v", partition=1)  # type: ignore[call-arg]
    await asyncio.sleep(0)
    rig.assert_nothing_happened()


@pytest.mark.parametrize("transport", [Transport.NATS, Transport.GRPC])
async def test_a_partitioner_that_raises_gives_a_typed_error(
    rig: Rig, transport: Transport
) -> None:
    def broken(stream: str, key: bytes | None, value: bytes, partitions: int) -> int:
        raise RuntimeError("partitioner bug")

    for call in the_three_ways(rig.publisher):
        with pytest.raises(errors.PartitionerError, match="raised RuntimeError") as info:
            await call("s", b"v", key=b"k", partitioner=broken, transport=transport)
        assert isinstance(info.value.__cause__, RuntimeError)
        assert "stream 's'" in str(info.value)
    await asyncio.sleep(0)
    rig.assert_nothing_happened()


async def test_nats_requested_without_a_nats_connection() -> None:
    rig = await make_rig(with_nats=False, transport=Transport.NATS)
    try:
        assert rig.publisher.transport is Transport.NATS
        for call in the_three_ways(rig.publisher):
            with pytest.raises(errors.InvalidInputError, match="needs a NATS connection"):
                await call("s", b"v")
            with pytest.raises(errors.InvalidInputError, match="nats_servers"):
                await call("s", b"v", transport=Transport.NATS)
        rig.assert_nothing_happened()
    finally:
        await rig.close()


async def test_default_transport_follows_the_nats_connection() -> None:
    with_nats = await make_rig()
    without = await make_rig(with_nats=False)
    forced = await make_rig(transport=Transport.GRPC)
    try:
        assert ClientOptions().transport is None
        assert with_nats.publisher.transport is Transport.NATS
        assert without.publisher.transport is Transport.GRPC
        assert forced.publisher.transport is Transport.GRPC
    finally:
        for r in (with_nats, without, forced):
            await r.close()


async def test_oversized_nats_message_is_refused_locally(rig: Rig) -> None:
    value = b"x" * rig.wire.max_payload  # the envelope and fields push it over
    for call in the_three_ways(rig.publisher):
        with pytest.raises(errors.MessageTooLargeError, match="max_payload"):
            await call("s", value)
    rig.assert_nothing_happened()


async def test_oversized_grpc_request_is_refused_locally(rig: Rig) -> None:
    value = b"x" * (4 * 1024 * 1024)
    for call in the_three_ways(rig.publisher):
        with pytest.raises(errors.MessageTooLargeError, match="gRPC limit"):
            await call("s", value, transport=Transport.GRPC)
    rig.assert_nothing_happened()


async def test_duplicate_pending_correlation_id(rig: Rig) -> None:
    fut = rig.publisher.publish_nowait("s", b"v", correlation_id="mine")
    for call in the_three_ways(rig.publisher):
        with pytest.raises(errors.InvalidInputError, match="already pending"):
            await call("s", b"v", correlation_id="mine")
    assert rig.publisher._correlator.held == 1  # only the first one's slot
    fut.cancel()
    assert rig.publisher._correlator.held == 0


async def test_automatic_ids_skip_a_callers_id_of_their_form(rig: Rig) -> None:
    # The caller gives the id the counter would give next (as an ack shows ids): the next
    # publish without an id must not fail as "already pending" on an id it never chose.
    publisher = rig.publisher
    first = publisher.publish_nowait("s", b"v")
    prefix = publisher.cid_prefix
    n = int(first.correlation_id.removeprefix(prefix))
    mine = publisher.publish_nowait("s", b"v", correlation_id=f"{prefix}{n + 1}")
    auto = [publisher.publish_nowait("s", b"v", partition=p) for p in (0, 1)]
    auto += [await publisher.send("s", b"v", transport=t) for t in Transport]
    ids = [f.correlation_id for f in (first, mine, *auto)]
    assert len(set(ids)) == len(ids)
    # Ids of the form but far ahead, with leading zeros or too long change nothing else.
    odd = (f"{prefix}{n + 1000}", f"{prefix}007", f"{prefix}{'9' * 40}", f"{prefix}x")
    auto += [publisher.publish_nowait("s", b"v", correlation_id=cid) for cid in odd]
    assert int(publisher.publish_nowait("s", b"v").correlation_id.removeprefix(prefix)) == (
        n + 1001
    )
    for fut in (first, mine, *auto):
        fut.cancel()


async def test_closed_publisher_refuses(rig: Rig) -> None:
    await rig.close()
    for call in the_three_ways(rig.publisher):
        with pytest.raises(errors.ConnectionClosedError):
            await call("s", b"v")
    with pytest.raises(errors.ConnectionClosedError):
        await rig.publisher.publish_to_subject("s.subj", b"v")
    with pytest.raises(errors.ConnectionClosedError):
        await rig.publisher.flush(None)
    rig.assert_nothing_happened()


async def test_full_window_refuses_publish_nowait_only(rig: Rig) -> None:
    small = await make_rig(max_inflight=2, ack_wait=30)
    try:
        p = small.publisher
        first = p.publish_nowait("s", b"1")
        p.publish_nowait("s", b"2")
        with pytest.raises(errors.InflightLimitError):
            p.publish_nowait("s", b"3")
        waiting = asyncio.create_task(p.send("s", b"3"))
        await asyncio.sleep(0.01)
        assert not waiting.done()  # send() waits for room...
        first.cancel()  # ...which a cancel (or an ack) makes
        third = await asyncio.wait_for(waiting, 1)
        assert not third.done()
        assert p._correlator.held == 2
    finally:
        await small.close()


BAD_SUBJECT_PUBLISHES: list[tuple[str, tuple[Any, ...], dict[str, Any], str]] = [
    ("empty subject", ("", b"v"), {}, "subject must be"),
    ("value str", ("a.b", "v"), {}, "value must be bytes"),
    ("key str", ("a.b", b"v"), {"key": "k"}, "key must be bytes"),
    ("header key too long", ("a.b", b"v"), {"headers": {"k" * 40000: b""}}, "32767"),
    ("ack wait zero", ("a.b", b"v"), {"ack_wait": 0}, "ack_wait"),
    ("ack policy bad", ("a.b", b"v"), {"ack_policy": 9}, "ack_policy"),
    ("correlation id empty", ("a.b", b"v"), {"correlation_id": ""}, "correlation_id"),
    ("correlation id surrogate", ("a.b", b"v"), {"correlation_id": "\udfff"}, "correlation_id"),
    ("subject surrogate", ("\ud800", b"v"), {}, "subject does not encode"),
    ("subject wildcard", ("a.*", b"v"), {}, "wildcard"),
    ("subject with space", ("a b", b"v"), {}, "whitespace"),
    ("subject empty token", ("a..b", b"v"), {}, "'..'"),
]


@pytest.mark.parametrize(
    ("args", "kw", "match"),
    [pytest.param(a, k, m, id=i) for i, a, k, m in BAD_SUBJECT_PUBLISHES],
)
async def test_bad_subject_publish_is_rejected(
    rig: Rig, args: tuple[Any, ...], kw: dict[str, Any], match: str
) -> None:
    with pytest.raises(errors.InvalidInputError, match=match):
        await rig.publisher.publish_to_subject(*args, **kw)
    rig.assert_nothing_happened()


async def test_flush_timeout_must_be_positive(rig: Rig) -> None:
    with pytest.raises(errors.InvalidInputError):
        await rig.publisher.flush(0)
    with pytest.raises(errors.InvalidInputError):
        await rig.publisher.flush(-1)
    with pytest.raises(errors.InvalidInputError, match="timeout"):
        await rig.publisher.flush(float("inf"))
    fut = rig.publisher.publish_nowait("s", b"v", ack_wait=30)
    with pytest.raises(errors.LiftbridgeTimeoutError, match="still pending"):
        await rig.publisher.flush(timedelta(milliseconds=20))  # a timedelta is seconds too
    fut.cancel()


# ---------------------------------------------------------------- fast path == slow path


@settings(max_examples=examples(200), deadline=None)
@given(
    stream=st.sampled_from(["s", "unknown-stream"]),
    value=st.binary(max_size=64),
    partition=st.one_of(st.none(), st.integers(min_value=0, max_value=2)),
    ack_policy=st.one_of(st.none(), st.sampled_from(list(AckPolicy))),
    transport=st.sampled_from(list(Transport)),
)
def test_prepare_fast_path_builds_what_the_checked_path_builds(
    stream: str,
    value: bytes,
    partition: int | None,
    ack_policy: AckPolicy | None,
    transport: Transport,
) -> None:
    """The unchecked fast path of `Publisher._prepare` is an optimisation only."""

    async def compare() -> None:
        r = await make_rig(transport=transport)
        try:
            p = r.publisher
            kw: dict[str, Any] = {}
            if partition is not None:
                kw["partition"] = partition
            if ack_policy is not None:
                kw["ack_policy"] = ack_policy
            fast, slow = p._prepare(stream, value, **kw), p._prepare_checked(stream, value, **kw)
            for item in (fast, slow):
                assert item.correlation_id.startswith(p.cid_prefix)
            fields = ["stream", "value", "key", "headers", "partition", "partitioner"]
            fields += ["ack_policy", "expected_offset", "route", "subject"]
            for name in fields:
                assert getattr(fast, name) == getattr(slow, name), name
            if fast.request is not None:  # gRPC: equal but for the correlation id
                assert slow.request is not None
                assert fast.request.correlationId != slow.request.correlationId
                fast.request.correlationId = slow.request.correlationId
                assert fast.request == slow.request
            else:
                assert slow.request is None
            if fast.payload is not None:  # NATS: equal but for the correlation id inside
                assert slow.payload is not None
                a = envelope.decode_message(fast.payload)
                b = envelope.decode_message(slow.payload)
                a.correlationId = b.correlationId = ""
                assert a == b
            else:
                assert slow.payload is None
        finally:
            await r.close()

    asyncio.run(compare())


async def test_ack_wait_takes_a_timedelta(rig: Rig) -> None:
    fut = rig.publisher.publish_nowait("s", b"v", ack_wait=timedelta(milliseconds=50))
    with pytest.raises(errors.AckTimeoutError, match=r"within 0\.05s"):
        await asyncio.wait_for(fut, 5)
