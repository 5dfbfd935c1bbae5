"""A deterministic scenario for a restarted node that hides what it acked (patch 0009).

:func:`single_node_restart`: one node (embedded NATS), a stream of 2 partitions, acked
publishes, then the node stops (SIGKILL, or SIGINT) well within 5 s of the stream's
creation, so its logs never checkpointed their high watermark after the publishes, and
starts again on the same data directory. Nothing is published until the node has been
back for ``BOUND`` seconds; then one message goes to partition 0 only. v1.9.0 serves each
partition up to the high watermark of its checkpoint file (-1 without one) until that
publish: reads from the earliest offset get nothing, and partition 1, which gets no
message, stays hidden. The patched node commits its whole log when it starts leading.
docs/compatibility.md has the mechanism.

Run by hand (from tests/): ``python -m faults.restart_scenarios --out /tmp/rs``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import time
import uuid
from pathlib import Path

from liftbridge_client import AckPolicy, Client, StreamConfig, errors
from liftbridge_client.testing import SingleNode

PARTITIONS = 2
PER_PARTITION = 500
BOUND = 10.0  # s after the node serves again: every acked message readable by then
READ_IDLE = 3.0  # a read from the earliest offset ends after this long without a message
CHECKPOINT_FILE = "replication-offset-checkpoint"


@dataclasses.dataclass
class RestartOutcome:
    """High watermarks and reads of each partition around a restart."""

    version: str
    stop: str  # "kill" (SIGKILL) or "interrupt" (SIGINT)
    exit_status: int | None = None
    hw_before: list[int] = dataclasses.field(default_factory=list)
    checkpoint: list[int | None] = dataclasses.field(default_factory=list)  # None: no file
    hw_at_start: list[int] = dataclasses.field(default_factory=list)  # as soon as it serves
    readable_s: list[float | None] = dataclasses.field(default_factory=list)  # HW back
    hw_at_bound: list[int] = dataclasses.field(default_factory=list)
    newest_at_bound: list[int] = dataclasses.field(default_factory=list)  # the log's end
    read: list[int] = dataclasses.field(default_factory=list)  # messages from the earliest
    hw_after_poke: list[int] = dataclasses.field(default_factory=list)
    read_after_poke: list[int] = dataclasses.field(default_factory=list)

    @property
    def last(self) -> int:
        """Each partition's last acked offset."""
        return PER_PARTITION - 1

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


async def _hws(client: Client, stream: str) -> list[int]:
    infos = [await client.fetch_partition_metadata(stream, p) for p in range(PARTITIONS)]
    return [info.high_watermark for info in infos]


async def _newest(client: Client, stream: str) -> list[int]:
    infos = [await client.fetch_partition_metadata(stream, p) for p in range(PARTITIONS)]
    return [info.newest_offset for info in infos]


async def _read(client: Client, stream: str, partition: int) -> int:
    """How many messages a subscription from offset 0 gets before READ_IDLE of silence."""
    count = 0
    async with client.subscribe(stream, partition, start_offset=0) as sub:
        try:
            while True:
                await sub.next(timeout=READ_IDLE)
                count += 1
        except TimeoutError:
            return count


def checkpoint_path(node: SingleNode, stream: str, partition: int) -> Path:
    """Where the node keeps a partition's HW on disk (written every 5 s and on close)."""
    return node.node.data_dir / "streams" / stream / str(partition) / CHECKPOINT_FILE


def _checkpoint(node: SingleNode, stream: str, partition: int) -> int | None:
    path = checkpoint_path(node, stream, partition)
    try:
        return int(path.read_text())
    except FileNotFoundError:
        return None


async def single_node_restart(node: SingleNode, stop: str = "kill") -> RestartOutcome:
    """See the module docstring. Needs a started SingleNode."""
    outcome = RestartOutcome(node.version, stop)
    stream = f"restart-{uuid.uuid4().hex[:8]}"
    async with Client(node.addresses) as client:
        await client.create_stream(stream, stream, StreamConfig(partitions=PARTITIONS))
        futures = [
            await client.send(
                stream, f"m-{i}".encode(), partition=i % PARTITIONS, ack_policy=AckPolicy.ALL
            )
            for i in range(PARTITIONS * PER_PARTITION)
        ]
        await asyncio.gather(*futures)
        outcome.hw_before = await _hws(client, stream)
    outcome.exit_status = node.node.kill() if stop == "kill" else node.node.stop()
    outcome.checkpoint = [_checkpoint(node, stream, p) for p in range(PARTITIONS)]
    node.node.start()
    served = time.monotonic()
    async with Client(node.addresses) as client:
        outcome.hw_at_start = await _hws(client, stream)
        outcome.readable_s = [None] * PARTITIONS
        while time.monotonic() - served < BOUND:
            hws = await _hws(client, stream)
            for p, hw in enumerate(hws):
                if hw >= outcome.last and outcome.readable_s[p] is None:
                    outcome.readable_s[p] = round(time.monotonic() - served, 2)
            if None not in outcome.readable_s:
                break
            await asyncio.sleep(0.2)
        outcome.hw_at_bound = await _hws(client, stream)
        outcome.newest_at_bound = await _newest(client, stream)
        outcome.read = [await _read(client, stream, p) for p in range(PARTITIONS)]
        # What users of a stock node are told to do: publish once to each partition.
        await client.publish(stream, b"poke", partition=0, ack_policy=AckPolicy.ALL)
        outcome.hw_after_poke = await _hws(client, stream)
        outcome.read_after_poke = [await _read(client, stream, p) for p in range(PARTITIONS)]
    return outcome


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--versions", default="v1.9.0,v1.9.0+lbc.1", help="comma list")
    parser.add_argument("--stops", default="kill,interrupt", help="comma list")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for version in args.versions.split(","):
        for stop in args.stops.split(","):
            with SingleNode(base_dir=args.out / f"{version}-{stop}", version=version) as node:
                try:
                    outcome = asyncio.run(single_node_restart(node, stop))
                except errors.LiftbridgeError as exc:
                    print(f"{version} {stop}: {exc!r}", file=sys.stderr)
                    continue
            results.append(outcome.to_dict())
            print(json.dumps(outcome.to_dict()), flush=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
