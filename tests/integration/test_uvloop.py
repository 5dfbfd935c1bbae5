"""The client on uvloop's event loop, against a real server.

uvloop's transports are not ``asyncio.Transport`` subclasses, and its futures and
handles are its own: the h2 stream transport once refused its connections for
that, and the batched done callbacks of publish futures must wake tasks there too.
"""

from __future__ import annotations

import asyncio

import pytest
import uvloop  # a dev dependency: the test fails, never skips, without it

from liftbridge_client import (
    AckPolicy,
    Client,
    ClientOptions,
    StartPosition,
    StreamTransport,
    Transport,
)
from liftbridge_client.testing import Deployment, StreamNames

pytestmark = pytest.mark.integration


def test_publish_and_subscribe_on_uvloop(
    liftbridge_server: Deployment, stream_names: StreamNames
) -> None:
    stream = stream_names()

    async def main() -> tuple[list[int], list[bytes], int]:
        assert "uvloop" in type(asyncio.get_running_loop()).__module__
        options = ClientOptions(ack_wait=5.0, stream_transport=StreamTransport.H2)
        async with Client(
            liftbridge_server.addresses,
            nats_servers=[liftbridge_server.nats_url],
            options=options,
        ) as client:
            await client.create_stream(stream.subject, stream.name)
            acks = [await client.publish(stream.name, b"first", transport=Transport.GRPC)]
            futs = [await client.send(stream.name, b"g%d" % i) for i in range(300)]
            futs += [
                await client.send(stream.name, b"n%d" % i, transport=Transport.NATS)
                for i in range(300)
            ]
            called = 0

            def count(_fut: asyncio.Future[object]) -> None:
                nonlocal called
                called += 1

            for fut in futs:
                fut.add_done_callback(count)
            acks += await asyncio.gather(*futs)
            none = await client.send(stream.name, b"last", ack_policy=AckPolicy.NONE)
            await none
            assert none.result() is None
            await client.flush()
            offsets = [ack.offset for ack in acks if ack is not None]
            async with client.subscribe(stream.name, start=StartPosition.EARLIEST) as sub:
                values = []
                async for message in sub:
                    values.append(message.value)
                    if len(values) == 602:
                        break
            return offsets, values, called

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        offsets, values, called = runner.run(main())
    assert offsets == list(range(601))
    expected = [b"first"] + [b"g%d" % i for i in range(300)] + [b"n%d" % i for i in range(300)]
    assert values == [*expected, b"last"]
    assert called == 600
