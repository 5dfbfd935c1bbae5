"""Choosing the partition a message is published to.

A partitioner is any callable ``(stream, key, value, partitions) -> partition``.
Two are provided:

- `KeyPartitioner` (also the plain function `key_partition`): CRC-32 (IEEE) of
  the key modulo the partition count, computed unsigned. This is exactly what
  go-liftbridge's ``KeyPartitioner`` does, so producers in Go and Python put the
  same key on the same partition. A missing or empty key hashes to partition 0.
- `RoundRobinPartitioner`: a counter per stream, ``count % partitions``.

Precedence when publishing (see `Client.publish`):

1. an explicit ``partition=`` argument;
2. else a partitioner: the call's ``partitioner=``, else ``ClientOptions.partitioner``,
   which is a `KeyPartitioner` by default: a keyed message goes to
   ``crc32(key) % partitions``, as Kafka users expect;
3. else (``ClientOptions(partitioner=None)``) partition 0.

go-liftbridge's default differs: it sends every message without an explicit partition
to partition 0 unless a partitioner is set. A fleet mixing Go and Python producers
agrees when the Go producers use ``lift.PartitionByKey()`` (the same CRC-32), or when
these clients set ``ClientOptions(partitioner=None)``.

Whatever a partitioner returns is checked: anything but an int in
``[0, partitions)`` raises `InvalidInputError` and nothing is sent.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

from liftbridge_client.errors import InvalidInputError

__all__ = [
    "KeyPartitioner",
    "Partitioner",
    "RoundRobinPartitioner",
    "choose_partition",
    "key_partition",
]

Partitioner = Callable[[str, bytes | None, bytes, int], int]
"""``(stream, key, value, partitions) -> partition id``, in ``[0, partitions)``."""


def key_partition(key: bytes | None, partitions: int) -> int:
    """``crc32_ieee(key) % partitions``, unsigned, as go-liftbridge computes it.

    >>> key_partition(b"foobarbazqux", 2), key_partition(b"blah", 2), key_partition(b"foo", 3)
    (1, 0, 2)
    """
    if partitions < 1:
        raise InvalidInputError(f"partitions must be >= 1, got {partitions}")
    if not key:
        return 0
    return zlib.crc32(key) % partitions  # zlib.crc32 is unsigned in Python 3


class KeyPartitioner:
    """Partition by the CRC-32 of the key (go-liftbridge compatible); no key: 0."""

    __slots__ = ()

    def __call__(self, stream: str, key: bytes | None, value: bytes, partitions: int) -> int:
        return key_partition(key, partitions)

    def __repr__(self) -> str:
        return "KeyPartitioner()"


class RoundRobinPartitioner:
    """Cycle through the partitions, with one counter per stream.

    Python ints do not overflow, and the counter is kept below the partition
    count anyway, so it cycles evenly forever. Not shared between processes.
    """

    __slots__ = ("_next",)

    def __init__(self) -> None:
        self._next: dict[str, int] = {}

    def __call__(self, stream: str, key: bytes | None, value: bytes, partitions: int) -> int:
        if partitions < 1:
            raise InvalidInputError(f"partitions must be >= 1, got {partitions}")
        current = self._next.get(stream, 0) % partitions
        self._next[stream] = (current + 1) % partitions
        return current

    def __repr__(self) -> str:
        return f"RoundRobinPartitioner(streams={len(self._next)})"


def choose_partition(
    stream: str,
    key: bytes | None,
    value: bytes,
    partitions: int,
    *,
    partition: int | None = None,
    partitioner: Partitioner | None = None,
) -> int:
    """Apply the precedence above and check the result is a partition of the stream."""
    if partition is not None:
        chosen: object = partition
        source = "partition"
    elif partitioner is not None:
        chosen = partitioner(stream, key, value, partitions)
        source = f"partitioner {partitioner!r}"
    else:
        return 0
    if isinstance(chosen, bool) or not isinstance(chosen, int) or not 0 <= chosen < partitions:
        raise InvalidInputError(
            f"{source} gave {chosen!r}: stream {stream!r} has partitions 0..{partitions - 1}"
        )
    return chosen
