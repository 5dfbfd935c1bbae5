"""A deterministic scenario for v1.9.0's "Read corrupted data" panic (patch 0007).

:func:`follower_catchup_read`: a subscription pinned to a follower (an ISR-replica read)
has read everything and waits at the follower's high watermark. The follower is paused
until the leader drops it from the ISR, the leader takes a burst larger than one
replication fetch (``clustering.replication.max.bytes``, 1 MB), and the follower is
resumed. v1.9.0 takes the leader's HW from the first fetch response before appending its
data, so the waiting reader wakes to an HW past the end of its log; it reads nothing,
reports that as success, decodes a stale header and, at the next HW change (the 5 messages
published after the catch-up), reads from the wrong position and panics: the node dies.
docs/compatibility.md has the mechanism. The patched follower takes the HW after the data
and no further than its log end, and the subscription delivers every offset once, in
order.

Run by hand (from tests/): ``python -m faults.reader_scenarios --rounds 3 --out /tmp/rd``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import sys
import time
import uuid
from pathlib import Path

from faults.epoch_scenarios import OPTIONS, paused, wait_isr, wait_leader
from liftbridge_client import AckPolicy, Client, StreamConfig, errors
from liftbridge_client.testing import Cluster, wait_until

ISR_WAIT = 90.0
BURST = 48  # messages of BURST_BYTES: about 5 replication fetches
BURST_BYTES = 100_000
TAIL = 5  # small messages after the catch-up, to move the HW once more
READ_WAIT = 60.0


@dataclasses.dataclass
class ReadOutcome:
    """What the follower's subscription delivered and whether the follower survived."""

    version: str
    follower: str
    last_offset: int  # the partition's last offset: the subscription should reach it
    offsets: list[int] = dataclasses.field(default_factory=list)
    error: str = ""
    follower_exited: bool = False
    panic: str = ""  # the panic line of the follower's log, if any

    def in_order(self) -> bool:
        return self.offsets == list(range(self.last_offset + 1))

    def to_dict(self) -> dict[str, object]:
        summary = dataclasses.asdict(self)
        summary["offsets"] = f"{len(self.offsets)} offsets, in order: {self.in_order()}"
        return summary


async def follower_catchup_read(cluster: Cluster, version: str) -> ReadOutcome:
    """See the module docstring. Needs a started 3-node cluster."""
    name = f"catchup-{uuid.uuid4().hex[:8]}"
    addresses = [node.address for node in cluster.nodes]
    async with Client(cluster.addresses, nats_servers=[cluster.nats_url], options=OPTIONS) as c:
        await c.create_stream(f"reader.{name}", name, StreamConfig(replication_factor=3, min_isr=1))
        everyone = {node.server_id for node in cluster.nodes}
        leader = await wait_leader(c, name, everyone, full_isr=True, timeout=ISR_WAIT)
        follower, other = [node for node in cluster.nodes if node.server_id != leader]
        for i in range(10):
            await c.publish(name, f"first-{i}".encode(), ack_policy=AckPolicy.ALL)
        pinned = dataclasses.replace(
            OPTIONS, address_overrides=dict.fromkeys(addresses, follower.address)
        )
        outcome = ReadOutcome(version, follower.server_id, 10 + BURST + TAIL - 1)
        async with (
            Client([follower.address], options=pinned) as one,
            one.subscribe(name, 0, start_offset=0, read_isr_replica=True) as sub,
        ):
            for _ in range(10):
                outcome.offsets.append((await sub.next(timeout=READ_WAIT)).offset)
            # The reader now waits at the follower's HW (9).
            with paused([follower]):
                await wait_isr(c, name, {leader, other.server_id}, timeout=ISR_WAIT)
                for i in range(BURST):
                    value = f"burst-{i}-".encode() + b"x" * BURST_BYTES
                    await c.publish(name, value, ack_policy=AckPolicy.ALL)
            # Resumed: the follower catches up over several fetches, then rejoins the ISR
            # (v1.9.0 too: its reader is stuck, not yet dead).
            await wait_isr(c, name, everyone, timeout=ISR_WAIT)
            for i in range(TAIL):
                await c.publish(name, f"tail-{i}".encode(), ack_policy=AckPolicy.LEADER)
            deadline = time.monotonic() + READ_WAIT
            try:
                while len(outcome.offsets) <= outcome.last_offset:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        outcome.error = "timed out"
                        break
                    outcome.offsets.append((await sub.next(timeout=left)).offset)
            except errors.LiftbridgeError as exc:
                outcome.error = f"{type(exc).__name__}: {exc}"
    # A panicking node may still be writing its stack: give it a moment to exit.
    with contextlib.suppress(TimeoutError):
        await wait_until(lambda: not follower.running, timeout=10, what="the follower's exit")
    outcome.follower_exited = not follower.running
    outcome.panic = next(
        (line for line in follower.logs().splitlines() if line.startswith("panic:")), ""
    )
    return outcome


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--versions", default="v1.9.0,v1.9.0+lbc.1", help="comma list")
    parser.add_argument("--rounds", type=int, default=1, help="per version, interleaved")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    versions = [v for v in args.versions.split(",") if v]
    crashed = dict.fromkeys(versions, 0)
    clean = dict.fromkeys(versions, 0)
    for round_ in range(args.rounds):
        for version in versions:
            base = args.out / f"catchup-{version}-{round_}"
            with Cluster(3, base_dir=base, versions=version) as cluster:
                outcome = asyncio.run(follower_catchup_read(cluster, version))
            crashed[version] += outcome.follower_exited
            clean[version] += outcome.in_order() and not outcome.follower_exited
            print(json.dumps(outcome.to_dict()), flush=True)
    for version in versions:
        print(
            f"catchup {version}: follower crashed in {crashed[version]}, every offset once "
            f"in order in {clean[version]} of {args.rounds} rounds",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
