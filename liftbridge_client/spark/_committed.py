"""Read-committed batch reads (``isolation=read_committed``), on an executor.

One task reads one Liftbridge partition ``[start, end)`` through the exactly-once layer's
`Sequencer`, which starts from the producer states at ``start`` (none for a batch read;
for a streaming read, the snapshot the task of the micro-batch before saved in the states
stream, and this task saves the states at ``end`` there; see `_committed_stream`): it
drops the copies a
producer re-sent (same UUID), holds CONTINUE_TXN messages until their producer's ACK_TXN
and discards rolled-back ones. What the read yields is what was committed inside the
range: a transaction whose ACK lies at or past ``end`` is not (yet) visible, and the
ACK_TXN messages themselves are never rows. Because the state lives in the task, a
partition is never split across Spark partitions in this mode.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator
from dataclasses import replace

import pyarrow as pa
from google.protobuf.message import DecodeError

from liftbridge_client._native import new_slotted, speedups
from liftbridge_client._proto import api_pb2
from liftbridge_client.exactly_once.publisher import CLOCKS_HEADER, UUID_HEADER
from liftbridge_client.exactly_once.reader import clocks_of, delivered, envelope_of, read_range
from liftbridge_client.exactly_once.sequencer import (
    COMMIT_OUTCOMES,
    Checkpoint,
    Envelope,
    PartitionRef,
    ProducerState,
    QueueOutcome,
    Sequencer,
)
from liftbridge_client.exactly_once.uuids import is_ack_txn
from liftbridge_client.models import Message, owned_message_from_proto
from liftbridge_client.spark._committed_stream import load_states, save_states
from liftbridge_client.spark._offsets import PartitionRange
from liftbridge_client.spark._read import (
    BATCH_ROWS,
    RangePartition,
    _batch_of,
    _chunks,
    _protos_batch,
    _wire_batch,
    data_loss,
    end_runtime,
    new_runtime,
)
from liftbridge_client.spark._runtime import TaskRuntime
from liftbridge_client.spark._stats import ReadStats
from liftbridge_client.subscription import WireMessages

__all__ = ["read_committed_range"]

_ZERO = bytes(16)


# The Sequencer's ring: big enough to hold the whole range of a typical task, so that
# producers whose transactions interleave across it (producersPerPartition, many tasks)
# commit from memory. With the default 4,096, every producer of a 200,000-row write with 16
# producers per partition needed a replay of most of the range: the task read it ~15 times.
# Served slots are released, so memory holds the open transactions, not the range.
MAX_RING = 1 << 18


def ring_size(messages: int) -> int:
    return max(4096, min(messages, MAX_RING))


def _envelope(pb: api_pb2.Message, ref: PartitionRef) -> Envelope:
    """`envelope_of` for a protobuf as the subscription received it: the headers are read
    from the protobuf's map, and no `Message` is made (most of a read's cost when each
    message was one); the rows are built from the protobufs as a plain read's are."""
    headers = pb.headers
    uuid = headers.get(UUID_HEADER)
    offset = pb.offset
    if uuid is None or len(uuid) != 16:
        return Envelope(ref, offset, offset + 1, _ZERO, pb)
    # A plain row's message carries the UUID alone: no second lookup for its clocks.
    clocks = headers.get(CLOCKS_HEADER) if len(headers) > 1 else None
    ticks = 1 if clocks is None else clocks_of(clocks, ref.stream, ref.partition, offset)
    # Envelope(ref, offset, offset + 1, uuid, pb, ticks), without the frozen dataclass's
    # __init__ (one object.__setattr__ per field: most of this function's cost).
    return new_slotted(Envelope, ref, offset, offset + 1, uuid, pb, ticks, 0)


_NO_END = (1 << 63) - 1  # message_columns takes every row
_UUID_NAME = UUID_HEADER.encode()
_CLOCKS_NAME = CLOCKS_HEADER.encode()


