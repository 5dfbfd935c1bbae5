"""Publishing a Spark task's rows (executor side), at least once.

Rows are published with the client's pipelined ``send`` (its ``max_inflight`` window
bounds what awaits an ack), in chunks between which arrived acks are counted and failures
raised, and the task waits for every ack before it returns: a task that returns has had
every row acked (with ack policy ``none``: written to the connection). A failed publish
fails the task with the client's typed error; Spark retries the task, which publishes its
rows again: without the idempotent mode a retry can duplicate rows (at-least-once).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Protocol, TypeVar

from liftbridge_client import errors
from liftbridge_client._publish.acks import PublishFuture
from liftbridge_client.client import Client
from liftbridge_client.models import Ack, AckPolicy
from liftbridge_client.options import ClientOptions
from liftbridge_client.packing import PackedRow, Packer, pack, packed_headers
from liftbridge_client.partitioning import key_partition
from liftbridge_client.spark._columns import Columns
from liftbridge_client.spark._options import SinkOptions
from liftbridge_client.spark._rows import PublishedRow
from liftbridge_client.spark._runtime import TaskRuntime

__all__ = [
    "CHUNK_ROWS",
    "PublishedRow",
    "SinkGuard",
    "WriteStats",
    "bounded",
    "publish_batches",
]

CHUNK_ROWS = 1000

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(slots=True)
class WriteStats:
    """What one task published: rows per ``stream/partition`` (acked ones only)."""

    rows: int = 0
    per_partition: dict[str, int] = field(default_factory=dict)
    skipped: int = 0  # idempotent mode: rows an earlier attempt had published

    def add(self, ack: Ack | None, rows: int = 1) -> None:
        """Count an acked publish of ``rows`` rows (more than one when packed)."""
        if ack is None:
            self.rows += rows
        else:
            self.add_rows(ack.stream, ack.partition, rows)

    def add_rows(self, stream: str, partition: int, rows: int) -> None:
        """Count ``rows`` rows acked in one partition."""
        self.rows += rows
        key = f"{stream}/{partition}"
        self.per_partition[key] = self.per_partition.get(key, 0) + rows

    def add_acks(self, acks: Iterable[Ack | None]) -> None:
        """Count acked publishes of one row each (the key string is built once per
        partition, not per row)."""
        counts: dict[tuple[str, int], int] = {}
        for ack in acks:
            self.rows += 1
            if ack is not None:
                target = (ack.stream, ack.partition)
                counts[target] = counts.get(target, 0) + 1
        for (stream, partition), n in counts.items():
            key = f"{stream}/{partition}"
            self.per_partition[key] = self.per_partition.get(key, 0) + n

    def merge(self, other: WriteStats) -> None:
        self.rows += other.rows
        self.skipped += other.skipped
        for key, count in other.per_partition.items():
            self.per_partition[key] = self.per_partition.get(key, 0) + count


class InFlight:
    """A task's publishes awaiting their acks, across chunks: the client's ``max_inflight``
    window bounds them, acks are counted as they arrive, and the first failure is raised."""

    def __init__(self, stats: WriteStats) -> None:
        self._stats = stats
        self.rows: list[PublishFuture[Ack | None]] = []  # publishes of one row each
        self._packs: list[tuple[PublishFuture[Ack | None], int]] = []

    def add(self, future: PublishFuture[Ack | None], rows: int = 1) -> None:
        if rows == 1:
            self.rows.append(future)
        else:
            self._packs.append((future, rows))

    def collect(self) -> None:
        """Count the acks that arrived; raise the error of a failed publish."""
        if self.rows:
            done = [f for f in self.rows if f.done()]
            if done:
                self.rows = [f for f in self.rows if not f.done()]
                self._stats.add_acks([f.result() for f in done])
        if self._packs:
            waiting = []
            for future, rows in self._packs:
                if future.done():
                    self._stats.add(future.result(), rows)
                else:
                    waiting.append((future, rows))
            self._packs = waiting

    async def wait_all(self) -> None:
        pending = self.rows + [future for future, _ in self._packs]
        if pending:
            await asyncio.wait(pending)
        self.collect()

    def cancel_all(self) -> None:
        """The task fails: withdraw what was not sent, and retrieve every outcome."""
        for future in self.rows + [future for future, _ in self._packs]:
            if future.done():
                if not future.cancelled():
                    future.exception()
            else:
                future.cancel()
        self.rows = []
        self._packs = []


async def _publish_columns(
    client: Client, chunk: Columns, options: SinkOptions, inflight: InFlight
) -> None:
    """One publish per row, straight from the columns. With the client's own ack wait
    (which `client_options` sets) ``send`` takes the client's one-step path, headers
    included when they are a small dict of bytes (an idempotent write's ``lbspark-id``);
    the columns are never turned into row objects."""
    send, now = client.send, client._send_now
    policy = options.ack_policy
    add = inflight.rows.append
    streams, values = chunk.streams, chunk.values
    keys, partitions, headers = chunk.keys, chunk.partitions, chunk.headers
    if isinstance(streams, str) and keys is None and partitions is None:
        if headers is None:
            for value in values:
                fut = now(streams, value, None, None, None, policy)
                add(fut if fut is not None else await send(streams, value, ack_policy=policy))
        else:  # the idempotent sink's common case: one stream, a header per row
            for value, header in zip(values, headers, strict=True):
                fut = now(streams, value, None, header, None, policy)
                if fut is None:
                    fut = await send(streams, value, headers=header, ack_policy=policy)
                add(fut)
    else:
        n = len(values)
        none: list[None] = [None] * n
        rows = zip(
            [streams] * n if isinstance(streams, str) else streams,
            values,
            keys or none,
            partitions or none,
            headers or none,
            strict=True,
        )
        for stream, value, key, partition, header in rows:
            fut = now(stream, value, key, header, partition, policy)
            if fut is None:
                fut = await send(
                    stream, value, key=key, headers=header, partition=partition, ack_policy=policy
                )
            add(fut)
    inflight.collect()


async def _publish_packs(
    client: Client, chunk: list[PublishedRow], options: SinkOptions, inflight: InFlight
) -> None:
    for pack_ in chunk:
        future = await client.send(
            pack_.stream,
            pack_.value,
            headers=pack_.headers,
            partition=pack_.partition,
            ack_policy=options.ack_policy,
        )
        inflight.add(future, pack_.rows)
    inflight.collect()


def packed_publishes(
    rows: Iterable[PublishedRow], pack_rows: int, partitions_of: Callable[[str], int]
) -> Iterator[PublishedRow]:
    """Rows as packs of up to ``pack_rows`` rows (option ``packRows``), one per target
    partition at a time: a row's partition is its ``partition`` column, else the one its
    key picks as the unpacked sink's default partitioner would (`key_partition`; keyless
    rows to 0)."""
    packers: dict[tuple[str, int], Packer] = {}

    def as_publish(stream: str, partition: int, packed: list[PackedRow]) -> PublishedRow:
        n = len(packed)
        return PublishedRow(stream, pack(packed), None, partition, packed_headers(n), rows=n)

    for row in rows:
        count = partitions_of(row.stream)
        if row.partition is not None:
            # Checked here: a packed row waits for its pack, so the publish would fail late.
            if not 0 <= row.partition < count:
                raise errors.InvalidInputError(
                    f"partition {row.partition} of a row to write: stream {row.stream!r} has "
                    f"partitions 0..{count - 1}"
                )
            partition = row.partition
        else:
            partition = key_partition(row.key, count)
        target = (row.stream, partition)
        packer = packers.get(target)
        if packer is None:
            packer = packers[target] = Packer(pack_rows)
        for packed in packer.add(PackedRow(row.value, row.key, row.headers)):
            yield as_publish(row.stream, partition, packed)
    for (stream, partition), packer in packers.items():
        for packed in packer.flush():
            yield as_publish(stream, partition, packed)


async def bounded(
    coro: Coroutine[Any, Any, T], options: SinkOptions, what: str = "publishing"
) -> T:
    """``coro``, failed with a typed timeout when it makes no progress for
    ``deliveryTimeoutMs`` (the cluster is gone): a write never hangs on retries."""
    try:
        async with asyncio.timeout(options.delivery_timeout):
            return await coro
    except TimeoutError as exc:
        if isinstance(exc, errors.LiftbridgeError):
            raise
        raise errors.LiftbridgeTimeoutError(
            f"{what} made no progress within deliveryTimeoutMs="
            f"{options.delivery_timeout * 1000:.0f} (is the Liftbridge cluster reachable?)"
        ) from exc


async def _partition_count(client: Client, stream: str) -> int:
    info = (await client.fetch_metadata(stream)).streams.get(stream)
    if info is None:
        raise errors.NotFoundError(f"no stream named {stream!r} to write to")
    return len(info.partitions)


def sink_runtime(options: SinkOptions) -> TaskRuntime:
    """A runtime for a write's task or commit, its connect bounded as `client_options` says."""
    note = (
        f"a write connects within connectTimeoutMs={options.connect_timeout * 1000:.0f} or "
        f"deliveryTimeoutMs={options.delivery_timeout * 1000:.0f}, the smaller; Spark "
        "retries the task up to spark.task.maxFailures times"
    )
    return TaskRuntime(
        options.brokers, options.nats_servers, client_options(options), connect_note=note
    )


