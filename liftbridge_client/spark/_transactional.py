"""Exactly-once Spark writes (option ``exactlyOnce=true``) on the exactly-once layer.

Each task attempt publishes its rows as uncommitted (CONTINUE_TXN) messages, pipelined,
through one `_Lane` per target partition and lane (``producersPerPartition``). A lane
writes under a ProducerID of its own, random and new for every attempt, so no two
attempts of a task ever share one: a failed attempt's messages (cut short, or left behind
by a killed executor) belong to producers nobody commits, and read-committed readers
never show them.

Pipelining and the clock rule: a reader drops a message whose clock is not above the
largest its producer has stored in the open transaction (Gazette's rule). Messages of one
lane go out in clock order on one connection, so they land in that order; the lane checks
it on the acks (offsets rise with the clocks). When a publish fails (or an ack shows an
offset out of order), the lane ends that ProducerID's *generation*: its intent commits the
rows up to the last one acked without a gap (an ACK_TXN at that clock also drops that
producer's later messages), and every row after it is sent again, in order, under a fresh
ProducerID, after a backoff. Rows of one lane are committed in their order, generation
after generation.

The task returns its ACK_TXN intents (one per generation of each lane) in its commit
message; the driver writes them in ``commit`` only once Spark has decided that the job
(or the micro-batch) succeeded, after recording them in the write's journal (see
`_journal`): a batch replayed after the driver died, or a batch write run again with the
same ``writeId``, finds the intents recorded for it and writes those (again) instead of
its own, whose producers it rolls back. A failed or aborted job writes no intent: its
messages are never visible to read-committed readers.

Option ``producersPerPartition=N`` gives each (task, target partition) N lanes: a row with
a key goes to the lane its key's CRC-32 picks (rows of one key keep their order), a row
without one to the lane its number among the partition's keyless rows picks.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections import deque
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import chain, islice
from typing import Any, NamedTuple

from liftbridge_client import errors
from liftbridge_client.client import Client
from liftbridge_client.exactly_once.mapping import ModuloMapping, key_hash
from liftbridge_client.exactly_once.publisher import (
    CLOCKS_HEADER,
    DEFAULT_RETRY,
    UUID_HEADER,
    AckIntent,
    ExactlyOncePublisher,
    intents_from_json,
    intents_to_json,
    retry_worthy,
)
from liftbridge_client.exactly_once.uuids import (
    Flags,
    build_uuid_bytes,
    new_producer_id,
    uuid_bytes_of,
)
from liftbridge_client.models import Ack
from liftbridge_client.options import RetryPolicy
from liftbridge_client.packing import PackedRow, Packer, pack, packed_headers
from liftbridge_client.spark._columns import Columns
from liftbridge_client.spark._idempotent import TaskIdentity
from liftbridge_client.spark._journal import CLOCK_BASE, plan_commit
from liftbridge_client.spark._options import SinkOptions
from liftbridge_client.spark._rows import PublishedRow
from liftbridge_client.spark._write import CHUNK_ROWS, WriteStats, bounded, sink_runtime

__all__ = [
    "TaskIntents",
    "commit_batch",
    "commit_intents",
    "lane_for",
    "publish_rows",
    "publish_transactional",
    "write_intents",
]

log = logging.getLogger(__name__)

Runner = Callable[[Coroutine[Any, Any, None]], None]
"""Runs a coroutine to its end (`TaskRuntime.run`)."""


def lane_for(key: bytes | None, keyless_number: int, lanes: int) -> int:
    """A row's lane: its key's (CRC-32, stable across processes, unlike ``hash``), else its
    number among its partition's keyless rows, round robin."""
    if key is not None:
        return zlib.crc32(key) % lanes
    return keyless_number % lanes


# Where a lane writes: (stream, partition, lane).
_Target = tuple[str, int, int]

# One publish: a row as it is, or a pack of rows.
_Publish = PublishedRow | list[PackedRow]

_CONTINUE_TXN = int(Flags.CONTINUE_TXN)


@dataclass(slots=True)
class TaskIntents:
    """What one task published, and the intents that commit it (as JSON)."""

    stats: WriteStats = field(default_factory=WriteStats)
    intents: str = "[]"


