"""Exactly-once Spark writes (option ``exactlyOnce=true``) on the exactly-once layer.

Each task attempt publishes its rows as uncommitted (CONTINUE_TXN) messages through one
`ExactlyOncePublisher` per target partition and lane (below). Its producer id is derived
from the task's identity (the write id: the streaming query's id or the ``writeId``
option; the micro-batch id; the Spark partition), the target partition and the lane; its
clock starts at a fixed value and ticks once per row it publishes (a pack of ``packRows``
rows ticks once per row it holds, its UUID carrying the last: header ``eo-clocks``). So a
retried task, or a micro-batch replayed after the query was stopped or the driver died,
sends every row again under the SAME clock, which read-committed readers drop as a
duplicate. A failed attempt whose input Spark cut short publishes a shorter last pack than
its retry; with a clock per row, readers deliver the retry's pack minus the rows the short
one delivered. Producers write
concurrently, each with one message in flight (the layer's ordering rule); each one's
clocks depend only on the order of its own rows.

Option ``producersPerPartition=N`` gives each (task, target partition) N producers (lanes),
so N messages in flight: a row with a key goes to the lane its key's CRC-32 picks (rows of
one key keep their order), a row without one to the lane its number among the partition's
keyless rows picks. Lane 0's producer id is that of the single producer of N=1.

The task returns its ACK_TXN intents (one per producer) in its commit message; the driver
writes them in ``commit`` only once Spark has decided that the job (or the micro-batch)
succeeded. A failed or aborted job writes no intent: its messages are never visible to
read-committed readers. Intents written twice (a batch replayed after the driver died
between writing them and recording the batch) commit once.

Rows must come in the same order on a retry (the i-th row for a producer gets its i-th
clock), and with the same ``producersPerPartition``; rows without a key or a partition go
to the partition the task's number picks, so that too is the same on every attempt.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import zlib
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from liftbridge_client import errors
from liftbridge_client.client import Client
from liftbridge_client.exactly_once.mapping import ModuloMapping
from liftbridge_client.exactly_once.publisher import (
    AckIntent,
    ExactlyOncePublisher,
    intents_from_json,
    intents_to_json,
)
from liftbridge_client.exactly_once.uuids import Clock, unix_ns_to_clock
from liftbridge_client.packing import PackedRow, Packer, pack, packed_headers
from liftbridge_client.spark._columns import Columns
from liftbridge_client.spark._idempotent import TaskIdentity
from liftbridge_client.spark._options import SinkOptions
from liftbridge_client.spark._rows import PublishedRow
from liftbridge_client.spark._write import CHUNK_ROWS, WriteStats, bounded, sink_runtime

__all__ = [
    "CLOCK_BASE",
    "TaskIntents",
    "commit_intents",
    "lane_for",
    "producer_for",
    "publish_rows",
    "publish_transactional",
    "write_intents",
]

log = logging.getLogger(__name__)

Runner = Callable[[Coroutine[Any, Any, None]], None]
"""Runs a coroutine to its end (`TaskRuntime.run`)."""

# A fixed start (2020-01-01): the clocks must be the same on every attempt of a task.
CLOCK_BASE = unix_ns_to_clock(1_577_836_800 * 10**9)


def producer_for(identity: TaskIdentity, stream: str, partition: int, lane: int = 0) -> bytes:
    """The 6-byte producer id of a task for one target partition and lane (multicast bit
    set, as random ids have it)."""
    name = f"{identity.tag}\x00{stream}\x00{partition}"
    if lane:
        name += f"\x00{lane}"
    raw = bytearray(hashlib.blake2b(name.encode(), digest_size=6).digest())
    raw[0] |= 0x01
    return bytes(raw)


def lane_for(key: bytes | None, keyless_number: int, lanes: int) -> int:
    """A row's lane: its key's (CRC-32, stable across processes, unlike ``hash``), else its
    number among its partition's keyless rows, round robin."""
    if key is not None:
        return zlib.crc32(key) % lanes
    return keyless_number % lanes


# Where a producer writes: (stream, partition, lane).
_Target = tuple[str, int, int]


@dataclass(slots=True)
class TaskIntents:
    """What one task published, and the intents that commit it (as JSON)."""

    stats: WriteStats = field(default_factory=WriteStats)
    intents: str = "[]"


class _Producers:
    """A task's publishers, one per target partition, made on first use."""

    def __init__(self, client: Client, options: SinkOptions, identity: TaskIdentity) -> None:
        self._client = client
        self._options = options
        self._identity = identity
        self._mapping = ModuloMapping()
        # Only for partition lists (metadata, cached): it publishes nothing.
        self._metadata = ExactlyOncePublisher(client, ack_policy=options.ack_policy)
        self.publishers: dict[_Target, ExactlyOncePublisher] = {}
        self.pack_rows = options.pack_rows
        self.packers: dict[_Target, Packer] = {}
        self._lanes = options.producers_per_partition
        self._keyless: dict[tuple[str, int], int] = {}  # keyless rows seen per partition

    def packer(self, target: _Target) -> Packer:
        found = self.packers.get(target)
        if found is None:
            found = self.packers[target] = Packer(self.pack_rows)
        return found

    def lane_of(self, stream: str, partition: int, key: bytes | None) -> int:
        """The producer of a row among its partition's: the same on every attempt."""
        if self._lanes == 1:
            return 0
        n = 0
        if key is None:
            n = self._keyless.get((stream, partition), 0)
            self._keyless[(stream, partition)] = n + 1
        return lane_for(key, n, self._lanes)

    async def partition_of(self, row: PublishedRow) -> int:
        partitions = await self._metadata.partitions(row.stream)
        if row.partition is not None:
            # Checked here, not when the publish fails: a packed row waits for its pack,
            # and the task must fail at the bad row, before it publishes anything after it.
            if row.partition not in partitions:
                raise errors.InvalidInputError(
                    f"partition {row.partition} of a row to write: stream {row.stream!r} has "
                    f"partitions {partitions}"
                )
            return row.partition
        if row.key is None:  # keyless rows: spread by task, the same on every attempt
            return partitions[self._identity.task % len(partitions)]
        return self._mapping.choose(row.stream, row.key, partitions)

    def publisher(self, target: _Target) -> ExactlyOncePublisher:
        found = self.publishers.get(target)
        if found is None:
            stream, partition, lane = target
            found = ExactlyOncePublisher(
                self._client,
                producer=producer_for(self._identity, stream, partition, lane),
                clock=Clock(CLOCK_BASE),
                ack_policy=self._options.ack_policy,
            )
            self.publishers[target] = found
        return found


