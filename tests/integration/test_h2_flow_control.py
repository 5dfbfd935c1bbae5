"""A slow consumer over the h2 stream transport holds at most one receive window.

Receive windows reopen only as the application reads (WINDOW_UPDATE after each
batch it took), so a subscriber that sleeps 10 ms per message while megabytes wait
on the server never buffers more than the stream window (plus one message being
assembled). Asserted on the bytes the call holds, not on timing; the peak RSS of
the same scenario is measured by bench (docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio

import pytest

from liftbridge_client import Client, ClientOptions, StartPosition, StreamTransport, Transport
from liftbridge_client._transport.h2 import ServerStreamCall
from liftbridge_client._transport.h2.connection import STREAM_WINDOW
from liftbridge_client.errors import InvalidInputError
from liftbridge_client.testing import Deployment, StreamNames

pytestmark = pytest.mark.integration

MESSAGES = 6000  # of 1 KiB: 6 MiB waiting, six stream windows
VALUE = b"x" * 1024


@pytest.mark.parametrize("window", [None, 4 * STREAM_WINDOW], ids=["default", "4x"])
async def test_a_slow_consumer_buffers_at_most_one_window(
    liftbridge_server: Deployment, stream_names: StreamNames, window: int | None
) -> None:
    """The default window, or the larger one a subscription asked for (the Spark source's
    read tasks do, through ``_use_receive_window``)."""
    limit = window or STREAM_WINDOW
    name, subject = stream_names("slow")
    options = ClientOptions(stream_transport=StreamTransport.H2, transport=Transport.NATS)
    async with Client(
        liftbridge_server.addresses, nats_servers=[liftbridge_server.nats_url], options=options
    ) as client:
        await client.create_stream(subject, name)
        futures = [await client.send(name, VALUE) for _ in range(MESSAGES)]
        await asyncio.gather(*futures)
        peak = 0
        sub = client.subscribe(name, start=StartPosition.EARLIEST)
        if window is not None:
            sub._use_receive_window(window)
        with pytest.raises(InvalidInputError):
            sub._use_receive_window(STREAM_WINDOW - 1)  # less than h2's initial window
        assert sub._receive_window == limit
        async with sub:
            call = sub._call
            assert isinstance(call, ServerStreamCall)
            for expected in range(150):
                message = await sub.next(timeout=10)
                assert message.offset == expected
                await asyncio.sleep(0.01)  # the slow consumer
                held = call._held + call._splitter.buffered
                peak = max(peak, held)
            # The server had far more to send; the call holds one window at most, plus
            # one message (1 KiB value + stream, subject, headers...) partly acked.
            assert peak <= limit + 2048
            assert peak >= limit // 4  # the window was used, not starved
            if window is not None:  # more than the default window could have held
                assert peak > STREAM_WINDOW + 2048
            # Draining fast reopens the window: everything arrives, in order.
            async with asyncio.timeout(30):
                for expected in range(150, MESSAGES):
                    assert (await anext(sub)).offset == expected