def client_options(options: SinkOptions) -> ClientOptions:
    # Connecting is a step of the write too: deliveryTimeoutMs bounds it (a frozen server
    # accepts connections and answers nothing, so only the connect timeout ended it).
    return ClientOptions(
        connect_timeout=min(options.connect_timeout, options.delivery_timeout),
        max_inflight=options.max_inflight,
        transport=options.transport,
        ack_wait=options.ack_timeout,
        metadata_refresh_interval=None,
    )


class SinkGuard(Protocol):
    """The per-task hooks of a delivery mode stronger than at-least-once.

    The idempotent mode (`_idempotent.WriteGuard`) is one; the exactly-once layer's
    transactional producer (deterministic producer ids and UUIDs, ACK intents written by
    the driver's commit) plugs in here the same way.
    """

    async def prepare(self) -> bool:
        """Before publishing; True when this task's rows are already all published."""
        ...

    def mark(self, chunk: Columns) -> Columns:
        """The rows of ``chunk`` to publish, as they must be published (e.g. with ids)."""
        ...

    async def beat(self) -> None:
        """After each chunk: the attempt is alive and publishing."""
        ...

    async def close(self) -> None:
        """After the attempt's last publish was acked or abandoned, whether it succeeded or
        not: a retry waits for this before it looks at what the attempt published.

        There is no "finished" hook: a task cannot tell that its input was complete (Spark
        ends the writer's input early when the task fails upstream of it), so only the
        driver's commit records a batch as written.
        """
        ...


