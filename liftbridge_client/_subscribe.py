"""Subscriptions: the arguments and their meaning, and emulated reverse reads.

`liftbridge_client.subscription` does the IO. In order: `SubscribeSpec` and
`classify` (pure); `ReverseReader`.

Arguments and endings
---------------------

Subscriptions without IO: validated arguments, the wire request, what a status means.

- `SubscribeSpec.build` checks the caller's keyword arguments (`InvalidInputError`
  before anything is sent) and resolves a time delta to an absolute timestamp once,
  so every resubscribe asks for the same position.
- `SubscribeSpec.request` is the SubscribeRequest for the first subscribe or for a
  resubscribe after the last offset received.
- `classify` decides what an error ending (or refusing) a subscription means: a
  clean end, a typed end to raise, a reason to resubscribe, or a plain failure.

Reverse reads
-------------

Reverse reads on servers that ignore ``SubscribeRequest.reverse`` (v1.9.0 and older).

Such a server streams forward from the start offset and then waits for new messages, so
asking it for a reverse read yields the wrong order and never ends. The emulation reads
forward windows instead, from the newest offset backwards: each window is a forward
subscription with a start and a stop offset (it ends by itself), and its messages are
yielded newest first. The result is what a server that honours the field sends: offsets
``top``, ``top - 1``, ... down to the oldest, then a clean end.

`windows` (pure) plans the windows; `ReverseReader` reads them. Stop offsets must exist:
on compacted streams, where offsets can be missing, use a server that honours reverse.
"""

from __future__ import annotations

import datetime
import enum
import logging
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol, TypedDict, TypeVar

from liftbridge_client import _validate, errors
from liftbridge_client._proto import api_pb2
from liftbridge_client.models import Message, StartPosition, StopPosition

__all__ = [
    "WINDOW",
    "Action",
    "Phase",
    "Progress",
    "ReverseReader",
    "SubscribeArgs",
    "SubscribeSpec",
    "Verdict",
    "classify",
    "windows",
]

# ---- Arguments and endings -------------------------------------------------------------

_INT32_MAX = _validate.INT32_MAX
_INT64_MAX = _validate.INT64_MAX

_P = TypeVar("_P", StartPosition, StopPosition)
_E = TypeVar("_E", bound=errors.SubscriptionEnded)


class SubscribeArgs(TypedDict, total=False):
    """Keyword arguments of `Client.subscribe` (all optional)."""

    start: StartPosition  # default NEW_ONLY (or implied by the option below)
    start_offset: int  # implies StartPosition.OFFSET
    start_timestamp_ns: int  # implies StartPosition.TIMESTAMP (Unix ns)
    start_time_delta: float | datetime.timedelta  # back from now; implies TIMESTAMP
    stop: StopPosition  # default ON_CANCEL (or implied by the option below)
    stop_offset: int  # implies StopPosition.OFFSET (inclusive)
    stop_timestamp_ns: int  # implies StopPosition.TIMESTAMP (Unix ns)
    start_time: datetime.datetime  # implies StartPosition.TIMESTAMP (naive: local time)
    stop_time: datetime.datetime  # implies StopPosition.TIMESTAMP (naive: local time)
    read_isr_replica: bool  # read from a random in-sync replica, not only the leader
    resume: bool  # resume the partition if it is paused
    reverse: bool  # newest first (emulated on servers that ignore it, e.g. v1.9.0)


_KNOWN_ARGS = frozenset(SubscribeArgs.__annotations__)


def _int(name: str, value: object, low: int, high: int = _INT64_MAX) -> int:
    return _validate.int_arg(name, value, low, high)


_flag = _validate.flag


def _position(name: str, value: object, enum_type: type[_P]) -> _P:
    if isinstance(value, bool) or not isinstance(value, int):
        raise errors.InvalidInputError(f"{name} must be a {enum_type.__name__}, got {value!r}")
    try:
        return enum_type(value)
    except ValueError:
        raise errors.InvalidInputError(f"{name}: no {enum_type.__name__} {value!r}") from None


def _implied_position(
    kind: str, args: Mapping[str, object], implied: Mapping[str, _P], default: _P
) -> _P:
    """The ``start``/``stop`` position: given, or implied by at most one value option."""
    given = [name for name in implied if name in args]
    if len(given) > 1:
        raise errors.InvalidInputError(f"conflicting {kind} options: {', '.join(given)}")
    enum_type = type(default)
    position = _position(kind, args.get(kind, implied[given[0]] if given else default), enum_type)
    if given and implied[given[0]] is not position:
        raise errors.InvalidInputError(f"{given[0]} conflicts with {kind}={position.name}")
    return position