class _Sent(NamedTuple):
    """A message in flight. Made with ``tuple.__new__`` (in C), one per row: a slotted
    dataclass's ``__init__`` is a Python call."""

    item: _Publish
    rows: int
    clock: int
    floor: int  # the lane's gapless prefix (its last clock) when this one was sent
    future: asyncio.Future[Any]


_new_sent = tuple.__new__


# A message of a gapless prefix: its clock, offset and rows (what was sent is kept beside).
_Acked = tuple[int, int, int]


def _consume(future: asyncio.Future[Any]) -> None:
    # A publish the lane no longer waits for: its outcome is read, never logged as lost.
    if not future.cancelled():
        future.exception()


class _Lane:
    """The pipelined publishes of one task to one target partition and lane (see the
    module doc): in clock order, checked on the acks, a new generation on a failure."""

    def __init__(
        self,
        client: Client,
        options: SinkOptions,
        stream: str,
        partition: int,
        retry: RetryPolicy,
    ) -> None:
        self._client = client
        self._ack_policy = options.ack_policy
        self.stream = stream
        self.partition = partition
        self._retry = retry
        self._todo: deque[_Publish] = deque()  # not sent in this generation yet
        self._inflight: deque[_Sent] = deque()
        self._ended: list[AckIntent] = []  # one per generation before this one
        self._failures = 0
        self._producer = new_producer_id()
        self._clock = CLOCK_BASE
        self._acked = CLOCK_BASE  # last clock of the gapless acked prefix
        self._offset = -1  # the offset of that prefix's last message
        self._sent = False
        self._rows = 0  # in the gapless prefixes of every generation
        # The prefix's last messages (clock, offset, rows; and beside, what was sent), to
        # end it earlier when an ack shows a later message stored before them;
        # ``_forgot``: older ones were let go. No more than a window of messages can have
        # been sent before an ack came back. Neither futures nor acks are kept, and the
        # numbers are a tuple of their own: thousands of objects alive a while each are
        # what CPython's cyclic GC traverses over and over, and it stops tracking a tuple
        # of numbers at its first collection (not one holding a row).
        window = options.max_inflight + 1
        self._recent: deque[_Acked] = deque(maxlen=window)
        self._recent_items: deque[_Publish] = deque(maxlen=window)
        self._forgot = False

    def intents(self) -> list[AckIntent]:
        """The generations' intents, in order (call after `finish`)."""
        assert not self._inflight
        assert not self._todo
        return [*self._ended, *self._intent()]

    @property
    def rows(self) -> int:
        """The rows the intents commit."""
        return self._rows

    def _intent(self) -> list[AckIntent]:
        if not self._sent:
            return []
        uuid = build_uuid_bytes(self._producer, self._acked, Flags.ACK_TXN)
        return [AckIntent(self.stream, self.partition, uuid)]

    def publish_now(self, item: _Publish) -> BaseException | bool:
        """`publish` when nothing needs waiting, without a coroutine (most rows). False:
        nothing was done, await `publish` of it. True: sent, and the acks that came
        meanwhile taken. An error: sent, but an ack ended the generation: await
        `recover` with it."""
        if self._todo:
            return False
        rows, value, key, clock, headers = self._message(item)
        try:
            future = self._client._send_now(
                self.stream, value, key, headers, self.partition, self._ack_policy
            )
        except errors.LiftbridgeError:
            return False  # `publish` sends it again and handles the error
        if future is None:
            return False
        self._record(item, rows, clock, future)
        return self._settle_done() or True

    async def publish(self, item: _Publish) -> None:
        if self._todo:  # rows of an ended generation go again first
            self._todo.append(item)
            await self._pump(final=False)
            return
        try:
            await self._send(item)
        except errors.LiftbridgeError as exc:
            self._todo.append(item)
            await self._send_failed(exc)
            await self._pump(final=False)
            return
        # The common case: one send, then the acks that came meanwhile (no waiting).
        problem = self._settle_done()
        if problem is not None:
            await self.recover(problem)

    async def recover(self, problem: BaseException) -> None:
        """An ack ended the generation: a new one sends what followed again."""
        await self._new_generation(problem)
        await self._pump(final=False)

    async def finish(self) -> None:
        """Returns once every row is acked in a gapless generation prefix."""
        await self._pump(final=True)

    async def _pump(self, final: bool) -> None:
        while True:
            while self._todo:
                item = self._todo.popleft()
                try:
                    await self._send(item)
                except errors.LiftbridgeError as exc:
                    self._todo.appendleft(item)
                    await self._send_failed(exc)
            problem = await self._settle() if final else self._settle_done()
            if problem is not None:
                await self._new_generation(problem)
            elif not final or not self._todo:
                return

    async def _send_failed(self, exc: errors.LiftbridgeError) -> None:
        """A send raised ``exc``; its row is back in front of the rows to send."""
        if not retry_worthy(exc):
            raise exc
        # What is in flight comes first: its gapless prefix stays in this generation, the
        # rest goes again, before this row.
        await self._new_generation(await self._settle() or exc)

    async def _settle(self) -> BaseException | None:
        """`_settle_done` for every message in flight, waiting for each ack in turn."""
        inflight = self._inflight
        while inflight:
            head = inflight[0].future
            if not head.done():
                await asyncio.wait((head,))
            problem = self._settle_done()
            if problem is not None:
                return problem
        return None

    def _settle_done(self) -> BaseException | None:
        """Take the acked heads into the gapless prefix, in order, up to the first still
        in flight; at the first that cannot be taken, put it and everything after it back
        in front of the rows to send and return why."""
        inflight = self._inflight
        while inflight and inflight[0].future.done():
            head = inflight.popleft()
            refused = self._take(head)
            if refused is not None:
                problem, back = refused
                again = [*back, head.item, *(sent.item for sent in inflight)]
                self._todo.extendleft(reversed(again))
                for sent in inflight:
                    sent.future.add_done_callback(_consume)
                inflight.clear()
                return problem
        return None

    def _message(self, item: _Publish) -> tuple[int, bytes, bytes | None, int, dict[str, bytes]]:
        """What ``item`` goes out as next: its rows, value, key, clock and headers."""
        if isinstance(item, PublishedRow):
            clock = self._clock + 1
            uuid = uuid_bytes_of(self._producer, clock, _CONTINUE_TXN)
            # The row's own headers, if any, and the layer's (which wins over a namesake).
            headers = {**item.headers, UUID_HEADER: uuid} if item.headers else {UUID_HEADER: uuid}
            return 1, item.value, item.key, clock, headers
        # A pack takes a clock per row (its UUID carries the last): the layer's format.
        rows = len(item)
        clock = self._clock + rows
        headers = packed_headers(rows)
        headers[CLOCKS_HEADER] = str(rows).encode()
        headers[UUID_HEADER] = uuid_bytes_of(self._producer, clock, _CONTINUE_TXN)
        return rows, pack(item), None, clock, headers

    async def _send(self, item: _Publish) -> None:
        rows, value, key, clock, headers = self._message(item)
        future = await self._client.send(
            self.stream,
            value,
            key=key,
            headers=headers,
            partition=self.partition,
            ack_policy=self._ack_policy,
        )
        self._record(item, rows, clock, future)

    def _record(self, item: _Publish, rows: int, clock: int, future: asyncio.Future[Any]) -> None:
        """``item`` went out at ``clock``: in flight until its ack."""
        self._clock = clock
        self._sent = True
        self._inflight.append(_new_sent(_Sent, (item, rows, clock, self._acked, future)))

    def _take(self, sent: _Sent) -> tuple[BaseException, list[_Publish]] | None:
        """Take an acked head into the gapless prefix (None, the common case: nothing
        allocated); else the reason it cannot be, and the prefix's messages that must go
        again with it."""
        try:
            ack: Ack | None = sent.future.result()  # one call for the common case
        except asyncio.CancelledError:
            return self._failed(sent, errors.LiftbridgeTimeoutError("the publish was cancelled"))
        except BaseException as exc:  # the publish's own error, whatever its class
            return self._failed(sent, exc)
        offset = self._offset + 1 if ack is None else ack.offset
        if offset <= self._offset:
            # Messages of the prefix stored after this one are dropped by readers (their
            # clocks are lower): the prefix ends before the first of them.
            back = self._rewind(lambda _, at: at > offset)
            return errors.OutOfOrderAckError(
                f"{self.stream}/{self.partition}: ack at offset {offset} after acks up to "
                f"{self._offset} (the messages landed out of order)"
            ), back
        self._offset = offset
        self._acked = sent.clock
        self._rows += sent.rows
        self._forgot |= len(self._recent) == self._recent.maxlen
        self._recent.append((sent.clock, offset, sent.rows))
        self._recent_items.append(sent.item)
        return None

    def _failed(self, sent: _Sent, exc: BaseException) -> tuple[BaseException, list[_Publish]]:
        # It may be stored, and (were the transport to reorder) before messages acked
        # after it was sent: the prefix ends where it stood when this one went out.
        return exc, self._rewind(lambda clock, _: clock > sent.floor)

    def _rewind(self, drop: Callable[[int, int], bool]) -> list[_Publish]:
        """End the prefix before its last messages for which ``drop(clock, offset)``
        holds; returns them, to go again."""
        back: list[_Publish] = []
        recent = self._recent
        while recent and drop(recent[-1][0], recent[-1][1]):
            back.append(self._recent_items.pop())
            self._rows -= recent.pop()[2]
        if not back:
            return back
        back.reverse()
        if recent:
            self._acked, self._offset = recent[-1][0], recent[-1][1]
        elif self._forgot:
            raise errors.OutOfOrderAckError(
                f"{self.stream}/{self.partition}: the gapless prefix would end before acked "
                "messages the task no longer holds"
            )
        else:
            self._acked, self._offset = CLOCK_BASE, -1
        return back

    async def _new_generation(self, exc: BaseException) -> None:
        if not isinstance(exc, errors.LiftbridgeError) or not retry_worthy(exc):
            raise exc
        self._failures += 1
        if self._failures >= self._retry.attempts:
            raise exc
        log.info(
            "%s/%d: publish failed (%r): the rows from clock %d on go again under a new ProducerID",
            self.stream,
            self.partition,
            exc,
            self._acked + 1,
        )
        self._ended.extend(self._intent())
        await asyncio.sleep(self._retry.backoff(self._failures))
        self._producer = new_producer_id()
        self._clock = self._acked = CLOCK_BASE
        self._offset = -1
        self._sent = False
        self._recent.clear()
        self._recent_items.clear()
        self._forgot = False


