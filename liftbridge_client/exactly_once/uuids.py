"""Message UUIDs: RFC 4122 version 1 UUIDs that carry a producer, a clock and flags.

Pure: no IO. The layout follows Gazette's ``message`` package so that both agree byte for
byte:

- bytes 0-7: the 60-bit timestamp of a v1 UUID (100 ns ticks since 1582-10-15) with the
  version nibble 1;
- bytes 8-9: the variant bits ``10``, then 4 bits of sequence counter that extend the
  timestamp (so a producer may mint 16 UUIDs per 100 ns, 160M/s, before running ahead of
  wall time), then 10 bits of `Flags`;
- bytes 10-15: the `ProducerID`, 6 random bytes with the multicast bit set (RFC 4122's mark
  for "not a real MAC address").

A `Clock` is the 60-bit timestamp shifted left by 4 plus the counter: it totally orders the
UUIDs of one producer.
"""

# tests/interop/gazette checks the bytes against Gazette's own.

from __future__ import annotations

import enum
import os
import threading
import time
import uuid as _uuid

from liftbridge_client import errors
from liftbridge_client._native import speedups

__all__ = [
    "GREGORIAN_OFFSET_100NS",
    "Clock",
    "Flags",
    "ProducerID",
    "build_uuid",
    "build_uuid_bytes",
    "clock_of",
    "clock_to_unix_ns",
    "fields_of",
    "flags_of",
    "is_ack_txn",
    "new_producer_id",
    "producer_of",
    "unix_ns_to_clock",
    "uuid_bytes_of",
    "uuid_bytes_of_twin",
]

# 100 ns intervals between 1582-10-15 (the v1 UUID epoch) and 1970-01-01.
GREGORIAN_OFFSET_100NS = 122_192_928_000_000_000
_U64 = (1 << 64) - 1
_FLAG_BITS = 0x3FF

ProducerID = bytes
"""Six bytes: the node field of the UUIDs a producer mints."""


class Flags(enum.IntEnum):
    """The transaction role of a message (the 10 low bits of the clock sequence)."""

    OUTSIDE_TXN = 0x0  # committed on its own: visible at once
    CONTINUE_TXN = 0x1  # part of an open transaction: visible once a later ACK commits it
    ACK_TXN = 0x2  # commits the producer's CONTINUE_TXN messages with clocks <= its own


_ACK_FLAGS = int(Flags.ACK_TXN)
_NO_UUID = bytes(16)


def new_producer_id() -> ProducerID:
    """A random ProducerID (47 random bits) with the multicast bit set."""
    raw = bytearray(os.urandom(6))
    raw[0] |= 0x01
    return bytes(raw)


def _check_producer(producer: bytes) -> bytes:
    if type(producer) is not bytes or len(producer) != 6:
        raise errors.InvalidInputError("producer must be 6 bytes")
    return producer


