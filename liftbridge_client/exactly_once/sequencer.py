"""The Sequencer: read-uncommitted messages in, read-committed messages out (pure, no IO).

Semantics follow Gazette's message.Sequencer (the same interleavings give the same
committed output in both):

- State is kept per (partition, producer): ``min_clock`` (the last acknowledged clock; a
  message at or below it is a duplicate and is dropped), ``max_clock`` (the largest clock of
  the open transaction) and ``begin`` (offset of the open transaction's first message).
- OUTSIDE_TXN commits itself. CONTINUE_TXN is held until an ACK_TXN of the same producer
  with a larger or equal clock commits it; an ACK_TXN with a clock equal to (or below) the
  last acknowledged one rolls the open transaction back. Other producers never wait.
- Held messages live in a ring buffer of ``buffer`` entries. A commit whose transaction
  starts before the ring (or before a restored checkpoint) needs a replay: `queue` returns
  `QueueOutcome.ACK_COMMIT_REPLAY`, `replay_range` says which offsets to re-read, and the
  caller hands them to `start_replay` before stepping.
- After `queue`, call `step` until it returns None; each other result is one committed
  message. A `checkpoint` (offsets read through, producer states) restores a Sequencer that
  continues exactly where this one stands.

On Liftbridge a message at offset ``o`` spans ``[o, o + 1)``.

A message may take several clock values (``Envelope.ticks``: a pack whose rows have a clock
each; its UUID carries the last). Copies of it made by another attempt of the same writer
may then start on the same clock and end on another (a task cut short packs fewer rows
than its retry): the Sequencer keeps the first copy of every clock value, so a committed
envelope whose first clocks an earlier one already delivered comes out with ``skip`` set
to how many of its leading clock values (rows) the caller must drop.
"""

# tests/interop/gazette feeds this and Gazette's Sequencer the same interleavings.

from __future__ import annotations

import enum
import json
import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from liftbridge_client import errors
from liftbridge_client.exactly_once.uuids import Flags, clock_of, fields_of, producer_of

__all__ = [
    "Checkpoint",
    "Envelope",
    "PartitionRef",
    "ProducerState",
    "QueueOutcome",
    "Sequencer",
]

log = logging.getLogger(__name__)

_ZERO_UUID = bytes(16)


class PartitionRef(NamedTuple):
    stream: str
    partition: int

    def __str__(self) -> str:
        return f"{self.stream}/{self.partition}"


@dataclass(frozen=True, slots=True)
class Envelope:
    """One message as read: where it is, its UUID (16 bytes; zeros when it has none), and
    the application's message (the Liftbridge `Message`, or a decoded framing).

    ``ticks``: how many clock values the message takes, its UUID's clock the last (1 for
    a plain message). ``skip``: set by `Sequencer.step` on a committed envelope, how many
    of its leading clock values an earlier message of the producer already delivered."""

    partition: PartitionRef
    begin: int
    end: int
    uuid: bytes
    message: Any = None
    ticks: int = 1
    skip: int = 0


class QueueOutcome(enum.Enum):
    OUTSIDE_ALREADY_ACKED = "outsideAlreadyAcked"
    OUTSIDE_COMMIT = "outsideCommit"
    CONTINUE_ALREADY_ACKED = "continueAlreadyAcked"
    CONTINUE_TXN_CLOCK_LARGER = "continueRingClockLarger"
    CONTINUE_BEGIN_SPAN = "continueBeginSpan"
    CONTINUE_EXTEND_SPAN = "continueExtendSpan"
    ACK_ROLLBACK = "ackRollback"
    ACK_EMPTY = "ackEmpty"
    ACK_COMMIT_RING = "ackCommitRing"
    ACK_COMMIT_REPLAY = "ackCommitReplay"

    # Members are singletons, equal only to themselves: hashed by identity, in C. Enum's
    # own __hash__ is a Python call, and readers test an outcome against a set per message.
    __hash__ = object.__hash__


