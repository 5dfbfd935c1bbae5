"""Deterministic scenarios for the leader-epoch defects that v1.9.0+lbc.1 patches.

Each scenario drives a 3-node :class:`Cluster` (loopback, SIGSTOP/SIGKILL only, no
network namespace) into one defect's precondition by construction, not by timing luck, and
returns what each replica's log holds afterwards. docs/compatibility.md explains the
mechanisms; the patches are in ``patches/liftbridge/v1.9.0+lbc.1/``.

- :func:`empty_leader_divergence`: a leader takes in messages its followers never get
  (they are paused), dies; a follower with an empty log becomes leader, takes other
  messages at the same offsets; the old leader comes back. v1.9.0's new leader started its
  epoch at offset -1, read that as "no later epoch" and answered its log end offset, so the
  old leader kept its own messages under offsets where the leader has different ones: two
  replicas in the ISR disagree on committed offsets. The patched leader answers -1 and the
  old leader truncates everything it had.
- :func:`restart_truncation_loss`: with one follower paused out of the ISR, 20 messages are
  acked ALL by the leader and the other follower, which is then killed before its next HW
  checkpoint, and the leader after it. The follower restarts, asks the dead leader where
  its epoch ended, gets "no responders" and (v1.9.0) truncates to its checkpointed HW; it
  is then elected, being the only other ISR member, and the acked messages are gone. The
  patched follower keeps asking until it is elected itself, and keeps its log.
- :func:`epoch_boundary_divergence` (5 nodes): a follower-recorded epoch start answers the
  returning old leader one offset too high, and it keeps its own entry at the boundary
  (stock v1.9.0: 2 of 2 rounds; run by hand only, it takes about a minute per version).

Run by hand (from tests/): ``python -m faults.epoch_scenarios --scenario hw-loss --rounds 3
--out /tmp/epoch`` (stock and patched in turn; ``--scenario divergence`` for the other).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from liftbridge_client import AckPolicy, Client, ClientOptions, RetryPolicy, StreamConfig, errors
from liftbridge_client.testing import Cluster, LiftbridgeNode

OPTIONS = ClientOptions(
    ack_wait=5.0,
    rpc_timeout=3.0,
    retry=RetryPolicy(attempts=10, initial_backoff=0.2, max_backoff=1.0),
)
# Generous bounds: the machine is shared and a failover takes the 3 s leader timeout plus a
# metadata election; nothing here asserts on time.
FAILOVER_WAIT = 60.0
ISR_WAIT = 90.0


@dataclasses.dataclass
class Outcome:
    """What a scenario left behind: each replica's log (offset -> value) and who led."""

    version: str
    old_leader: str
    new_leader: str
    logs: dict[str, dict[int, str]]
    notes: list[str] = dataclasses.field(default_factory=list)
    acked: list[str] = dataclasses.field(default_factory=list)  # values acked with ALL
    stream: str = ""

    def acked_lost(self) -> list[str]:
        """Acked values the new leader's log does not hold."""
        held = set(self.logs.get(self.new_leader, {}).values())
        return [value for value in self.acked if value not in held]

    def divergent_offsets(self) -> list[int]:
        """Offsets that two replicas both hold with different values."""
        offsets = sorted({o for log in self.logs.values() for o in log})
        bad = []
        for offset in offsets:
            values = {log[offset] for log in self.logs.values() if offset in log}
            if len(values) > 1:
                bad.append(offset)
        return bad

    def to_dict(self) -> dict[str, object]:
        return {
            **dataclasses.asdict(self),
            "divergent": self.divergent_offsets(),
            "acked_lost": self.acked_lost(),
        }


@contextlib.contextmanager
def paused(nodes: list[LiftbridgeNode]) -> Iterator[None]:
    """SIGSTOP ``nodes`` for the block (SIGCONT after it, whatever happens)."""
    pids = [node.process.pid for node in nodes]
    try:
        for pid in pids:
            if pid:
                os.kill(pid, signal.SIGSTOP)
        yield
    finally:
        for pid in pids:
            if pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)


