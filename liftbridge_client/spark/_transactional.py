"""Exactly-once Spark writes (option ``exactlyOnce=true``) on the exactly-once layer.

Each task attempt publishes its rows as uncommitted (CONTINUE_TXN) messages through an
`ExactlyOncePublisher` whose producer id is derived from the task's identity (the write
id: the streaming query's id or the ``writeId`` option; the micro-batch id; the Spark
partition) and whose clock starts at a fixed value and ticks once per row. So a retried
task, or a micro-batch replayed after the query was stopped or the driver died, sends
every row again under the SAME UUID, which read-committed readers drop as a duplicate.

The task returns its ACK_TXN intents (one per partition it wrote) in its commit message;
the driver writes them in ``commit`` only once Spark has decided that the job (or the
micro-batch) succeeded. A failed or aborted job writes no intent: its messages are never
visible to read-committed readers. Intents written twice (a batch replayed after the
driver died between writing them and recording the batch) commit once.

Rows must come in the same order on a retry (the i-th row of a task gets the i-th clock);
rows without a key or a partition go to the partition the task's number picks, so that
too is the same on every attempt.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import islice

from liftbridge_client import errors
from liftbridge_client.client import Client
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
from liftbridge_client.spark._write import CHUNK_ROWS, WriteStats, client_options

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


def producer_for(identity: TaskIdentity) -> bytes:
    """The 6-byte producer id of a task (multicast bit set, as random ids have it)."""
    raw = bytearray(hashlib.blake2b(identity.tag.encode(), digest_size=6).digest())
    raw[0] |= 0x01
    return bytes(raw)


@dataclass(slots=True)
class TaskIntents:
    """What one task published, and the intents that commit it (as JSON)."""

    stats: WriteStats = field(default_factory=WriteStats)
    intents: str = "[]"


async def _publish_chunk(
    publisher: ExactlyOncePublisher,
    chunk: Sequence[PublishedRow],
    task: int,
    stats: WriteStats,
) -> None:
    for row in chunk:
        partition = row.partition
        if partition is None and row.key is None:
            # Keyless rows: spread by task, the same on every attempt.
            partitions = await publisher.partitions(row.stream)
            partition = partitions[task % len(partitions)]
        ack = await publisher.publish_uncommitted(
            row.stream, row.value, key=row.key, headers=row.headers, partition=partition
        )
        stats.add(ack)


def publish_transactional(
    publishes: Iterable[PublishedRow], options: SinkOptions, identity: TaskIdentity
) -> TaskIntents:
    """Publish a task's rows uncommitted (one in flight per partition, as the layer needs
    for ordering) and return the intents that commit them."""
    result = TaskIntents()
    runtime = TaskRuntime(options.brokers, options.nats_servers, client_options(options))
    failed = True
    try:
        publisher = ExactlyOncePublisher(
            runtime.client,
            producer=producer_for(identity),
            clock=Clock(CLOCK_BASE),
            ack_policy=options.ack_policy,
        )
        iterator = iter(publishes)
        while chunk := list(islice(iterator, CHUNK_ROWS)):
            runtime.run(_publish_chunk(publisher, chunk, identity.task, result.stats))
        result.intents = intents_to_json(publisher.build_ack_intents())
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
        runtime.run(_write(runtime.client, options, intents))
    except errors.LiftbridgeError:
        log.error("%s: writing the ACK intents failed; a replay writes them again", what)
        raise
    finally:
        runtime.close()
    log.info(
        "%s: %d ACK intents written (committed for read_committed readers)", what, len(intents)
    )
    return len(intents)
