"""Whole deployments a test talks to: one node, a 3-node cluster, or servers run elsewhere.

All of them satisfy :class:`Deployment`: gRPC ``addresses`` (``host:port``), a ``nats_url``
and the tails of their servers' logs. Local deployments are context managers that start on
entry and stop every process on exit; a ``weakref.finalize`` (which also runs at interpreter
exit) stops them and removes their temporary directory if ``close`` is never called.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import uuid
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Protocol, Self, runtime_checkable

from liftbridge_client.testing._config import (
    CLUSTER_SETTINGS,
    NatsServerTLS,
    NodeConfig,
    Setting,
    StrPath,
    default_log_level,
    nats_embedded_config,
    nats_url,
)
from liftbridge_client.testing._errors import ConfigError, ServerStartError
from liftbridge_client.testing._probe import wait_serving
from liftbridge_client.testing._process import ServerProcess, free_ports
from liftbridge_client.testing._provision import LIFTBRIDGE_VERSION, liftbridge_binary
from liftbridge_client.testing._servers import LiftbridgeNode, NatsServer
from liftbridge_client.testing._tls import ServerTLS
from liftbridge_client.testing._topology import ClusterTopology, SingleNodeTopology
from liftbridge_client.testing._versions import server_version

__all__ = [
    "ENV_ADDRS",
    "ENV_NATS_URL",
    "Cluster",
    "Deployment",
    "ExternalDeployment",
    "SingleNode",
]

ENV_ADDRS = "LIFTBRIDGE_ADDRS"
ENV_NATS_URL = "LIFTBRIDGE_NATS_URL"

_log = logging.getLogger(__name__)


@runtime_checkable
class Deployment(Protocol):
    """What a test needs to reach a Liftbridge deployment."""

    @property
    def addresses(self) -> list[str]:
        """gRPC addresses of the brokers, ``host:port``."""
        ...

    @property
    def nats_url(self) -> str:
        """URL of the NATS server the brokers use."""
        ...

    def log_tails(self, lines: int = 80) -> dict[str, str]:
        """The last ``lines`` lines of each server's log, by server name (may be empty)."""
        ...


def _namespace() -> str:
    return f"lbtest-{uuid.uuid4().hex[:10]}"


def _shutdown(groups: Sequence[Sequence[ServerProcess]], owned_dir: Path | None) -> None:
    """Stop process groups in order (each group interrupted at once), then remove the dir."""
    for group in groups:
        for process in group:
            process.interrupt()
        for process in group:
            process.stop()
    if owned_dir is not None:
        shutil.rmtree(owned_dir, ignore_errors=True)