async def wait_leader(
    client: Client,
    stream: str,
    among: set[str],
    *,
    full_isr: bool = False,
    min_hw: int = -1,
    timeout: float,
) -> str:
    """The partition's leader once it is one of ``among``, with a full ISR if asked and a
    high watermark of at least ``min_hw``."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            info = await client.fetch_partition_metadata(stream, 0)
            last = (info.leader, sorted(info.isr), info.high_watermark)
            full = set(info.isr) == set(info.replicas)
            if info.leader in among and (full or not full_isr) and info.high_watermark >= min_hw:
                return str(info.leader)
        except errors.LiftbridgeError as exc:
            last = repr(exc)
        await asyncio.sleep(0.3)
    raise TimeoutError(f"no leader among {sorted(among)} after {timeout} s (last: {last})")


async def read_replica(
    address: str, addresses: list[str], stream: str, last: int
) -> dict[int, str]:
    """Offsets 0..``last`` as one replica holds them (an ISR-replica read pinned to it)."""
    pinned = dataclasses.replace(OPTIONS, address_overrides=dict.fromkeys(addresses, address))
    got: dict[int, str] = {}
    deadline = time.monotonic() + 60
    # A node just restarted may refuse connections or not be in the ISR yet: retry.
    while time.monotonic() < deadline and len(got) <= last:
        start = max(got) + 1 if got else 0
        try:
            async with (
                Client([address], options=pinned) as one,
                one.subscribe(
                    stream, 0, start_offset=start, stop_offset=last, read_isr_replica=True
                ) as sub,
            ):
                async for message in sub:
                    got[message.offset] = message.value.decode()
        except errors.StopPositionReached:
            break
        except errors.LiftbridgeError:
            await asyncio.sleep(0.5)
    return got


async def empty_leader_divergence(cluster: Cluster, version: str) -> Outcome:
    """The -1 epoch start: see the module docstring. Needs a started 3-node cluster."""
    name = f"epoch-{uuid.uuid4().hex[:8]}"
    async with Client(cluster.addresses, nats_servers=[cluster.nats_url], options=OPTIONS) as c:
        # min ISR 1: the lone leader must take messages while both followers are paused.
        await c.create_stream(f"epoch.{name}", name, StreamConfig(replication_factor=3, min_isr=1))
        everyone = {node.server_id for node in cluster.nodes}
        old = await wait_leader(c, name, everyone, full_isr=True, timeout=ISR_WAIT)
        others = [node for node in cluster.nodes if node.server_id != old]
        with paused(others):
            for i in range(10):
                await c.publish(name, f"old-{i}".encode(), ack_policy=AckPolicy.LEADER)
            cluster.node(old).kill()
        # The followers, resumed, report the dead leader; one of them (empty log) leads.
        new = await wait_leader(c, name, {n.server_id for n in others}, timeout=FAILOVER_WAIT)
        for i in range(5):
            await c.publish(name, f"new-{i}".encode(), ack_policy=AckPolicy.LEADER)
        await asyncio.to_thread(cluster.node(old).start)
        # The 5 new messages committed (so on every ISR replica) with the old leader back.
        await wait_leader(c, name, {new}, full_isr=True, min_hw=4, timeout=ISR_WAIT)
        info = await c.fetch_partition_metadata(name, 0)
        last = int(info.high_watermark)
    addresses = {node.server_id: node.address for node in cluster.nodes}
    logs = {
        node: await read_replica(address, list(addresses.values()), name, last)
        for node, address in addresses.items()
    }
    return Outcome(version, old, new, logs, notes=[f"high watermark {last}"], stream=name)


async def restart_truncation_loss(cluster: Cluster, version: str) -> Outcome:
    """The HW fallback: see the module docstring. Needs a started 3-node cluster."""
    name = f"hwloss-{uuid.uuid4().hex[:8]}"
    async with Client(cluster.addresses, nats_servers=[cluster.nats_url], options=OPTIONS) as c:
        await c.create_stream(f"epoch.{name}", name, StreamConfig(replication_factor=3, min_isr=2))
        everyone = {node.server_id for node in cluster.nodes}
        old = await wait_leader(c, name, everyone, full_isr=True, timeout=ISR_WAIT)
        spare, witness = [node for node in cluster.nodes if node.server_id != old]
        notes = [f"paused {spare.server_id}; ISR {{{old}, {witness.server_id}}}"]
        with paused([spare]):
            # Out of the ISR: ALL acks then mean the leader and `witness` only.
            await wait_isr(c, name, {old, witness.server_id}, timeout=ISR_WAIT)
            acked = []
            for i in range(20):
                await c.publish(name, f"acked-{i}".encode(), ack_policy=AckPolicy.ALL)
                acked.append(f"acked-{i}")
            # Killed before its next HW checkpoint (every 5 s): its HW on disk is behind.
            witness.kill()
            cluster.node(old).kill()
        # `witness` recovers as a follower of the dead leader, asks it for the epoch's end
        # offset (no responders), then is elected: it is the only other ISR replica.
        await asyncio.to_thread(witness.start, wait=False)
        new = await wait_leader(c, name, {witness.server_id}, timeout=FAILOVER_WAIT)
        await asyncio.to_thread(cluster.node(old).start)
        await wait_leader(c, name, {new}, full_isr=True, timeout=ISR_WAIT)
        info = await c.fetch_partition_metadata(name, 0)
        last = int(info.high_watermark)
    addresses = {node.server_id: node.address for node in cluster.nodes}
    logs = {
        node: await read_replica(address, list(addresses.values()), name, last)
        for node, address in addresses.items()
    }
    notes.append(f"high watermark {last}")
    return Outcome(version, old, new, logs, notes=notes, acked=acked, stream=name)


async def wait_isr(client: Client, stream: str, isr: set[str], *, timeout: float) -> None:
    """Wait until the partition's ISR is exactly ``isr``."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        with contextlib.suppress(errors.LiftbridgeError):
            info = await client.fetch_partition_metadata(stream, 0)
            last = sorted(info.isr)
            if set(info.isr) == isr:
                return
        await asyncio.sleep(0.3)
    raise TimeoutError(f"ISR never became {sorted(isr)} in {timeout} s (last: {last})")