@dataclass(frozen=True, slots=True)
class SubscribeSpec:
    """A validated subscription: where to read and how."""

    stream: str
    partition: int
    start: StartPosition = StartPosition.NEW_ONLY
    start_offset: int = 0
    start_timestamp_ns: int = 0
    stop: StopPosition = StopPosition.ON_CANCEL
    stop_offset: int = 0
    stop_timestamp_ns: int = 0
    read_isr_replica: bool = False
    resume: bool = False
    reverse: bool = False

    @classmethod
    def build(
        cls, stream: str, partition: int, args: Mapping[str, object], *, now_ns: int
    ) -> SubscribeSpec:
        """Validate ``args`` (`SubscribeArgs`); ``now_ns`` anchors ``start_time_delta``."""
        _validate.text("stream", stream)
        partition = _int("partition", partition, 0, _INT32_MAX)
        unknown = sorted(set(args) - _KNOWN_ARGS)
        if unknown:
            raise errors.InvalidInputError(f"unknown subscribe option(s): {', '.join(unknown)}")

        start = _implied_position(
            "start",
            args,
            {
                "start_offset": StartPosition.OFFSET,
                "start_timestamp_ns": StartPosition.TIMESTAMP,
                "start_time_delta": StartPosition.TIMESTAMP,
                "start_time": StartPosition.TIMESTAMP,
            },
            StartPosition.NEW_ONLY,
        )

        start_offset = start_ts = 0
        if start is StartPosition.OFFSET:
            if "start_offset" not in args:
                raise errors.InvalidInputError("start=OFFSET needs start_offset")
            start_offset = _int("start_offset", args["start_offset"], 0)
        elif start is StartPosition.TIMESTAMP:
            if "start_timestamp_ns" in args:
                start_ts = _int("start_timestamp_ns", args["start_timestamp_ns"], 0)
            elif "start_time" in args:
                start_ts = _validate.timestamp_ns("start_time", args["start_time"])
            elif "start_time_delta" in args:
                delta = _validate.seconds(
                    "start_time_delta", args["start_time_delta"], allow_zero=True
                )
                start_ts = max(0, now_ns - round(delta * 1e9))
            else:
                raise errors.InvalidInputError(
                    "start=TIMESTAMP needs start_timestamp_ns, start_time or start_time_delta"
                )

        stop = _implied_position(
            "stop",
            args,
            {
                "stop_offset": StopPosition.OFFSET,
                "stop_timestamp_ns": StopPosition.TIMESTAMP,
                "stop_time": StopPosition.TIMESTAMP,
            },
            StopPosition.ON_CANCEL,
        )

        stop_offset = stop_ts = 0
        if stop is StopPosition.OFFSET:
            if "stop_offset" not in args:
                raise errors.InvalidInputError("stop=OFFSET needs stop_offset")
            stop_offset = _int("stop_offset", args["stop_offset"], 0)
            if start is StartPosition.OFFSET and stop_offset < start_offset:
                raise errors.InvalidInputError(
                    f"stop_offset {stop_offset} is before start_offset {start_offset}"
                )
        elif stop is StopPosition.TIMESTAMP:
            if "stop_timestamp_ns" in args:
                stop_ts = _int("stop_timestamp_ns", args["stop_timestamp_ns"], 0)
            elif "stop_time" in args:
                stop_ts = _validate.timestamp_ns("stop_time", args["stop_time"])
            else:
                raise errors.InvalidInputError(
                    "stop=TIMESTAMP needs stop_timestamp_ns or stop_time"
                )
            if start is StartPosition.TIMESTAMP and stop_ts < start_ts:
                raise errors.InvalidInputError(
                    f"stop_timestamp_ns {stop_ts} is before the start timestamp {start_ts}"
                )

        reverse = _flag("reverse", args.get("reverse", False))
        if reverse and stop is not StopPosition.ON_CANCEL:
            raise errors.InvalidInputError(
                "reverse reads end at the oldest message; a stop position cannot be combined"
            )
        return cls(
            stream=stream,
            partition=partition,
            start=start,
            start_offset=start_offset,
            start_timestamp_ns=start_ts,
            stop=stop,
            stop_offset=stop_offset,
            stop_timestamp_ns=stop_ts,
            read_isr_replica=_flag("read_isr_replica", args.get("read_isr_replica", False)),
            resume=_flag("resume", args.get("resume", False)),
            reverse=reverse,
        )

    def request(self, resume_at: int | None = None) -> api_pb2.SubscribeRequest:
        """The request: the original position, or OFFSET ``resume_at`` when resubscribing."""
        req = api_pb2.SubscribeRequest(
            stream=self.stream,
            partition=self.partition,
            startPosition=self.start.value,
            startOffset=self.start_offset,
            startTimestamp=self.start_timestamp_ns,
            stopPosition=self.stop.value,
            stopOffset=self.stop_offset,
            stopTimestamp=self.stop_timestamp_ns,
            readISRReplica=self.read_isr_replica,
            resume=self.resume,
            reverse=self.reverse,
        )
        if resume_at is not None:
            req.startPosition = api_pb2.OFFSET
            req.startOffset = resume_at
            req.startTimestamp = 0
        return req