class _LocalDeployment:
    """Shared lifecycle of deployments whose servers run here."""

    def _setup_dir(self, base_dir: StrPath | None, prefix: str) -> Path:
        if base_dir is not None:
            root = Path(base_dir)
            root.mkdir(parents=True, exist_ok=True)
            self._owned_dir: Path | None = None
            return root
        self._owned_dir = Path(tempfile.mkdtemp(prefix=prefix))
        return self._owned_dir

    def _servers(self) -> list[LiftbridgeNode | NatsServer]:
        raise NotImplementedError

    def start(self) -> Self:
        """Start every server and wait until the deployment is usable."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        if not any(server.running for server in self._servers()):
            self.start()
        return self

    def _arm_finalizer(self, groups: Sequence[Sequence[ServerProcess]]) -> None:
        self._finalizer = weakref.finalize(self, _shutdown, groups, self._owned_dir)

    def close(self) -> None:
        """Stop every server (graceful, SIGKILL after 15 s) and remove an owned temp dir."""
        self._finalizer()

    def log_tails(self, lines: int = 80) -> dict[str, str]:
        """The last ``lines`` lines of each server's log, by process name."""
        return {server.process.name: server.tail(lines) for server in self._servers()}

    def unexpected_exits(self) -> dict[str, int | None]:
        """Servers that exited without the harness stopping them: name -> exit status."""
        return {
            server.process.name: server.returncode
            for server in self._servers()
            if server.exited_unexpectedly
        }

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class SingleNode(SingleNodeTopology[LiftbridgeNode], _LocalDeployment):
    """One Liftbridge node with an embedded NATS server, both on 127.0.0.1.

    It seeds its own Raft group and has the cursors stream enabled. ``settings`` adds
    Liftbridge config keys (dotted, e.g. ``{"streams.retention.max.age": "1h"}``).
    """

    def __init__(
        self,
        *,
        base_dir: StrPath | None = None,
        settings: Mapping[str, Setting] | None = None,
        binary: StrPath | None = None,
        server_id: str = "n1",
        tls: ServerTLS | None = None,
        nats_credentials: tuple[str, str] | None = None,
        nats_tls: ServerTLS | None = None,
        nats_nkeys: Sequence[str] = (),
        nats_users: Sequence[Mapping[str, object]] = (),
        version: str = LIFTBRIDGE_VERSION,
        port: int | None = None,
        nats_port: int | None = None,
        log_level: str | None = None,
        namespace: str | None = None,
    ) -> None:
        """Pick ports and write the configuration; :meth:`start` (or ``with``) runs it.

        ``version`` is the server version to run (``v1.9.0``, ``v1.7.1``, ``master``; see
        :data:`~liftbridge_client.testing.KNOWN_VERSIONS`). ``tls`` serves the gRPC API
        over TLS (see :func:`make_pki`). ``port`` (gRPC) and ``nats_port`` fix the ports;
        None (or 0) picks free ones. ``log_level`` is the node's ``logging.level`` (``debug``,
        ``info``, ``warn``, ``error``); None takes ``$LIFTBRIDGE_LOG_LEVEL``, else ``info``.
        ``nats_credentials`` (user, password) makes the embedded NATS require them (the
        node itself is configured with them too). ``nats_tls`` makes the embedded NATS
        require TLS, and with ``client_auth`` a client certificate (the node presents the
        PKI's client certificate). ``nats_nkeys`` (public user keys, see
        :func:`make_nkey_user`) are NATS users that authenticate with their seeds; the
        node then gets a user and password of its own unless ``nats_credentials`` says.
        ``nats_users`` are more NATS users, as entries of NATS's ``authorization.users``
        (with ``permissions`` if wanted); the node again gets a user of its own.
        ``namespace`` is the node's ``clustering.namespace`` (it prefixes the cursors
        stream's subject); None picks a unique ``lbtest-...`` one.
        """
        root = self._setup_dir(base_dir, "liftbridge-single-")
        workdir = root / server_id
        workdir.mkdir(parents=True, exist_ok=True)
        free_port, free_nats_port = free_ports(2)
        port = port or free_port
        self.nats_port = nats_port or free_nats_port
        nats_config = workdir / "nats.conf"
        if (nats_nkeys or nats_users) and nats_credentials is None:
            nats_credentials = ("liftbridge", uuid.uuid4().hex)
        server_tls = None
        if nats_tls is not None:
            pki = nats_tls.pki
            server_tls = NatsServerTLS(
                pki.server_cert, pki.server_key, pki.ca_cert, verify=nats_tls.client_auth
            )
        nats_config.write_text(
            nats_embedded_config(
                self.nats_port,
                nats_credentials,
                tls=server_tls,
                nkeys=nats_nkeys,
                users=nats_users,
            )
        )
        auth: dict[str, Setting] = {}
        if nats_credentials is not None:
            auth = {"nats.user": nats_credentials[0], "nats.password": nats_credentials[1]}
        if nats_tls is not None:
            auth["nats.tls.cert"] = str(nats_tls.pki.client_cert)
            auth["nats.tls.key"] = str(nats_tls.pki.client_key)
            auth["nats.tls.ca"] = str(nats_tls.pki.ca_cert)
        config = NodeConfig(
            server_id=server_id,
            port=port,
            data_dir=workdir / "data",
            nats_servers=(nats_url(self.nats_port),),
            namespace=namespace or _namespace(),
            embedded_nats_config=nats_config,
            bootstrap_seed=True,
            log_level=log_level or default_log_level(),
            extra={**(tls.settings() if tls else {}), **auth, **(settings or {})},
        )
        self.tls = tls
        self.version = server_version(version).name
        self.node = LiftbridgeNode(
            config,
            workdir,
            binary=binary,
            probe_credentials=tls.probe_credentials() if tls else None,
            version=self.version,
        )
        self._arm_finalizer([[self.node.process]])

    def __repr__(self) -> str:
        """Address and NATS URL."""
        return f"<SingleNode {self.version} {self.address} nats={self.nats_url}>"

    def _servers(self) -> list[LiftbridgeNode | NatsServer]:
        return [self.node]

    def start(self, *, timeout: float = 30.0) -> Self:
        """Start the node and wait until it can create streams."""
        return SingleNodeTopology.start(self, timeout=timeout)

    def close(self) -> None:
        """Stop the node (and its embedded NATS) and remove what it owns."""
        _LocalDeployment.close(self)


