"""The nemesis: faults injected into an AddressedCluster, each undone by its heal.

Liftbridge nodes talk to each other only through NATS, so a node "partitioned from the
others" is a node whose NATS connections are cut; its gRPC port stays reachable for
clients (a client can still publish to, and read from, a leader the cluster has lost).

Kinds (targets are chosen when the fault starts; "the leader" is the node leading the
most partitions of the plain stream):

- ``isolate-leader``: the leader cut from NATS, both ways;
- ``isolate-follower``: a node that leads none of them (if any), cut from NATS;
- ``isolate-two``: the leader and a follower cut from NATS: the node left with NATS is a
  minority (no Raft quorum anywhere);
- ``leader-out`` / ``leader-in``: one direction only (the leader cannot send / cannot
  receive on its NATS connections; TCP turns that into a stall both ways after a window);
- ``lossy``: every node's NATS traffic loses 15 % of its packets, both directions;
- ``slow-leader``: the leader's traffic through a 100 kbit/s link with a 1 s queue
  (delay from queueing, then drops; this kernel has no netem);
- ``client-cut-leader``: clients cannot reach the leader's gRPC port (NATS untouched);
- ``pause-leader``: SIGSTOP for the fault's duration (longer than the leader timeout);
- ``kill-leader``: SIGKILL, restarted at the heal;
- ``split-leader`` (a routed cluster only: each node with its own NATS server, see
  ``ROUTED_KINDS``): the leader and its NATS server split from the two other nodes and
  theirs, both ways, so the other side keeps a quorum (a true majority/minority split;
  clients reach every node and NATS server on both sides);
- ``combo``: two at once (one pair of ``COMBOS``, drawn from the run's seed;
  ``pause-follower`` and ``kill-follower`` hit a node that leads none of the partitions,
  if there is one);
- ``crash-all`` (``CRASH_KINDS``): every node SIGKILLed at once, all restarted at the heal;
  the runner publishes to streams that get nothing after the restart and checks that what
  they acked is readable again within a bound (fault_restart).
"""

from __future__ import annotations

import os
import random
import signal
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from faults.fault_history import Recorder, error_name
from liftbridge_client import Client, errors
from liftbridge_client.testing import AddressedCluster, Firewall
from liftbridge_client.testing._netns import NATS_HOST, NODE_PORT

BASE_KINDS = (
    "isolate-leader",
    "isolate-follower",
    "isolate-two",
    "leader-out",
    "leader-in",
    "lossy",
    "slow-leader",
    "client-cut-leader",
    "pause-leader",
    "kill-leader",
)
# Kinds that need every node on a NATS server of its own (AddressedCluster(routed=True)).
ROUTED_KINDS = ("split-leader",)
# Kinds that take the whole cluster down: the runner checks what was acked before it.
CRASH_KINDS = ("crash-all",)
# New kinds go last: a kind's index seeds its rounds, so the others keep their draws.
KINDS = (*BASE_KINDS, "combo", *ROUTED_KINDS, *CRASH_KINDS)
# Combinations: each pair hits two nodes, or two mechanisms at once.
COMBOS = (
    ("isolate-leader", "pause-follower"),  # no replica of the partition can lead
    ("kill-leader", "isolate-follower"),  # one replica left with NATS, below min ISR
    ("leader-in", "kill-follower"),
    ("lossy", "kill-leader"),
    ("lossy", "pause-leader"),
    ("isolate-follower", "pause-leader"),
    ("slow-leader", "kill-follower"),
    ("client-cut-leader", "isolate-follower"),
)


@dataclass
class Active:
    """A fault in effect: what it is, whom it hit, how to undo its process part."""

    kind: str
    targets: list[str]
    undo: list[Callable[[], None]] = field(default_factory=list)
    detail: dict[str, object] = field(default_factory=dict)
    # The history time of its start event, once every rule is in place: what the checkers
    # measure from (a publish invoked before it may still reach the old leader).
    started: float = 0.0


