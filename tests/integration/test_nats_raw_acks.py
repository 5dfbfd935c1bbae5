"""Acks reach the publisher straight from nats-py's parser on a real connection."""

from __future__ import annotations

from typing import Any

import nats
import pytest

from liftbridge_client import Client, envelope
from liftbridge_client._transport import nats_shortcuts as transport_nats
from liftbridge_client.options import ClientOptions
from liftbridge_client.testing import Deployment, StreamNames, wait_until

pytestmark = pytest.mark.integration


async def test_acks_take_the_raw_route_and_other_traffic_is_untouched(
    liftbridge_server: Deployment, stream_names: StreamNames
) -> None:
    options = ClientOptions(ack_wait=5.0)
    async with Client(
        liftbridge_server.addresses, nats_servers=[liftbridge_server.nats_url], options=options
    ) as client:
        assert client._publisher is not None
        pub = client._publisher._nats_pub
        assert pub is not None
        assert pub.raw_acks  # if nats-py changed, this says the short cut is off
        nc = client._nats
        assert nc is not None
        assert "parse" in vars(nc._ps)  # and this, that the routed-MSG walk is off
        served = 0
        real_serve = transport_nats._serve  # serve_routed, or its C twin

        def counting_serve(*args: Any) -> tuple[int, bool]:
            nonlocal served
            served += 1
            return real_serve(*args)

        stream = stream_names()
        await client.create_stream(stream.subject, stream.name)
        transport_nats._serve = counting_serve
        try:
            acks = [await client.publish(stream.name, b"v%d" % i) for i in range(3)]
        finally:
            transport_nats._serve = real_serve
        assert [a.offset for a in acks if a is not None] == [0, 1, 2]
        assert served >= 3  # each ack's read went through the walk
        # Once nats-py's read task has parsed a read, acks are served as the socket's
        # data arrives (_FastReads.feed_data): the read task sees none of them.
        parsed_acks = 0
        real_parse = nc._ps.parse

        async def counting_parse(data: bytes = b"") -> None:
            nonlocal parsed_acks
            parsed_acks += b"MSG " in data
            await real_parse(data)

        nc._ps.parse = counting_parse  # type: ignore[method-assign]
        try:
            acks = [await client.publish(stream.name, b"u%d" % i) for i in range(20)]
        finally:
            nc._ps.parse = real_parse  # type: ignore[method-assign]
        assert [a.offset for a in acks if a is not None] == list(range(3, 23))
        assert parsed_acks == 0
        # Then the sender appends to nats-py's buffer itself (the subject is known now).
        out = nc.stats["out_msgs"]
        slow: list[str] = []
        real_publish = nc.publish

        async def counting_publish(subject: str, payload: bytes = b"", **kw: Any) -> None:
            slow.append(subject)
            await real_publish(subject, payload, **kw)

        nc.publish = counting_publish  # type: ignore[method-assign,assignment]
        futs = [await client.send(stream.name, b"w%d" % i) for i in range(300)]
        acks = [await f for f in futs]
        assert [a.offset for a in acks if a is not None] == list(range(23, 323))
        assert nc.stats["out_msgs"] - out >= 300
        assert slow == []  # none took nats-py's publish
        nc.publish = real_publish  # type: ignore[method-assign]
        # Another subscription on the same connection still gets Msg objects.
        seen: list[bytes] = []

        async def on_msg(msg: nats.aio.msg.Msg) -> None:
            seen.append(msg.data)

        sub = await nc.subscribe(f"{stream.subject}.side", cb=on_msg)
        await nc.publish(f"{stream.subject}.side", b"hello")
        await wait_until(lambda: seen == [b"hello"], what="the side message")
        await sub.unsubscribe()
        # Junk on the inbox, with or without NATS headers, is counted and dropped.
        async with await nats.connect(liftbridge_server.nats_url) as other:
            await other.publish(pub.inbox, b"junk")
            await other.publish(pub.inbox, b"junk", headers={"A": "b"})
            await other.publish(pub.inbox, envelope.encode_message(b"not an ack"))
        await wait_until(lambda: pub.undecodable_acks == 3, what="three undecodable acks")
