"""NATS over mutual TLS with nkey authentication, against a real node whose NATS demands both.

The node's embedded NATS requires TLS with a client certificate signed by the test CA
(``verify``) and authenticates users by nkey (the node itself by user and password).
The client configures NATS like gRPC: ``ClientOptions.nats_tls`` (a `TLSConfig`) and
``NatsAuth(nkey_seed_file=...)``.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_read_sizes import BIG, peak_during

from liftbridge_client import (
    AckPolicy,
    Client,
    ClientOptions,
    NatsAuth,
    StartPosition,
    StopPosition,
    TLSConfig,
    Transport,
    errors,
)
from liftbridge_client._transport.nats_shortcuts import READ_SIZE
from liftbridge_client.testing import (
    NatsServer,
    NkeyUser,
    ServerTLS,
    SingleNode,
    TestPKI,
    make_nkey_user,
    make_operator_setup,
    make_pki,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> TestPKI:
    return make_pki(tmp_path_factory.mktemp("nats-pki"))


@pytest.fixture(scope="module")
def nkey_user(tmp_path_factory: pytest.TempPathFactory) -> NkeyUser:
    return make_nkey_user(tmp_path_factory.mktemp("nkeys"), "client")


@pytest.fixture(scope="module")
def secure_node(
    pki: TestPKI, nkey_user: NkeyUser, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SingleNode]:
    with SingleNode(
        base_dir=tmp_path_factory.mktemp("nats-secure"),
        nats_tls=ServerTLS(pki, client_auth=True),
        nats_nkeys=[nkey_user.public_key],
    ) as node:
        yield node


def options(
    pki: TestPKI,
    auth: NatsAuth | None,
    *,
    client_cert: bool = True,
    server_name: str | None = None,
    tls: bool = True,
    connect_timeout: float = 3.0,
) -> ClientOptions:
    nats_tls = (
        TLSConfig(
            ca_file=pki.ca_cert,
            cert_file=pki.client_cert if client_cert else None,
            key_file=pki.client_key if client_cert else None,
            server_name=server_name,
        )
        if tls
        else None
    )
    return ClientOptions(nats_tls=nats_tls, nats_auth=auth, connect_timeout=connect_timeout)


@contextlib.asynccontextmanager
async def tls_client_and_stream(
    node: SingleNode, opts: ClientOptions
) -> AsyncIterator[tuple[Client, str]]:
    """A client of ``node`` with ``opts``, and a new stream's name."""
    tag = uuid.uuid4().hex[:10]
    name = f"natssec-{tag}"
    async with Client(node.addresses, nats_servers=[node.nats_url], options=opts) as client:
        await client.create_stream(f"natssec.{tag}", name)
        yield client, name


async def test_publish_over_nats_with_mutual_tls_and_an_nkey(
    secure_node: SingleNode, pki: TestPKI, nkey_user: NkeyUser
) -> None:
    opts = options(pki, NatsAuth(nkey_seed_file=nkey_user.seed_file))
    assert str(nkey_user.seed_file) in repr(opts)  # the path, never the seed
    assert nkey_user.seed_file.read_text()[:10] not in repr(opts)
    async with tls_client_and_stream(secure_node, opts) as (client, name):
        ack = await client.publish(name, b"over tls", transport=Transport.NATS)
        assert ack.offset == 0
        async with client.subscribe(
            name, start=StartPosition.EARLIEST, stop=StopPosition.LATEST
        ) as sub:
            assert [m.value async for m in sub] == [b"over tls"]


async def test_over_tls_a_lone_publish_reads_no_256_kib_at_once(
    secure_node: SingleNode, pki: TestPKI, nkey_user: NkeyUser
) -> None:
    # The SSL protocol reads the decrypted bytes with SSLObject.read(max_size): 256 KiB,
    # allocated in full for each read, unless the client lowers it (tests/integration/
    # test_read_sizes.py has the plain TCP and h2 cases).
    opts = options(pki, NatsAuth(nkey_seed_file=nkey_user.seed_file))
    async with tls_client_and_stream(secure_node, opts) as (client, name):
        await client.publish(name, b"first", transport=Transport.NATS)
        nc: Any = client._nats
        assert nc._transport._io_writer.transport._ssl_protocol.max_size == READ_SIZE

        async def publish() -> None:
            for i in range(30):
                await client.publish(name, b"m%d" % i, transport=Transport.NATS)

        assert await peak_during(publish) < BIG


