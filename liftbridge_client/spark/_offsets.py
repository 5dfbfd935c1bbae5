"""Offset arithmetic of the data source, without IO.

An offset map is ``{stream: {partition id as a string: next offset to read}}``: the
exclusive end of what was read, as Spark's Kafka source checkpoints it. String partition
ids because Spark carries offsets through JSON, where integer keys come back as strings.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from liftbridge_client.errors import InvalidInputError

__all__ = [
    "OffsetMap",
    "PartitionRange",
    "cap_by_backlog",
    "copy_offsets",
    "offsets_from_checkpoint",
    "plan_ranges",
]

OffsetMap = dict[str, dict[str, int]]


def copy_offsets(offsets: Mapping[str, Mapping[str, int]]) -> OffsetMap:
    return {stream: dict(partitions) for stream, partitions in offsets.items()}


def offsets_from_checkpoint(raw: object) -> OffsetMap:
    """An offset map read back from Spark (a checkpoint, or a start/end it hands back)."""
    if not isinstance(raw, Mapping):
        raise InvalidInputError(f"offsets must be a JSON object, got {raw!r}")
    result: OffsetMap = {}
    for stream, partitions in raw.items():
        if not isinstance(stream, str) or not isinstance(partitions, Mapping):
            raise InvalidInputError(f"offsets of stream {stream!r} must be an object")
        entry: dict[str, int] = {}
        for pid, value in partitions.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidInputError(f"offset of {stream}/{pid} must be an int >= 0")
            entry[str(pid)] = value
        result[stream] = entry
    return result


@dataclass(frozen=True, slots=True)
class PartitionRange:
    """Offsets ``[start, end)`` of one Liftbridge partition: one Spark partition's work."""

    stream: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def cap_by_backlog(
    start: Mapping[str, Mapping[str, int]],
    latest: Mapping[str, Mapping[str, int]],
    limit: int,
) -> OffsetMap:
    """The end offsets of a micro-batch of at most ``limit`` messages, shared by backlog.

    Each partition gets a share of ``limit`` in proportion to its backlog (``latest -
    start``), rounded down, and the units left by rounding go to the largest remainders
    (ties: in stream and partition order), so the batch has exactly ``min(limit, total
    backlog)`` messages and no partition with a backlog waits forever while the total
    backlog exceeds the number of partitions. A partition absent from ``start`` has no
    backlog: the caller adds new partitions to ``start`` first.
    """
    if limit < 1:
        raise InvalidInputError(f"maxOffsetsPerTrigger must be >= 1, got {limit}")
    backlog: dict[tuple[str, str], int] = {}
    for stream, partitions in latest.items():
        for pid, end in partitions.items():
            begin = start.get(stream, {}).get(pid, end)
            backlog[(stream, pid)] = max(end - begin, 0)
    total = sum(backlog.values())
    result = copy_offsets(latest)
    if total <= limit:
        return result
    shares = {key: limit * size // total for key, size in backlog.items()}
    left = limit - sum(shares.values())
    by_remainder = sorted(backlog, key=lambda key: (-(limit * backlog[key] % total), key))
    for key in by_remainder[:left]:
        shares[key] += 1
    for (stream, pid), share in shares.items():
        end = latest[stream][pid]
        result[stream][pid] = end - backlog[(stream, pid)] + share
    return result


def plan_ranges(
    start: Mapping[str, Mapping[str, int]],
    end: Mapping[str, Mapping[str, int]],
    *,
    min_partitions: int | None = None,
    max_records: int | None = None,
) -> list[PartitionRange]:
    """Spark partitions for reading ``[start, end)``: one per non-empty Liftbridge partition,
    split into equal pieces when ``max_records`` caps a piece or ``min_partitions`` asks for
    more pieces than there are partitions (larger ranges are split first)."""
    ranges = [
        PartitionRange(stream, int(pid), begin, stop)
        for stream, partitions in sorted(end.items())
        for pid, stop in sorted(partitions.items(), key=lambda item: int(item[0]))
        if (begin := start.get(stream, {}).get(pid, stop)) < stop
    ]
    pieces = dict.fromkeys(ranges, 1)
    if max_records is not None:
        pieces = {r: -(-r.size // max_records) for r in ranges}
    total = sum(r.size for r in ranges)
    if min_partitions is not None and sum(pieces.values()) < min_partitions and total:
        for r in ranges:  # proportional to size, at least what max_records asked
            wanted = -(-min_partitions * r.size // total)
            pieces[r] = min(max(pieces[r], wanted), r.size)
    return [piece for r in ranges for piece in _split(r, pieces[r])]


def _split(r: PartitionRange, count: int) -> Iterable[PartitionRange]:
    bounds = [r.start + r.size * i // count for i in range(count + 1)]
    for begin, stop in itertools.pairwise(bounds):
        if begin < stop:
            yield PartitionRange(r.stream, r.partition, begin, stop)