class _Producers:
    """A task's lanes, one per target partition and lane, made on first use."""

    def __init__(self, client: Client, options: SinkOptions, identity: TaskIdentity) -> None:
        self._client = client
        self._options = options
        self._identity = identity
        self._mapping = ModuloMapping()
        # Only for partition lists (metadata, cached): it publishes nothing.
        self._metadata = ExactlyOncePublisher(client, ack_policy=options.ack_policy)
        self.lanes: dict[_Target, _Lane] = {}
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
        """The lane of a row among its partition's."""
        if self._lanes == 1:
            return 0
        n = 0
        if key is None:
            n = self._keyless.get((stream, partition), 0)
            self._keyless[(stream, partition)] = n + 1
        return lane_for(key, n, self._lanes)

    async def partitions(self, stream: str) -> tuple[int, ...]:
        """The stream's partitions (metadata, cached and re-read when stale)."""
        return await self._metadata.partitions(stream)

    def partition_of(self, row: PublishedRow, partitions: tuple[int, ...]) -> int:
        """The row's partition among its stream's ``partitions``."""
        if row.partition is not None:
            # Checked here, not when the publish fails: a packed row waits for its pack,
            # and the task must fail at the bad row, before it publishes anything after it.
            if row.partition not in partitions:
                raise errors.InvalidInputError(
                    f"partition {row.partition} of a row to write: stream {row.stream!r} has "
                    f"partitions {partitions}"
                )
            return row.partition
        key = row.key
        if key is None:  # keyless rows: spread by task
            return partitions[self._identity.task % len(partitions)]
        if type(key) is bytes and partitions:  # `ModuloMapping.choose`, one call per row
            return partitions[key_hash(key) % len(partitions)]
        return self._mapping.choose(row.stream, key, partitions)

    def lane(self, target: _Target) -> _Lane:
        found = self.lanes.get(target)
        if found is None:
            stream, partition, _ = target
            found = _Lane(self._client, self._options, stream, partition, DEFAULT_RETRY)
            self.lanes[target] = found
        return found