class Cluster(ClusterTopology[LiftbridgeNode, NatsServer], _LocalDeployment):
    """``size`` Liftbridge nodes (``n1`` ... ``nN``) on one external NATS server.

    Every node gets the full peer list, a namespace unique to this cluster, its own ports
    and data directory, and :data:`CLUSTER_SETTINGS` (fast failover, a long-lived broker
    cache); ``settings`` adds or overrides keys.
    Kill, stop and restart single nodes or NATS freely; :meth:`ensure_all_running` brings
    everything back and waits until the cluster is whole again.

    ``versions`` is one server version for every node, or one per node (a mixed cluster,
    as in a rolling upgrade: ``("v1.9.0", "v1.9.0", "master")``).
    """

    def __init__(
        self,
        size: int = 3,
        *,
        base_dir: StrPath | None = None,
        settings: Mapping[str, Setting] | None = None,
        binary: StrPath | None = None,
        versions: str | Sequence[str] = LIFTBRIDGE_VERSION,
        log_level: str | None = None,
    ) -> None:
        """Pick ports and write configurations; :meth:`start` (or ``with``) runs it.

        ``log_level`` is every node's ``logging.level``; None takes ``$LIFTBRIDGE_LOG_LEVEL``,
        else ``info``.
        """
        if size < 1:
            raise ConfigError(f"a cluster needs at least one node, not {size}")
        per_node = [versions] * size if isinstance(versions, str) else list(versions)
        if len(per_node) != size:
            raise ConfigError(f"{len(per_node)} versions given for a {size}-node cluster")
        self.versions = [server_version(v).name for v in per_node]
        if binary is not None and len(set(self.versions)) > 1:
            raise ConfigError("binary= runs one binary everywhere; it cannot mix versions")
        root = self._setup_dir(base_dir, "liftbridge-cluster-")
        binaries = {
            v: Path(binary) if binary is not None else liftbridge_binary(v)
            for v in dict.fromkeys(self.versions)
        }
        self.namespace = _namespace()
        # All ports at once: picked separately, NATS and a node could get the same one.
        nats_port, *ports = free_ports(size + 1)
        self.nats = NatsServer(root / "nats", port=nats_port)
        ids = tuple(f"n{index}" for index in range(1, size + 1))
        extra = {**CLUSTER_SETTINGS, **(settings or {})}
        level = log_level or default_log_level()
        self._nodes = [
            LiftbridgeNode(
                NodeConfig(
                    server_id=server_id,
                    port=port,
                    data_dir=root / server_id / "data",
                    nats_servers=(self.nats.url,),
                    namespace=self.namespace,
                    bootstrap_peers=ids,
                    log_level=level,
                    extra=extra,
                ),
                root / server_id,
                binary=binaries[version],
                version=version,
            )
            for server_id, port, version in zip(ids, ports, self.versions, strict=True)
        ]
        # Nodes stop before the NATS server they talk through.
        self._arm_finalizer([[node.process for node in self._nodes], [self.nats.process]])

    def __repr__(self) -> str:
        """Namespace and nodes."""
        return f"<Cluster {self.namespace} {self._nodes} nats={self.nats.url}>"

    def _servers(self) -> list[LiftbridgeNode | NatsServer]:
        return [self.nats, *self._nodes]

    def _label(self) -> str:
        return f"cluster {self.namespace}"

    def start(self, *, timeout: float = 60.0) -> Self:
        """Start NATS and every node, then wait until the cluster is whole."""
        return ClusterTopology.start(self, timeout=timeout)

    def close(self) -> None:
        """Stop every server (graceful, SIGKILL after 15 s) and remove an owned temp dir."""
        _LocalDeployment.close(self)


class ExternalDeployment:
    """Servers run elsewhere (docker compose, CI services): only their addresses."""

    def __init__(self, addresses: Sequence[str], nats_url: str) -> None:
        """Validate ``host:port`` addresses and keep them with the NATS URL."""
        cleaned = [address.strip() for address in addresses if address.strip()]
        if not cleaned:
            raise ConfigError("an external deployment needs at least one address")
        for address in cleaned:
            host, sep, port = address.rpartition(":")
            if not (host and sep and port.isdigit() and 0 < int(port) < 65536):
                raise ConfigError(f"{address!r} is not host:port")
        if not nats_url.strip():
            raise ConfigError("an external deployment needs a NATS URL")
        self._addresses = cleaned
        self._nats_url = nats_url.strip()

    def __repr__(self) -> str:
        """Addresses and NATS URL."""
        return f"<ExternalDeployment {self._addresses} nats={self._nats_url}>"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ExternalDeployment | None:
        """Build from ``LIFTBRIDGE_ADDRS`` / ``LIFTBRIDGE_NATS_URL``; None if ADDRS is unset."""
        env = os.environ if environ is None else environ
        addresses = env.get(ENV_ADDRS, "").strip()
        if not addresses:
            return None
        url = env.get(ENV_NATS_URL, "").strip()
        if not url:
            raise ConfigError(
                f"${ENV_ADDRS} is set but ${ENV_NATS_URL} is not: set both to use external "
                "servers (e.g. LIFTBRIDGE_NATS_URL=nats://127.0.0.1:4222)"
            )
        return cls(addresses.split(","), url)

    @property
    def addresses(self) -> list[str]:
        """The configured gRPC addresses."""
        return list(self._addresses)

    @property
    def nats_url(self) -> str:
        """The configured NATS URL."""
        return self._nats_url

    def log_tails(self, lines: int = 80) -> dict[str, str]:
        """Always empty: the logs of external servers are not ours to read."""
        return {}

    def wait_ready(self, *, timeout: float = 30.0) -> Self:
        """Block until the first address can create (and delete) a probe stream."""
        try:
            wait_serving(self._addresses[0], timeout=timeout)
        except ServerStartError as exc:
            raise ServerStartError(
                f"external Liftbridge from ${ENV_ADDRS} is not usable: {exc}"
            ) from exc
        return self

    def close(self) -> None:
        """Nothing to stop."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
