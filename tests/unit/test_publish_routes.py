"""Each route's one-step publish (`Route.direct`) is an optimisation only: the bytes it
puts on the wire and the outcome its caller gets are those of the general path
(`Route.prepare` + `submit`/`send`), for any plain publish.

Two publishers share one correlation-id prefix and counter position, so the direct
publish of one and the general publish of the other carry the same id; the general one is
forced by an explicit ``expected_offset=-1`` (the default value, but not a keyword the
one-step path takes).
"""

from __future__ import annotations

import asyncio
import dataclasses
from types import MappingProxyType
from typing import Any

import hypothesis.strategies as st
import pytest
from budget import examples
from hypothesis import given, settings
from publish_fakes import Rig, make_rig

from liftbridge_client import envelope, errors
from liftbridge_client._publish.leaders import LeaderRoute
from liftbridge_client._publish.nats import _MAX_EXPECTS, NatsRoute
from liftbridge_client.envelope import MAX_HEADER_KEY_BYTES, MAX_PLAIN_HEADERS
from liftbridge_client.models import Ack, AckPolicy, Metadata
from liftbridge_client.options import StreamTransport, Transport
from liftbridge_client.testing import wait_until

PLAIN = {
    "value": st.binary(max_size=3000),
    "partition": st.integers(min_value=0, max_value=2),
    "ack_policy": st.sampled_from(list(AckPolicy)),
    "key": st.one_of(st.none(), st.binary(max_size=300)),
    # Headers the one-step path takes (envelope.plain_header_entries): exact str names
    # and bytes values, at most MAX_PLAIN_HEADERS.
    # One header (the Spark sink's case) is drawn as often as none or several.
    "headers": st.one_of(
        st.none(),
        *(
            st.dictionaries(
                st.text(alphabet=st.characters(codec="utf-8"), max_size=20),
                st.binary(max_size=200),
                min_size=low,
                max_size=high,
            )
            for low, high in [(1, 1), (0, MAX_PLAIN_HEADERS)]
        ),
    ),
}


async def _twins(**options: Any) -> tuple[Rig, Rig]:
    one, two = await make_rig(**options), await make_rig(**options)
    two.publisher._slots.cid_prefix = one.publisher.cid_prefix
    return one, two


@settings(max_examples=examples(40), deadline=None)
@given(crc=st.booleans(), **{**PLAIN, "partition": st.none() | PLAIN["partition"]})
def test_the_nats_one_step_publish_writes_the_general_paths_bytes(
    crc: bool,
    value: bytes,
    partition: int | None,
    ack_policy: AckPolicy,
    key: bytes | None,
    headers: dict[str, bytes] | None,
) -> None:
    # No partition: the key picks it (the default KeyPartitioner), on both paths.
    async def compare() -> None:
        one, two = await _twins(transport=Transport.NATS, envelope_crc=crc)
        try:
            assert isinstance(one.publisher._default_route, NatsRoute)
            direct = one.publisher.send_plain(
                "s", value, partition, ack_policy, None, False, key, headers
            )
            assert direct is not None  # the one-step path took it
            general = two.publisher.publish_nowait(
                "s",
                value,
                key=key,
                headers=headers,
                partition=partition,
                ack_policy=ack_policy,
                expected_offset=-1,
            )
            await wait_until(
                lambda: bool(one.wire.published and two.wire.published), what="both written"
            )
            if headers is None or len(headers) <= 1:
                assert one.wire.published == two.wire.published  # subject and bytes
            else:  # the same message; upb orders the map by hash (see plain_header_entries)
                assert one.wire.messages() == two.wire.messages()
            if ack_policy is AckPolicy.NONE:  # written: both resolve to None at once
                assert await direct is None
                assert await general is None
                return
            cid = direct.correlation_id
            assert cid == general.correlation_id
            one.ack(cid, 7)
            two.ack(cid, 7)
            got = await asyncio.gather(direct, general)
            assert all(isinstance(ack, Ack) and ack.offset == 7 for ack in got)
            assert got[0] == got[1]
        finally:
            await one.close()
            await two.close()

    asyncio.run(compare())


@settings(max_examples=examples(25), deadline=None)
@given(**{**PLAIN, "value": st.binary(min_size=1, max_size=3000)})  # b"" is not plain
def test_the_h2_one_step_publish_sends_the_general_paths_request(
    value: bytes,
    partition: int,
    ack_policy: AckPolicy,
    key: bytes | None,
    headers: dict[str, bytes] | None,
) -> None:
    async def compare() -> None:
        options = {"transport": Transport.GRPC, "stream_transport": StreamTransport.H2}
        one, two = await _twins(auto_ack=True, **options)
        try:
            assert isinstance(one.publisher._default_route, LeaderRoute)
            # The first publish opens the leader's stream; the second takes the one step.
            for rig in (one, two):
                await rig.publisher.publish("s", b"open", partition=partition)
            direct = one.publisher.send_plain(
                "s", value, partition, ack_policy, None, False, key, headers
            )
            assert direct is not None  # the one-step path took it
            general = two.publisher.publish_nowait(
                "s",
                value,
                key=key,
                headers=headers,
                partition=partition,
                ack_policy=ack_policy,
                expected_offset=-1,
            )
            assert direct.correlation_id == general.correlation_id
            got = await asyncio.gather(direct, general)
            await wait_until(
                lambda: len(one.server.published) == len(two.server.published) == 2,
                what="the broker reading both",
            )
            sent = [rig.server.published[-1][1] for rig in (one, two)]
            assert sent[0] == sent[1]  # the request the broker decoded, field by field
            assert sent[0].value == value
            assert sent[0].key == (key or b"")
            assert dict(sent[0].headers) == (headers or {})
            if ack_policy is AckPolicy.NONE:
                assert list(got) == [None, None]
            else:
                assert got[0] is not None
                assert got[1] is not None
                assert got[0].correlation_id == got[1].correlation_id
        finally:
            await one.close()
            await two.close()

    asyncio.run(compare())