async def _publish_chunk(producers: _Producers, chunk: Sequence[PublishedRow]) -> None:
    """A chunk's rows, pipelined, and their acks: the chunk ends with nothing in flight,
    as the event loop stands still while Spark makes the next one (sent messages would
    wait in buffers, and a task failing there would leave its earlier chunks unsent)."""
    known: dict[str, tuple[int, ...]] = {}  # partition lists, looked up once a chunk
    packing = producers.pack_rows > 1
    lanes = producers.lanes
    for row in chunk:
        stream = row.stream
        partitions = known.get(stream)
        if partitions is None:
            partitions = known[stream] = await producers.partitions(stream)
        partition = producers.partition_of(row, partitions)
        target = (stream, partition, producers.lane_of(stream, partition, row.key))
        lane = lanes.get(target) or producers.lane(target)
        if packing:
            packed = PackedRow(row.value, row.key, row.headers)
            for full in producers.packer(target).add(packed):
                await lane.publish(full)
        elif (done := lane.publish_now(row)) is not True:
            await (lane.publish(row) if done is False else lane.recover(done))
    await _settle(producers)


async def _finish(producers: _Producers) -> None:
    """The last, partial pack of every lane, and its ack."""
    for target, packer in producers.packers.items():
        for rest in packer.flush():
            await producers.lane(target).publish(rest)
    await _settle(producers)


