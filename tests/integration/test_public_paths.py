"""With nats-py or h2 internals of another shape, a real client still publishes and reads.

The hooks into dependency internals (tests/unit/test_deps_fallback.py has each one in
detail) turn themselves off on the real connections here, and nats-py's and h2's public
paths carry the same messages to and from a real server.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import h2.connection
import nats.aio.client
import pytest

from liftbridge_client import Client, ClientOptions, StartPosition, StreamTransport, Transport
from liftbridge_client._transport import nats as transport_nats
from liftbridge_client._transport.h2 import connection as h2conn
from liftbridge_client.testing import Deployment, StreamNames

pytestmark = pytest.mark.integration

ONE_BY_ONE = 20
BURST = 300


class ChangedNats(nats.aio.client.Client):
    """A nats-py whose ``_process_msg`` takes another argument and whose pending limit is
    a float: the ack router and the direct publish buffer must not use either."""

    async def _process_msg(
        self,
        sid: int,
        subject: bytes,
        reply: bytes,
        data: bytes,
        headers: bytes | None,
        extra: object = None,
    ) -> None:
        await super()._process_msg(sid, subject, reply, data, headers)  # type: ignore[arg-type]

    @property  # type: ignore[override]
    def _max_pending_size(self) -> float:
        return self._limit

    @_max_pending_size.setter
    def _max_pending_size(self, value: float) -> None:
        self._limit = float(value)


class BytesBufferH2(h2.connection.H2Connection):
    """An h2 whose outgoing buffer starts as bytes, as in h2 3.x."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._data_to_send = b""  # type: ignore[assignment]


async def _publish_and_read(client: Client, name: str) -> tuple[list[int], list[bytes]]:
    """Offsets acked for ONE_BY_ONE publishes and a BURST of sends; the values read back."""
    offsets = []
    for i in range(ONE_BY_ONE):
        ack = await client.publish(name, b"one-%d" % i)
        assert ack is not None
        offsets.append(ack.offset)
    futures = [await client.send(name, b"burst-%d" % i) for i in range(BURST)]
    for ack in await asyncio.gather(*futures):
        assert ack is not None
        offsets.append(ack.offset)
    values: list[bytes] = []
    async with client.subscribe(name, start=StartPosition.EARLIEST) as sub:
        async with asyncio.timeout(60):
            while len(values) < ONE_BY_ONE + BURST:
                values.append((await anext(sub)).value)
    return offsets, values


EXPECTED_VALUES = [b"one-%d" % i for i in range(ONE_BY_ONE)] + [
    b"burst-%d" % i for i in range(BURST)
]


@pytest.fixture
def fresh_logs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transport_nats, "_logged", set())
    monkeypatch.setattr(h2conn, "_fallback_logged", False)


@pytest.mark.usefixtures("fresh_logs")
async def test_nats_publishing_with_changed_nats_py_internals(
    liftbridge_server: Deployment,
    stream_names: StreamNames,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, "liftbridge_client._transport.nats")
    monkeypatch.setattr(nats.aio.client, "Client", ChangedNats)
    name, subject = stream_names("natsfallback")
    options = ClientOptions(ack_wait=10.0, transport=Transport.NATS)
    async with Client(
        liftbridge_server.addresses, nats_servers=[liftbridge_server.nats_url], options=options
    ) as client:
        nc = client._nats
        assert isinstance(nc, ChangedNats)
        published: list[str] = []
        public_publish = nc.publish

        async def counting_publish(subject: str, payload: bytes = b"", **kw: Any) -> None:
            published.append(subject)
            await public_publish(subject, payload, **kw)

        nc.publish = counting_publish  # type: ignore[method-assign,assignment]
        await client.create_stream(subject, name)
        assert client._publisher is not None
        pub = client._publisher._nats_pub
        assert pub is not None
        offsets, values = await _publish_and_read(client, name)
        assert not pub.raw_acks  # acks came as nats-py Msg objects to the callback
        assert "_process_msg" not in vars(nc)
        assert "parse" not in vars(nc._ps)
        assert len(published) == ONE_BY_ONE + BURST  # every one through nats-py's publish
    assert offsets == list(range(ONE_BY_ONE + BURST))
    assert values == EXPECTED_VALUES
    text = caplog.text
    assert "routing acks goes through nats-py's public path" in text
    assert "publishing goes through nats-py's public path" in text


@pytest.mark.usefixtures("fresh_logs")
async def test_grpc_over_h2_with_changed_h2_internals(
    liftbridge_server: Deployment,
    stream_names: StreamNames,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, "liftbridge_client._transport.h2.connection")
    monkeypatch.setattr(h2.connection, "H2Connection", BytesBufferH2)
    name, subject = stream_names("h2fallback")
    options = ClientOptions(
        ack_wait=10.0, transport=Transport.GRPC, stream_transport=StreamTransport.H2
    )
    async with Client(liftbridge_server.addresses, options=options) as client:
        await client.create_stream(subject, name)
        offsets, values = await _publish_and_read(client, name)
        pool = client._pool._h2
        assert pool is not None
        conns = list(pool._conns.values())
        assert conns  # publishing and subscribing went over the h2 transport
        for conn in conns:
            assert isinstance(conn._h2, BytesBufferH2)
            assert not conn._fast_data
    assert offsets == list(range(ONE_BY_ONE + BURST))
    assert values == EXPECTED_VALUES
    records = [r for r in caplog.records if "_data_to_send is not a bytearray" in r.getMessage()]
    assert len(records) == 1
    assert records[0].levelno == logging.DEBUG
