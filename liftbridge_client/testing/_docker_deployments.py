"""Deployments whose servers run in docker containers built by :mod:`._docker_images`.

:class:`DockerSingleNode` and :class:`DockerCluster` mirror
:class:`~liftbridge_client.testing.SingleNode` and :class:`~liftbridge_client.testing.Cluster`
(same topology, same :class:`~liftbridge_client.testing.Deployment` protocol, nodes that can
be stopped, killed and started again), so the same tests run against either. The images are
built on first use when missing (see :func:`ensure_images`). Every container carries the label
:data:`DEPLOYMENT_LABEL` with the deployment's name; :meth:`close` (or a ``weakref.finalize``
at interpreter exit) removes the containers and their volumes.
"""

from __future__ import annotations

import logging
import uuid
import weakref
from collections.abc import Sequence
from types import TracebackType
from typing import Self

from liftbridge_client.testing._config import nats_url
from liftbridge_client.testing._containers import (
    Container,
    LiftbridgeContainer,
    NatsContainer,
)
from liftbridge_client.testing._docker_cli import DockerCLI, docker_cli
from liftbridge_client.testing._docker_images import NATS_IMAGE, ensure_images
from liftbridge_client.testing._errors import ConfigError
from liftbridge_client.testing._process import free_ports
from liftbridge_client.testing._topology import ClusterTopology, SingleNodeTopology

__all__ = ["DockerCluster", "DockerSingleNode"]

_log = logging.getLogger("liftbridge_client.testing")


def _remove(containers: Sequence[Container]) -> None:
    for container in containers:
        container.remove()


class _DockerDeployment:
    """Shared lifecycle: a unique name, image check, removal of every container."""

    def _setup(self, cli: DockerCLI | None, image: str | None) -> tuple[DockerCLI, str]:
        cli = cli or docker_cli()
        self.name = f"lbtest-{uuid.uuid4().hex[:10]}"
        if image is None:
            image = ensure_images(cli=cli).liftbridge_image
        return cli, image

    def _containers(self) -> list[Container]:
        raise NotImplementedError

    def start(self) -> Self:
        """Start every container and wait until the deployment is usable."""
        raise NotImplementedError

    def _arm_finalizer(self) -> None:
        self._finalizer = weakref.finalize(self, _remove, self._containers())

    def close(self) -> None:
        """Remove every container of this deployment with its data."""
        self._finalizer()

    def __enter__(self) -> Self:
        if not any(container.running for container in self._containers()):
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def log_tails(self, lines: int = 80) -> dict[str, str]:
        """The last ``lines`` lines of each container's output, by container name."""
        return {container.name: container.tail(lines) for container in self._containers()}

    def unexpected_exits(self) -> dict[str, int | None]:
        """Containers that stopped without the harness stopping them: name -> exit code."""
        return {
            container.name: container.returncode
            for container in self._containers()
            if container.exited_unexpectedly
        }


class DockerSingleNode(SingleNodeTopology[LiftbridgeContainer], _DockerDeployment):
    """One Liftbridge node with embedded NATS in a container, both on 127.0.0.1.

    The image's ``single.yaml``: seeds its own Raft group, cursors on. ``image`` defaults to
    the locally built ``liftbridge-client/liftbridge:<pinned version>``.
    """

    def __init__(
        self,
        *,
        image: str | None = None,
        cli: DockerCLI | None = None,
        port: int | None = None,
        nats_port: int | None = None,
        namespace: str | None = None,
        name: str | None = None,
    ) -> None:
        """Pick ports and describe the container; :meth:`start` (or ``with``) runs it.

        ``port`` (gRPC) and ``nats_port`` fix the ports (None: free ones); ``namespace``
        is the node's ``--ns`` (None: the deployment's name). ``name`` replaces the
        deployment's unique ``lbtest-...`` name (the container is ``<name>-n1``).
        """
        cli, image = self._setup(cli, image)
        self.name = name or self.name
        free_port, free_nats_port = free_ports(2)
        port = port or free_port
        self.nats_port = nats_port or free_nats_port
        self.node = LiftbridgeContainer(
            cli,
            f"{self.name}-n1",
            image,
            [
                "-c",
                "/etc/liftbridge/single.yaml",
                "--port",
                str(port),
                "--nats-servers",
                nats_url(self.nats_port),
                "--ns",
                namespace or self.name,
            ],
            server_id="n1",
            port=port,
            deployment=self.name,
            env={"NATS_PORT": str(self.nats_port)},
        )
        self._arm_finalizer()

    def __repr__(self) -> str:
        """Container, address and NATS URL."""
        return f"<DockerSingleNode {self.node.name} {self.address} nats={self.nats_url}>"

    def _containers(self) -> list[Container]:
        return [self.node]

    def start(self, *, timeout: float = 30.0) -> Self:
        """Start the node and wait until it can create streams."""
        return SingleNodeTopology.start(self, timeout=timeout)

    def close(self) -> None:
        """Stop the node (and its embedded NATS) and remove what it owns."""
        _DockerDeployment.close(self)


class DockerCluster(ClusterTopology[LiftbridgeContainer, NatsContainer], _DockerDeployment):
    """``size`` Liftbridge containers (``n1`` ... ``nN``) on one nats-server container.

    The image's ``cluster.yaml`` (fast failover like
    :data:`~liftbridge_client.testing.CLUSTER_SETTINGS`) with the full peer list of ``n1``,
    ``n2``, ``n3``, so ``size`` is 3.
    """

    def __init__(
        self,
        size: int = 3,
        *,
        image: str | None = None,
        nats_image: str = NATS_IMAGE,
        cli: DockerCLI | None = None,
    ) -> None:
        """Pick ports and describe the containers; :meth:`start` (or ``with``) runs them."""
        if size != 3:
            raise ConfigError(f"size: the image's cluster.yaml names 3 peers, not {size}")
        cli, image = self._setup(cli, image)
        nats_port, *ports = free_ports(size + 1)
        self.nats = NatsContainer(
            cli, f"{self.name}-nats", nats_image, nats_port, deployment=self.name
        )
        self._nodes = [
            LiftbridgeContainer(
                cli,
                f"{self.name}-{server_id}",
                image,
                [
                    "-c",
                    "/etc/liftbridge/cluster.yaml",
                    "--id",
                    server_id,
                    "--port",
                    str(port),
                    "--nats-servers",
                    self.nats.url,
                    "--ns",
                    self.name,
                ],
                server_id=server_id,
                port=port,
                deployment=self.name,
            )
            for server_id, port in zip(("n1", "n2", "n3"), ports, strict=True)
        ]
        self.namespace = self.name
        self._arm_finalizer()

    def __repr__(self) -> str:
        """Name, nodes and NATS."""
        return f"<DockerCluster {self.name} {self._nodes} nats={self.nats.url}>"

    def _containers(self) -> list[Container]:
        return [*self._nodes, self.nats]

    def _label(self) -> str:
        return self.name

    def start(self, *, timeout: float = 60.0) -> Self:
        """Start NATS and every node, then wait until the cluster is whole."""
        return ClusterTopology.start(self, timeout=timeout)

    def close(self) -> None:
        """Remove every container of this deployment with its data."""
        _DockerDeployment.close(self)
