"""gRPC over TLS and mutual TLS against a real node (certificates made for the test)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from liftbridge_client import (
    Client,
    ClientOptions,
    NatsAuth,
    StartPosition,
    StopPosition,
    TLSConfig,
    Transport,
    errors,
)
from liftbridge_client._proto import api_pb2
from liftbridge_client._transport.grpc import map_rpc_error
from liftbridge_client._transport.h2 import H2Pool, H2RpcError
from liftbridge_client.options import StreamTransport
from liftbridge_client.testing import ServerTLS, SingleNode, StreamNames, TestPKI, make_pki

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> TestPKI:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_node(pki: TestPKI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SingleNode]:
    with SingleNode(base_dir=tmp_path_factory.mktemp("tls"), tls=ServerTLS(pki)) as node:
        yield node


@pytest.fixture(scope="module")
def mtls_node(pki: TestPKI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SingleNode]:
    tls = ServerTLS(pki, client_auth=True)
    with SingleNode(base_dir=tmp_path_factory.mktemp("mtls"), tls=tls) as node:
        yield node


def quick(
    tls: TLSConfig | None, stream_transport: StreamTransport = StreamTransport.GRPC
) -> ClientOptions:
    return ClientOptions(
        tls=tls, connect_timeout=3.0, rpc_timeout=2.0, stream_transport=stream_transport
    )


BOTH = pytest.mark.parametrize(
    "stream_transport", [StreamTransport.GRPC, StreamTransport.H2], ids=["grpc", "h2"]
)


async def round_trip(client: Client, names: StreamNames) -> None:
    name, subject = names("tls")
    await client.create_stream(subject, name)
    ack = await client.publish(name, b"secret")  # gRPC: no NATS servers given
    assert ack is not None
    async with client.subscribe(name, start=StartPosition.EARLIEST, stop=StopPosition.LATEST) as s:
        assert [m.value async for m in s] == [b"secret"]


@BOTH
async def test_tls_with_the_ca(
    tls_node: SingleNode, pki: TestPKI, stream_names: StreamNames, stream_transport: StreamTransport
) -> None:
    options = quick(TLSConfig(ca_file=pki.ca_cert), stream_transport)
    async with Client(tls_node.addresses, options=options) as c:
        await round_trip(c, stream_names)


async def test_plaintext_client_cannot_talk_to_a_tls_server(tls_node: SingleNode) -> None:
    with pytest.raises(errors.NoBrokerAvailableError):
        await Client(tls_node.addresses, options=quick(None)).connect()


async def test_unknown_ca_is_refused(tls_node: SingleNode, tmp_path: Path) -> None:
    other = make_pki(tmp_path / "other")
    with pytest.raises(errors.NoBrokerAvailableError):
        await Client(tls_node.addresses, options=quick(TLSConfig(ca_file=other.ca_cert))).connect()


@BOTH
async def test_mutual_tls_with_a_client_certificate(
    mtls_node: SingleNode,
    pki: TestPKI,
    stream_names: StreamNames,
    stream_transport: StreamTransport,
) -> None:
    tls = TLSConfig(ca_file=pki.ca_cert, cert_file=pki.client_cert, key_file=pki.client_key)
    async with Client(mtls_node.addresses, options=quick(tls, stream_transport)) as c:
        await round_trip(c, stream_names)


async def _h2_subscribe_missing(node: SingleNode, tls: TLSConfig) -> H2RpcError:
    """Subscribe over the h2 transport alone to a missing stream; the error it gets."""
    pool = H2Pool(quick(tls, StreamTransport.H2))
    request = api_pb2.SubscribeRequest(stream="no-such-stream").SerializeToString()
    try:
        call = pool.server_stream(
            node.addresses[0], "/proto.API/Subscribe", request, api_pb2.Message.FromString
        )
        with pytest.raises(H2RpcError) as info:
            await call.read()
        return info.value
    finally:
        await pool.close()


async def test_h2_checks_the_server_name_override(tls_node: SingleNode, pki: TestPKI) -> None:
    # The server's certificate names localhost and 127.0.0.1: the override is what is checked.
    ok = await _h2_subscribe_missing(
        tls_node, TLSConfig(ca_file=pki.ca_cert, server_name="localhost")
    )
    assert isinstance(map_rpc_error(ok), errors.NotFoundError)  # TLS worked; the server answered
    bad = await _h2_subscribe_missing(
        tls_node, TLSConfig(ca_file=pki.ca_cert, server_name="not-the-server.test")
    )
    assert bad.code() is grpc.StatusCode.UNAVAILABLE
    assert "not-the-server.test" in bad.details() or "certificate" in bad.details().lower()


async def test_h2_refused_by_mutual_tls_without_a_certificate(
    mtls_node: SingleNode, pki: TestPKI
) -> None:
    refused = await _h2_subscribe_missing(mtls_node, TLSConfig(ca_file=pki.ca_cert))
    assert isinstance(map_rpc_error(refused), errors.UnavailableError)


async def test_mutual_tls_refuses_a_client_without_certificate(
    mtls_node: SingleNode, pki: TestPKI
) -> None:
    with pytest.raises(errors.NoBrokerAvailableError):
        await Client(mtls_node.addresses, options=quick(TLSConfig(ca_file=pki.ca_cert))).connect()


# ---------------------------------------------------------------- NATS credentials


@pytest.fixture(scope="module")
def nats_auth_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SingleNode]:
    base = tmp_path_factory.mktemp("natsauth")
    with SingleNode(base_dir=base, nats_credentials=("lbuser", "s3cret-pass")) as node:
        yield node


async def test_nats_credentials(nats_auth_node: SingleNode, stream_names: StreamNames) -> None:
    opts = ClientOptions(
        nats_auth=NatsAuth(user="lbuser", password="s3cret-pass"), connect_timeout=3.0
    )
    async with Client(
        nats_auth_node.addresses, nats_servers=[nats_auth_node.nats_url], options=opts
    ) as c:
        name, subject = stream_names("natsauth")
        await c.create_stream(subject, name)
        ack = await c.publish(name, b"over authenticated NATS", transport=Transport.NATS)
        assert ack is not None
        assert ack.offset == 0
        assert "s3cret-pass" not in repr(c)
        assert "s3cret-pass" not in repr(c.options)


async def test_wrong_nats_password_fails_connect(nats_auth_node: SingleNode) -> None:
    opts = ClientOptions(nats_auth=NatsAuth(user="lbuser", password="wrong"), connect_timeout=3.0)
    client = Client(nats_auth_node.addresses, nats_servers=[nats_auth_node.nats_url], options=opts)
    with pytest.raises(errors.NatsUnreachableError, match="Authorization Violation") as info:
        await client.connect()
    assert "wrong" not in str(info.value)  # the password never shows