# ---------------------------------------------------------------- progress


_NO_CEILING = 2**63  # above every int64 offset


@dataclass(slots=True)
class Progress:
    """What was delivered so far, and the order the server really sends messages in.

    A reverse read may be ignored by the server (v1.9.0 reads forward instead), so
    for ``reverse`` the order is learned from the first two messages; until then it
    is assumed to be the order asked for.
    """

    reverse: bool
    last: int | None = None
    descending: bool | None = None  # None: not known yet
    # Forward reads from StartPosition.OFFSET: offsets below were not asked for. A v1.9.0
    # node asked for an offset past its high watermark starts at the watermark instead
    # (its committed reader forgets the offset), e.g. a new leader after a failover.
    floor: int = 0
    # Forward reads to a stop offset: offsets above were not asked for. A v1.9.0 server
    # ends the stream only on the stop offset itself; when compaction or retention removed
    # it, it sends on past it and never ends: the first offset past it ends the read.
    ceiling: int = _NO_CEILING
    past: int | None = None  # the first offset past the ceiling that arrived: the end

    def __post_init__(self) -> None:
        if not self.reverse:
            self.descending = False

    @classmethod
    def for_spec(cls, spec: SubscribeSpec) -> Progress:
        """Nothing delivered yet, for a read of ``spec``."""
        forward_from = spec.start is StartPosition.OFFSET and not spec.reverse
        floor = spec.start_offset if forward_from else 0
        if spec.stop is StopPosition.OFFSET and not spec.reverse:
            return _ToStopOffset(spec.reverse, floor=floor, ceiling=spec.stop_offset)
        return cls(spec.reverse, floor=floor)

    def accept(self, offset: int) -> bool:
        """Record a received offset; False for a replay (delivered already, or below the
        offset asked for: drop it)."""
        last = self.last
        if last is not None:
            if offset == last:
                return False
            if self.descending is None:
                self.descending = offset < last
            elif offset > last if self.descending else offset < last:
                return False
        elif offset < self.floor:
            return False
        self.last = offset
        return True

    def resume_at(self, spec: SubscribeSpec) -> int | None:
        """Where a resubscribe starts; None when nothing is left to read."""
        if self.last is None:
            raise ValueError("nothing was delivered: resubscribe at the original position")
        descending = self.reverse if self.descending is None else self.descending
        if descending:
            return self.last - 1 if self.last > 0 else None
        if spec.stop is StopPosition.OFFSET and self.last >= spec.stop_offset:
            return None
        return self.last + 1


class _ToStopOffset(Progress):
    """`Progress` of a forward read to a stop offset, which also refuses the offsets past
    it, keeping the first as ``past`` (the end). Its own class, so reads without a stop
    offset pay nothing for the check."""

    __slots__ = ()

    def accept(self, offset: int) -> bool:
        if offset > self.ceiling:
            if self.past is None:
                self.past = offset
            return False
        return Progress.accept(self, offset)


# ---------------------------------------------------------------- outcomes


class Phase(enum.Enum):
    OPENING = "opening"  # first subscribe: nothing was ever established
    STREAMING = "streaming"  # an established stream failed
    RESUBSCRIBING = "resubscribing"  # reopening after an established stream failed


class Action(enum.Enum):
    END = "end"  # iteration stops cleanly; the error is the end reason
    END_RAISE = "end_raise"  # the error is the end reason and is raised
    RESUBSCRIBE = "resubscribe"  # refresh metadata and subscribe again
    # NOT_FOUND from a broker: the stream is gone only if the refreshed metadata no longer
    # lists the partition (a restarting broker answers NOT_FOUND until it has loaded it);
    # else resubscribe. The error is the end reason when it is gone.
    CHECK_DELETED = "check_deleted"
    # INTERNAL "segment has been closed" opening a reader: the partition is paused, or
    # retention closed the segment the reader was opening. Paused (the error is the end
    # reason) only if the refreshed metadata says so; else subscribe again.
    CHECK_PAUSED = "check_paused"
    FAIL = "fail"  # raise the error as it is