def eo_fields_twin(
    raw: bytes, uuid_name: bytes, clocks_name: bytes
) -> tuple[int, bytes | None, bytes | None, int] | None:
    """A message's offset, its headers ``uuid_name`` and ``clocks_name`` (None when
    absent) and the size of its key and value, from its wire bytes; None when protobuf
    cannot decode them. (The C accelerator's ``eo_fields`` reads the same without a
    protobuf object, and says None for any shape but the plain one.)"""
    try:
        pb = api_pb2.Message.FromString(raw)
    except DecodeError:
        return None
    headers = pb.headers
    uuid, clocks = headers.get(uuid_name.decode()), headers.get(clocks_name.decode())
    return pb.offset, uuid, clocks, len(pb.key) + len(pb.value)


_eo_fields = None if speedups is None else speedups.eo_fields


def _envelope_raw(raw: bytes, ref: PartitionRef) -> Envelope:
    """`_envelope` of a message's wire bytes (the accelerator's ``eo_fields`` reads what
    sequencing needs): the envelope holds the bytes, which become columns in C."""
    assert _eo_fields is not None  # the wire path is taken with the accelerator only
    fields = _eo_fields(raw, _UUID_NAME, _CLOCKS_NAME)
    if fields is None:  # not the plain shape: protobuf decodes it (or says what is wrong)
        return _envelope(api_pb2.Message.FromString(raw), ref)
    offset, uuid, clocks, _ = fields
    if uuid is None or len(uuid) != 16:
        return new_slotted(Envelope, ref, offset, offset + 1, _ZERO, raw, 1, 0)
    ticks = 1 if clocks is None else clocks_of(clocks, ref.stream, ref.partition, offset)
    return new_slotted(Envelope, ref, offset, offset + 1, uuid, raw, ticks, 0)


# What a committed envelope delivers: its wire bytes or protobuf as read, or a `Message`
# (from a replay, or a pack an earlier copy delivered some rows of).
Delivered = bytes | api_pb2.Message | Message


def _delivered(env: Envelope) -> Delivered:
    message = env.message
    if isinstance(message, bytes):
        if not env.skip:
            return message
        message = api_pb2.Message.FromString(message)
    if env.skip and isinstance(message, api_pb2.Message):
        return delivered(replace(env, message=owned_message_from_proto(message)))
    return message if isinstance(message, api_pb2.Message) else delivered(env)


def _rows(out: list[Delivered], r: PartitionRange, include_headers: bool) -> pa.RecordBatch:
    if not include_headers and all(type(m) is bytes for m in out):
        raws: list[bytes] = out  # type: ignore[assignment]
        made = _wire_batch(raws, _NO_END, r.stream, r.partition, ordered=False)
        if made is not None and made[0].num_rows == len(raws):  # one row per message
            return made[0]
    decode = api_pb2.Message.FromString
    pbs = [decode(m) if isinstance(m, bytes) else m for m in out]
    if all(isinstance(m, api_pb2.Message) for m in pbs):
        return _protos_batch(pbs, r.stream, r.partition, include_headers)  # type: ignore[arg-type]
    # Some came from a replay, or lost rows to an earlier copy (`delivered`): as messages.
    messages = [m if isinstance(m, Message) else owned_message_from_proto(m) for m in pbs]
    return _batch_of(messages, include_headers)


def _offset(message: Message) -> int:
    return message.offset


class _Earlier:
    """Replays of transactions that began before the range (a streaming micro-batch's
    start). What was read from before the start is kept and shared: each replay reads
    only the part of its span not read yet, so every offset before the start is read at
    most once, and only as far back as a committing transaction began (a transaction
    left open for good, whose producer died, costs nothing until it commits). Before,
    each replay re-read its whole span, once per producer; then the stretch from the
    earliest open transaction, committing or not, on every micro-batch. Within the range
    the ring holds what replays need, unless it overflowed: that part is read again."""

    def __init__(
        self,
        runtime: TaskRuntime,
        r: PartitionRange,
        states: Iterable[ProducerState],
        stats: ReadStats | None = None,
    ) -> None:
        self._runtime = runtime
        self._range = r
        self._stats = stats
        self._first = min((s.begin for s in states if 0 <= s.begin < r.start), default=r.start)
        self._low = r.start  # the kept messages are those of [_low, start)
        self._messages: list[Message] = []

    def _read(self, begin: int, end: int) -> list[Message]:
        r = self._range
        messages = self._runtime.run(
            read_range(self._runtime.client, r.stream, r.partition, begin, end)
        )
        if self._stats is not None:
            self._stats.reread(messages)
        return messages

    def replay(self, begin: int, end: int) -> list[Message]:
        start = self._range.start
        if begin >= start or begin < self._first:
            return self._read(begin, end)  # not from before the range (or states say not)
        if begin < self._low:
            self._messages[:0] = self._read(begin, self._low)
            self._low = begin
        kept = self._messages
        found = kept[bisect_left(kept, begin, key=_offset) : bisect_left(kept, end, key=_offset)]
        if end > start:
            found += self._read(start, end)
        return found


