"""Partition details from their leaders (offsets, paused, read-only), for many at once."""

from __future__ import annotations

import asyncio
import logging

from liftbridge_client import errors
from liftbridge_client.client import Client
from liftbridge_client.models import Metadata, PartitionInfo

__all__ = ["leader_views"]

log = logging.getLogger(__name__)


async def leader_views(client: Client, metadata: Metadata) -> dict[str, dict[int, PartitionInfo]]:
    """Each partition as its leader reports it; the cluster's view where the leader fails.

    FetchMetadata carries placement only; offsets and states come from each leader.
    """

    async def one(part: PartitionInfo) -> PartitionInfo:
        try:
            return await client.fetch_partition_metadata(part.stream, part.id)
        except errors.LiftbridgeError as exc:
            log.debug("partition %s/%d: %r", part.stream, part.id, exc)
            return part

    parts = [p for s in metadata.streams.values() for p in s.partitions.values()]
    views = await asyncio.gather(*(one(p) for p in parts))
    result: dict[str, dict[int, PartitionInfo]] = {name: {} for name in metadata.streams}
    for view in views:
        result[view.stream][view.id] = view
    return result
