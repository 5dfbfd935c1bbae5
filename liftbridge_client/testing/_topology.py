"""What every cluster deployment does the same way, whatever runs its servers.

A cluster is N Liftbridge nodes on one shared NATS server. Local processes
(:class:`~liftbridge_client.testing.Cluster`) and containers
(:class:`~liftbridge_client.testing.DockerCluster`) differ only in how a server is
started, stopped and checked; naming nodes, starting the whole, readiness and bringing
everything back are written once here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Generic, Protocol, Self, TypeVar

from liftbridge_client.testing._config import nats_url
from liftbridge_client.testing._errors import ServerStartError
from liftbridge_client.testing._probe import wait_brokers, wait_serving

__all__ = ["ClusterTopology", "SingleNodeTopology"]

_log = logging.getLogger(__name__)


class _Server(Protocol):
    @property
    def running(self) -> bool: ...

    def check_alive(self) -> None: ...


class _Node(_Server, Protocol):
    @property
    def server_id(self) -> str: ...

    @property
    def address(self) -> str: ...

    def start(self, *, wait: bool = ..., timeout: float = ...) -> object: ...

    def wait_ready(self, *, timeout: float = ...) -> object: ...

    @property
    def exited_unexpectedly(self) -> bool: ...

    @property
    def returncode(self) -> int | None: ...

    def tail(self) -> str: ...


class _Nats(_Server, Protocol):
    @property
    def url(self) -> str: ...

    def start(self) -> object: ...


NodeT = TypeVar("NodeT", bound=_Node)
NatsT = TypeVar("NatsT", bound=_Nats)


class ClusterTopology(Generic[NodeT, NatsT]):
    """Mixin: ``_nodes`` (in id order) and ``nats`` are set by the subclass."""

    _nodes: Sequence[NodeT]
    nats: NatsT

    def _label(self) -> str:
        """How log lines name this cluster."""
        return repr(self)

    def close(self) -> None:
        """Stop everything (subclasses)."""
        raise NotImplementedError

    @property
    def nodes(self) -> list[NodeT]:
        """The nodes, in id order."""
        return list(self._nodes)

    @property
    def server_ids(self) -> list[str]:
        """``["n1", "n2", ...]``."""
        return [node.server_id for node in self._nodes]

    def node(self, server_id: str) -> NodeT:
        """The node with ``server_id``."""
        for node in self._nodes:
            if node.server_id == server_id:
                return node
        raise KeyError(f"no node {server_id!r} in this cluster (have {self.server_ids})")

    @property
    def addresses(self) -> list[str]:
        """gRPC addresses of every node, running or not."""
        return [node.address for node in self._nodes]

    @property
    def nats_url(self) -> str:
        """URL of the shared NATS server."""
        return self.nats.url

    def start(self, *, timeout: float = 60.0) -> Self:
        """Start NATS and every node, then wait until the cluster is whole."""
        try:
            self.nats.start()
            for node in self._nodes:
                node.start(wait=False)
            self.wait_ready(timeout=timeout)
        except BaseException:
            self.close()
            raise
        return self

    def wait_ready(self, *, timeout: float = 60.0, every_broker_listed: bool = True) -> None:
        """Block until the whole cluster works.

        Every node must be running and able to create a stream; a stream replicated on every
        node must be creatable and known to every node (so restarted nodes have recovered);
        and every node's FetchMetadata must list every broker (unless
        ``every_broker_listed`` is False: for a cluster built so that some never do).
        """
        deadline = time.monotonic() + timeout
        for node in self._nodes:
            if node.exited_unexpectedly:
                raise ServerStartError(
                    f"{node!r} exited on its own (status {node.returncode}); the last "
                    f"lines of its log:\n{node.tail()}"
                )
            if not node.running:
                raise ServerStartError(f"{node!r} is not running; start it first")
            node.wait_ready(timeout=max(1.0, deadline - time.monotonic()))
        wait_serving(
            self._nodes[0].address,
            replication_factor=len(self._nodes),
            timeout=max(1.0, deadline - time.monotonic()),
            check_alive=self._check_all_alive,
            applied_on=[node.address for node in self._nodes],
        )
        if not every_broker_listed:
            return
        expected = set(self.server_ids)
        for node in self._nodes:
            wait_brokers(
                node.address,
                expected,
                timeout=max(1.0, deadline - time.monotonic()),
                check_alive=self._check_all_alive,
            )

    def _check_all_alive(self) -> None:
        self.nats.check_alive()
        for node in self._nodes:
            node.check_alive()

    def ensure_all_running(self, *, timeout: float = 60.0) -> list[str]:
        """Start NATS and every node that is down, then wait until the cluster is whole.

        Returns the names restarted (``"nats"`` and/or server ids); ``[]`` when everything
        was running, in which case nothing is waited for.
        """
        restarted: list[str] = []
        if not self.nats.running:
            self.nats.start()
            restarted.append("nats")
        for node in self._nodes:
            if not node.running:
                node.start(wait=False)
                restarted.append(node.server_id)
        if restarted:
            _log.info("restarted %s in %s", ", ".join(restarted), self._label())
            self.wait_ready(timeout=timeout)
        return restarted


class SingleNodeTopology(Generic[NodeT]):
    """Mixin: one node with embedded NATS; ``node`` and ``nats_port`` set by the subclass."""

    node: NodeT
    nats_port: int

    def close(self) -> None:
        """Stop everything (subclasses)."""
        raise NotImplementedError

    @property
    def address(self) -> str:
        """The node's gRPC address, ``127.0.0.1:<port>``."""
        return self.node.address

    @property
    def addresses(self) -> list[str]:
        """``[address]``."""
        return [self.node.address]

    @property
    def nats_url(self) -> str:
        """URL of the embedded NATS server."""
        return nats_url(self.nats_port)

    def start(self, *, timeout: float = 30.0) -> Self:
        """Start the node and wait until it can create streams."""
        try:
            self.node.start(timeout=timeout)
        except BaseException:
            self.close()
            raise
        return self

    def ensure_all_running(self, *, timeout: float = 30.0) -> list[str]:
        """Start the node if it is down; return the ids started (``[]`` or ``["n1"]``)."""
        if self.node.running:
            return []
        self.node.start(timeout=timeout)
        return [self.node.server_id]