class _Name(str):
    pass


# Headers the one-step path leaves to the general path, which converts them or says what
# is wrong (tests/unit/test_publish_wire.py checks the rule itself).
_CONVERTED: list[Any] = [
    {"a": bytearray(b"v")},
    {"a": memoryview(b"v")},
    MappingProxyType({"a": b"v"}),
    {_Name("a"): b"v"},
    {str(i): b"v" for i in range(MAX_PLAIN_HEADERS + 1)},
]
_REFUSED: list[Any] = [
    {b"a": b"v"},
    {1: b"v"},
    {"a": "v"},
    {"a": None},
    {"\ud800": b"v"},
    {"n" * (MAX_HEADER_KEY_BYTES + 1): b"v"},
    [("a", b"v")],
]


@pytest.mark.parametrize("transport", [Transport.NATS, Transport.GRPC])
@pytest.mark.parametrize("headers", _CONVERTED + _REFUSED)
def test_headers_the_one_step_path_refuses_get_the_general_paths_outcome(
    headers: Any, transport: Transport
) -> None:
    async def compare() -> None:
        one, two = await _twins(
            auto_ack=True, transport=transport, stream_transport=StreamTransport.H2
        )
        try:
            if transport is Transport.GRPC:  # the leader's stream open, as in the test above
                for rig in (one, two):
                    await rig.publisher.publish("s", b"open", partition=0)
                    await rig.publisher.flush(None)
            before = one.publisher._correlator.held
            # Refused without a trace: no slot taken, nothing registered or written.
            assert (
                one.publisher.send_plain("s", b"v", 0, AckPolicy.LEADER, None, False, None, headers)
                is None
            )
            assert one.publisher._correlator.held == before
            assert one.publisher.pending == 0
            if any(headers is refused for refused in _REFUSED):
                with pytest.raises(errors.InvalidInputError):
                    two.publisher.publish_nowait("s", b"v", headers=headers, partition=0)
                return
            # Valid: the general path sends them, as bytes, as if given as a plain dict.
            fut = two.publisher.publish_nowait("s", b"v", headers=headers, partition=0)
            expected = {name: bytes(value) for name, value in headers.items()}
            if transport is Transport.NATS:
                await wait_until(lambda: bool(two.wire.published), what="written")
                sent = dict(envelope.decode_message(two.wire.published[-1][1]).headers)
                two.ack(fut.correlation_id, 1)
                await fut
            else:
                await fut
                sent = dict(two.server.published[-1][1].headers)
            assert sent == expected
        finally:
            await one.close()
            await two.close()

    asyncio.run(compare())


def test_nats_publishes_share_what_their_acks_must_name_per_stream_and_subject() -> None:
    """One (stream, subject) tuple per partition, not one per publish; a second stream on
    the same subject gets its own, and an ack naming the other stream settles nothing."""

    async def run() -> None:
        rig = await make_rig(transport=Transport.NATS)
        try:
            info = rig.md.current.streams["s"]
            twin = dataclasses.replace(info, name="t")  # another stream, the same subjects
            rig.md.current = Metadata(brokers=(), streams={"s": info, "t": twin})
            publisher = rig.publisher

            async def send(streams: tuple[str, ...]) -> list[tuple[str, int, Any]]:
                return [
                    (stream, partition, await publisher.send(stream, b"v", partition=partition))
                    for _ in range(3)
                    for stream in streams
                    for partition in range(3)
                ]

            alone, mixed = await send(("s",)), await send(("s", "t"))
            await wait_until(
                lambda: all(fut.expect is not None for _, _, fut in alone + mixed),
                what="every publish written",
            )
            for stream, partition, fut in alone + mixed:
                assert fut.expect == (stream, info.partition_subject(partition))
            shared = {(p, id(fut.expect)) for _, p, fut in alone}
            assert len(shared) == 3  # one tuple per partition
            stream, partition, fut = alone[0]
            rig.ack(fut.correlation_id, 5, stream="t")
            await asyncio.sleep(0)
            assert not fut.done()  # named the other stream: dropped
            rig.ack(fut.correlation_id, 5)
            assert (await fut).offset == 5
        finally:
            await rig.close()

    asyncio.run(run())


def test_a_nats_route_with_many_subjects_keeps_a_bounded_cache() -> None:
    async def run() -> None:
        rig = await make_rig(transport=Transport.NATS)
        try:
            route = rig.publisher._default_route
            assert isinstance(route, NatsRoute)
            for n in range(_MAX_EXPECTS + 10):
                assert route._expect("s", f"sub.{n}") == ("s", f"sub.{n}")
            assert 0 < len(route._expects) <= _MAX_EXPECTS
        finally:
            await rig.close()

    asyncio.run(run())
