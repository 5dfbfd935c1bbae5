"""The server's gRPC ping policy, pinned: frequent keepalive pings get a GOAWAY.

Liftbridge v1.9.0 keeps grpc-go's default enforcement (no pings more often than every
5 minutes). A client pinging every second is sent GOAWAY "too_many_pings" within seconds;
the subscription comes back by itself, losing and repeating nothing. The default
keepalive (330 s) stays inside the policy.
"""

from __future__ import annotations

import asyncio
import socket

import pytest

from liftbridge_client import Client, ClientOptions, Message, StartPosition
from liftbridge_client.options import KEEPALIVE_DEFAULT, StreamTransport
from liftbridge_client.testing import Deployment, StreamNames

pytestmark = pytest.mark.integration


def test_default_keepalive_is_inside_the_servers_policy() -> None:
    assert KEEPALIVE_DEFAULT > 300


@pytest.mark.parametrize(
    "stream_transport", [StreamTransport.GRPC, StreamTransport.H2], ids=["grpc", "h2"]
)
async def test_too_frequent_pings_get_goaway_and_the_subscription_survives(
    liftbridge_server: Deployment, stream_names: StreamNames, stream_transport: StreamTransport
) -> None:
    name, subject = stream_names("ka")
    options = ClientOptions(keepalive_time=1.0, stream_transport=stream_transport)
    async with Client(liftbridge_server.addresses, options=options) as client:
        await client.create_stream(subject, name)
        await client.publish(name, b"before")
        got: list[Message] = []
        async with client.subscribe(name, start=StartPosition.EARLIEST) as sub:
            async with asyncio.timeout(30):
                got.append(await anext(sub))
                reader = asyncio.create_task(anext(sub))  # notices the break, resubscribes
                while sub.resubscribes == 0:  # noqa: ASYNC110 - a counter; no event to await
                    await asyncio.sleep(0.2)
                await client.publish(name, b"after")
                got.append(await reader)
        assert [(m.offset, m.value) for m in got] == [(0, b"before"), (1, b"after")]


@pytest.mark.parametrize("timeout", [20.0, None], ids=["default", "off"])
async def test_h2_connections_ask_the_kernel_to_notice_a_cut_broker(
    liftbridge_server: Deployment, stream_names: StreamNames, timeout: float | None
) -> None:
    """Pings cannot be sent often (above), so a subscription whose broker is cut off
    learns it from the kernel: keepalive probes and TCP_USER_TIMEOUT on its connection
    (the fault suite's client-cut-leader rounds drop the packets for real)."""
    name, subject = stream_names("dead")
    options = ClientOptions(stream_transport=StreamTransport.H2, dead_peer_timeout=timeout)
    async with Client(liftbridge_server.addresses, options=options) as client:
        await client.create_stream(subject, name)
        async with client.subscribe(name, start=StartPosition.EARLIEST) as sub:
            assert sub.broker is not None
            conn = client._pool.h2()._conns[sub.broker]
            assert conn._transport is not None
            sock = conn._transport.get_extra_info("socket")
            keepalive = sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE)
            user_timeout = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT)
    assert (keepalive, user_timeout) == ((1, 20_000) if timeout else (0, 0))
