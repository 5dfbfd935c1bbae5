"""Partition details from their leaders (offsets, paused, read-only), for many at once."""

from __future__ import annotations

import asyncio
import logging

from liftbridge_client import errors
from liftbridge_client.cli._app import CommandError
from liftbridge_client.cli._exit import ExitStatus
from liftbridge_client.client import Client
from liftbridge_client.models import Metadata, PartitionInfo

__all__ = ["check_partition", "leader_views", "partition_range"]

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


def partition_range(count: int) -> str:
    """``0`` or ``0-3``: the partition numbers of a stream with ``count`` of them."""
    return "0" if count == 1 else f"0-{count - 1}"


async def check_partition(client: Client, stream: str, partition: int) -> None:
    """A not-found `CommandError` naming ``-p`` and the partitions there are, if
    ``partition`` is not one of ``stream``'s (the client's own error names its keyword)."""
    metadata = await client.fetch_metadata(stream)
    info = metadata.streams.get(stream)
    if info is None or partition in info.partitions:
        return  # a missing stream: the command's own call says so
    raise CommandError(
        f"NotFoundError: stream {stream} has no partition {partition} "
        f"(-p {partition}; its partitions: {partition_range(len(info.partitions))})",
        ExitStatus.NOT_FOUND,
    )
