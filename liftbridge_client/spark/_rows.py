"""A row of a Spark write, as one publish (shared by the sink and its delivery modes)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["PublishedRow"]


@dataclass(frozen=True, slots=True)
class PublishedRow:
    """One row as a publish: the sink's columns, decoded and checked."""

    stream: str
    value: bytes
    key: bytes | None = None
    partition: int | None = None
    headers: Mapping[str, bytes] | None = None
    rows: int = 1  # the rows it carries: more than one for a pack (option ``packRows``)