async def epoch_boundary_divergence(cluster: Cluster, version: str) -> Outcome:
    """Where a follower-recorded epoch starts: needs a started 5-node cluster.

    The stream's replicas are A (first leader), M and F. A takes offset 5 alone (M and F
    paused) and dies; M leads epoch 2 and writes offsets 5-9, which F replicates, recording
    epoch 2 as starting at offset 5 (the first offset it saw in it; a leader records the
    offset *before* its epoch: M recorded 4). M dies and F leads. A comes back and asks F
    where epoch 1 ended: F answers 5, A keeps its own offset 5 and rejoins the ISR. Five
    nodes so that Raft keeps a quorum while A and M are both down.
    """
    name = f"boundary-{uuid.uuid4().hex[:8]}"
    async with Client(cluster.addresses, nats_servers=[cluster.nats_url], options=OPTIONS) as c:
        await c.create_stream(f"epoch.{name}", name, StreamConfig(replication_factor=3, min_isr=1))
        everyone = {node.server_id for node in cluster.nodes}
        a = await wait_leader(c, name, everyone, full_isr=True, timeout=ISR_WAIT)
        info = await c.fetch_partition_metadata(name, 0)
        followers = [cluster.node(r) for r in info.replicas if r != a]
        for i in range(5):
            await c.publish(name, f"e1-{i}".encode(), ack_policy=AckPolicy.ALL)
        with paused(followers):
            await c.publish(name, b"a-only-5", ack_policy=AckPolicy.LEADER)
            cluster.node(a).kill()
        m = await wait_leader(c, name, {n.server_id for n in followers}, timeout=FAILOVER_WAIT)
        f = next(n.server_id for n in followers if n.server_id != m)
        for i in range(5, 10):
            await c.publish(name, f"e2-{i}".encode(), ack_policy=AckPolicy.LEADER)
        # Committed: F holds 5-9 (and A is out of the ISR, so F alone can elect itself).
        await wait_isr(c, name, {m, f}, timeout=ISR_WAIT)
        await wait_leader(c, name, {m}, min_hw=9, timeout=ISR_WAIT)
        cluster.node(m).kill()
        await wait_leader(c, name, {f}, timeout=FAILOVER_WAIT)
        await asyncio.to_thread(cluster.node(a).start)
        await wait_isr(c, name, {a, f}, timeout=ISR_WAIT)
        info = await c.fetch_partition_metadata(name, 0)
        last = int(info.high_watermark)
    addresses = {node.server_id: node.address for node in cluster.nodes}
    logs = {
        node: await read_replica(addresses[node], list(addresses.values()), name, last)
        for node in (a, f)
    }
    notes = [f"A={a} M={m} F={f}; high watermark {last}"]
    return Outcome(version, a, f, logs, notes=notes, stream=name)


SCENARIOS = {
    "divergence": empty_leader_divergence,
    "hw-loss": restart_truncation_loss,
    "boundary": epoch_boundary_divergence,
}
SIZES = {"boundary": 5}  # nodes; 3 otherwise


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--versions", default="v1.9.0,v1.9.0+lbc.1", help="comma list")
    parser.add_argument("--rounds", type=int, default=1, help="per version, interleaved")
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), default="divergence")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    versions = [v for v in args.versions.split(",") if v]
    scenario = SCENARIOS[args.scenario]
    divergent = dict.fromkeys(versions, 0)
    lost = dict.fromkeys(versions, 0)
    for round_ in range(args.rounds):
        for version in versions:
            base = args.out / f"{args.scenario}-{version}-{round_}"
            size = SIZES.get(args.scenario, 3)
            with Cluster(size, base_dir=base, versions=version, log_level="debug") as cluster:
                outcome = asyncio.run(scenario(cluster, version))
            divergent[version] += bool(outcome.divergent_offsets())
            lost[version] += bool(outcome.acked_lost())
            print(json.dumps(outcome.to_dict()), flush=True)
    for version in versions:
        print(
            f"{args.scenario} {version}: divergent in {divergent[version]}, acked lost in "
            f"{lost[version]} of {args.rounds} rounds",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