async def test_server_name_override(
    secure_node: SingleNode, pki: TestPKI, nkey_user: NkeyUser
) -> None:
    auth = NatsAuth(nkey_seed_file=nkey_user.seed_file)
    # The server certificate names localhost and 127.0.0.1.
    async with Client(
        secure_node.addresses,
        nats_servers=[secure_node.nats_url],
        options=options(pki, auth, server_name="localhost"),
    ) as client:
        assert client.stats().pending == 0
    with pytest.raises(errors.NatsUnreachableError, match="NATS"):
        await Client(
            secure_node.addresses,
            nats_servers=[secure_node.nats_url],
            options=options(pki, auth, server_name="not-the-server.example", connect_timeout=1.5),
        ).connect()


@pytest.mark.parametrize(
    "case", ["no tls", "no client certificate", "no credentials", "unknown nkey"]
)
async def test_nats_refuses_a_client_missing_a_requirement(
    secure_node: SingleNode, pki: TestPKI, nkey_user: NkeyUser, tmp_path: Path, case: str
) -> None:
    auth: NatsAuth | None = NatsAuth(nkey_seed_file=nkey_user.seed_file)
    kw: dict[str, Any] = {"connect_timeout": 1.5}  # refused: no need to wait long
    if case == "no tls":
        kw["tls"] = False
    elif case == "no client certificate":
        kw["client_cert"] = False
    elif case == "no credentials":
        auth = None
    else:
        auth = NatsAuth(nkey_seed_file=make_nkey_user(tmp_path, "stranger").seed_file)
    with pytest.raises(errors.NatsUnreachableError, match="NATS"):
        await Client(
            secure_node.addresses,
            nats_servers=[secure_node.nats_url],
            options=options(pki, auth, **kw),
        ).connect()


async def test_local_problems_are_typed_errors(secure_node: SingleNode, tmp_path: Path) -> None:
    missing = NatsAuth(nkey_seed_file=tmp_path / "missing.nk")
    with pytest.raises(errors.InvalidInputError, match="nkey_seed_file"):
        await Client(
            secure_node.addresses,
            nats_servers=[secure_node.nats_url],
            options=ClientOptions(nats_auth=missing),
        ).connect()
    bad_ca = tmp_path / "ca.pem"
    bad_ca.write_text("not a certificate")
    with pytest.raises(errors.InvalidInputError, match="nats_tls"):
        await Client(
            secure_node.addresses,
            nats_servers=[secure_node.nats_url],
            options=ClientOptions(nats_tls=TLSConfig(ca_file=bad_ca)),
        ).connect()


@pytest.fixture(scope="module")
def operator_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NatsServer, Path]]:
    """A standalone nats-server in operator (JWT) mode and a user's credentials file."""
    work = tmp_path_factory.mktemp("nats-operator")
    setup = make_operator_setup(work / "keys", "orders")
    server = NatsServer(work / "server", config=setup.server_config).start()
    try:
        yield server, setup.creds_file
    finally:
        server.stop()


async def test_credentials_file(
    liftbridge_server: SingleNode, operator_nats: tuple[NatsServer, Path], tmp_path: Path
) -> None:
    """NATS authenticates the client by its creds file (JWT + seed). A v1.9.0 node cannot
    join an operator-mode NATS itself, so gRPC goes to the session's node and the NATS
    publish (ack policy NONE: resolved once written) only proves the connection works."""
    server, creds = operator_nats
    opts = ClientOptions(nats_auth=NatsAuth(creds_file=creds), connect_timeout=3.0)
    tag = uuid.uuid4().hex[:10]
    async with Client(
        liftbridge_server.addresses, nats_servers=[server.url], options=opts
    ) as client:
        await client.create_stream(f"natscreds.{tag}", f"natscreds-{tag}")
        # Returns once nats-py wrote it: the connection is authenticated and usable.
        await client.publish(
            f"natscreds-{tag}", b"v", transport=Transport.NATS, ack_policy=AckPolicy.NONE
        )
        assert client.stats().pending == 0
        await client.flush(timeout=5)
    stranger = make_operator_setup(tmp_path / "other", "stranger").creds_file
    with pytest.raises(errors.NatsUnreachableError, match="NATS"):
        await Client(
            liftbridge_server.addresses,
            nats_servers=[server.url],
            options=ClientOptions(nats_auth=NatsAuth(creds_file=stranger), connect_timeout=1.5),
        ).connect()
