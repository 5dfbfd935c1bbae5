"""Forged acks on the client's NATS ack inbox do not settle its publishes.

Anyone who may publish on the NATS account can send to the client's ack inbox: a
hand-made Ack, or a message on another stream's subject that carries the client's inbox
and a pending correlation id (the server then sends a real Ack, for the wrong stream).
Before the fix either one resolved the pending publish. Now both are counted in
``Client.stats().mismatched_acks`` and dropped, and the real ack still resolves it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import nats
import pytest

from liftbridge_client import Client, ClientOptions, Transport, envelope
from liftbridge_client._proto import api_pb2
from liftbridge_client.testing import SingleNode, wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
async def client(liftbridge_server: SingleNode) -> AsyncIterator[Client]:
    async with Client(
        liftbridge_server.addresses,
        nats_servers=[liftbridge_server.nats_url],
        options=ClientOptions(ack_wait=60),
    ) as c:
        yield c


async def test_forged_acks_are_counted_and_dropped_and_the_real_ack_resolves(
    client: Client, liftbridge_server: SingleNode
) -> None:
    tag = uuid.uuid4().hex[:10]
    target, target_subject = f"forge-target-{tag}", f"forge.target.{tag}"
    other, other_subject = f"forge-other-{tag}", f"forge.other.{tag}"
    await client.create_stream(target_subject, target)
    await client.create_stream(other_subject, other)
    inbox = client._publisher.ack_inbox if client._publisher else None
    assert inbox is not None

    attacker = await nats.connect(liftbridge_server.nats_url)
    try:
        # Watch the target's subject to get the client's real message off the wire.
        tap = await attacker.subscribe(target_subject)
        await attacker.flush()
        # Paused, the target's leader stops listening: the publish stays pending.
        await client.pause_stream(target)
        cid = f"victim-{tag}"
        fut = client.publish_nowait(target, b"real", correlation_id=cid)
        original = await tap.next_msg(timeout=10)

        # 1. A hand-made Ack naming another stream.
        forged = api_pb2.Ack(stream=other, msgSubject=other_subject, correlationId=cid, offset=999)
        await attacker.publish(inbox, envelope.encode_ack(forged))
        # 2. A publish on another stream carrying the client's inbox and the pending id:
        #    that stream's server answers with a genuine Ack for the wrong stream.
        await attacker.publish(
            other_subject,
            envelope.encode_message(b"decoy", ack_inbox=inbox, correlation_id=cid),
        )
        # 3. The right stream but another partition's subject.
        wrong_partition = api_pb2.Ack(
            stream=target, msgSubject=f"{target_subject}.1", correlationId=cid, offset=998
        )
        await attacker.publish(inbox, envelope.encode_ack(wrong_partition))
        await attacker.flush()
        await wait_until(
            lambda: client.stats().mismatched_acks == 3, timeout=20, what="3 mismatched acks"
        )
        assert not fut.done()
        assert client.stats().pending == 1
        assert client.stats().unknown_acks == 0

        # The decoy really was stored (the server did ack it, to the wrong inbox owner).
        decoy = await client.fetch_partition_metadata(other)
        assert decoy.newest_offset == 0

        # Resume the target (a gRPC publish does), then let the server see the client's
        # original message again: its ack names the target and resolves the publish.
        first = await client.publish(target, b"resume", transport=Transport.GRPC)
        assert first.offset == 0
        while not fut.done():
            await attacker.publish(target_subject, original.data)
            await attacker.flush()
            await asyncio.wait({fut}, timeout=0.5)
        ack = fut.result()
        assert ack.stream == target
        assert ack.msg_subject == target_subject
        assert ack.offset >= 1
        assert client.stats().mismatched_acks == 3
    finally:
        await attacker.close()


async def test_ack_inbox_under_a_custom_prefix(liftbridge_server: SingleNode) -> None:
    """NATS permissions can then give each user its own inbox space (docs/security.md)."""
    opts = ClientOptions(nats_inbox_prefix="_INBOX_forgetest")
    async with Client(
        liftbridge_server.addresses, nats_servers=[liftbridge_server.nats_url], options=opts
    ) as c:
        tag = uuid.uuid4().hex[:10]
        await c.create_stream(f"forge.prefix.{tag}", f"forge-prefix-{tag}")
        ack = await c.publish(f"forge-prefix-{tag}", b"v", transport=Transport.NATS)
        assert ack.ack_inbox.startswith("_INBOX_forgetest.")