def _envelopes(
    chunk: list[api_pb2.Message] | WireMessages, ref: PartitionRef, stats: ReadStats | None
) -> list[Envelope]:
    """A chunk's messages as envelopes, counted in ``stats``."""
    if isinstance(chunk, WireMessages):
        envelopes = [_envelope_raw(raw, ref) for raw in chunk.raws]
        if stats is not None:
            stats.ranged_count(len(envelopes), sum(_size(env.message) for env in envelopes))
        return envelopes
    if stats is not None:
        stats.ranged(chunk)
    return [_envelope(pb, ref) for pb in chunk]


def _size(message: bytes | api_pb2.Message) -> int:
    """The bytes of a message's key and value."""
    if isinstance(message, bytes):
        eo_fields = eo_fields_twin if _eo_fields is None else _eo_fields
        fields = eo_fields(message, _UUID_NAME, _CLOCKS_NAME)
        if fields is not None:
            return fields[3]
        message = api_pb2.Message.FromString(message)
    return len(message.key) + len(message.value)


def read_committed_range(part: RangePartition) -> Iterator[pa.RecordBatch]:
    """The committed messages of ``[start, end)`` of one partition, in offset order."""
    r, options = part.range, part.options
    if r.start >= r.end:
        return
    ref = PartitionRef(r.stream, r.partition)
    runtime = new_runtime(options)
    ok = False
    try:
        states = part.states
        at = part.states_at
        if at is not None:
            found = runtime.run(
                load_states(runtime.client, at, ref, r.start, min(options.poll_timeout, 30.0))
            )
            if found is None:
                data_loss(
                    options,
                    f"{ref}: the producer states at offset {r.start} are not in the states "
                    f"stream {at.store!r} (removed by retention, or the stream was deleted): "
                    "reading on without them may yield duplicates and lose the transactions "
                    "open there",
                )
            states = found or ()
        sequencer = Sequencer(Checkpoint({ref: r.start}, states), buffer=ring_size(r.size))
        stats = ReadStats.of(r, options.isolation) if options.task_stats else None
        earlier = _Earlier(runtime, r, states, stats)
        out: list[Delivered] = []
        # Wire bytes where the accelerator reads them (not with headers: those columns are
        # made from protobufs), else protobufs.
        wire = _eo_fields is not None and not options.include_headers
        for chunk in _chunks(part, runtime, wire=wire):
            for queued in _envelopes(chunk, ref, stats):
                outcome = sequencer.queue(queued)
                if outcome not in COMMIT_OUTCOMES:
                    continue  # held or dropped: nothing to step through
                if outcome is QueueOutcome.ACK_COMMIT_REPLAY:
                    # The transaction began before the ring: re-read the offsets it spans.
                    _, begin, end = sequencer.replay_range()
                    sequencer.start_replay(envelope_of(m) for m in earlier.replay(begin, end))
                while (env := sequencer.step()) is not None:
                    if not is_ack_txn(env.uuid):
                        out.append(_delivered(env))
            if len(out) >= BATCH_ROWS:
                yield _rows(out, r, options.include_headers)
                out = []
        if out:
            yield _rows(out, r, options.include_headers)
        if at is not None:
            # Only once the whole range was read: the next micro-batch starts from it.
            end_states = sequencer.checkpoint(at.horizon_ns).states
            runtime.run(save_states(runtime.client, at, ref, r.end, end_states))
        if stats is not None and options.task_stats:
            stats.write(options.task_stats)
        ok = True
    finally:
        end_runtime(options, runtime, ok=ok)
