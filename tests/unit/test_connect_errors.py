"""Connection errors name their cause: DNS, refused, the wrong protocol on that port.

Tiny asyncio servers play the wrong server: a NATS greeting where gRPC was expected, an
HTTP/2 SETTINGS frame (what a gRPC server sends first) where NATS was expected.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import AsyncIterator

import pytest

from liftbridge_client import Client, ClientOptions, errors
from liftbridge_client._transport import probe
from liftbridge_client._transport.nats import connect_nats

NATS_INFO = b'INFO {"server_id":"fake","version":"2.10.0","max_payload":1048576}\r\n'
# An empty SETTINGS frame: length 0, type 4, flags 0, stream 0.
HTTP2_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


async def _serve(greeting: bytes) -> tuple[asyncio.Server, str]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(greeting)
        await writer.drain()
        with contextlib.suppress(ConnectionError):
            await reader.read(65536)  # hold the connection until the client gives up
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"127.0.0.1:{port}"


@pytest.fixture
async def fake_nats() -> AsyncIterator[str]:
    server, address = await _serve(NATS_INFO)
    async with server:
        yield address


@pytest.fixture
async def fake_grpc() -> AsyncIterator[str]:
    server, address = await _serve(HTTP2_SETTINGS)
    async with server:
        yield address


def _dead_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


QUICK = ClientOptions(connect_timeout=3.0, rpc_timeout=1.0)


async def test_broker_that_does_not_resolve() -> None:
    with pytest.raises(errors.NoBrokerAvailableError, match="does not resolve") as info:
        await Client(["nohost.invalid:1"], options=QUICK).connect()
    assert "'nohost.invalid'" in str(info.value)
    assert isinstance(info.value.__cause__, socket.gaierror)


async def test_broker_that_refuses() -> None:
    dead = _dead_port()
    with pytest.raises(errors.NoBrokerAvailableError, match="connection refused") as info:
        await Client([dead], options=QUICK).connect()
    assert isinstance(info.value.__cause__, ConnectionRefusedError)


async def test_broker_address_at_a_nats_port(fake_nats: str) -> None:
    with pytest.raises(errors.NoBrokerAvailableError, match="a NATS server listens") as info:
        await Client([fake_nats], options=QUICK).connect()
    assert not isinstance(info.value, errors.NatsUnreachableError)  # the broker is at fault
    assert "NATS port" in str(info.value)
    assert isinstance(info.value.__cause__, errors.ProtocolError)
    assert "INFO" in str(info.value.__cause__)


async def test_nats_server_at_a_grpc_port_fails_at_once(fake_grpc: str) -> None:
    started = time.monotonic()
    # A NATS-specific error (it was the broker error, NoBrokerAvailableError, itself).
    with pytest.raises(errors.NatsUnreachableError, match="HTTP/2 server") as info:
        await connect_nats({"servers": [f"nats://{fake_grpc}"], "connect_timeout": 5.0}, 5.0)
    assert time.monotonic() - started < 2  # not the 5 s connect timeout
    assert "gRPC port" in str(info.value)
    assert isinstance(info.value.__cause__, errors.ProtocolError)


@pytest.fixture
def no_dns_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """``.invalid`` names fail to resolve at once, as a healthy resolver answers them: a
    unit test must not wait on the machine's DNS (one stalled for 2 minutes in a run)."""
    real = socket.getaddrinfo

    def getaddrinfo(host: object, *args: object, **kwargs: object) -> object:
        name = host.decode() if isinstance(host, bytes) else str(host)
        if name.endswith(".invalid"):
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


@pytest.mark.usefixtures("no_dns_wait")
async def test_nats_server_that_does_not_resolve() -> None:
    started = time.monotonic()
    with pytest.raises(errors.NatsUnreachableError, match="does not resolve") as info:
        await connect_nats({"servers": ["nats://nohost.invalid:4222"], "connect_timeout": 5.0}, 5.0)
    assert time.monotonic() - started < 3
    assert isinstance(info.value.__cause__, socket.gaierror)


@pytest.mark.usefixtures("no_dns_wait")
async def test_unreachable_nats_error_hides_credentials(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    urls = ["nats://app:hunter2-SECRET@nohost.invalid:4222", "tls://t0k3n-SECRET@x.invalid:1"]
    with pytest.raises(errors.NatsUnreachableError) as info:
        await connect_nats({"servers": urls, "connect_timeout": 5.0}, 5.0)
    assert "nats://app:***@nohost.invalid:4222, tls://***@x.invalid:1" in str(info.value)
    for text in (str(info.value), repr(info.value), caplog.text):
        assert "SECRET" not in text


@pytest.mark.usefixtures("no_dns_wait")
async def test_probe_findings() -> None:
    dead = _dead_port()
    (refused,) = await probe.explain([dead], probe.Protocol.NATS)
    assert "connection refused" in refused.reason
    assert not refused.certain  # a server may be starting: the caller keeps trying
    (odd,) = await probe.explain(["nohost.invalid:1"], probe.Protocol.GRPC)
    assert odd.certain


async def test_probe_is_quiet_for_the_right_server(fake_nats: str, fake_grpc: str) -> None:
    assert await probe.explain([fake_nats], probe.Protocol.NATS) == []
    assert await probe.explain([fake_grpc], probe.Protocol.GRPC) == []


@pytest.mark.parametrize(
    ("url", "address"),
    [
        ("nats://h:1", "h:1"),
        ("tls://h:2", "h:2"),
        ("h:3", "h:3"),
        ("nats://h", "h:4222"),
        ("nats://user:pw@h:5", "h:5"),
        ("nats://[::1]:6", "[::1]:6"),
    ],
)
def test_nats_address(url: str, address: str) -> None:
    assert probe.nats_address(url) == address