_BEGIN = QueueOutcome.CONTINUE_BEGIN_SPAN
_EXTEND = QueueOutcome.CONTINUE_EXTEND_SPAN
# Outcomes that drop the message (a duplicate): only the offsets move.
_SKIPPED = frozenset(
    {
        QueueOutcome.OUTSIDE_ALREADY_ACKED,
        QueueOutcome.CONTINUE_ALREADY_ACKED,
        QueueOutcome.CONTINUE_TXN_CLOCK_LARGER,
    }
)
_CONTINUE = int(Flags.CONTINUE_TXN)
_ACK = int(Flags.ACK_TXN)
_OUTSIDE = int(Flags.OUTSIDE_TXN)

# The outcomes after which `step` returns committed envelopes (after any other, None).
COMMIT_OUTCOMES = frozenset(
    {
        QueueOutcome.OUTSIDE_COMMIT,
        QueueOutcome.ACK_EMPTY,
        QueueOutcome.ACK_COMMIT_RING,
        QueueOutcome.ACK_COMMIT_REPLAY,
    }
)


@dataclass(frozen=True, slots=True)
class ProducerState:
    """A producer's state in one partition, as checkpointed.

    ``last_ack``: clock of its last ACK_TXN or OUTSIDE_TXN; ``begin``: offset of its first
    CONTINUE_TXN message after ``last_ack`` (the open transaction), -1 if none.
    """

    partition: PartitionRef
    producer: bytes
    last_ack: int
    begin: int


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Offsets read through (next offset to read per partition) and producer states."""

    offsets: Mapping[PartitionRef, int]
    states: tuple[ProducerState, ...] = ()

    def to_json(self) -> str:
        return json.dumps(
            {
                "offsets": [
                    [ref.stream, ref.partition, offset]
                    for ref, offset in sorted(self.offsets.items())
                ],
                "producers": [
                    {
                        "stream": s.partition.stream,
                        "partition": s.partition.partition,
                        "producer": s.producer.hex(),
                        "last_ack": s.last_ack,
                        "begin": s.begin,
                    }
                    for s in self.states
                ],
            },
            sort_keys=True,
        )

    def to_bytes(self) -> bytes:
        return self.to_json().encode()

    @classmethod
    def from_json(cls, text: str | bytes) -> Checkpoint:
        try:
            doc = json.loads(text)
            offsets = {
                PartitionRef(str(stream), int(partition)): int(offset)
                for stream, partition, offset in doc["offsets"]
            }
            states = tuple(
                ProducerState(
                    PartitionRef(str(p["stream"]), int(p["partition"])),
                    bytes.fromhex(p["producer"]),
                    int(p["last_ack"]),
                    int(p["begin"]),
                )
                for p in doc["producers"]
            )
        except (ValueError, KeyError, TypeError, RecursionError) as exc:  # json: deep nesting
            raise errors.InvalidInputError(f"checkpoint is not a valid checkpoint: {exc}") from exc
        for state in states:
            if len(state.producer) != 6:
                raise errors.InvalidInputError("checkpoint has a producer id that is not 6 bytes")
        return cls(offsets, states)

    from_bytes = from_json


class _Partial:
    """A producer's sequence in a partition: acknowledged bound and the open span.
    ``committed``: whether anything of it may have been committed (only for logging)."""

    __slots__ = ("begin", "committed", "key", "max_clock", "min_clock", "ring_start", "ring_stop")

    def __init__(
        self, key: tuple[PartitionRef, bytes], clock: int, begin: int, committed: bool = False
    ) -> None:
        self.key = key
        self.committed = committed
        self.reset(clock, begin)

    def reset(self, clock: int, begin: int = -1) -> None:
        self.min_clock = clock
        self.max_clock = clock
        self.begin = begin
        self.ring_start = -1
        self.ring_stop = -1


class Sequencer:
    """Sequences read-uncommitted envelopes into read-committed ones (see module doc)."""

    def __init__(self, checkpoint: Checkpoint | None = None, *, buffer: int = 4096) -> None:
        if type(buffer) is not int:
            raise errors.InvalidInputError("buffer must be an int")
        buffer = max(buffer, 1)
        self._offsets: dict[PartitionRef, int] = {}
        self._partials: dict[tuple[PartitionRef, bytes], _Partial] = {}
        if checkpoint is not None:
            self._offsets.update(checkpoint.offsets)
            for state in checkpoint.states:
                key = (state.partition, state.producer)
                # A checkpoint does not say whether anything was committed: assume so.
                self._partials[key] = _Partial(key, state.last_ack, state.begin, True)
        self._pending: set[tuple[PartitionRef, bytes]] = set()
        self._emit: _Partial | None = None
        self._dequeued: Envelope | None = None
        self._dequeued_clock = 0
        self._replay: Iterator[Envelope] | None = None
        self._ring: list[Envelope | None] = [None] * buffer
        self._clocks: list[int] = [0] * buffer  # each slot's UUID clock, decoded once
        self._next: list[int] = [-1] * buffer
        self._head = 0

    # ------------------------------------------------------------ queue

    def queue(self, env: Envelope) -> QueueOutcome:
        """Apply the next read-uncommitted envelope. Drain `step` before the next call."""
        if self._emit is not None:
            raise errors.InvalidInputError("committed messages remain: step() until None first")
        if self._ring[self._head] is not None:
            self._evict_at_head()
        producer, clock, flags = fields_of(env.uuid or _ZERO_UUID)
        uuid_clock = clock
        key = (env.partition, producer)
        partial = self._partials.get(key)

        if clock == 0:
            # No clock: committed on its own, and never indexed.
            partial = _Partial(key, 0, -1)
            flags, clock = _OUTSIDE, 1
        elif partial is None:
            # Nothing of this producer seen: every clock value of this message is new.
            partial = _Partial(key, max(clock - env.ticks, 0), -1)
            self._partials[key] = partial

        if (
            flags == _CONTINUE
            and clock > partial.max_clock
            and clock > partial.min_clock
            and partial.begin != -1
        ):
            outcome = _EXTEND  # what _decide says, without the call (most messages)
        else:
            outcome = self._decide(env, partial, clock, flags)

        # Identity tests on module constants, the most frequent first: a transaction's
        # messages are most of what a read_committed reader queues.
        if outcome is _EXTEND or outcome is _BEGIN:
            if outcome is _BEGIN:
                partial.begin = env.begin
                self._pending.add(key)
            self._add_at_head(env, partial, uuid_clock)
            partial.max_clock = clock
            self._offsets[env.partition] = env.end
        elif outcome in _SKIPPED:
            self._offsets[env.partition] = env.end
        elif outcome is QueueOutcome.ACK_ROLLBACK:
            partial.reset(clock)
            self._pending.discard(key)
            self._offsets[env.partition] = env.end
        else:
            # A commit: offsets move only once the sequence is dequeued, so a Sequencer
            # restored from a checkpoint taken before that reads the ACK again.
            self._add_at_head(env, partial, uuid_clock)
            if outcome is QueueOutcome.ACK_EMPTY:
                partial.begin = env.begin
            elif outcome is QueueOutcome.OUTSIDE_COMMIT:
                # Any open span of this producer is dropped: an OUTSIDE_TXN stands alone.
                partial.begin = env.begin
                partial.ring_start = partial.ring_stop
            partial.max_clock = clock  # later-clocked held messages are not committed
            partial.committed = True
            self._emit = partial
        return outcome

    def _decide(self, env: Envelope, partial: _Partial, clock: int, flags: int) -> QueueOutcome:
        if flags == _CONTINUE:
            if clock <= partial.min_clock:
                return QueueOutcome.CONTINUE_ALREADY_ACKED
            if clock <= partial.max_clock:
                return QueueOutcome.CONTINUE_TXN_CLOCK_LARGER
            if partial.begin == -1:
                return QueueOutcome.CONTINUE_BEGIN_SPAN
            return QueueOutcome.CONTINUE_EXTEND_SPAN
        if flags == _ACK:
            if clock < partial.min_clock:
                if partial.committed:
                    self._log(env, partial, "ACK_TXN below the last ACK: exactly-once is lost")
                else:
                    # Nothing of this producer was committed here, so nothing can come
                    # twice: a writer that restarted without a checkpoint and rolls back
                    # what it left open (ExactlyOncePublisher's rollback_open).
                    self._log(env, partial, "ACK_TXN rolls back an open span", logging.INFO)
                return QueueOutcome.ACK_ROLLBACK
            if clock == partial.min_clock:
                return QueueOutcome.ACK_ROLLBACK
            if partial.begin == -1:
                return QueueOutcome.ACK_EMPTY
            if partial.ring_start == -1:
                return QueueOutcome.ACK_COMMIT_REPLAY
            first = self._ring[partial.ring_start]
            if first is None or partial.begin != first.begin:
                return QueueOutcome.ACK_COMMIT_REPLAY
            return QueueOutcome.ACK_COMMIT_RING
        if flags != _OUTSIDE:
            self._log(env, partial, f"unexpected UUID flags {flags:#x}: taken as OUTSIDE_TXN")
        if clock <= partial.min_clock:
            return QueueOutcome.OUTSIDE_ALREADY_ACKED
        if partial.begin != -1:
            self._log(env, partial, "OUTSIDE_TXN after an open CONTINUE_TXN: span dropped")
        return QueueOutcome.OUTSIDE_COMMIT

    # ------------------------------------------------------------ step

    def step(self) -> Envelope | None:
        """The next committed envelope of the sequence being dequeued, or None when done."""
        emit = self._emit
        if emit is None:
            return None
        if (
            self._dequeued is None
            and self._replay is None
            and emit.begin != self._ring_begin(emit.ring_start)
        ):
            raise errors.ReplayMismatchError(
                "this commit needs a replay: call replay_range() and start_replay() first"
            )
        if self._dequeued is not None:
            emit.min_clock = self._dequeued_clock  # the previous one was processed

        while emit.ring_start != -1:
            if self._replay is None:
                index = emit.ring_start
                candidate = self._ring[index]
                assert candidate is not None
                clock = self._clocks[index]
                emit.ring_start = self._next[index]
                # Served: the slot holds nothing anyone needs, so a large ring keeps only
                # the open transactions' messages alive, not everything read.
                self._ring[index] = None
                self._next[index] = -1
            else:
                replayed = next(self._replay, None)
                if replayed is None:
                    self._replay = None
                    continue
                self._check_replayed(replayed, emit)
                if producer_of(replayed.uuid or _ZERO_UUID) != emit.key[1]:
                    continue  # other producers' messages share the range
                candidate = replayed
                clock = clock_of(candidate.uuid or _ZERO_UUID)
            self._dequeued = candidate
            self._dequeued_clock = clock
            if self._dequeued_clock != 0 and self._dequeued_clock <= emit.min_clock:
                continue  # a duplicate (replays may repeat what the ring held)
            if self._dequeued_clock > emit.max_clock:
                continue  # beyond what the ACK committed
            emit.begin = candidate.begin
            # Clock values at or below the last delivered one came in an earlier copy.
            skip = emit.min_clock - (self._dequeued_clock - candidate.ticks)
            if skip > 0 and self._dequeued_clock != 0:
                return replace(candidate, skip=skip)
            return candidate

        self._finish(emit)
        return None

    def _finish(self, emit: _Partial) -> None:
        # The sequence is done: only now do offsets move past its ACK.
        assert self._dequeued is not None
        self._offsets[emit.key[0]] = self._dequeued.end
        emit.reset(emit.min_clock)
        self._pending.discard(emit.key)
        self._dequeued = None
        self._emit = None
        self._dequeued_clock = 0

    def _ring_begin(self, index: int) -> int | None:
        env = self._ring[index] if index >= 0 else None
        return None if env is None else env.begin

    def _check_replayed(self, env: Envelope, emit: _Partial) -> None:
        ring_begin = self._ring_begin(emit.ring_start)
        if env.partition != emit.key[0]:
            raise errors.ReplayMismatchError(
                f"replay of the wrong partition ({env.partition}; expected {emit.key[0]})"
            )
        if env.begin < emit.begin:
            raise errors.ReplayMismatchError(
                f"replayed offset {env.begin} is before the range start {emit.begin}"
            )
        if ring_begin is not None and env.end > ring_begin:
            raise errors.ReplayMismatchError(
                f"replayed message ends at {env.end}, past the range end {ring_begin}"
            )

    # ------------------------------------------------------------ replay

    def replay_range(self) -> tuple[PartitionRef, int, int]:
        """The partition and ``[begin, end)`` offsets to re-read for the pending commit."""
        if self._emit is None:
            raise errors.InvalidInputError("no commit is being dequeued")
        end = self._ring_begin(self._emit.ring_start)
        assert end is not None
        return self._emit.key[0], self._emit.begin, end

    def start_replay(self, envelopes: Iterable[Envelope]) -> None:
        """Supply the read-uncommitted envelopes of `replay_range`, in offset order."""
        if self._emit is None:
            raise errors.InvalidInputError("no commit is being dequeued")
        self._replay = iter(envelopes)

    # ------------------------------------------------------------ checkpoints

    def has_pending(self) -> bool:
        """Whether a transaction was begun or extended since the last checkpoint."""
        return bool(self._pending)

    def checkpoint(self, prune_horizon_ns: int = 0) -> Checkpoint:
        """Offsets and producer states; producers whose last clock is older than
        ``prune_horizon_ns`` before the newest producer of their partition are dropped
        (0: never).

        Taken while a committed sequence is being dequeued, it counts the envelope `step`
        returned last as processed: a Sequencer restored from it replays the rest of the
        sequence (from that envelope's offset), dropping what was already returned.
        """
        emit = self._emit
        if emit is not None and self._dequeued is not None:
            emit.min_clock = self._dequeued_clock
            if emit.ring_start == -1 and self._replay is None:
                # That was the sequence's last envelope: close it as `step` would, so the
                # offsets move past it (a clock-less message has no state to drop it by).
                self._finish(emit)
                emit = None
        newest: dict[PartitionRef, int] = {}
        for (ref, _), partial in self._partials.items():
            # As Gazette: a partition whose producers all have clock 0 is never pruned.
            if partial.min_clock > newest.get(ref, 0):
                newest[ref] = partial.min_clock
        # Clamped at 0: a newest clock younger than the horizon (small clocks, as tests and
        # hand-built UUIDs use) prunes nothing, where a wrapped difference pruned everyone.
        floor = {
            ref: max(clock - ((prune_horizon_ns // 100) << 4), 0) if prune_horizon_ns > 0 else 0
            for ref, clock in newest.items()
        }
        states = []
        for key, partial in list(self._partials.items()):
            if partial is emit or partial.max_clock >= floor.get(key[0], 0):
                states.append(ProducerState(key[0], key[1], partial.min_clock, partial.begin))
            else:
                del self._partials[key]
        self._pending.clear()
        states.sort(key=lambda s: (s.partition, s.producer))
        return Checkpoint(dict(self._offsets), tuple(states))

    # ------------------------------------------------------------ ring

    def _evict_at_head(self) -> None:
        head = self._head
        env = self._ring[head]
        if env is None:
            return
        key = (env.partition, producer_of(env.uuid or _ZERO_UUID))
        partial = self._partials.get(key)
        if partial is not None and partial.ring_start == head:
            nxt = self._next[head]
            if partial.ring_start == partial.ring_stop and nxt == -1:
                partial.ring_start = partial.ring_stop = -1
            elif partial.ring_start != partial.ring_stop and nxt != -1:
                partial.ring_start = nxt
            else:
                raise AssertionError("ring invariant: start == stop iff next[start] == -1")
        self._ring[head] = None
        self._next[head] = -1

    def _add_at_head(self, env: Envelope, partial: _Partial, clock: int) -> None:
        head = self._head
        self._ring[head] = env
        self._clocks[head] = clock
        self._next[head] = -1
        if partial.ring_stop == -1:
            partial.ring_start = head
        else:
            self._next[partial.ring_stop] = head
        partial.ring_stop = head
        self._head = (head + 1) % len(self._ring)

    def _log(self, env: Envelope, partial: _Partial, what: str, level: int = logging.ERROR) -> None:
        log.log(
            level,
            "%s: partition %s offset %d producer %s clock %d (last ack %d, open clock %d)",
            what,
            env.partition,
            env.begin,
            partial.key[1].hex(),
            clock_of(env.uuid or _ZERO_UUID),
            partial.min_clock,
            partial.max_clock,
        )