@dataclass(frozen=True, slots=True)
class Verdict:
    action: Action
    error: errors.LiftbridgeError


# Texts the v1.9.0 server puts in statuses that end or refuse a subscription.
STOP_OFFSET_REACHED = "Stop offset reached"
END_OF_READONLY = "End of readonly partition"
STREAM_IS_EMPTY = "Stream is empty"
STOP_BEFORE_START = "Stop offset is before start offset"
LOG_CLOSED = "commit log was closed"
SEGMENT_CLOSED = "segment has been closed"  # INTERNAL when subscribing to a paused partition
SEGMENT_NOT_FOUND = "segment not found"  # INTERNAL: a reverse read of an empty partition
# UNKNOWN mid-stream when the log under the reader changed (a truncation at a leader change):
# the server gives up on that reader, not on the partition.
READER_LOST = "failed to reinitialize reader"
LOG_DELETED = "commit log was deleted"  # NOT_FOUND ending a subscription: the stream was deleted
# INTERNAL refusing a stop timestamp older than the partition's oldest message.
STOP_TIME_BEFORE_LOG = "timestamp is before the beginning of the log"


def _end(kind: type[_E], text: str, cause: errors.LiftbridgeError) -> _E:
    end = kind(text)
    end.__cause__ = cause
    return end


# The partition (or its broker) went away, not the subscription: try again elsewhere.
_RESUBSCRIBE_ON = (
    errors.UnavailableError,
    errors.NotLeaderError,
    errors.LiftbridgeTimeoutError,
    errors.DeadlineExceededError,
    errors.NoBrokerAvailableError,
)


def classify(exc: errors.LiftbridgeError, spec: SubscribeSpec, phase: Phase) -> Verdict:
    """What ``exc``, ending or refusing a subscription in ``phase``, means."""
    details = exc.details if isinstance(exc, errors.ServerError) else ""
    where = f"{spec.stream}/{spec.partition}"
    if isinstance(exc, errors.ResourceExhaustedError):
        if details.startswith(STOP_OFFSET_REACHED):
            if spec.stop is StopPosition.ON_CANCEL:
                # The server turns ON_CANCEL into "stop at the newest offset" on a
                # partition that was already read-only when the subscription started.
                return Verdict(
                    Action.END, _end(errors.ReadonlyPartitionEnd, f"{where}: {details}", exc)
                )
            return Verdict(Action.END, _end(errors.StopPositionReached, f"{where}: {details}", exc))
        if details.startswith(END_OF_READONLY):
            return Verdict(
                Action.END, _end(errors.ReadonlyPartitionEnd, f"{where}: {details}", exc)
            )
        if details.startswith(STREAM_IS_EMPTY):
            return Verdict(Action.END, _end(errors.StopPositionReached, f"{where}: {details}", exc))
        return Verdict(Action.FAIL, exc)
    if isinstance(exc, errors.InvalidArgumentError) and details.startswith(STOP_BEFORE_START):
        # Nothing lies between start and stop. When the server chose the stop
        # (ON_CANCEL on a read-only partition, LATEST) or we resubscribe after the
        # last message, that is an empty read, not a mistake of the caller.
        if spec.stop is StopPosition.ON_CANCEL:
            return Verdict(
                Action.END, _end(errors.ReadonlyPartitionEnd, f"{where}: {details}", exc)
            )
        if spec.stop is StopPosition.LATEST or phase is Phase.RESUBSCRIBING:
            return Verdict(Action.END, _end(errors.StopPositionReached, f"{where}: {details}", exc))
        return Verdict(Action.FAIL, exc)
    if (
        isinstance(exc, _RESUBSCRIBE_ON)
        or (isinstance(exc, errors.InternalServerError) and LOG_CLOSED in details)
        or (
            isinstance(exc, errors.UnknownServerError)
            and phase is Phase.STREAMING
            and READER_LOST in details
        )
    ):
        return Verdict(Action.RESUBSCRIBE, exc)
    if isinstance(exc, errors.NotFoundError) and phase is not Phase.OPENING:
        deleted = _end(errors.StreamDeletedEnd, f"{where}: {details or exc}", exc)
        if LOG_DELETED in details:  # the leader saw the deletion itself
            return Verdict(Action.END_RAISE, deleted)
        return Verdict(Action.CHECK_DELETED, deleted)
    if isinstance(exc, errors.StreamNotLoadedError):
        # Opening, on a stream the metadata listed lately (`MetadataCache.not_found`): a
        # broker that restarted, until the metadata proves the stream gone.
        gone = errors.NotFoundError(f"{where}: not found ({details or exc})", details=details)
        gone.__cause__ = exc
        return Verdict(Action.CHECK_DELETED, gone)
    closed_log = isinstance(exc, errors.FailedPreconditionError) and LOG_CLOSED in details
    closed_segment = isinstance(exc, errors.InternalServerError) and SEGMENT_CLOSED in details
    if closed_log or closed_segment:
        # Paused while subscribed (FAILED_PRECONDITION), or paused before (INTERNAL
        # "Failed to create stream reader: segment has been closed", which a segment
        # that retention deleted under the new reader also gives).
        paused = _end(
            errors.PartitionPausedEnd,
            f"{where}: the partition is paused ({details}); subscribe with resume=True "
            "to resume it",
            exc,
        )
        return Verdict(Action.CHECK_PAUSED if closed_segment else Action.END_RAISE, paused)
    if (
        isinstance(exc, errors.InternalServerError)
        and spec.stop is StopPosition.TIMESTAMP
        and STOP_TIME_BEFORE_LOG in details
    ):
        # Nothing is at or before the stop time: an empty read, as with a stop offset
        # before the start (the server only refuses stop times this way, start times
        # before the log start at its oldest message).
        return Verdict(
            Action.END,
            _end(
                errors.StopPositionReached,
                f"{where}: the stop time is before the partition's oldest message",
                exc,
            ),
        )
    if (
        isinstance(exc, errors.InternalServerError)
        and spec.reverse
        and SEGMENT_NOT_FOUND in details
    ):
        # Master fails a reverse read of an empty partition instead of ending it.
        return Verdict(
            Action.END, _end(errors.StopPositionReached, f"{where}: the partition is empty", exc)
        )
    if isinstance(exc, errors.UnknownServerError) and spec.reverse and details == "EOF":
        # Newer servers end a reverse read at the oldest message with a bare EOF.
        return Verdict(Action.END, _end(errors.StopPositionReached, f"{where}: {details}", exc))
    return Verdict(Action.FAIL, exc)


