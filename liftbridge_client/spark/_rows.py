"""A row of a Spark write, as one publish (shared by the sink and its delivery modes)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

__all__ = ["PublishedRow"]


class PublishedRow(NamedTuple):
    """One row as a publish: the sink's columns, decoded and checked.

    A named tuple, not a dataclass: the row-by-row modes make one per row, and a frozen
    dataclass's ``__init__`` cost several times as much."""

    stream: str
    value: bytes
    key: bytes | None = None
    partition: int | None = None
    headers: Mapping[str, bytes] | None = None
    rows: int = 1  # the rows it carries: more than one for a pack (option ``packRows``)
