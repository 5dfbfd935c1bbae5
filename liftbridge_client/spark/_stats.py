"""What a read task read, for the ``taskStatsFile`` option (a diagnostic, off by default).

Each task appends one JSON line when its range is done: the range, the messages and bytes
(keys and values) it received for the range itself, and those it read again besides (a
read_committed task replaying transactions begun before its range). Their ratio says what
a read cost beyond the data it returned; the benchmarks and tests read it. One short
``write`` per task to a file opened for appending, so the lines of concurrent tasks do not
interleave on a local file system.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Protocol

from liftbridge_client.spark._offsets import PartitionRange

__all__ = ["ReadStats"]


class _Sized(Protocol):
    @property
    def key(self) -> bytes | None: ...

    @property
    def value(self) -> bytes: ...


def _bytes(messages: Iterable[_Sized]) -> int:
    return sum(len(m.value) + len(m.key or b"") for m in messages)


@dataclass(slots=True)
class ReadStats:
    """Counts of one task's reads; `write` appends them to the option's file."""

    stream: str
    partition: int
    start: int
    end: int
    isolation: str
    messages: int = 0  # received for the range
    bytes: int = 0
    reread_messages: int = 0  # read again (replays)
    reread_bytes: int = 0
    reads: int = 1  # subscriptions: the range's and one per replay

    @classmethod
    def of(cls, r: PartitionRange, isolation: str) -> ReadStats:
        return cls(r.stream, r.partition, r.start, r.end, isolation)

    def ranged(self, messages: Sequence[_Sized]) -> None:
        self.ranged_count(len(messages), _bytes(messages))

    def ranged_count(self, messages: int, size: int) -> None:
        """`ranged` of ``messages`` whose keys and values hold ``size`` bytes."""
        self.messages += messages
        self.bytes += size

    def reread(self, messages: Sequence[_Sized]) -> None:
        self.reads += 1
        self.reread_messages += len(messages)
        self.reread_bytes += _bytes(messages)

    def write(self, path: str) -> None:
        line = (json.dumps(asdict(self), separators=(",", ":")) + "\n").encode()
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
