"""Several ``nats-server`` processes joined by routes, standing in for the one NATS server
of a cluster topology (start, liveness and a client URL), so each Liftbridge node can
have a NATS server of its own and a network split can leave a working majority."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Self

from liftbridge_client.testing._errors import ConfigError
from liftbridge_client.testing._servers import NatsServer

__all__ = ["NatsCluster", "route_args"]


def route_args(name: str, listen: str, routes: Sequence[str]) -> list[str]:
    """``nats-server`` options joining cluster ``name``: routes accepted on ``listen``
    (``host:port``) and solicited to ``routes`` (``host:port`` each). Cluster members are
    not advertised to clients, so a client (a Liftbridge node) stays on the server it was
    given instead of moving to one it learnt about."""
    if not routes:
        raise ConfigError("a NATS cluster member needs at least one route")
    return [
        "--cluster_name",
        name,
        "--cluster",
        f"nats://{listen}",
        "--routes",
        ",".join(f"nats-route://{route}" for route in routes),
        "--no_advertise=true",
    ]


class NatsCluster:
    """NATS servers that route to each other; ``url`` is the first one's."""

    def __init__(self, servers: Sequence[NatsServer]) -> None:
        if not servers:
            raise ConfigError("a NATS cluster needs at least one server")
        self.servers = list(servers)

    def __repr__(self) -> str:
        """The servers."""
        return f"<NatsCluster {self.servers}>"

    @property
    def url(self) -> str:
        """The first server's client URL."""
        return self.servers[0].url

    @property
    def urls(self) -> list[str]:
        """Every server's client URL."""
        return [server.url for server in self.servers]

    @property
    def running(self) -> bool:
        """Whether every server runs."""
        return all(server.running for server in self.servers)

    def check_alive(self) -> None:
        """Raise if a server exited on its own."""
        for server in self.servers:
            server.check_alive()

    def start(self) -> Self:
        """Start the servers that are not running (each waits for its INFO greeting)."""
        for server in self.servers:
            if not server.running:
                server.start()
        return self
