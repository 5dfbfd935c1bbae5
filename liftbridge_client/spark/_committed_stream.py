"""Read-committed streaming reads: producer states travel through a Liftbridge stream.

A micro-batch's task needs the Sequencer's producer states (last acknowledged clocks, open
transactions) at its start offset, and Spark's read tasks cannot hand anything back to the
driver. So the tasks carry them themselves: the task that reads ``[start, end)`` of a
partition restores the states at ``start`` from a snapshot in the *states stream* (option
``committedStatesStream``), reads its range through a Sequencer, and before it ends
publishes the states at ``end`` there (pruned of producers idle beyond
``producerIdleHorizonMs``). The driver plans from metadata only: it never reads messages.

What the offsets (and so Spark's checkpoint) hold besides the offsets, under `STATES_KEY`:
a run id (so a new checkpoint never reads the snapshots of another), the states stream's
name and, per partition, the states stream offset from which its snapshot is to be found
(the states stream's end when the driver planned the micro-batch that reads up to it; -1:
no states, the partition is read from its first planned offset on without any). That is
one integer per partition, whatever the number of producers.

Snapshots are deterministic (the states at an offset follow from the states at the start
and the messages read), so a retried task, or a replayed micro-batch after a restart,
publishes the same snapshot again and a reader may take any copy.
"""

from __future__ import annotations

import asyncio
import json
import struct
import uuid
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from liftbridge_client import StreamConfig, errors
from liftbridge_client.models import AckPolicy
from liftbridge_client.spark._offsets import OffsetMap, copy_offsets, offsets_from_checkpoint

if TYPE_CHECKING:  # the driver's planning needs neither: loaded by the tasks that do
    from liftbridge_client.client import Client
    from liftbridge_client.exactly_once.sequencer import PartitionRef, ProducerState

__all__ = [
    "NO_STATES",
    "STATES_KEY",
    "Plan",
    "StatesAt",
    "decode_states",
    "encode_states",
    "ensure_store",
    "load_states",
    "next_plan",
    "save_states",
    "split_offsets",
    "store_end",
    "with_plan",
]

STATES_KEY = "__lbspark_read_committed__"
"""The offsets' entry with the run id and snapshot positions (a JSON string, not a stream)."""

NO_STATES = -1
"""A partition's snapshot position when it starts without producer states."""

_VERSION = 2  # 1: the producer states themselves were in the offsets (development builds)
_PART_HEADER = "lbspark-states-part"
_RECORD = struct.Struct(">6sQq")  # producer id, last acknowledged clock, open txn's begin
# States per snapshot message: 22 bytes each, so a part stays well under the server's
# default 1 MiB message limit (clustering.replication.max.bytes) even uncompressed.
PART_STATES = 20_000


