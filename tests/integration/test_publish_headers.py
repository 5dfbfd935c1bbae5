"""Headers on the one-step publish path, against a real server, over NATS and h2.

`Client.send` with a small plain headers dict skips the publisher's queue
(`envelope.plain_header_entries`); these tests check that the server stores what the
general path would have sent, and pin that the order of the header map's entries on the
wire does not matter to it (the one-step path writes them in the dict's order, Python's
protobuf in a hash order that changes per process).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from test_publish import new_stream, read_back

from liftbridge_client import Client, ClientOptions, Transport, errors
from liftbridge_client._proto import api_pb2
from liftbridge_client._publish.publisher import Publisher
from liftbridge_client.options import StreamTransport
from liftbridge_client.testing import Deployment, StreamName, StreamNames

pytestmark = pytest.mark.integration

# The one-step path over gRPC needs the h2 stream transport (grpc.aio takes messages).
ONE_STEP = pytest.mark.parametrize(
    ("transport", "stream_transport"),
    [(Transport.NATS, StreamTransport.GRPC), (Transport.GRPC, StreamTransport.H2)],
    ids=["nats", "h2"],
)
# What the server adds to every message it stores.
_SERVER_HEADERS = ("subject", "reply")

HEADERS: list[dict[str, bytes]] = [
    {"lbspark-id": b"0123456789abcdef:0:17"},  # the Spark sink's one header
    {"a": b"1", "b": b"2", "zz": bytes(range(256)), "": b"", "empty": b""},
    {"empty": b"", "": b"", "zz": bytes(range(256)), "b": b"2", "a": b"1"},  # reversed
    {"naïve-名前": b"\x00\xff"},  # a non-ASCII name
    {},  # no headers
]


@pytest.fixture
async def client(
    liftbridge_server: Deployment, stream_transport: StreamTransport
) -> AsyncIterator[Client]:
    options = ClientOptions(ack_wait=10.0, stream_transport=stream_transport)
    async with Client(
        liftbridge_server.addresses, nats_servers=[liftbridge_server.nats_url], options=options
    ) as c:
        yield c


def _general_calls(publisher: Publisher, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record every publish that enters the general path from now on."""
    calls: list[str] = []
    prepare = publisher._prepare

    def spy(stream: str, value: bytes, *args: Any) -> Any:
        calls.append(stream)
        return prepare(stream, value, *args)

    monkeypatch.setattr(publisher, "_prepare", spy)
    return calls


async def _warm_stream(
    client: Client, stream_names: StreamNames, transport: Transport
) -> StreamName:
    """A new stream with one message: the first publish looks the stream up (and over h2
    opens the leader's stream), so the next ones can take the one-step path."""
    stream = await new_stream(client, stream_names)
    await client.publish(stream.name, b"first", transport=transport)
    return stream


def _stored(message: api_pb2.Message) -> dict[str, bytes]:
    return {k: v for k, v in message.headers.items() if k not in _SERVER_HEADERS}


@ONE_STEP
async def test_headers_sent_in_one_step_are_stored(
    client: Client,
    stream_names: StreamNames,
    transport: Transport,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stream = await _warm_stream(client, stream_names, transport)
    general = _general_calls(client._require_open(), monkeypatch)
    futures = [
        await client.send(stream.name, b"v%d" % i, headers=headers, transport=transport)
        for i, headers in enumerate(HEADERS)
    ]
    futures.append(
        await client.send(stream.name, b"k", key=b"key", headers=HEADERS[0], transport=transport)
    )
    assert general == []  # every one took the one-step path
    acks = [await future for future in futures]
    assert [ack.offset for ack in acks] == list(range(1, len(HEADERS) + 2))
    messages = (await read_back(client, stream.name, len(HEADERS) + 2))[1:]
    assert [m.value for m in messages] == [b"v%d" % i for i in range(len(HEADERS))] + [b"k"]
    assert [_stored(m) for m in messages] == [*HEADERS, HEADERS[0]]
    assert messages[-1].key == b"key"
    for message in messages:
        assert message.headers["subject"] == stream.subject.encode()


@ONE_STEP
async def test_publish_and_publish_nowait_take_the_one_step_path_with_headers(
    client: Client,
    stream_names: StreamNames,
    transport: Transport,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stream = await _warm_stream(client, stream_names, transport)
    publisher = client._require_open()
    general = _general_calls(publisher, monkeypatch)
    # Each verb is one typed call into the publisher, whose one-step path takes it.
    one_step: list[bool] = []
    send_plain = publisher.send_plain

    def spy(*args: Any, **kwargs: Any) -> Any:
        fut = send_plain(*args, **kwargs)
        one_step.append(fut is not None)
        return fut

    monkeypatch.setattr(publisher, "send_plain", spy)
    ack = await client.publish(stream.name, b"p", headers=HEADERS[1], transport=transport)
    future = client.publish_nowait(stream.name, b"n", headers=HEADERS[2], transport=transport)
    assert general == []  # neither went through the queue,
    assert one_step == [True, True]  # but in one step each
    assert ack is not None
    assert ack.offset == 1
    assert (await future).offset == 2
    # Headers the one-step check refuses (a str value) still go the general path, typed.
    with pytest.raises(errors.InvalidInputError):
        await client.publish(stream.name, b"x", headers={"h": "str"}, transport=transport)  # type: ignore[dict-item]
    messages = (await read_back(client, stream.name, 3))[1:]
    assert [(m.value, _stored(m)) for m in messages] == [(b"p", HEADERS[1]), (b"n", HEADERS[2])]


@ONE_STEP
async def test_the_order_of_header_entries_does_not_matter_to_the_server(
    client: Client,
    stream_names: StreamNames,
    transport: Transport,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same headers in two insertion orders, each on the one-step path (entries in
    that order) and the general path (an explicit correlation id; protobuf's order): the
    server stores the same map, and acks each."""
    stream = await _warm_stream(client, stream_names, transport)
    forward, backward = HEADERS[1], HEADERS[2]
    assert list(forward) == list(reversed(backward))
    general = _general_calls(client._require_open(), monkeypatch)
    futures = []
    for i, headers in enumerate([forward, backward, forward, backward]):
        futures.append(
            await client.send(
                stream.name,
                b"v%d" % i,
                headers=headers,
                transport=transport,
                correlation_id=f"general-{i}" if i >= 2 else None,
            )
        )
    assert len(general) == 2  # the two with a correlation id
    acks = [await future for future in futures]
    assert [ack.offset for ack in acks] == [1, 2, 3, 4]
    messages = (await read_back(client, stream.name, 5))[1:]
    assert [_stored(m) for m in messages] == [forward] * 4
