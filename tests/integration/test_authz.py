"""Authorization (casbin) on a real node with mutual TLS: denials are `PermissionDeniedError`.

The v1.9.0 server answers a denied unary or streaming call with UNKNOWN "The client is not
authorized to call X on resource Y", and a denied PublishAsync message with the async
error PERMISSION_DENIED; the client turns each into `PermissionDeniedError` (not
retriable). Two server behaviours are pinned here because users must know them:

- a PublishAsync message that was denied is stored anyway (the server reports the
  denial, then publishes it: a missing ``continue`` in v1.9.0's api.go); its late ack is
  counted as unknown;
- publishes straight over NATS are not subject to Liftbridge authorization at all (NATS
  permissions are the only guard there; see docs/security.md).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest

from liftbridge_client import (
    Client,
    ClientOptions,
    StartPosition,
    StopPosition,
    TLSConfig,
    Transport,
    errors,
)
from liftbridge_client.testing import AuthzPolicy, ServerTLS, SingleNode, make_pki, wait_until
from liftbridge_client.testing._tls import CLIENT_CN

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class Names:
    ok: str  # every call allowed
    ro: str  # create and subscribe only
    wo: str  # create and publish only
    missing: str  # nothing allowed


@dataclass(frozen=True)
class AuthzNode:
    node: SingleNode
    tls: TLSConfig
    names: Names


@pytest.fixture(scope="module")
def authz(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthzNode]:
    work = tmp_path_factory.mktemp("authz")
    pki = make_pki(work / "pki")
    tag = uuid.uuid4().hex[:8]
    names = Names(f"authz-ok-{tag}", f"authz-ro-{tag}", f"authz-wo-{tag}", f"authz-no-{tag}")
    every = (
        "CreateStream",
        "DeleteStream",
        "Publish",
        "Subscribe",
        "FetchPartitionMetadata",
        "SetCursor",
        "FetchCursor",
    )
    rules = [(CLIENT_CN, names.ok, action) for action in every]
    rules += [(CLIENT_CN, names.ro, a) for a in ("CreateStream", "Subscribe")]
    rules += [(CLIENT_CN, names.wo, a) for a in ("CreateStream", "Publish")]
    rules += [(CLIENT_CN, "__cursors", "Publish")]  # cursors are stored by publishing
    policy = AuthzPolicy(rules)
    with SingleNode(
        base_dir=work / "node",
        tls=ServerTLS(pki, client_auth=True),
        settings=policy.settings(work / "policy"),
    ) as node:
        tls = TLSConfig(ca_file=pki.ca_cert, cert_file=pki.client_cert, key_file=pki.client_key)
        yield AuthzNode(node, tls, names)


@pytest.fixture
async def client(authz: AuthzNode) -> AsyncIterator[Client]:
    async with Client(
        authz.node.addresses,
        nats_servers=[authz.node.nats_url],
        options=ClientOptions(tls=authz.tls, ack_wait=10, transport=Transport.GRPC),
    ) as c:
        yield c


@pytest.fixture
async def streams(client: Client, authz: AuthzNode) -> Names:
    n = authz.names
    for name in (n.ok, n.ro, n.wo):
        await client.create_stream(f"authz.{name}", name, exist_ok=True)
    return n


def denied(info: pytest.ExceptionInfo[errors.PermissionDeniedError], call: str, obj: str) -> None:
    err = info.value
    assert type(err) is errors.PermissionDeniedError
    assert not err.retriable
    assert f"not authorized to call {call} on resource {obj}" in str(err)


async def test_allowed_calls_work(client: Client, streams: Names) -> None:
    ack = await client.publish(streams.ok, b"allowed")
    await client.set_cursor("reader", streams.ok, ack.offset)
    assert await client.fetch_cursor("reader", streams.ok) == ack.offset
    info = await client.fetch_partition_metadata(streams.ok)
    assert info.newest_offset >= ack.offset
    async with client.subscribe(
        streams.ok, start_offset=ack.offset, stop=StopPosition.LATEST
    ) as sub:
        assert [m.value async for m in sub] == [b"allowed"]


async def test_admin_denials(client: Client, streams: Names) -> None:
    with pytest.raises(errors.PermissionDeniedError) as info:
        await client.create_stream(f"authz.{streams.missing}", streams.missing)
    denied(info, "CreateStream", streams.missing)
    with pytest.raises(errors.PermissionDeniedError) as info:
        await client.delete_stream(streams.ro)
    denied(info, "DeleteStream", streams.ro)
    with pytest.raises(errors.PermissionDeniedError) as info:
        await client.pause_stream(streams.ro)
    denied(info, "PauseStream", streams.ro)
    with pytest.raises(errors.PermissionDeniedError) as info:
        await client.set_stream_readonly(streams.ro)
    denied(info, "SetStreamReadonly", streams.ro)
    with pytest.raises(errors.PermissionDeniedError) as info:
        await client.fetch_partition_metadata(streams.wo)
    denied(info, "FetchPartitionMetadata", streams.wo)
    with pytest.raises(errors.PermissionDeniedError) as info:
        await client.set_cursor("reader", streams.ro, 0)
    denied(info, "SetCursor", streams.ro)
    assert streams.ro in (await client.fetch_metadata()).streams  # still there


async def test_subscribe_denial(client: Client, streams: Names) -> None:
    with pytest.raises(errors.PermissionDeniedError) as info:
        async with client.subscribe(streams.wo, start=StartPosition.EARLIEST) as sub:
            await sub.next(timeout=10)
    denied(info, "Subscribe", streams.wo)


async def test_publish_denials_and_the_message_stored_anyway(
    client: Client, streams: Names
) -> None:
    async def contents() -> list[bytes]:
        async with client.subscribe(
            streams.ro, start=StartPosition.EARLIEST, stop=StopPosition.LATEST
        ) as sub:
            return [m.value async for m in sub]

    before = await contents()
    marker = uuid.uuid4().hex.encode()
    with pytest.raises(errors.PermissionDeniedError) as info:
        await client.publish(streams.ro, marker, transport=Transport.GRPC)
    denied(info, "Publish", streams.ro)
    with pytest.raises(errors.PermissionDeniedError) as subject_info:
        await client.publish_to_subject(f"authz.{streams.ro}", b"to the subject")
    denied(subject_info, "PublishToSubject", f"authz.{streams.ro}")
    # v1.9.0 stores the denied PublishAsync message all the same, and acks it later.
    await wait_until(lambda: client.stats().unknown_acks >= 1, timeout=10, what="a late ack")
    after = await contents()
    assert after[len(before) :] == [marker]


async def test_nats_publishes_bypass_liftbridge_authorization(
    client: Client, streams: Names
) -> None:
    ack = await client.publish(streams.ro, b"over nats", transport=Transport.NATS)
    assert ack.stream == streams.ro
