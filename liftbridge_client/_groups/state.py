"""Consumer-group bookkeeping without IO: positions per partition, assignment changes.

A member tracks, for each partition it was assigned, the offset of the last message the
application finished with (``processed``) and the last one stored in the group's cursor
(``committed``). Every message handed out carries the partition's ``generation``: when
the partition is revoked or its reader restarted, messages still buffered from before
are recognised as stale and dropped (they were never handed out, so nothing is lost:
the next reader starts after ``processed``).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from liftbridge_client.models import StartPosition

__all__ = ["AutoOffset", "PartitionKey", "PartitionState", "diff_assignments", "start_args"]

PartitionKey = tuple[str, int]
"""(stream, partition)."""


class AutoOffset(enum.Enum):
    """Where a member starts reading a partition the group has no committed offset for."""

    EARLIEST = "earliest"  # the oldest message still stored
    LATEST = "latest"  # the newest message already stored, then what follows
    NEW_ONLY = "new_only"  # only messages stored after the subscription starts


_AUTO_STARTS = {
    AutoOffset.EARLIEST: StartPosition.EARLIEST,
    AutoOffset.LATEST: StartPosition.LATEST,
    AutoOffset.NEW_ONLY: StartPosition.NEW_ONLY,
}


@dataclass(slots=True, eq=False)
class PartitionState:
    """What this member knows of one assigned partition."""

    stream: str
    partition: int
    processed: int | None = None  # offset of the last message the application finished
    committed: int | None = None  # offset last stored in the cursor (None: not by us)
    generation: int = 0  # bumped when the reader restarts: older buffered messages are stale
    active: bool = True  # False once revoked

    @property
    def key(self) -> PartitionKey:
        return (self.stream, self.partition)

    def mark_processed(self, offset: int) -> None:
        """Offsets only move forward (a redelivered message does not move them back)."""
        if self.processed is None or offset > self.processed:
            self.processed = offset

    def to_commit(self) -> int | None:
        """The offset to store now, or None when the cursor already has it."""
        if self.processed is None or self.processed == self.committed:
            return None
        return self.processed

    def resume_offset(self, cursor: int) -> int | None:
        """The offset a restarted reader starts at: after what was processed, or the cursor.

        None when neither is known (the group's auto offset applies).
        """
        last = max(cursor, -1 if self.processed is None else self.processed)
        return None if last < 0 else last + 1


@dataclass(frozen=True, slots=True)
class AssignmentDiff:
    """How the member's partitions change with a new assignment."""

    revoked: tuple[PartitionKey, ...] = ()
    added: tuple[PartitionKey, ...] = ()
    kept: tuple[PartitionKey, ...] = field(default=())


def flatten(assignments: Mapping[str, Iterable[int]]) -> frozenset[PartitionKey]:
    return frozenset((stream, p) for stream, parts in assignments.items() for p in parts)


def diff_assignments(
    current: Iterable[PartitionKey], assignments: Mapping[str, Iterable[int]]
) -> AssignmentDiff:
    """Compare the partitions read now with the coordinator's answer (sorted, deterministic)."""
    have = frozenset(current)
    want = flatten(assignments)
    return AssignmentDiff(
        revoked=tuple(sorted(have - want)),
        added=tuple(sorted(want - have)),
        kept=tuple(sorted(have & want)),
    )


def start_args(start_offset: int | None, auto_offset: AutoOffset) -> dict[str, Any]:
    """Subscribe arguments: at ``start_offset`` when known, else per ``auto_offset``."""
    if start_offset is not None:
        return {"start_offset": start_offset}
    return {"start": _AUTO_STARTS[auto_offset]}
