"""A cluster whose servers each own a loopback address, inside a private network namespace.

For fault injection with the kernel's own tools: every Liftbridge node binds its own
address (``127.0.0.11``, ``.12``, ...) and NATS binds ``127.0.0.10``, so iptables rules
matched on addresses cut, or drop part of, exactly one server's traffic. Liftbridge nodes
talk to each other only through NATS (Raft and replication are NATS requests), so "a node
cut from the others" is "a node cut from NATS"; its gRPC port (what clients use) is a
separate address and port and can be cut, or left alone, on its own.

With ``routed=True`` each node has a NATS server of its own instead, ``n<i>``'s on
``127.0.0.(30+i)``, joined by routes: then a node and its NATS server can be split from
the others and the other side keeps a quorum. Server ``i`` solicits its route to server
``j`` at the alias ``127.0.1.(10*i+j)``, preferred source ``127.0.0.(30+i)``, forwarded to
``127.0.0.(30+j):6222`` (the same trick as the nodes', below), so rules see each route's
two servers; a standing rule drops route connections from anywhere else (127.0.0.1), so a
route learnt by gossip cannot bypass a split.

A node's NATS connection would leave from 127.0.0.1 like every other loopback connection,
and rules could not tell the nodes apart. So node ``i`` dials NATS at its own alias
``127.0.0.(20+i)``: a local route gives that alias the preferred source ``127.0.0.(10+i)``
and a DNAT rule forwards it to the real NATS address. NATS then sees node ``i`` as
``127.0.0.(10+i)``; clients reach NATS from 127.0.0.1.

Everything here changes the network of the namespace it runs in, so it refuses to run in
the host's (see :func:`require_private_netns`): enter one with :func:`private_netns_argv`
(``unshare --net``). The namespace, its rules and its qdiscs disappear with its last
process; nothing needs undoing on the host.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Self

from liftbridge_client.testing._config import CLUSTER_SETTINGS, NodeConfig, Setting
from liftbridge_client.testing._deployments import _LocalDeployment
from liftbridge_client.testing._errors import ConfigError, HarnessError
from liftbridge_client.testing._nats_cluster import NatsCluster, route_args
from liftbridge_client.testing._provision import LIFTBRIDGE_VERSION, liftbridge_binary
from liftbridge_client.testing._servers import LiftbridgeNode, NatsServer
from liftbridge_client.testing._topology import ClusterTopology
from liftbridge_client.testing._versions import server_version

__all__ = [
    "NATS_HOST",
    "NATS_PORT",
    "NODE_PORT",
    "ROUTE_PORT",
    "AddressedCluster",
    "Firewall",
    "node_host",
    "node_nats_alias",
    "private_netns_argv",
    "require_private_netns",
    "route_alias",
    "routed_nats_host",
    "setup_namespace_network",
]

NATS_HOST = "127.0.0.10"
NATS_PORT = 4222
NODE_PORT = 9292  # every node has its own address, so all can use the default port
ROUTE_PORT = 6222  # NATS route port of a routed cluster's servers


def node_host(index: int) -> str:
    """The address node ``n<index>`` (1-based) binds: ``127.0.0.(10+index)``."""
    if not 1 <= index <= 9:
        raise ConfigError(f"node index {index} is out of 1..9")
    return f"127.0.0.{10 + index}"


def node_nats_alias(index: int) -> str:
    """The address node ``n<index>`` dials NATS at: ``127.0.0.(20+index)``, forwarded."""
    node_host(index)  # validates the index
    return f"127.0.0.{20 + index}"


def routed_nats_host(index: int) -> str:
    """The address of node ``n<index>``'s own NATS server in a routed cluster:
    ``127.0.0.(30+index)``."""
    node_host(index)  # validates the index
    return f"127.0.0.{30 + index}"


def route_alias(dialer: int, target: int) -> str:
    """Where NATS server ``dialer`` solicits its route to server ``target``:
    ``127.0.1.(10*dialer+target)``, forwarded."""
    node_host(dialer), node_host(target)  # validate
    if dialer == target:
        raise ConfigError("a NATS server has no route to itself")
    return f"127.0.1.{10 * dialer + target}"


_PARENT_NETNS_ENV = "LIFTBRIDGE_PARENT_NETNS"


def _netns_inode(pid: str) -> int:
    return os.stat(f"/proc/{pid}/ns/net").st_ino


def _outside_inodes() -> set[int]:
    """Network namespaces known not to be ours: the launcher's (passed down by
    :func:`private_netns_argv`) and init's, when readable (a sandbox may forbid it)."""
    outside = set()
    if os.environ.get(_PARENT_NETNS_ENV, "").isdigit():
        outside.add(int(os.environ[_PARENT_NETNS_ENV]))
    with contextlib.suppress(OSError):
        outside.add(_netns_inode("1"))
    return outside


