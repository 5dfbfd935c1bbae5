"""Exactly-once Spark writes (option ``exactlyOnce=true``) on the exactly-once layer.

Each task attempt publishes its rows as uncommitted (CONTINUE_TXN) messages through one
`ExactlyOncePublisher` per target partition, whose producer id is derived from the task's
identity (the write id: the streaming query's id or the ``writeId`` option; the
micro-batch id; the Spark partition) and the target partition, and whose clock starts at
a fixed value and ticks once per row it publishes. So a retried task, or a micro-batch
replayed after the query was stopped or the driver died, sends every row again under the
SAME UUID, which read-committed readers drop as a duplicate. The partitions are written
concurrently (one message in flight per partition, the layer's ordering rule); each one's
clocks depend only on the order of its own rows.

The task returns its ACK_TXN intents (one per partition it wrote) in its commit message;
the driver writes them in ``commit`` only once Spark has decided that the job (or the
micro-batch) succeeded. A failed or aborted job writes no intent: its messages are never
visible to read-committed readers. Intents written twice (a batch replayed after the
driver died between writing them and recording the batch) commit once.

Rows must come in the same order on a retry (the i-th row for a partition gets its i-th
clock);
rows without a key or a partition go to the partition the task's number picks, so that
too is the same on every attempt.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import islice

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
from liftbridge_client.spark._idempotent import TaskIdentity
from liftbridge_client.spark._options import SinkOptions
from liftbridge_client.spark._rows import PublishedRow
from liftbridge_client.spark._runtime import TaskRuntime
from liftbridge_client.spark._write import CHUNK_ROWS, WriteStats, bounded, client_options

__all__ = [
    "CLOCK_BASE",
    "TaskIntents",
    "commit_intents",
    "producer_for",
    "publish_transactional",
]

log = logging.getLogger(__name__)

# A fixed start (2020-01-01): the clocks must be the same on every attempt of a task.
CLOCK_BASE = unix_ns_to_clock(1_577_836_800 * 10**9)


def producer_for(identity: TaskIdentity, stream: str, partition: int) -> bytes:
    """The 6-byte producer id of a task for one target partition (multicast bit set, as
    random ids have it)."""
    name = f"{identity.tag}\x00{stream}\x00{partition}"
    raw = bytearray(hashlib.blake2b(name.encode(), digest_size=6).digest())
    raw[0] |= 0x01
    return bytes(raw)


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
        self.publishers: dict[tuple[str, int], ExactlyOncePublisher] = {}

    async def partition_of(self, row: PublishedRow) -> int:
        if row.partition is not None:
            return row.partition
        partitions = await self._metadata.partitions(row.stream)
        if row.key is None:  # keyless rows: spread by task, the same on every attempt
            return partitions[self._identity.task % len(partitions)]
        return self._mapping.choose(row.stream, row.key, partitions)

    def publisher(self, stream: str, partition: int) -> ExactlyOncePublisher:
        found = self.publishers.get((stream, partition))
        if found is None:
            found = ExactlyOncePublisher(
                self._client,
                producer=producer_for(self._identity, stream, partition),
                clock=Clock(CLOCK_BASE),
                ack_policy=self._options.ack_policy,
            )
            self.publishers[(stream, partition)] = found
        return found


async def _publish_in_order(
    publisher: ExactlyOncePublisher,
    stream: str,
    partition: int,
    rows: Sequence[PublishedRow],
    stats: WriteStats,
) -> None:
    for row in rows:
        ack = await publisher.publish_uncommitted(
            stream, row.value, key=row.key, headers=row.headers, partition=partition
        )
        stats.add(ack)


async def _publish_chunk(
    producers: _Producers, chunk: Sequence[PublishedRow], stats: WriteStats
) -> None:
    by_partition: dict[tuple[str, int], list[PublishedRow]] = {}
    for row in chunk:
        target = (row.stream, await producers.partition_of(row))
        by_partition.setdefault(target, []).append(row)
    # One sequence per partition, all at once: the first failure stops the others and
    # fails the task with its typed error.
    tasks = [
        asyncio.ensure_future(_publish_in_order(producers.publisher(s, p), s, p, rows, stats))
        for (s, p), rows in by_partition.items()
    ]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


def publish_transactional(
    publishes: Iterable[PublishedRow], options: SinkOptions, identity: TaskIdentity
) -> TaskIntents:
    """Publish a task's rows uncommitted (one in flight per partition, as the layer needs
    for ordering; partitions concurrently) and return the intents that commit them."""
    result = TaskIntents()
    runtime = TaskRuntime(options.brokers, options.nats_servers, client_options(options))
    failed = True
    try:
        producers = _Producers(runtime.client, options, identity)
        iterator = iter(publishes)
        while chunk := list(islice(iterator, CHUNK_ROWS)):
            runtime.run(bounded(_publish_chunk(producers, chunk, result.stats), options))
        intents = [i for p in producers.publishers.values() for i in p.build_ack_intents()]
        result.intents = intents_to_json(intents)
        failed = False
    finally:
        runtime.close(drain=not failed)
    return result


async def _write(client: Client, options: SinkOptions, intents: list[AckIntent]) -> None:
    await ExactlyOncePublisher(client, ack_policy=options.ack_policy).write_ack_intents(intents)


def commit_intents(options: SinkOptions, documents: Iterable[str], what: str) -> int:
    """Write every task's intents (driver side); returns how many were written."""
    intents = [intent for doc in documents for intent in intents_from_json(doc)]
    if not intents:
        return 0
    runtime = TaskRuntime(options.brokers, options.nats_servers, client_options(options))
    try:
        runtime.run(bounded(_write(runtime.client, options, intents), options, "committing"))
    except errors.LiftbridgeError:
        log.error("%s: writing the ACK intents failed; a replay writes them again", what)
        raise
    finally:
        runtime.close()
    log.info(
        "%s: %d ACK intents written (committed for read_committed readers)", what, len(intents)
    )
    return len(intents)
