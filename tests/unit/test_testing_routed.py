"""The addresses and options of a routed AddressedCluster's NATS servers (no servers run:
the namespace setup itself is exercised by the fault suite's split-leader rounds)."""

from __future__ import annotations

from pathlib import Path

import pytest

from liftbridge_client.testing import NatsServer
from liftbridge_client.testing._errors import ConfigError
from liftbridge_client.testing._nats_cluster import NatsCluster, route_args
from liftbridge_client.testing._netns import route_alias, routed_nats_host

FAKE_BINARY = "/nonexistent/nats-server"  # configured, never started


def test_every_route_of_three_servers_has_its_own_alias() -> None:
    aliases = {route_alias(i, j) for i in (1, 2, 3) for j in (1, 2, 3) if i != j}
    assert len(aliases) == 6
    assert route_alias(1, 3) == "127.0.1.13"
    assert route_alias(3, 1) == "127.0.1.31"
    # None of them is a node's, a NATS server's or a node's NATS alias.
    assert not aliases & {f"127.0.0.{n}" for n in range(256)}
    assert [routed_nats_host(i) for i in (1, 2, 3)] == ["127.0.0.31", "127.0.0.32", "127.0.0.33"]
    with pytest.raises(ConfigError):
        route_alias(2, 2)
    with pytest.raises(ConfigError):
        routed_nats_host(10)


def test_route_options_and_the_cluster_of_servers(tmp_path: Path) -> None:
    args = route_args("ns", "127.0.0.31:6222", ["127.0.1.12:6222", "127.0.1.13:6222"])
    assert args[args.index("--cluster") + 1] == "nats://127.0.0.31:6222"
    assert args[args.index("--routes") + 1] == (
        "nats-route://127.0.1.12:6222,nats-route://127.0.1.13:6222"
    )
    assert "--no_advertise=true" in args  # nodes stay on the server they were given
    with pytest.raises(ConfigError):
        route_args("ns", "127.0.0.31:6222", [])
    servers = [
        NatsServer(
            tmp_path / f"n{i}", port=4222, host=routed_nats_host(i), binary=FAKE_BINARY, args=args
        )
        for i in (1, 2)
    ]
    assert servers[0].process.argv[-len(args) :] == args
    cluster = NatsCluster(servers)
    assert cluster.url == "nats://127.0.0.31:4222"
    assert cluster.urls == ["nats://127.0.0.31:4222", "nats://127.0.0.32:4222"]
    assert not cluster.running
    with pytest.raises(ConfigError):
        NatsCluster([])
