"""Consumer groups: members share the partitions of streams, positions live in cursors.

Created by `Client.consumer`; see docs/consumer-groups.md for the concepts. A `Consumer`
joins the group, asks the group's coordinator (a broker) for its partition assignments,
reads the assigned partitions and hands their messages out through one async iterator.
What it reads is committed to the cursors of the group, so another member (or this one
after a restart) continues where it stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Self

from liftbridge_client import _validate, errors
from liftbridge_client._cluster import admin as _admin
from liftbridge_client._cluster import groups as _groups
from liftbridge_client._cluster.groups import (
    AutoOffset,
    PartitionKey,
    PartitionState,
    diff_assignments,
    start_args,
)
from liftbridge_client._cluster.metadata import MetadataCache
from liftbridge_client._tasks import TaskHandle, TaskSupervisor
from liftbridge_client._transport.grpc import BrokerPool
from liftbridge_client._validate import OptionalSeconds
from liftbridge_client.models import Message
from liftbridge_client.options import ClientOptions
from liftbridge_client.subscription import Subscription

__all__ = ["AutoOffset", "Consumer", "ConsumerOptions", "group_cursor_id"]

log = logging.getLogger(__name__)

# Fatal for the whole consumer: retrying cannot help.
_FATAL = (errors.FeatureNotSupportedError, errors.CursorsDisabledError, errors.InvalidInputError)
_MAX_RETRY_DELAY = 1.0  # seconds between attempts to reach a coordinator that did not answer


def group_cursor_id(group_id: str) -> str:
    """The cursor id a group's positions are stored under: ``__group:<group_id>``.

    The same id as go-liftbridge's consumers, so members written with either client
    continue from each other's positions.
    """
    return f"__group:{group_id}"


@dataclass(frozen=True)
class ConsumerOptions:
    """How a group member behaves. Times are seconds or `datetime.timedelta` (read back as
    float seconds).

    - ``consumer_id``: this member's id in the group; unique per live member (a random
      one when None). Reusing the id of a member that crashed takes its place.
    - ``auto_offset``: where to start a partition the group has no committed offset for.
    - ``commit_interval``: how often positions are committed in the background (None:
      only by `Consumer.commit` and on close). It bounds what is read twice after a crash.
    - ``fetch_interval``: how often the coordinator is asked for assignments; this is
      also the member's heartbeat. None: 0.4 x the server's ``groups.consumer.timeout``.
    - ``max_buffered``: messages read ahead of the application, over all partitions.
    - ``commit_on_close``: on a normal close, count the last message handed out as
      processed and commit; after an exception only what was finished is committed.
    - ``cursor_id``: the cursor id positions are committed under. None (the default) is
      `group_cursor_id` (``__group:<group_id>``, as go-liftbridge); every member of a
      group must use the same.
    """

    consumer_id: str | None = None
    auto_offset: AutoOffset = AutoOffset.EARLIEST
    commit_interval: OptionalSeconds = OptionalSeconds(5.0)
    fetch_interval: OptionalSeconds = OptionalSeconds(None)
    max_buffered: int = 1024
    commit_on_close: bool = True
    cursor_id: str | None = None

    def __post_init__(self) -> None:
        if self.cursor_id is not None and "," in _validate.text("cursor_id", self.cursor_id):
            raise errors.InvalidInputError(
                f"cursor_id must be a non-empty string without ',' or None, got {self.cursor_id!r}"
            )
        if self.consumer_id is not None:
            _validate.text("consumer_id", self.consumer_id)
        if not isinstance(self.auto_offset, AutoOffset):
            raise errors.InvalidInputError(
                f"auto_offset must be an AutoOffset, got {self.auto_offset!r}"
            )
        _validate.int_arg("max_buffered", self.max_buffered, 1, _validate.INT32_MAX)
        _validate.flag("commit_on_close", self.commit_on_close)


def _check_ids(group_id: object, streams: object) -> tuple[str, tuple[str, ...]]:
    group_id = _validate.text("group_id", group_id)
    if "," in group_id:
        # Cursor keys are comma-separated: a comma would make them ambiguous.
        raise errors.InvalidInputError(f"group_id must not contain ',', got {group_id!r}")
    if isinstance(streams, str) or not isinstance(streams, Sequence) or not streams:
        raise errors.InvalidInputError(
            f"streams must be a non-empty sequence of stream names, got {streams!r}"
        )
    for stream in streams:
        _validate.text("streams entry", stream)
    return group_id, tuple(dict.fromkeys(streams))


_Item = tuple[PartitionState, int, Message] | None  # None wakes the reader up


class Consumer:
    """A member of a consumer group: ``async with`` it, ``async for`` over its messages.

    ::

        async with client.consumer("billing", ["orders"]) as consumer:
            async for msg in consumer:
                handle(msg)

    **Assignment.** Joining (on ``async with``, or the first read) makes the server
    assign each partition of the streams to exactly one member. The member asks the
    coordinator for its assignments every ``fetch_interval`` (also its heartbeat) and
    reads the partitions it holds; messages of all of them come out of one iterator,
    each partition in offset order.

    **Commit.** A message counts as processed once the application asks for the next
    one (or calls `commit`, which also counts the message just handed out). Processed
    positions are stored in the group's cursors every ``commit_interval``, when a
    partition is taken away, on `commit` and on close. A partition given to a member
    starts after its cursor, so nothing is skipped; what was processed but not yet
    committed when a member died is read again (at-least-once).

    **Failures.** When the coordinator stops answering, the member looks the group up
    again (a new coordinator or epoch is used at once); after the server's coordinator
    timeout it reports the coordinator as failed, and the cluster elects another. A
    member the coordinator dropped (it went silent past the consumer timeout) joins
    again. Errors no retry can fix (`FeatureNotSupportedError` on servers without
    groups, `CursorsDisabledError`) are raised by the iterator.

    **Close.** `close` (or leaving ``async with``) stops reading, commits and leaves the
    group, so its partitions go to the other members at once.
    """

    def __init__(
        self,
        metadata: MetadataCache,
        pool: BrokerPool,
        options: ClientOptions,
        subscribe: Callable[..., Subscription],
        group_id: str,
        streams: Sequence[str],
        consumer_options: ConsumerOptions | None = None,
        *,
        on_close: Callable[[Consumer], None] | None = None,
        fetch_cursor: Callable[[str, str, int], Awaitable[int]] | None = None,
    ) -> None:
        self._group_id, self._streams = _check_ids(group_id, streams)
        opts = consumer_options or ConsumerOptions()
        if not isinstance(opts, ConsumerOptions):
            raise errors.InvalidInputError(f"options must be ConsumerOptions, got {opts!r}")
        self._opts = opts
        self._consumer_id = opts.consumer_id or uuid.uuid4().hex
        self._cursor_id = opts.cursor_id or group_cursor_id(self._group_id)
        self._metadata = metadata
        self._pool = pool
        self._options = options
        self._subscribe = subscribe
        self._on_close = on_close
        # The client's fetch_cursor (_cluster.cursor_log: right on v1.9.0 after a restart
        # too); the plain RPC when constructed without it.
        self._fetch_cursor = fetch_cursor or self._plain_fetch_cursor
        self._queue: asyncio.Queue[_Item] = asyncio.Queue(opts.max_buffered)
        self._parts: dict[PartitionKey, PartitionState] = {}
        # The coordination loops and partition readers run under one anyio task group of
        # the consumer's own, as the client's tasks do (_tasks says why).
        self._tasks = TaskSupervisor(f"lb-group-{self._group_id}")
        self._readers: dict[PartitionKey, TaskHandle] = {}
        self._revoked: list[PartitionState] = []  # awaiting their last commit
        self._last: PartitionState | None = None  # partition of the message handed out last
        self._last_offset = -1
        self._coordinator = ""
        self._epoch = 0
        self._fetch_interval = 1.0
        self._coordinator_timeout = 15.0
        self._strikes = 0  # "not a member" answers in a row
        self._loops: list[TaskHandle] = []
        self._failure: BaseException | None = None
        self._started = False
        self._closed = False
        self._start_lock = asyncio.Lock()
        self._commit_lock = asyncio.Lock()
        self._answered = False  # an assignment answer arrived
        self._changed = asyncio.Event()  # set (and replaced) after each answer, close, failure

    def __repr__(self) -> str:
        state = "closed" if self._closed else "joined" if self._started else "new"
        return (
            f"<Consumer {self._group_id}/{self._consumer_id} {state} "
            f"coordinator={self._coordinator or None} epoch={self._epoch} "
            f"partitions={len(self._parts)}>"
        )

    # ------------------------------------------------------------ state

    @property
    def group_id(self) -> str:
        return self._group_id

    @property
    def consumer_id(self) -> str:
        return self._consumer_id

    @property
    def cursor_id(self) -> str:
        """The cursor id the group's positions are committed under (`group_cursor_id`)."""
        return self._cursor_id

    @property
    def streams(self) -> tuple[str, ...]:
        return self._streams

    @property
    def coordinator(self) -> str:
        """Id of the broker coordinating the group, as last learnt ("" before joining)."""
        return self._coordinator

    @property
    def epoch(self) -> int:
        """The group's epoch as last learnt (it changes with membership and coordinator)."""
        return self._epoch

    @property
    def assignments(self) -> frozenset[PartitionKey]:
        """The (stream, partition) pairs this member reads now."""
        return frozenset(self._parts)

    @property
    def closed(self) -> bool:
        return self._closed

    def positions(self) -> dict[PartitionKey, int]:
        """Offset of the last processed message per partition held (not yet committed, maybe)."""
        return {k: s.processed for k, s in self._parts.items() if s.processed is not None}

    # ------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close(commit_last=exc is None)

    async def start(self) -> None:
        """Join the group and start following assignments. Idempotent."""
        if self._closed:
            raise errors.ConnectionClosedError(f"{self!r} is closed")
        async with self._start_lock:
            if self._started:
                return
            try:
                await self._join()
            except errors.FailedPreconditionError as exc:
                if "already a member" not in exc.details:
                    raise
                # A previous run with this consumer_id that did not leave: take its place.
                log.info("%r: still a member from before; leaving and joining again", self)
                await _groups.leave(
                    self._metadata, self._options, self._group_id, self._consumer_id
                )
                await self._join()
            self._started = True
            await self._tasks.start()
            self._loops.append(
                self._tasks.spawn(self._coordinate, name=f"lb-group-{self._group_id}")
            )
            if self._opts.commit_interval is not None:
                self._loops.append(
                    self._tasks.spawn(self._commit_loop, name=f"lb-group-commit-{self._group_id}")
                )

    async def wait_assigned(
        self,
        until: Callable[[frozenset[PartitionKey]], bool] | None = None,
        *,
        timeout: float | None = None,
    ) -> frozenset[PartitionKey]:
        """Wait for an assignment from the coordinator and return it.

        Without ``until``, the first answer will do; with it, the first answer for which
        ``until(assignments)`` is true (e.g. ``lambda a: len(a) == 2`` once a rebalance
        is expected). `LiftbridgeTimeoutError` after ``timeout`` seconds.
        """
        await self.start()
        try:
            async with asyncio.timeout(timeout):
                while True:
                    if self._failure is not None:
                        raise self._failure
                    if self._closed:
                        raise errors.ConnectionClosedError(f"{self!r} is closed")
                    if self._answered and (until is None or until(self.assignments)):
                        return self.assignments
                    await self._changed.wait()
        except TimeoutError:
            raise errors.LiftbridgeTimeoutError(
                f"{self!r}: no such assignment within {timeout}s"
            ) from None

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def close(self, *, commit_last: bool | None = None, leave: bool = True) -> None:
        """Stop reading, commit, leave the group (its partitions move at once). Idempotent.

        ``commit_last`` counts the last message handed out as processed (default:
        ``ConsumerOptions.commit_on_close``). ``leave=False`` keeps the membership until
        the server's consumer timeout expires it (what a crashed member does).
        """
        if self._closed:
            return
        self._closed = True
        if commit_last is None:
            commit_last = self._opts.commit_on_close
        if commit_last:
            self._mark_last()
        loops, self._loops = self._loops, []
        for loop in loops:
            await loop.stop(1.0)
        for key in list(self._readers):
            await self._stop_reader(key)
        await self._tasks.aclose(1.0)
        if self._started:
            try:
                await self._commit(list(self._parts.values()) + self._revoked)
            except errors.LiftbridgeError as exc:
                log.warning("%r: the commit on close failed: %s", self, exc)
            if leave:
                try:
                    await _groups.leave(
                        self._metadata, self._options, self._group_id, self._consumer_id
                    )
                except errors.LiftbridgeError as exc:
                    if _groups.is_not_member(exc):
                        # Expired already, or a retried leave whose first try went through.
                        log.debug("%r: not a member any more when leaving: %s", self, exc)
                    else:
                        log.warning("%r: leaving the group failed: %s", self, exc)
        for state in self._parts.values():
            state.active = False
        self._parts.clear()
        self._wake()
        self._notify()
        on_close, self._on_close = self._on_close, None
        if on_close is not None:
            on_close(self)

    async def aclose(self) -> None:
        await self.close()

    # ------------------------------------------------------------ iteration

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Message:
        if not self._started:
            await self.start()
        self._mark_last()
        while True:
            if self._failure is not None:
                raise self._failure
            if self._closed:
                raise StopAsyncIteration
            item = await self._queue.get()
            if item is None:
                continue
            state, generation, msg = item
            if not state.active or generation != state.generation:
                continue  # revoked or restarted since it was read: it comes again
            self._last, self._last_offset = state, msg.offset
            return msg

    async def next(self, timeout: float | None = None) -> Message:
        """The next message within ``timeout`` seconds (`LiftbridgeTimeoutError` if none)."""
        try:
            async with asyncio.timeout(timeout):
                return await self.__anext__()
        except StopAsyncIteration:
            raise errors.ConnectionClosedError(f"{self!r} is closed") from None
        except TimeoutError:
            raise errors.LiftbridgeTimeoutError(
                f"no message for consumer {self._consumer_id} within {timeout}s"
            ) from None

    def _mark_last(self) -> None:
        last, self._last = self._last, None
        if last is not None:
            last.mark_processed(self._last_offset)

    def _wake(self) -> None:
        # When full, the reader has items to take, and checks the state before each.
        with contextlib.suppress(asyncio.QueueFull):
            self._queue.put_nowait(None)

    def _fail(self, exc: BaseException) -> None:
        if self._failure is None:
            log.error("%r failed: %s", self, exc)
            self._failure = exc
        self._wake()
        self._notify()

    # ------------------------------------------------------------ commit

    async def commit(self) -> None:
        """Commit the positions of every message handed out so far, this one included."""
        if not self._started:
            raise errors.ConnectionClosedError("the consumer has not joined its group yet")
        self._mark_last()
        await self._commit(list(self._parts.values()) + self._revoked)

    async def _commit(self, states: list[PartitionState]) -> None:
        async with self._commit_lock:
            for state in states:
                offset = state.to_commit()
                if offset is None:
                    continue
                await _admin.set_cursor(
                    self._metadata,
                    self._options,
                    self._cursor_id,
                    state.stream,
                    state.partition,
                    offset,
                )
                state.committed = offset
            self._revoked = [s for s in self._revoked if s.to_commit() is not None]

    async def _commit_loop(self) -> None:
        interval = self._opts.commit_interval
        assert interval is not None
        while True:
            await asyncio.sleep(interval)
            try:
                await self._commit(list(self._parts.values()) + self._revoked)
            except _FATAL as exc:
                self._fail(exc)
                return
            except errors.LiftbridgeError as exc:
                log.warning("%r: periodic commit failed (retried next time): %s", self, exc)

    # ------------------------------------------------------------ membership

    async def _join(self) -> None:
        joined = await _groups.join(
            self._metadata, self._options, self._group_id, self._consumer_id, self._streams
        )
        self._coordinator, self._epoch = joined.coordinator, joined.epoch
        self._coordinator_timeout = joined.coordinator_timeout
        self._fetch_interval = self._opts.fetch_interval or max(0.4 * joined.consumer_timeout, 0.05)
        if self._fetch_interval >= joined.consumer_timeout > 0:
            log.warning(
                "%r: fetch_interval %.1fs is not below the server's consumer timeout %.1fs: "
                "the coordinator will drop this member between fetches",
                self,
                self._fetch_interval,
                joined.consumer_timeout,
            )
        log.info(
            "%s joined group %s (coordinator %s, epoch %d)",
            self._consumer_id,
            self._group_id,
            self._coordinator,
            self._epoch,
        )

    async def _join_again(self) -> None:
        try:
            await self._join()
        except errors.FailedPreconditionError as exc:
            if "already a member" not in exc.details:
                raise
            # Still a member after all: the coordinator and epoch come from metadata.

    async def _coordinator_address(self) -> str:
        broker = self._metadata.current.broker(self._coordinator)
        if broker is None:
            await self._metadata.refresh()
            # Left out of the answer (its NATS was slow for the survey): its last address.
            broker = self._metadata.known_broker(self._coordinator)
        if broker is None:
            raise errors.UnavailableError(
                f"coordinator {self._coordinator!r} is not among the known brokers",
                details="unknown coordinator",
            )
        return broker.address

    async def _coordinate(self) -> None:
        """Fetch assignments (the heartbeat); follow coordinator and epoch changes."""
        loop = asyncio.get_running_loop()
        last_contact = loop.time()
        while True:
            try:
                address = await self._coordinator_address()
                epoch, assignments = await _groups.fetch_assignments(
                    self._pool,
                    self._options,
                    address,
                    self._group_id,
                    self._consumer_id,
                    self._epoch,
                )
            except _FATAL as exc:
                self._fail(exc)
                return
            except errors.LiftbridgeError as exc:
                await self._recover(exc, loop.time() - last_contact)
                if self._failure is not None:
                    return
                continue
            last_contact = loop.time()
            self._strikes = 0
            self._epoch = epoch
            await self._reconcile(assignments)
            self._answered = True
            self._notify()
            await asyncio.sleep(self._fetch_interval)

    async def _recover(self, exc: errors.LiftbridgeError, silence: float) -> None:
        """After a failed fetch: re-join, pick up a new coordinator/epoch, or report it."""
        delay = min(self._fetch_interval, _MAX_RETRY_DELAY)
        try:
            # Right after a join the coordinator may not have applied it yet: only a
            # second "not a member" in a row means the member was dropped.
            self._strikes = self._strikes + 1 if _groups.is_not_member(exc) else 0
            if self._strikes >= 2:
                self._strikes = 0
                log.warning("%r: no longer a member (%s); joining again", self, exc)
                await self._join_again()
                return
            info = await _groups.fetch_group(self._metadata, self._group_id)
            if info is not None and (info.coordinator, info.epoch) != (
                self._coordinator,
                self._epoch,
            ):
                log.info(
                    "%r: group moved to coordinator %s epoch %d",
                    self,
                    info.coordinator,
                    info.epoch,
                )
                self._coordinator, self._epoch = info.coordinator, info.epoch
                return
            if silence > self._coordinator_timeout:
                log.warning(
                    "%r: coordinator silent for %.1fs (%s); reporting it", self, silence, exc
                )
                await _groups.report_coordinator(
                    self._metadata,
                    self._options,
                    self._group_id,
                    self._consumer_id,
                    self._coordinator,
                    self._epoch,
                )
        except _FATAL as fatal:
            self._fail(fatal)
            return
        except errors.LiftbridgeError as other:
            log.debug("%r: recovering from %s failed: %s", self, exc, other)
        await asyncio.sleep(delay)

    # ------------------------------------------------------------ partitions

    async def _reconcile(self, assignments: Mapping[str, tuple[int, ...]]) -> None:
        diff = diff_assignments(self._parts, assignments)
        if diff.revoked or diff.added:
            log.info(
                "%r epoch %d: +%s -%s", self, self._epoch, list(diff.added), list(diff.revoked)
            )
        revoked = []
        for key in diff.revoked:
            await self._stop_reader(key)
            state = self._parts.pop(key)
            state.active = False
            revoked.append(state)
        if revoked:
            self._revoked.extend(revoked)
            try:
                await self._commit(revoked)
            except _FATAL as exc:
                self._fail(exc)
            except errors.LiftbridgeError as exc:
                log.warning("%r: committing revoked partitions failed: %s", self, exc)
        for key in diff.added:
            state = PartitionState(*key)
            self._parts[key] = state
            self._start_reader(state)
        for key in diff.kept:
            if key not in self._readers:  # its reader ended: start it again
                self._start_reader(self._parts[key])

    def _start_reader(self, state: PartitionState) -> None:
        state.generation += 1
        self._readers[state.key] = self._tasks.spawn(
            self._read,
            state,
            state.generation,
            name=f"lb-group-{state.stream}-{state.partition}",
        )

    async def _plain_fetch_cursor(self, cursor_id: str, stream: str, partition: int) -> int:
        return await _admin.fetch_cursor(
            self._metadata, self._options, cursor_id, stream, partition
        )

    async def _stop_reader(self, key: PartitionKey) -> None:
        handle = self._readers.pop(key, None)
        if handle is not None and not await handle.stop(2.0):
            log.warning("%r: the reader of %s did not stop in time", self, key)

    async def _read(self, state: PartitionState, generation: int) -> None:
        try:
            cursor = await self._fetch_cursor(self._cursor_id, state.stream, state.partition)
            if state.committed is None and cursor >= 0:
                state.committed = cursor
            args = start_args(state.resume_offset(cursor), self._opts.auto_offset)
            async with self._subscribe(state.stream, state.partition, **args) as sub:
                async for msg in sub:
                    await self._queue.put((state, generation, msg))
            log.info("%r: %s/%d ended (%s)", self, state.stream, state.partition, sub.end_reason)
            if isinstance(sub.end_reason, errors.ReadonlyPartitionEnd):
                return  # nothing more can come: not restarted
        except _FATAL as exc:
            self._fail(exc)
            return
        except errors.LiftbridgeError as exc:
            log.warning("%r: reading %s/%d failed: %s", self, state.stream, state.partition, exc)
        # Ended by an error, or cleanly but not for good: the next assignment round starts
        # it again, after what was processed.
        if self._readers.get(state.key) is not None and state.generation == generation:
            del self._readers[state.key]