def unix_ns_to_clock(unix_ns: int) -> int:
    """The clock value of a wall time (counter bits zero), as Gazette computes it."""
    # Go divides an int64 towards zero; times before 1970 do the same here.
    ticks = -(-unix_ns // 100) if unix_ns < 0 else unix_ns // 100
    return ((ticks + GREGORIAN_OFFSET_100NS) << 4) & _U64


def clock_to_unix_ns(clock: int) -> int:
    """The wall time (ns since 1970) of a clock, dropping the counter bits."""
    return ((clock >> 4) - GREGORIAN_OFFSET_100NS) * 100


class Clock:
    """A producer's monotonic clock: never decreases; every `tick` moves it forward.

    `update` moves it forward to a wall time (never backward); `tick` returns the next value.
    Safe to share between threads (a lock guards the value).
    """

    __slots__ = ("_lock", "_value")

    def __init__(self, value: int = 0) -> None:
        if type(value) is not int or not 0 <= value <= _U64:
            raise errors.InvalidInputError("clock value must be an int in [0, 2**64)")
        self._value = value
        self._lock = threading.Lock()

    @classmethod
    def from_unix_ns(cls, unix_ns: int) -> Clock:
        clock = cls()
        clock.update(unix_ns)
        return clock

    @property
    def value(self) -> int:
        return self._value

    def update(self, unix_ns: int | None = None) -> None:
        """Move to ``unix_ns`` (default: now) unless the clock is already past it."""
        target = unix_ns_to_clock(time.time_ns() if unix_ns is None else unix_ns)
        with self._lock:
            self._value = max(self._value, target)

    def tick(self, n: int = 1) -> int:
        """Increment by ``n`` (default one) and return the new value (wraps at 2**64, as
        Go's uint64). A message that takes ``n`` clock values (a pack of ``n`` rows, each
        with its own clock) ticks once by ``n``: its UUID carries the last."""
        if type(n) is not int or n < 1:
            raise errors.InvalidInputError("a clock ticks by an int >= 1")
        with self._lock:
            self._value = (self._value + n) & _U64
            return self._value

    def __repr__(self) -> str:
        return f"Clock({self._value})"


def build_uuid(producer: ProducerID, clock: int, flags: int) -> _uuid.UUID:
    """The v1 UUID of ``producer`` at ``clock`` with ``flags`` (at most 10 bits)."""
    return _uuid.UUID(bytes=build_uuid_bytes(producer, clock, flags))


def build_uuid_bytes(producer: ProducerID, clock: int, flags: int) -> bytes:
    """`build_uuid` as its 16 bytes (what the ``eo-uuid`` header carries)."""
    _check_producer(producer)
    if type(flags) is not int and not isinstance(flags, Flags):
        raise errors.InvalidInputError("flags must be an int")
    if not 0 <= flags <= _FLAG_BITS:
        raise errors.InvalidInputError("flags must fit in 10 bits (0..0x3ff)")
    if type(clock) is not int or not 0 <= clock <= _U64:
        raise errors.InvalidInputError("clock must be an int in [0, 2**64)")
    return uuid_bytes_of(producer, clock, int(flags))


def uuid_bytes_of(producer: ProducerID, clock: int, flags: int) -> bytes:
    """`build_uuid_bytes` of arguments known to be valid (a writer's own producer, clock
    and flags), without the checks: the exactly-once sink makes one per row."""
    if _uuid_bytes is not None and (raw := _uuid_bytes(producer, clock, flags)) is not None:
        return raw
    return uuid_bytes_of_twin(producer, clock, flags)


def uuid_bytes_of_twin(producer: ProducerID, clock: int, flags: int) -> bytes:
    """`uuid_bytes_of` in Python (the C accelerator's ``uuid_bytes`` is its twin)."""
    time_low = (clock >> 4) & 0xFFFF_FFFF
    time_mid = (clock >> 36) & 0xFFFF
    time_hi = ((clock >> 52) & 0xFFFF) | 0x1000
    seq = ((clock << 10) & 0x3C00) | flags | 0x8000
    head = (time_low << 32) | (time_mid << 16) | (time_hi & 0xFFFF)
    return head.to_bytes(8, "big") + seq.to_bytes(2, "big") + producer


def _raw(value: _uuid.UUID | bytes) -> bytes:
    if type(value) is bytes and len(value) == 16:  # first: what readers pass, per message
        return value
    if isinstance(value, _uuid.UUID):
        return value.bytes
    raise errors.InvalidInputError("uuid must be a uuid.UUID or 16 bytes")


def clock_of(value: _uuid.UUID | bytes) -> int:
    """The clock (timestamp and counter) of a UUID."""
    if _uuid_fields is not None and (fields := _uuid_fields(value)) is not None:
        return fields[1]  # 16 exact bytes, split in C (the reader's hot path)
    raw = _raw(value)
    clock = int.from_bytes(raw[0:4], "big") << 4
    clock |= int.from_bytes(raw[4:6], "big") << 36
    clock |= int.from_bytes(raw[6:8], "big") << 52
    clock |= (raw[8] >> 2) & 0xF
    return clock & _U64


def flags_of(value: _uuid.UUID | bytes) -> int:
    """The 10 flag bits of a UUID (an int: unknown bits are kept, not rejected)."""
    raw = _raw(value)
    return ((raw[8] << 8) | raw[9]) & _FLAG_BITS


def is_ack_txn(raw: bytes) -> bool:
    """Whether a UUID's 16 bytes carry the ACK_TXN flags (never the all-zero "no UUID"):
    `flags_of` inlined, as readers ask it of every committed message."""
    return ((raw[8] << 8) | raw[9]) & _FLAG_BITS == _ACK_FLAGS and raw != _NO_UUID


def producer_of(value: _uuid.UUID | bytes) -> ProducerID:
    """The ProducerID (node field) of a UUID."""
    return _raw(value)[10:16]


def fields_of_twin(raw: bytes) -> tuple[ProducerID, int, int]:
    """`fields_of` in Python (the C accelerator's ``uuid_fields`` is its twin)."""
    if len(raw) != 16:
        raise errors.InvalidInputError("uuid must be 16 bytes")
    head = int.from_bytes(raw[0:8], "big")
    seq = (raw[8] << 8) | raw[9]
    clock = (((head >> 32) << 4) | (((head >> 16) & 0xFFFF) << 36) | ((head & 0xFFFF) << 52)) & _U64
    return raw[10:16], clock | ((seq >> 10) & 0xF), seq & _FLAG_BITS


# The C split and build (liftbridge_client/_speedups.c) when it is built: exact bytes and
# ints only.
_uuid_fields = None if speedups is None else speedups.uuid_fields
_uuid_bytes = None if speedups is None else speedups.uuid_bytes


def fields_of(raw: bytes) -> tuple[ProducerID, int, int]:
    """(producer, clock, flags) of a UUID's 16 bytes, in one pass (the reader's hot path).

    Raises:
        InvalidInputError: ``raw`` is not 16 bytes.
    """
    if _uuid_fields is not None and (fields := _uuid_fields(raw)) is not None:
        return fields
    return fields_of_twin(raw)