def publish_batches(
    batches: Iterable[Columns],
    options: SinkOptions,
    guard_for: Callable[[Client], SinkGuard] | None = None,
) -> WriteStats:
    """Publish every row and wait for the acks; raises the first publish error.

    ``guard_for`` makes the task's `SinkGuard` from its client (idempotent mode: rows an
    earlier attempt of the same task published are skipped, see `_idempotent`).
    """
    stats = WriteStats()
    runtime = sink_runtime(options)
    failed = True
    guard = None
    try:
        client = runtime.client
        guard = guard_for(client) if guard_for is not None else None
        if guard is not None and runtime.run(bounded(guard.prepare(), options, "preparing")):
            failed = False
            return stats
        inflight = InFlight(stats)

        def publish(step: Coroutine[Any, Any, None]) -> None:
            try:
                runtime.run(bounded(step, options))
                if guard is not None:
                    runtime.run(bounded(guard.beat(), options))
            except BaseException:
                inflight.cancel_all()
                raise

        if options.pack_rows > 1:
            counts: dict[str, int] = {}

            def partitions_of(stream: str) -> int:
                if stream not in counts:
                    counts[stream] = runtime.run(bounded(_partition_count(client, stream), options))
                return counts[stream]

            rows = (row for columns in batches for row in columns.rows())
            packs = iter(packed_publishes(rows, options.pack_rows, partitions_of))
            # A chunk of packs holds about CHUNK_ROWS rows too (not CHUNK_ROWS packs in memory).
            per_chunk = max(1, CHUNK_ROWS // options.pack_rows)
            while packed := list(islice(packs, per_chunk)):
                publish(_publish_packs(client, packed, options, inflight))
        else:
            for columns in batches:
                for start in range(0, len(columns), CHUNK_ROWS):
                    chunk = columns.slice(start, start + CHUNK_ROWS)
                    if guard is not None:
                        before = len(chunk)
                        chunk = guard.mark(chunk)
                        stats.skipped += before - len(chunk)
                    publish(_publish_columns(client, chunk, options, inflight))
        try:
            runtime.run(bounded(inflight.wait_all(), options))
        except BaseException:
            inflight.cancel_all()
            raise
        if options.ack_policy is AckPolicy.NONE:
            runtime.run(client.flush(options.ack_timeout))
        failed = False
    finally:
        if guard is not None:
            try:
                runtime.run(bounded(guard.close(), options, "recording the attempt's end"))
            except Exception:
                log.warning("could not record the end of this attempt", exc_info=True)
        runtime.close(drain=not failed)
    return stats
