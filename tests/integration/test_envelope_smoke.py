"""The envelope codec against the real server, over plain NATS (no Publisher involved).

Pins the server's behaviour: an enveloped Publish is stored and acked on its ack inbox,
with or without CRC; an envelope with a corrupted CRC is stored as raw bytes and not acked;
a plain NATS message is stored with its raw bytes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import nats
import nats.aio.client
import nats.aio.msg
import pytest

from liftbridge_client import Client, StartPosition, StopPosition, Transport, envelope, errors
from liftbridge_client._proto import api_pb2
from liftbridge_client.models import Message
from liftbridge_client.testing import StreamNames

pytestmark = pytest.mark.integration


@pytest.fixture
async def nc(liftbridge_server: Any) -> AsyncIterator[nats.aio.client.Client]:
    conn = await nats.connect(liftbridge_server.nats_url)
    yield conn
    await conn.close()


@pytest.fixture
async def client(liftbridge_server: Any) -> AsyncIterator[Client]:
    async with Client(liftbridge_server.addresses) as c:
        yield c


async def read_all(client: Client, stream: str) -> list[Message]:
    async with client.subscribe(
        stream, start=StartPosition.EARLIEST, stop=StopPosition.LATEST
    ) as sub:
        return [m async for m in sub]


async def wait_for_offset(client: Client, stream: str, offset: int) -> None:
    for _ in range(100):
        if (await client.fetch_partition_metadata(stream, 0)).newest_offset >= offset:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{stream} never reached offset {offset}")


@pytest.mark.parametrize("crc", [False, True])
async def test_enveloped_publish_is_stored_and_acked(
    client: Client, nc: nats.aio.client.Client, stream_names: StreamNames, crc: bool
) -> None:
    name, subject = stream_names("env")
    await client.create_stream(subject, name)
    inbox = nc.new_inbox()
    acks: asyncio.Queue[nats.aio.msg.Msg] = asyncio.Queue()
    await nc.subscribe(inbox, cb=acks.put)
    for i in range(3):
        data = envelope.encode_message(
            f"v{i}".encode(),
            key=b"k",
            headers={"h": b"x"},
            ack_inbox=inbox,
            correlation_id=f"cid-{i}",
            crc=crc,
        )
        await nc.publish(subject, data)
    got = [envelope.decode_ack((await asyncio.wait_for(acks.get(), 5)).data) for _ in range(3)]
    assert [a.correlationId for a in got] == ["cid-0", "cid-1", "cid-2"]
    assert [a.offset for a in got] == [0, 1, 2]
    assert {a.stream for a in got} == {name}
    assert {a.msgSubject for a in got} == {subject}
    assert all(a.ackError == api_pb2.Ack.OK for a in got)
    messages = await read_all(client, name)
    assert [(m.offset, m.value, m.key) for m in messages] == [
        (0, b"v0", b"k"),
        (1, b"v1", b"k"),
        (2, b"v2", b"k"),
    ]
    assert messages[0].headers["h"] == b"x"


async def test_corrupted_crc_is_stored_raw_and_not_acked(
    client: Client, nc: nats.aio.client.Client, stream_names: StreamNames
) -> None:
    name, subject = stream_names("crc")
    await client.create_stream(subject, name)
    inbox = nc.new_inbox()
    acks: asyncio.Queue[nats.aio.msg.Msg] = asyncio.Queue()
    await nc.subscribe(inbox, cb=acks.put)
    good = envelope.encode_message(b"value", ack_inbox=inbox, correlation_id="c", crc=True)
    corrupted = bytearray(good)
    corrupted[-1] ^= 0xFF  # payload changed, header CRC not
    with pytest.raises(errors.CrcMismatchError):
        envelope.decode(bytes(corrupted))
    await nc.publish(subject, bytes(corrupted))
    await wait_for_offset(client, name, 0)
    messages = await read_all(client, name)
    assert len(messages) == 1
    assert messages[0].value == bytes(corrupted)  # the whole envelope, as raw bytes
    await asyncio.sleep(0.5)
    assert acks.empty()


async def test_plain_nats_message_is_stored_with_its_raw_bytes(
    client: Client, nc: nats.aio.client.Client, stream_names: StreamNames
) -> None:
    name, subject = stream_names("plain")
    await client.create_stream(subject, name)
    await nc.publish(subject, b"not an envelope", reply="some.reply")
    await wait_for_offset(client, name, 0)
    (message,) = await read_all(client, name)
    assert message.value == b"not an envelope"
    assert message.key == b""
    # The server records the NATS subject and reply as headers too: kept in raw_headers,
    # not repeated in headers beside the fields.
    assert message.subject == subject
    assert message.reply_subject == "some.reply"
    assert message.headers == {}
    assert message.raw_headers == {"subject": subject.encode(), "reply": b"some.reply"}


async def test_server_headers_are_not_repeated_and_overwrite_the_publishers(
    liftbridge_server: Any, stream_names: StreamNames
) -> None:
    name, subject = stream_names("headers")
    async with Client(
        liftbridge_server.addresses, nats_servers=[liftbridge_server.nats_url]
    ) as client:
        await client.create_stream(subject, name)
        mine = {"subject": b"mine", "reply": b"also mine", "x": b"1"}
        for transport in (Transport.NATS, Transport.GRPC):
            await client.publish(name, b"v", headers=mine, transport=transport)
        messages = await read_all(client, name)
    assert len(messages) == 2
    for message in messages:
        # The server replaced the publisher's subject and reply headers with its own.
        assert message.headers == {"x": b"1"}
        assert message.raw_headers == {"x": b"1", "subject": subject.encode(), "reply": b""}