def require_private_netns() -> None:
    """Raise :class:`HarnessError` unless this process runs in a network namespace of its
    own with nothing but loopback: rules written here must never touch the host."""
    outside = _outside_inodes()
    private = bool(outside) and _netns_inode("self") not in outside
    links = _run(["ip", "-o", "link", "show"]).splitlines()
    names = sorted(line.split(":")[1].strip().split("@")[0] for line in links if ":" in line)
    if not private or names != ["lo"]:
        raise HarnessError(
            "refusing to change the network here: this is not a private network namespace "
            f"with only loopback (private={private}, links={names}); start it with "
            "private_netns_argv() (`unshare --net`)"
        )


def private_netns_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` run in a new network namespace (root needed), killed if ``unshare`` dies.

    Also a new PID namespace, whose first process is ``argv``: when it ends, however it
    ends, the kernel kills every process it left (a server paused by SIGSTOP included), and
    with the last of them the network namespace, its rules and its shaping go too. The
    child learns this namespace's identity from the environment, so that
    :func:`require_private_netns` can tell the two apart.
    """
    unshare = shutil.which("unshare")
    if unshare is None:
        raise HarnessError("unshare (util-linux) is not installed")
    parent = f"{_PARENT_NETNS_ENV}={_netns_inode('self')}"
    return [unshare, "--net", "--pid", "--kill-child=SIGKILL", "--", "env", parent, *argv]


def _run(argv: Sequence[str]) -> str:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    except FileNotFoundError as exc:
        raise HarnessError(
            f"{argv[0]} is not installed (apt-get install iproute2 iptables)"
        ) from exc
    if done.returncode != 0:
        raise HarnessError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def _sh(command: str) -> str:
    """Run a command given as one line of space-separated words (none contain spaces)."""
    return _run(command.split())


def setup_namespace_network(nodes: int, *, routed: bool = False) -> None:
    """Bring loopback up (MTU 1500) and give node ``1..nodes`` its NATS alias (route and
    DNAT), to the shared NATS server or, ``routed``, to its own; then the route aliases
    between those servers and the rule that keeps routes on them."""
    require_private_netns()
    # Packets of an Ethernet link's size: loopback's 64 KiB MTU (and GSO) would hand tc
    # single packets larger than any queue of a slow link, which then drops all of them.
    _sh("ip link set lo mtu 1500")
    _sh("ip link set lo gso_max_size 1500")
    _sh("ip link set lo up")
    for index in range(1, nodes + 1):
        alias, host = node_nats_alias(index), node_host(index)
        nats = routed_nats_host(index) if routed else NATS_HOST
        _forward(alias, host, f"{nats}:{NATS_PORT}", NATS_PORT)
    if not routed:
        return
    for dialer in range(1, nodes + 1):
        for target in range(1, nodes + 1):
            if dialer != target:
                _forward(
                    route_alias(dialer, target),
                    routed_nats_host(dialer),
                    f"{routed_nats_host(target)}:{ROUTE_PORT}",
                    ROUTE_PORT,
                )
    _sh(f"iptables -A OUTPUT -p tcp -s 127.0.0.1 --dport {ROUTE_PORT} -j DROP")


def _forward(alias: str, source: str, destination: str, port: int) -> None:
    """Connections to ``alias:port`` leave from ``source`` and reach ``destination``."""
    _sh(f"ip route replace local {alias}/32 dev lo src {source} table local")
    _sh(
        f"iptables -t nat -A OUTPUT -d {alias} -p tcp --dport {port} "
        f"-j DNAT --to-destination {destination}"
    )


class Firewall:
    """Fault rules in the namespace's filter table, chain ``OUTPUT`` (every loopback
    packet passes it once, after the DNAT above, with the real addresses) and traffic
    shaping on ``lo``. :meth:`heal` removes all of it."""

    def __init__(self) -> None:
        require_private_netns()
        self.rules: list[list[str]] = []
        self.shaped = False

    def drop(
        self,
        *,
        src: str | None = None,
        dst: str | None = None,
        sport: int | None = None,
        dport: int | None = None,
        probability: float | None = None,
    ) -> list[str]:
        """Drop TCP packets matching every given field (a random share with
        ``probability``). Returns the rule, as iptables arguments."""
        rule = ["-p", "tcp"]
        if src is not None:
            rule += ["-s", src]
        if dst is not None:
            rule += ["-d", dst]
        if sport is not None:
            rule += ["--sport", str(sport)]
        if dport is not None:
            rule += ["--dport", str(dport)]
        if probability is not None:
            if not 0 < probability <= 1:
                raise ConfigError(f"probability {probability} is out of (0, 1]")
            rule += ["-m", "statistic", "--mode", "random", "--probability", f"{probability:.4f}"]
        rule += ["-j", "DROP"]
        _run(["iptables", "-A", "OUTPUT", *rule])
        self.rules.append(rule)
        return rule

    def shape(self, hosts: Sequence[str], *, rate: str, delay_ms: int) -> None:
        """Slow links: packets to or from ``hosts`` share a token bucket of ``rate``
        (e.g. ``"256kbit"``) and wait in its queue up to ``delay_ms`` before being dropped
        (htb + u32; the kernel here has no netem, so delay comes from queueing)."""
        if self.shaped:
            raise ConfigError("shape() is already in effect; heal() first")
        _sh("tc qdisc add dev lo root handle 1: htb default 1")
        _sh("tc class add dev lo parent 1: classid 1:1 htb rate 20gbit")
        _sh(f"tc class add dev lo parent 1: classid 1:2 htb rate {rate} ceil {rate} burst 4k")
        # A bounded queue turns the rate into delay, then loss: bytes = rate x delay.
        limit = max(4096, int(_rate_bits(rate) / 8 * delay_ms / 1000))
        _sh(f"tc qdisc add dev lo parent 1:2 handle 20: bfifo limit {limit}")
        for host in hosts:
            for field in ("src", "dst"):
                _sh(
                    "tc filter add dev lo parent 1: protocol ip prio 1 u32 "
                    f"match ip {field} {host}/32 flowid 1:2"
                )
        self.shaped = True

    def counters(self) -> str:
        """Packet counters of the fault rules and the shaping (for a run's history)."""
        text = _sh("iptables -L OUTPUT -v -n -x") if self.rules else ""
        return text + (_sh("tc -s qdisc show dev lo") if self.shaped else "")

    def heal(self) -> None:
        """Remove every fault rule and the shaping (the NATS aliases stay)."""
        for rule in reversed(self.rules):
            _run(["iptables", "-D", "OUTPUT", *rule])
        self.rules.clear()
        if self.shaped:
            _sh("tc qdisc del dev lo root")
            self.shaped = False


def _rate_bits(rate: str) -> int:
    units = {"kbit": 1_000, "mbit": 1_000_000, "gbit": 1_000_000_000, "bit": 1}
    for unit, factor in units.items():
        if rate.endswith(unit):
            return int(float(rate[: -len(unit)]) * factor)
    raise ConfigError(f"rate {rate!r} must end in bit, kbit, mbit or gbit")


class AddressedCluster(ClusterTopology[LiftbridgeNode, NatsServer | NatsCluster], _LocalDeployment):
    """``size`` nodes, node ``n<i>`` on ``127.0.0.(10+i):9292``, NATS on ``127.0.0.10:4222``,
    each node dialling NATS through its alias (:func:`setup_namespace_network`). With
    ``routed=True`` every node has its own NATS server (``127.0.0.(30+i):4222``), the
    servers joined by routes (a :class:`NatsCluster` as ``nats``).

    Only inside a private network namespace (the constructor checks). Otherwise like
    :class:`~liftbridge_client.testing.Cluster`: ``settings`` override
    :data:`CLUSTER_SETTINGS`, ``base_dir`` keeps the servers' directories and logs.
    Servers log at debug by default: a fault run is explained from their logs.
    ``nats_configs`` (routed only): NATS configuration text for a node's own NATS server,
    by node id (``cluster { permissions { ... } }`` keeps subjects off its routes).
    """

    def __init__(
        self,
        size: int = 3,
        *,
        base_dir: Path | None = None,
        settings: Mapping[str, Setting] | None = None,
        version: str = LIFTBRIDGE_VERSION,
        log_level: str = "debug",
        routed: bool = False,
        nats_configs: Mapping[str, str] | None = None,
    ) -> None:
        """Set up the namespace's addresses and write the configurations; not started."""
        if not (2 if routed else 1) <= size <= 9:
            raise ConfigError(f"an addressed cluster has 1..9 nodes (routed: 2..9), not {size}")
        nats_configs = dict(nats_configs or {})
        unknown = sorted(set(nats_configs) - {f"n{i}" for i in range(1, size + 1)})
        if nats_configs and not routed:
            raise ConfigError("nats_configs needs routed=True (a NATS server per node)")
        if unknown:
            raise ConfigError(f"nats_configs names nodes n1..n{size}, not {unknown}")
        setup_namespace_network(size, routed=routed)
        self.version = server_version(version).name
        self.routed = routed
        root = self._setup_dir(base_dir, "liftbridge-netns-")
        self.namespace = f"lbfault-{uuid.uuid4().hex[:10]}"
        if routed:
            self.nats: NatsServer | NatsCluster = NatsCluster(
                [
                    NatsServer(
                        root / f"nats{i}",
                        port=NATS_PORT,
                        host=routed_nats_host(i),
                        config=nats_configs.get(f"n{i}"),
                        args=route_args(
                            self.namespace,
                            f"{routed_nats_host(i)}:{ROUTE_PORT}",
                            [
                                f"{route_alias(i, j)}:{ROUTE_PORT}"
                                for j in range(1, size + 1)
                                if j != i
                            ],
                        ),
                    )
                    for i in range(1, size + 1)
                ]
            )
        else:
            self.nats = NatsServer(root / "nats", port=NATS_PORT, host=NATS_HOST)
        ids = tuple(f"n{i}" for i in range(1, size + 1))
        binary = liftbridge_binary(self.version)
        self._nodes = [
            LiftbridgeNode(
                NodeConfig(
                    server_id=server_id,
                    port=NODE_PORT,
                    host=node_host(index),
                    data_dir=root / server_id / "data",
                    nats_servers=(f"nats://{node_nats_alias(index)}:{NATS_PORT}",),
                    namespace=self.namespace,
                    bootstrap_peers=ids,
                    extra={**CLUSTER_SETTINGS, **(settings or {})},
                    log_level=log_level,
                ),
                root / server_id,
                binary=binary,
                version=self.version,
            )
            for index, server_id in enumerate(ids, start=1)
        ]
        self._arm_finalizer(
            [[node.process for node in self._nodes], [nats.process for nats in self.nats_servers]]
        )

    def __repr__(self) -> str:
        """Namespace and nodes."""
        return f"<AddressedCluster {self.namespace} {self._nodes} nats={self.nats.url}>"

    @property
    def nats_servers(self) -> list[NatsServer]:
        """The NATS server, or a routed cluster's servers (``n1``'s first)."""
        return self.nats.servers if isinstance(self.nats, NatsCluster) else [self.nats]

    @property
    def nats_urls(self) -> list[str]:
        """Every NATS server's client URL."""
        return [nats.url for nats in self.nats_servers]

    def host_of(self, server_id: str) -> str:
        """The address of node ``server_id``."""
        return self.node(server_id).config.host

    def nats_host_of(self, server_id: str) -> str:
        """The address of the NATS server node ``server_id`` uses."""
        if not self.routed:
            return NATS_HOST
        return routed_nats_host(self.server_ids.index(server_id) + 1)

    def _servers(self) -> list[LiftbridgeNode | NatsServer]:
        return [*self.nats_servers, *self._nodes]

    def _label(self) -> str:
        return f"cluster {self.namespace}"

    def start(self, *, timeout: float = 60.0) -> Self:
        """Start NATS and every node, then wait until the cluster is whole."""
        return ClusterTopology.start(self, timeout=timeout)

    def close(self) -> None:
        """Stop every server (graceful, SIGKILL after 15 s) and remove an owned temp dir."""
        _LocalDeployment.close(self)