log = logging.getLogger(__name__)


# ---- Reverse reads ---------------------------------------------------------------------


class Window(Protocol):
    """What the reader needs of a window's forward subscription (a `Subscription`)."""

    async def __aenter__(self) -> object: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    def __aiter__(self) -> AsyncIterator[Message]: ...

    async def close(self) -> None: ...


WINDOW = 512
"""Messages per forward window: one Subscribe call (and that many messages held) each."""


def windows(top: int, oldest: int, size: int = WINDOW) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` offset pairs (both inclusive) from ``top`` down to ``oldest``."""
    if size < 1:
        raise ValueError(f"window size must be >= 1, got {size}")
    high = top
    while high >= oldest:
        low = max(oldest, high - size + 1)
        yield low, high
        high = low - 1


class ReverseReader:
    """Messages from ``top`` down to ``oldest``, newest first, one window at a time.

    ``open_window(start, stop)`` makes the forward subscription of a window.
    """

    def __init__(
        self,
        open_window: Callable[[int, int], Window],
        top: int,
        oldest: int,
        *,
        size: int = WINDOW,
    ) -> None:
        self._open = open_window
        self._plan = windows(top, oldest, size)
        self._window: tuple[int, int] | None = None  # the window being read
        self._buffer: list[Message] = []
        self._current: Window | None = None
        self._closed = False

    async def next(self) -> Message | None:
        """The next message (lower offset than the last), or None after the oldest.

        A caller cancelled mid-window (a read timeout) loses nothing: the next call reads
        that window again from its start.
        """
        while not self._buffer:
            if self._closed:
                return None
            if self._window is None:
                self._window = next(self._plan, None)
                if self._window is None:
                    return None
            self._buffer = await self._read(*self._window)
            self._window = None
        return self._buffer.pop()

    async def _read(self, start: int, stop: int) -> list[Message]:
        log.debug("reverse emulation: reading window [%d, %d]", start, stop)
        sub = self._current = self._open(start, stop)
        try:
            async with sub:
                return [message async for message in sub]
        finally:
            self._current = None

    async def close(self) -> None:
        """Stop: a window being read ends at once. Idempotent."""
        self._closed = True
        self._buffer.clear()
        if self._current is not None:
            await self._current.close()