class Nemesis:
    """Starts faults on ``cluster`` and heals them; records both in the history."""

    def __init__(
        self,
        cluster: AddressedCluster,
        client: Client,
        history: Recorder,
        stream: str,
        rng: random.Random,
    ) -> None:
        self.cluster = cluster
        self.client = client
        self.history = history
        self.stream = stream
        self.rng = rng
        self.firewall = Firewall()
        self.paused: set[str] = set()
        self.killed: set[str] = set()

    async def roles(self) -> tuple[str, list[str]]:
        """(the node leading most partitions of the stream, the others, non-leaders first)."""
        ids = self.cluster.server_ids
        counts: Counter[str] = Counter()
        try:
            meta = await self.client.fetch_metadata(self.stream)
            for part in meta.streams[self.stream].partitions.values():
                if part.leader:
                    counts[part.leader] += 1
        except (errors.LiftbridgeError, KeyError) as exc:
            self.history.emit("note", f="roles", error=error_name(exc))
        alive = [n for n in ids if n not in self.killed and n not in self.paused]
        ranked = sorted(alive, key=lambda n: (-counts[n], self.rng.random()))
        leader = ranked[0] if ranked else self.rng.choice(ids)
        others = sorted((n for n in ids if n != leader), key=lambda n: (counts[n], n))
        return leader, others

    def _cut(
        self, node: str, *, out: bool = True, into: bool = True, p: float | None = None
    ) -> None:
        host = self.cluster.host_of(node)
        if out:
            self.firewall.drop(src=host, dst=NATS_HOST, probability=p)
        if into:
            self.firewall.drop(src=NATS_HOST, dst=host, probability=p)

    def _split(self, minority: list[str]) -> None:
        """Cut every packet between ``minority`` (nodes and their NATS servers) and the
        rest; clients (127.0.0.1) still reach both sides."""
        ids = self.cluster.server_ids
        inside = {
            h for n in minority for h in (self.cluster.host_of(n), self.cluster.nats_host_of(n))
        }
        outside = {
            h
            for n in ids
            if n not in minority
            for h in (self.cluster.host_of(n), self.cluster.nats_host_of(n))
        }
        for a in sorted(inside):
            for b in sorted(outside):
                self.firewall.drop(src=a, dst=b)
                self.firewall.drop(src=b, dst=a)

    def _pause(self, node: str, active: Active) -> None:
        pid = self.cluster.node(node).process.pid
        if pid is None or not self.cluster.node(node).running or node in self.paused:
            return
        os.kill(pid, signal.SIGSTOP)
        self.paused.add(node)

        def resume() -> None:
            if self.cluster.node(node).running:
                os.kill(pid, signal.SIGCONT)
            self.paused.discard(node)

        active.undo.append(resume)

    def _kill(self, node: str, active: Active) -> None:
        server = self.cluster.node(node)
        if not server.running:
            return
        if node in self.paused:
            os.kill(server.process.pid or 0, signal.SIGCONT)  # killed anyway; no stale state
            self.paused.discard(node)
        server.kill()
        self.killed.add(node)

        def restart() -> None:
            # From the main thread: the start gets the harness's parent-death signal.
            if not server.running:
                server.start(wait=False)
            self.killed.discard(node)

        active.undo.append(restart)

    async def start(self, kind: str) -> Active:
        """Start a fault of ``kind`` now; record it."""
        leader, others = await self.roles()
        follower = others[0]
        active = Active(kind, [])
        if kind == "combo":
            first, second = self.rng.choice(COMBOS)
            self._apply(first, leader, follower, others, active)
            self._apply(second, leader, follower, others, active)
            active.detail["parts"] = [first, second]
        else:
            self._apply(kind, leader, follower, others, active)
        active.detail["rules"] = [" ".join(rule) for rule in self.firewall.rules]
        event = self.history.emit(
            "nemesis", f="start", value=kind, data={"targets": active.targets, **active.detail}
        )
        active.started = event.t
        return active

    def _apply(
        self, kind: str, leader: str, follower: str, others: list[str], active: Active
    ) -> None:
        if kind == "isolate-leader":
            self._cut(leader)
            active.targets.append(leader)
        elif kind == "isolate-follower":
            self._cut(follower)
            active.targets.append(follower)
        elif kind == "isolate-two":
            self._cut(leader)
            self._cut(follower)
            active.targets += [leader, follower]
        elif kind == "leader-out":
            self._cut(leader, into=False)
            active.targets.append(leader)
        elif kind == "leader-in":
            self._cut(leader, out=False)
            active.targets.append(leader)
        elif kind == "lossy":
            for node in self.cluster.server_ids:
                self._cut(node, p=0.15)
            active.targets += self.cluster.server_ids
        elif kind == "slow-leader":
            self.firewall.shape([self.cluster.host_of(leader)], rate="100kbit", delay_ms=1000)
            active.targets.append(leader)
        elif kind == "client-cut-leader":
            host = self.cluster.host_of(leader)
            self.firewall.drop(dst=host, dport=NODE_PORT)
            self.firewall.drop(src=host, sport=NODE_PORT)
            active.targets.append(leader)
        elif kind == "pause-leader":
            self._pause(leader, active)
            active.targets.append(leader)
        elif kind == "pause-follower":
            self._pause(follower, active)
            active.targets.append(follower)
        elif kind == "kill-leader":
            self._kill(leader, active)
            active.targets.append(leader)
        elif kind == "split-leader":
            if not self.cluster.routed:
                raise ValueError("split-leader needs a routed cluster (a NATS server per node)")
            self._split([leader])
            active.targets.append(leader)
            active.detail["majority"] = others
        elif kind == "kill-follower":
            self._kill(follower, active)
            active.targets.append(follower)
        elif kind == "crash-all":
            # One after the other, each SIGKILL waited for: milliseconds apart, far below
            # the seconds the survivors need to notice a dead peer.
            for node in self.cluster.server_ids:
                self._kill(node, active)
                active.targets.append(node)
        else:
            raise ValueError(f"unknown fault kind {kind!r}")

    def heal(self, active: Active) -> None:
        """Undo ``active`` (and every network rule); record the heal, with how many
        packets each rule dropped or delayed."""
        counters = self.firewall.counters()
        self.firewall.heal()
        for undo in active.undo:
            undo()
        active.undo.clear()
        self.history.emit(
            "nemesis",
            f="stop",
            value=active.kind,
            data={"targets": active.targets, "counters": counters.splitlines()},
        )

    def heal_all(self) -> None:
        """Safety net: no rule, no paused process left (killed nodes are the runner's)."""
        self.firewall.heal()
        for node in list(self.paused):
            pid = self.cluster.node(node).process.pid
            if pid is not None and self.cluster.node(node).running:
                os.kill(pid, signal.SIGCONT)
        self.paused.clear()