async def _settle(producers: _Producers) -> None:
    """Every lane's acks, lanes concurrently: the first failure stops the others and fails
    the task with its typed error."""
    tasks = [asyncio.ensure_future(lane.finish()) for lane in producers.lanes.values()]
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
    """Publish a task's rows uncommitted (pipelined, in clock order per lane) and return
    the intents that commit them."""
    runtime = sink_runtime(options)
    failed = True
    try:
        # chain, not a generator expression over rows: no Python frame resumed per row.
        rows = chain.from_iterable(columns.rows() for columns in batches)
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
        run(bounded(_publish_chunk(producers, chunk), options))
    run(bounded(_finish(producers), options))
    intents = [i for lane in producers.lanes.values() for i in lane.intents()]
    for lane in producers.lanes.values():
        if lane.rows:
            result.stats.add_rows(lane.stream, lane.partition, lane.rows)
    result.intents = intents_to_json(intents)
    return result


async def write_intents(client: Client, options: SinkOptions, intents: list[AckIntent]) -> None:
    """Write ACK intents (retried with their UUIDs; written twice, they commit once)."""
    await ExactlyOncePublisher(client, ack_policy=options.ack_policy).write_ack_intents(intents)


async def commit_batch(
    client: Client, options: SinkOptions, batch: int, intents: list[AckIntent]
) -> int:
    """The driver's commit of one batch: record the intents in the write's journal, then
    write them (see `_journal`); returns how many intents were written."""
    if options.journal and options.write_id is not None:
        intents = await plan_commit(client, options.write_id, batch, intents)
    await write_intents(client, options, intents)
    return len(intents)


def commit_intents(options: SinkOptions, documents: Iterable[str], batch: int, what: str) -> int:
    """Commit every task's intents (driver side); returns how many intents were written."""
    intents = [intent for doc in documents for intent in intents_from_json(doc)]
    if not intents:
        return 0
    runtime = sink_runtime(options)
    try:
        written = runtime.run(
            bounded(commit_batch(runtime.client, options, batch, intents), options, "committing")
        )
    except errors.LiftbridgeError:
        log.error("%s: writing the ACK intents failed; a replay writes them again", what)
        raise
    finally:
        runtime.close()
    log.info("%s: %d ACK intents written (committed for read_committed readers)", what, written)
    return written
