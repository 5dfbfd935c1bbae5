"""Cursors: stored consumer positions, routed to the owning __cursors partition.

SKELETON: the interface `client.py` relies on. Implementation pending.
"""

from __future__ import annotations

from liftbridge_client._metadata import MetadataCache
from liftbridge_client.options import ClientOptions


async def set_cursor(
    metadata: MetadataCache,
    options: ClientOptions,
    cursor_id: str,
    stream: str,
    partition: int,
    offset: int,
) -> None:
    raise NotImplementedError


async def fetch_cursor(
    metadata: MetadataCache, options: ClientOptions, cursor_id: str, stream: str, partition: int
) -> int:
    raise NotImplementedError