# One publish: a row as it is, or a pack of rows.
_Publish = PublishedRow | list[PackedRow]


async def _publish_in_order(
    publisher: ExactlyOncePublisher,
    stream: str,
    partition: int,
    publishes: Sequence[_Publish],
    stats: WriteStats,
) -> None:
    for item in publishes:
        if isinstance(item, PublishedRow):
            ack = await publisher.publish_uncommitted(
                stream, item.value, key=item.key, headers=item.headers, partition=partition
            )
            stats.add(ack)
        else:
            # A clock per row: a pack cut short by a failed attempt and the retry's full
            # pack end on different clocks, and readers deliver each row once.
            ack = await publisher.publish_uncommitted(
                stream,
                pack(item),
                headers=packed_headers(len(item)),
                partition=partition,
                clocks=len(item),
            )
            stats.add(ack, len(item))


async def _publish_chunk(
    producers: _Producers, chunk: Sequence[PublishedRow], stats: WriteStats
) -> None:
    by_target: dict[_Target, list[_Publish]] = {}
    for row in chunk:
        partition = await producers.partition_of(row)
        target = (row.stream, partition, producers.lane_of(row.stream, partition, row.key))
        publishes = by_target.setdefault(target, [])
        if producers.pack_rows > 1:
            packed = PackedRow(row.value, row.key, row.headers)
            publishes.extend(producers.packer(target).add(packed))
        else:
            publishes.append(row)
    await _publish_all(producers, by_target, stats)


async def _flush_packs(producers: _Producers, stats: WriteStats) -> None:
    """The last, partial pack of every producer (after the task's last row)."""
    by_target: dict[_Target, list[_Publish]] = {
        target: list(packer.flush()) for target, packer in producers.packers.items()
    }
    await _publish_all(producers, by_target, stats)


async def _publish_all(
    producers: _Producers, by_target: dict[_Target, list[_Publish]], stats: WriteStats
) -> None:
    # One sequence per producer, all at once: the first failure stops the others and
    # fails the task with its typed error.
    tasks = [
        asyncio.ensure_future(
            _publish_in_order(producers.publisher(target), target[0], target[1], items, stats)
        )
        for target, items in by_target.items()
        if items
    ]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


def publish_transactional(
    batches: Iterable[Columns], options: SinkOptions, identity: TaskIdentity
) -> TaskIntents:
    """Publish a task's rows uncommitted (one in flight per producer, as the layer needs
    for ordering; producers concurrently) and return the intents that commit them."""
    runtime = sink_runtime(options)
    failed = True
    try:
        rows = (row for columns in batches for row in columns.rows())
        result = publish_rows(runtime.run, runtime.client, rows, options, identity)
        failed = False
    finally:
        runtime.close(drain=not failed)
    return result


def publish_rows(
    run: Runner,
    client: Client,
    rows: Iterable[PublishedRow],
    options: SinkOptions,
    identity: TaskIdentity,
) -> TaskIntents:
    """`publish_transactional` on a connected ``client``, ``run`` running each step (the
    rows are pulled between steps, outside the event loop)."""
    result = TaskIntents()
    producers = _Producers(client, options, identity)
    iterator = iter(rows)
    while chunk := list(islice(iterator, CHUNK_ROWS)):
        run(bounded(_publish_chunk(producers, chunk, result.stats), options))
    run(bounded(_flush_packs(producers, result.stats), options))
    intents = [i for p in producers.publishers.values() for i in p.build_ack_intents()]
    result.intents = intents_to_json(intents)
    return result


async def write_intents(client: Client, options: SinkOptions, intents: list[AckIntent]) -> None:
    """Write ACK intents (retried with their UUIDs; written twice, they commit once)."""
    await ExactlyOncePublisher(client, ack_policy=options.ack_policy).write_ack_intents(intents)


def commit_intents(options: SinkOptions, documents: Iterable[str], what: str) -> int:
    """Write every task's intents (driver side); returns how many were written."""
    intents = [intent for doc in documents for intent in intents_from_json(doc)]
    if not intents:
        return 0
    runtime = sink_runtime(options)
    try:
        runtime.run(bounded(write_intents(runtime.client, options, intents), options, "committing"))
    except errors.LiftbridgeError:
        log.error("%s: writing the ACK intents failed; a replay writes them again", what)
        raise
    finally:
        runtime.close()
    log.info(
        "%s: %d ACK intents written (committed for read_committed readers)", what, len(intents)
    )
    return len(intents)