@dataclass(frozen=True, slots=True)
class Plan:
    """What the offsets carry for read_committed besides the offsets themselves."""

    run: str
    store: str
    positions: OffsetMap  # per partition: where its snapshot is found (NO_STATES: none)

    def position(self, stream: str, partition: int) -> int:
        return self.positions.get(stream, {}).get(str(partition), NO_STATES)

    def to_json(self) -> str:
        doc = {"v": _VERSION, "run": self.run, "store": self.store, "from": self.positions}
        return json.dumps(doc, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Plan:
        try:
            doc = json.loads(text)
            if not isinstance(doc, dict) or doc.get("v") != _VERSION:
                raise errors.InvalidInputError(
                    "these read_committed offsets were written by an earlier development "
                    "version of the data source (producer states inline): start the query "
                    "with a new checkpointLocation"
                )
            positions = {
                str(s): {str(p): int(v) for p, v in pids.items()} for s, pids in doc["from"].items()
            }
            return cls(str(doc["run"]), str(doc["store"]), positions)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise errors.InvalidInputError(f"offsets: {STATES_KEY} is not valid: {exc}") from exc

    @classmethod
    def new(cls, store: str, offsets: OffsetMap) -> Plan:
        positions = {s: dict.fromkeys(pids, NO_STATES) for s, pids in offsets.items()}
        return cls(uuid.uuid4().hex, store, positions)


def split_offsets(raw: object) -> tuple[OffsetMap, Plan | None]:
    """The offset map and the read_committed plan of offsets Spark hands back."""
    if isinstance(raw, Mapping) and STATES_KEY in raw:
        text = raw[STATES_KEY]
        if not isinstance(text, str):
            raise errors.InvalidInputError(f"offsets: {STATES_KEY} must be a JSON string")
        rest = {k: v for k, v in raw.items() if k != STATES_KEY}
        return offsets_from_checkpoint(rest), Plan.from_json(text)
    return offsets_from_checkpoint(raw), None


def with_plan(offsets: OffsetMap, plan: Plan) -> dict[str, Any]:
    out: dict[str, Any] = dict(copy_offsets(offsets))
    out[STATES_KEY] = plan.to_json()
    return out


def next_plan(plan: Plan, begin: OffsetMap, end: OffsetMap, store_at: int) -> Plan:
    """The plan at ``end``: a partition that moves gets its snapshot from ``store_at`` on
    (the states stream's end now, before the tasks that write the snapshot run); one that
    does not keeps its position, so an unchanged batch gives unchanged offsets."""
    positions: OffsetMap = {}
    for stream, ends in end.items():
        out = positions.setdefault(stream, {})
        for pid, stop in ends.items():
            start = begin.get(stream, {}).get(pid, stop)
            out[pid] = store_at if start < stop else plan.position(stream, int(pid))
    return Plan(plan.run, plan.store, positions)


@dataclass(frozen=True, slots=True)
class StatesAt:
    """Where a task finds the producer states at its start, and where it saves its end's
    (pickled to the executor)."""

    store: str
    run: str
    position: int  # NO_STATES: start without states
    horizon_ns: int  # producers idle longer (by their clocks) are dropped from snapshots


def _key(run: str, ref: PartitionRef, offset: int) -> bytes:
    return json.dumps([run, ref.stream, ref.partition, offset]).encode()


def encode_states(states: Sequence[ProducerState]) -> list[bytes]:
    """A partition's producer states as snapshot message values (at least one)."""
    parts = [states[i : i + PART_STATES] for i in range(0, len(states), PART_STATES)] or [[]]
    return [
        zlib.compress(b"".join(_RECORD.pack(s.producer, s.last_ack, s.begin) for s in part))
        for part in parts
    ]


def decode_states(ref: PartitionRef, values: Iterable[bytes]) -> tuple[ProducerState, ...]:
    from liftbridge_client.exactly_once.sequencer import ProducerState

    out: list[ProducerState] = []
    for value in values:
        raw = zlib.decompress(value)
        if len(raw) % _RECORD.size:
            raise errors.FramingError(f"{ref}: a producer states snapshot is truncated")
        out.extend(
            ProducerState(ref, producer, last_ack, begin)
            for producer, last_ack, begin in _RECORD.iter_unpack(raw)
        )
    return tuple(out)


# Replicas of a states stream the query creates: Kafka's choice for its internal topics
# (offsets.topic.replication.factor), capped by the cluster's size.
STORE_REPLICAS = 3


async def ensure_store(client: Client, store: str) -> None:
    """Create the states stream (one partition, subject = its name, on up to
    `STORE_REPLICAS` servers) unless it exists: the server's default of one replica would
    fail the query whenever that one server is down."""
    metadata = await client.fetch_metadata(store)  # lists the brokers too: one request
    if store in metadata.streams:
        return
    replicas = max(1, min(STORE_REPLICAS, len(metadata.brokers)))
    config = StreamConfig(partitions=1, replication_factor=replicas)
    await client.create_stream(store, store, config, exist_ok=True)


async def store_end(client: Client, store: str) -> int:
    """The states stream's next offset (metadata only)."""
    info = await client.fetch_partition_metadata(store, 0)
    return info.newest_offset + 1


async def save_states(
    client: Client,
    at: StatesAt,
    ref: PartitionRef,
    offset: int,
    states: Sequence[ProducerState],
) -> None:
    """Publish the snapshot of ``ref``'s states at ``offset`` (acknowledged by all
    replicas in sync, so the next micro-batch finds it after a leader change)."""
    key = _key(at.run, ref, offset)
    parts = encode_states(states)
    for i, value in enumerate(parts):
        await client.publish(
            at.store,
            value,
            key=key,
            headers={_PART_HEADER: b"%d/%d" % (i, len(parts))},
            ack_policy=AckPolicy.ALL,
        )


def _part_of(headers: Mapping[str, bytes]) -> tuple[int, int] | None:
    raw = headers.get(_PART_HEADER)
    if raw is None:
        return None
    try:
        index, count = (int(x) for x in raw.split(b"/"))
    except ValueError:
        return None
    return (index, count) if 0 <= index < count else None


async def load_states(
    client: Client, at: StatesAt, ref: PartitionRef, offset: int, timeout: float
) -> tuple[ProducerState, ...] | None:
    """The snapshot of ``ref``'s states at ``offset``, searched from ``at.position`` to the
    states stream's current end; None when it is not there."""
    if at.position == NO_STATES:
        return ()
    end = await store_end(client, at.store)
    if end <= at.position:
        return None
    key = _key(at.run, ref, offset)
    parts: dict[int, bytes] = {}
    async with client.subscribe(at.store, 0, start_offset=at.position, stop_offset=end - 1) as sub:
        messages = aiter(sub)
        while True:
            try:
                async with asyncio.timeout(timeout):
                    message = await anext(messages)
            except (StopAsyncIteration, TimeoutError):
                return None  # TimeoutError: removed by retention (see _positions.EMPTY_PROBE)
            if message.key != key or (part := _part_of(message.headers)) is None:
                continue
            index, count = part
            parts[index] = message.value  # copies are identical: any one will do
            if len(parts) == count and all(i in parts for i in range(count)):
                return decode_states(ref, (parts[i] for i in range(count)))
            if message.offset >= end - 1:
                return None
