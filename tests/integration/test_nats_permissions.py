"""The NATS permissions docs/security.md recommends stop forged acks at the NATS server.

Each client user may publish only on its streams' subjects and subscribe only to its own
inbox prefix; only the Liftbridge servers' user may publish on inboxes. A second user then
cannot read the client's acks, forge one, or publish decoys on the client's stream.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import nats
import pytest

from liftbridge_client import (
    Client,
    ClientOptions,
    NatsAuth,
    StartPosition,
    StopPosition,
    Transport,
    envelope,
)
from liftbridge_client._proto import api_pb2
from liftbridge_client.testing import SingleNode, wait_until

pytestmark = pytest.mark.integration


def user(name: str) -> dict[str, object]:
    return {
        "user": name,
        "password": f"{name}-password",
        "permissions": {
            "publish": {"allow": [f"perm.{name}.>"]},
            "subscribe": {"allow": [f"_INBOX_{name}.>"]},
        },
    }


@pytest.fixture(scope="module")
def locked_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SingleNode]:
    with SingleNode(
        base_dir=tmp_path_factory.mktemp("nats-perms"),
        nats_users=[user("orders"), user("mallory")],
    ) as node:
        yield node


async def test_permissions_keep_another_user_off_the_inbox(locked_node: SingleNode) -> None:
    opts = ClientOptions(
        nats_auth=NatsAuth(user="orders", password="orders-password"),
        nats_inbox_prefix="_INBOX_orders",
        ack_wait=30,
    )
    tag = uuid.uuid4().hex[:10]
    name, subject = f"perm-orders-{tag}", f"perm.orders.{tag}"
    async with Client(
        locked_node.addresses, nats_servers=[locked_node.nats_url], options=opts
    ) as client:
        await client.create_stream(subject, name)
        ack = await client.publish(name, b"allowed", transport=Transport.NATS)
        assert ack.ack_inbox.startswith("_INBOX_orders.")

        await client.pause_stream(name)  # keeps the next publish pending
        cid = f"pending-{tag}"
        fut = client.publish_nowait(name, b"pending", correlation_id=cid)

        violations: list[str] = []

        async def on_error(exc: Exception) -> None:
            violations.append(str(exc).lower())

        mallory = await nats.connect(
            locked_node.nats_url,
            user="mallory",
            password="mallory-password",
            error_cb=on_error,
            allow_reconnect=False,
        )
        try:
            await mallory.subscribe("_INBOX_orders.>")  # to learn correlation ids
            forged = api_pb2.Ack(stream=name, msgSubject=subject, correlationId=cid, offset=7)
            await mallory.publish(ack.ack_inbox, envelope.encode_ack(forged))
            decoy = envelope.encode_message(b"decoy", ack_inbox=ack.ack_inbox, correlation_id=cid)
            await mallory.publish(subject, decoy)
            await mallory.flush()
            await wait_until(
                lambda: sum("permissions violation" in v for v in violations) >= 3,
                timeout=10,
                what="three permission violations",
            )
        finally:
            await mallory.close()
        stats = client.stats()
        assert (stats.mismatched_acks, stats.unknown_acks, stats.pending) == (0, 0, 1)
        assert not fut.done()
        async with client.subscribe(
            name, start=StartPosition.EARLIEST, stop=StopPosition.LATEST, resume=True
        ) as sub:
            assert [m.value async for m in sub] == [b"allowed"]  # no decoy stored
        await client.close(drain=False)
